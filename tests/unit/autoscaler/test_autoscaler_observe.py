"""What a scan sees, read from the caches: the pool, unneeded nodes, the pods planned for it,
and which Autoscaler owns a pool."""

from __future__ import annotations

from typing import Any

import pytest

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler.decide import batch_plan
from nodepool_operator.controllers.autoscaler.decide.batch_plan import (
    ConflictingAutoscaler,
    MissingPool,
    Observation,
)
from nodepool_operator.controllers.autoscaler.snapshot import gather
from nodepool_operator.controllers.autoscaler.snapshot.pod_profiles import ProfileCache
from nodepool_operator.controllers.autoscaler.snapshot.scale_requests import (
    RequestLedger,
    asks_for_more,
    request_name,
)
from nodepool_operator.runtime import conditions
from nodepool_operator.runtime.client import Object
from unit.autoscaler.planning_world import (
    NOW,
    autoscaler,
    names,
    node,
    observe,
    observer,
    pod,
    pool,
)


def daemon_set(cpu: str) -> Object:
    container = {"name": "d", "resources": {"requests": {"cpu": cpu}}}
    return {
        "metadata": {"name": "ds", "namespace": "kube-system", "uid": "ds-uid", "generation": 1},
        "spec": {
            "template": {"metadata": {"labels": {"app": "ds"}}, "spec": {"containers": [container]}}
        },
    }


def not_ready_since(name: str, seconds_ago: float) -> Object:
    """A pool node whose Ready condition turned False ``seconds_ago``."""
    stale = node(name, ready=False)
    stale["status"]["conditions"][0]["lastTransitionTime"] = conditions.rfc3339(NOW - seconds_ago)
    return stale


def never_ready(name: str, registered_ago: float) -> Object:
    """A pool node registered ``registered_ago`` that never reported a Ready condition."""
    fresh = node(name, ready=False)
    fresh["status"]["conditions"] = []
    fresh["metadata"]["creationTimestamp"] = conditions.rfc3339(NOW - registered_ago)
    return fresh


async def test_the_pool_counts_ready_cordoned_and_booting_nodes() -> None:
    seen = await observe(
        observer(nodes=[node("n1"), node("n2", ready=False), node("n3", cordoned=True)])
    )
    # n3 is cordoned: a node (nothing in flight) but no room; n2 is still booting.
    assert (seen.pool.ready, seen.pool.cordoned, seen.pool.target) == (2, 1, 2)
    assert seen.pool.in_flight == 0
    assert (seen.pool_uid, seen.basis) == ("small-uid", 2)


async def test_free_room_on_ready_nodes_hosts_pending_pods_without_a_new_node() -> None:
    pods = [pod("a", node="n1", cpu="2"), pod("waiting", cpu="2")]
    seen = await observe(observer(nodes=[node("n1"), node("n2", cordoned=True)], pods=pods))
    assert names(seen.fitting) == ["waiting"]
    assert (seen.up.new_nodes, seen.triggering) == (0, ())


async def test_pods_beyond_the_room_trigger_new_nodes() -> None:
    pods = [pod(f"p{i}") for i in range(6)]
    seen = await observe(observer(nodes=[node("n1")], pods=pods, pools=[pool(target=1)]))
    assert seen.up.new_nodes == 1
    assert names(seen.triggering) == ["p4", "p5"]


async def test_nodes_with_only_daemonset_or_mirror_pods_are_unneeded() -> None:
    daemon = pod(
        "d", node="n1", ownerReferences=[{"kind": "DaemonSet", "name": "ds", "uid": "ds-uid"}]
    )
    mirror = pod("m", node="n2", annotations={"kubernetes.io/config.mirror": "x"})
    busy = pod("b", node="n3")
    nodes = [node("n1"), node("n2"), node("n3"), node("n4")]
    seen = await observe(observer(nodes=nodes, pods=[daemon, mirror, busy], pools=[pool(target=4)]))
    assert seen.unneeded == ("n1", "n2", "n4")


async def test_pods_are_split_into_fitting_and_never_fitting_in_the_watched_namespaces() -> None:
    pods = [
        pod("fits"),
        pod("huge", cpu="8"),
        pod("broken", cpu="lots"),
        pod("not-yet-marked", marked=False),
        pod("elsewhere", namespace="other"),
    ]
    seen = await observe(observer(pods=pods))
    assert names(seen.fitting) == ["fits"]
    reasons = {p["metadata"]["name"]: why for p, why in seen.unfit}
    assert "requests 8000 of cpu" in reasons["huge"]
    assert "cannot be read" in reasons["broken"]
    # Pending: the pod planned here and the two no pool can host; not the unjudged one.
    assert (seen.pending, seen.unschedulable, seen.waiting, seen.pending_fitting) == (3, 3, 1, 2)
    everywhere = observer(pods=pods, autoscalers=[autoscaler("nas")])
    seen_all = await observe(everywhere, spec=autoscaler_api.AutoscalerSpec(node_pool_name="small"))
    assert seen_all.pending == 4


async def test_pods_planned_onto_another_pool_are_not_this_autoscalers_pending() -> None:
    def selecting(name: str) -> dict[str, Any]:
        return {"nodeSelector": {wellknown.POOL_LABEL: name}}

    pods = [
        pod("mine", spec=selecting("small")),
        pod("theirs", spec=selecting("other")),
        pod("theirs-unjudged", spec=selecting("other"), marked=False),
    ]
    o = observer(
        pods=pods,
        pools=[pool(), pool("other")],
        autoscalers=[
            autoscaler("nas", namespaces=["apps"]),
            autoscaler("other", pool_name="other", namespaces=["apps"]),
        ],
    )
    seen = await observe(o)
    assert (names(seen.fitting), seen.pending, seen.waiting) == (["mine"], 1, 1)
    other = await observe(o, "other", autoscaler_api.AutoscalerSpec(node_pool_name="other"))
    assert (names(other.fitting), other.pending) == (["theirs"], 1)


async def test_a_missing_pool_answers_for_the_pods_of_its_namespaces_and_names_the_pool() -> None:
    o = observer(
        pods=[pod("waits")],
        pools=[],
        autoscalers=[autoscaler("nas", pool_name="nope", namespaces=["apps"])],
    )
    seen = await o.observe("nas", autoscaler_api.AutoscalerSpec(node_pool_name="nope"))
    assert isinstance(seen, MissingPool), seen
    assert (seen.pool, seen.pending, seen.unschedulable) == ("nope", 1, 1)
    [(told, why)] = seen.unfit
    assert told["metadata"]["name"] == "waits"
    assert why == "NodePool nope, which Autoscaler nas scales, does not exist"


async def test_every_autoscaler_of_a_namespace_tells_a_pod_the_same_reason() -> None:
    # One Autoscaler's pool exists, the other's does not: both answer for the pod that no
    # node hosts, with one reason (naming both), so the pod is not told twice.
    big = pod("huge", cpu="64")
    o = observer(
        pods=[big],
        autoscalers=[
            autoscaler("nas", namespaces=["apps"]),
            autoscaler("lost", pool_name="nope", namespaces=["apps"]),
        ],
    )
    present = await observe(o)
    missing = await o.observe("lost", autoscaler_api.AutoscalerSpec(node_pool_name="nope"))
    assert isinstance(missing, MissingPool)
    assert present.unfit == missing.unfit
    [(_, why)] = missing.unfit
    assert why.startswith("small: ")
    assert why.endswith("; NodePool nope, which Autoscaler lost scales, does not exist")


async def test_a_pool_whose_vms_cannot_be_listed_has_nothing_on_its_way() -> None:
    # Target 3, one Node: two VMs asked for. The cloud refuses to list the pool's VMs (a
    # wrong credential): nothing is launched, so the pods may not count on those two.
    listing = {
        "type": "Degraded",
        "status": "True",
        "reason": "CloudListFailed",
        "message": "listing the pool's VMs failed (Unauthorized): 401",
    }
    pods = [pod("a", cpu="3"), pod("b", cpu="3")]  # one fits on small-0, one needs a node

    def stuck(since: float) -> Object:
        body = pool(target=3)
        body["status"] = {
            "conditions": [{**listing, "lastTransitionTime": conditions.rfc3339(since)}]
        }
        return body

    # For a moment (one failed listing is retried within seconds), b counts on a VM asked for.
    fresh = await observe(observer(nodes=[node("small-0")], pods=pods, pools=[stuck(NOW - 5)]))
    assert fresh.pool.cannot_grow is None
    assert (fresh.up.wanted_nodes, names(fresh.beyond_max)) == (0, [])
    # Held past the grace: no VM is on its way, the pool cannot grow, and b waits for a
    # node it is told will not come (its NotTriggerScaleUp names the pool's reason).
    held = await observe(observer(nodes=[node("small-0")], pods=pods, pools=[stuck(NOW - 60)]))
    assert held.pool.cannot_grow is not None
    assert "CloudListFailed" in held.pool.cannot_grow
    assert (held.up.wanted_nodes, names(held.beyond_max)) == (1, ["b"])


async def test_the_oldest_autoscaler_of_a_pool_owns_it_and_another_is_a_conflict() -> None:
    o = observer(
        pods=[pod("p")],
        autoscalers=[
            autoscaler("younger", created="2026-11-29T09:30:00Z"),
            autoscaler("older", created="2026-11-29T09:00:00Z"),
        ],
    )
    spec = autoscaler_api.AutoscalerSpec(node_pool_name="small")
    assert await o.observe("younger", spec) == ConflictingAutoscaler(pool="small", owner="older")
    owner = await observe(o, "older", spec)
    assert names(owner.fitting) == ["p"]


async def test_expendable_pods_never_trigger_a_scale_up() -> None:
    pods = [pod("expendable", spec={"priority": -11}), pod("low", spec={"priority": -10})]
    seen = await observe(observer(pods=pods, pools=[pool(target=0)]))
    assert names(seen.fitting) == ["low"]
    assert names(seen.triggering) == ["low"]
    assert seen.unfit == ()


async def test_scheduling_gated_pods_are_not_planned_nor_block_scale_down() -> None:
    gated = pod("gated", spec={"schedulingGates": [{"name": "example.com/wait"}]}, marked=False)
    seen = await observe(observer(pods=[gated]))
    assert (seen.fitting, seen.unfit, seen.up.wanted_nodes) == ((), (), 0)
    assert seen.pending_fitting == 0


async def test_pods_for_another_scheduler_are_not_planned_nor_block_scale_down() -> None:
    theirs = pod("theirs", spec={"schedulerName": "volcano"})
    waiting = pod("waiting", spec={"schedulerName": "volcano"}, marked=False)
    seen = await observe(observer(pods=[theirs, waiting]))
    assert (seen.fitting, seen.unfit, seen.up.wanted_nodes) == ((), (), 0)
    assert seen.pending_fitting == 0


async def test_pending_daemonset_pods_are_not_planned() -> None:
    stuck = pod("ds-x", ownerReferences=[{"kind": "DaemonSet", "name": "ds", "uid": "ds-uid"}])
    seen = await observe(observer(pods=[stuck]))
    assert (seen.fitting, seen.unfit, seen.up.wanted_nodes, seen.pending) == ((), (), 0, 0)


async def test_a_daemonset_takes_room_on_the_new_nodes_it_plans() -> None:
    pods = [pod(f"p{i}") for i in range(4)]
    seen = await observe(
        observer(pods=pods, pools=[pool(target=0)], daemon_sets=[daemon_set("500m")])
    )
    assert seen.up.new_nodes == 2  # 3 pods per node next to the DaemonSet pod


async def test_two_pools_never_grow_for_the_same_pods() -> None:
    pools = [pool("small", target=0), pool("heavy", target=0, weight=10)]
    autoscalers = [autoscaler("nas"), autoscaler("heavy-nas", pool_name="heavy")]
    o = observer(pods=[pod("p")], pools=pools, autoscalers=autoscalers)
    small = await observe(o, "nas", autoscaler_api.AutoscalerSpec(node_pool_name="small"))
    heavy = await observe(o, "heavy-nas", autoscaler_api.AutoscalerSpec(node_pool_name="heavy"))
    assert (small.up.new_nodes, heavy.up.new_nodes) == (0, 1)
    assert names(heavy.triggering) == ["p"]


def test_the_ledger_shows_our_request_until_the_cache_does_or_moves_past_it() -> None:
    ledger = RequestLedger()
    created = {"metadata": {"name": "r1", "resourceVersion": "20"}}
    ledger.record("small", created)
    assert ledger.visible("small", [], cache_version="19") == [created]
    cached = [{"metadata": {"name": "r1", "resourceVersion": "20"}}]
    assert ledger.visible("small", cached, cache_version="20") == cached
    assert ledger.visible("small", [], cache_version="19") == []  # forgotten once seen
    ledger.record("small", created)
    assert ledger.visible("small", [], cache_version="25") == []  # answered and deleted


def test_request_names_are_valid_readable_and_distinct() -> None:
    assert request_name("nas", direction="up", millis=1_800_000_000_000) == "nas-mywpiww0-up"
    assert int("mywpiww0", 36) == 1_800_000_000_000  # base 36 of the creation time in ms
    assert request_name("nas", direction="up", millis=1) != request_name(
        "nas", direction="up", millis=2
    )
    long = "a" * 199 + "." + "b" * 50
    name = request_name(long, direction="down", millis=1)
    assert len(name) <= 253
    assert name == "a" * 199 + "-1-down"
    later_up = request_name("nas", direction="up", millis=1_800_000_000_001)
    earlier_down = request_name("nas", direction="down", millis=1_800_000_000_000)
    assert later_up > earlier_down  # the name breaks a same-second tie by time
    assert asks_for_more(later_up)
    assert not asks_for_more(earlier_down)
    assert not asks_for_more(request_name("up", direction="down", millis=1))


async def test_a_node_not_ready_past_the_pool_timeout_is_no_capacity() -> None:
    # One 4-cpu node per pod of 3 cpu: the dead node's room would hold the second pod.
    pods = [pod("p1", cpu="3"), pod("p2", cpu="3")]
    dead = not_ready_since("small-1", nodepool_api.DEFAULT_NOT_READY_TIMEOUT_SECONDS + 1)
    seen = await observe(observer(nodes=[node("small-0"), dead], pods=pods))
    assert seen.up.new_nodes == 1
    assert seen.pool.in_flight == 0  # nor a node on its way: the NodePool replaces it


async def test_a_node_not_ready_for_a_moment_is_still_counted_as_coming() -> None:
    pods = [pod("p1", cpu="3"), pod("p2", cpu="3")]
    booting = not_ready_since("small-1", 5)
    seen = await observe(observer(nodes=[node("small-0"), booting], pods=pods))
    assert seen.up.new_nodes == 0


async def test_a_node_that_never_reported_ready_counts_until_the_registration_timeout() -> None:
    pods = [pod("p1", cpu="3"), pod("p2", cpu="3")]
    late = never_ready("small-1", nodepool_api.DEFAULT_REGISTRATION_TIMEOUT_SECONDS + 1)
    seen = await observe(observer(nodes=[node("small-0"), late], pods=pods))
    assert seen.up.new_nodes == 1
    recent = never_ready("small-1", nodepool_api.DEFAULT_NOT_READY_TIMEOUT_SECONDS + 1)
    seen = await observe(observer(nodes=[node("small-0"), recent], pods=pods))
    assert seen.up.new_nodes == 0


async def test_a_startup_taint_left_past_the_registration_timeout_makes_the_node_no_capacity() -> (
    None
):
    # small-1 is Ready but its CNI never lifted the startup taint: the scheduler never
    # places a pod there. Past the registration timeout the NodePool controller replaces
    # it, and the plan no longer counts on its room (nor on it as a node on its way).
    cni = nodepool_api.Taint(key="example.com/cni-not-ready", effect="NoSchedule")
    with_startup = pool(target=2)
    with_startup["spec"]["template"]["startupTaints"] = [cni.to_dict()]

    def stuck(registered_ago: float) -> Object:
        found = node("small-1")
        found["spec"]["taints"] = [cni.to_dict()]
        found["metadata"]["creationTimestamp"] = conditions.rfc3339(NOW - registered_ago)
        return found

    pods = [pod("p1", cpu="3"), pod("p2", cpu="3")]
    timeout = nodepool_api.DEFAULT_REGISTRATION_TIMEOUT_SECONDS
    early = observer(nodes=[node("small-0"), stuck(60)], pods=pods, pools=[with_startup])
    assert (await observe(early)).up.new_nodes == 0  # its agent may still finish
    late = observer(nodes=[node("small-0"), stuck(timeout + 1)], pods=pods, pools=[with_startup])
    seen = await observe(late)
    assert seen.up.new_nodes == 1
    assert (seen.pool.ready, seen.pool.unhealthy, seen.pool.in_flight) == (1, 1, 0)
    assert "small-1" not in seen.unneeded  # being replaced: never consolidation's to take


def test_replicas_share_one_profile_in_the_cache() -> None:
    cache = ProfileCache()
    first, second = pod("web-1"), pod("web-2")
    second["metadata"]["uid"] = "another-uid"
    assert cache.get(first) is cache.get(second)


async def test_an_autoscaler_never_decides_twice_from_the_plan_before_its_request() -> None:
    o = observer(pods=[pod("p")], pools=[pool(target=0)])
    before = await observe(o)
    assert before.up.new_nodes == 1
    request = scalerequest_api.manifest(
        "r",
        scalerequest_api.ScaleRequestSpec(node_pool_name="small", target_nodes=1),
        pool_uid="small-uid",
    )
    request["metadata"]["resourceVersion"] = "99"
    o.pool_reads.ledger.record("small", request)
    after = await observe(o)  # the next plan has the request in flight
    assert after.pool.open_request
    assert after.up.new_nodes == 0


async def test_one_plan_gives_every_autoscaler_its_part(monkeypatch: pytest.MonkeyPatch) -> None:
    plans: list[int] = []
    simulate = gather.Gathered.simulate

    def counted(world: Any) -> Any:
        plans.append(1)
        return simulate(world)

    monkeypatch.setattr(gather.Gathered, "simulate", counted)
    pools = [pool("small", target=0, weight=10), pool("heavy", target=0)]
    autoscalers = [autoscaler("nas"), autoscaler("heavy-nas", pool_name="heavy")]
    o = observer(pods=[pod("p")], pools=pools, autoscalers=autoscalers)
    made = await o.plan()
    small = batch_plan.part_of(made, "nas", autoscaler_api.AutoscalerSpec(node_pool_name="small"))
    heavy = batch_plan.part_of(
        made, "heavy-nas", autoscaler_api.AutoscalerSpec(node_pool_name="heavy")
    )
    assert len(plans) == 1
    assert isinstance(small, Observation)
    assert isinstance(heavy, Observation)
    assert names(small.fitting) == ["p"]  # the heavier weight wins it
    assert names(heavy.fitting) == []
