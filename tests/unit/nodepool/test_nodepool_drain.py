"""Draining a Node before its VM goes, on fakes (API, caches, cloud) and a fake wall clock:
pods leave through the Eviction API and are waited for, budgets back off per pod and are
told once, do-not-disrupt pods stay, and only a pool's drain timeout forces anything."""

from __future__ import annotations

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.nodepool import evictions, plan
from nodepool_operator.runtime import errors
from nodepool_operator.runtime.controller import Request
from unit.nodepool.drain_world import (
    CONFIG,
    POOL,
    START,
    FakeInformer,
    World,
    draining_since,
    node,
    pod,
    pool_object,
    too_many_requests,
)

# --- one Node's drain ------------------------------------------------------------------


async def test_a_drain_cordons_stamps_its_start_and_evicts_each_pod() -> None:
    world = World("p-0")
    world.pods.put(pod("a"))
    world.pods.put(pod("b"))

    progress = await world.drain()

    assert world.api.writes() == [
        ("patch", "nodes", "p-0"),
        ("create", "pods/eviction", "a"),
        ("create", "pods/eviction", "b"),
    ]
    assert not progress.done
    assert progress.retry_in == CONFIG.poll_interval


async def test_a_pod_whose_namespace_is_being_deleted_is_waited_for_not_an_error() -> None:
    world = World("p-0")
    world.nodes.put(draining_since("p-0", START))
    world.pods.put(pod("a"))
    world.api.terminating.add("a")

    progress = await world.drain()  # no exception: the namespace takes the pod away

    assert not progress.done
    world.pods.remove("ns/a")
    assert (await world.drain()).done


async def test_an_evicted_pod_is_waited_for_until_it_is_gone() -> None:
    world = World("p-0")
    world.nodes.put(draining_since("p-0", START))
    world.pods.put(pod("a", grace=300, deleting_at=START + 300))

    progress = await world.drain()
    assert not progress.done
    world.advance(299)
    assert not (await world.drain()).done  # its grace period is never cut short

    world.pods.remove("ns/a")
    assert (await world.drain()).done
    assert world.api.writes() == []  # waiting writes nothing


async def test_a_pod_stuck_past_its_deletion_deadline_is_no_longer_waited_for() -> None:
    world = World("p-0")
    world.nodes.put(draining_since("p-0", START))
    world.pods.put(pod("a", grace=30, deleting_at=START + 30))

    world.advance(30 + CONFIG.stuck_terminating_seconds - 1)
    assert not (await world.drain()).done
    world.advance(1)
    assert (await world.drain()).done


async def test_daemonset_mirror_and_finished_pods_do_not_hold_a_drain() -> None:
    world = World("p-0")
    world.nodes.put(draining_since("p-0", START))
    world.pods.put(pod("agent", owner="DaemonSet"))
    world.pods.put(pod("static", annotations={"kubernetes.io/config.mirror": "x"}))
    done = pod("job")
    done["status"]["phase"] = "Succeeded"
    world.pods.put(done)

    assert (await world.drain()).done
    assert world.api.evictions() == 0


async def test_a_node_drained_by_an_older_operator_gets_its_start_stamped_once() -> None:
    world = World("p-0")
    world.nodes.put(node("p-0", annotations={plan.SCALE_DOWN_ANNOTATION: "true"}))

    await world.drain()

    assert world.api.writes() == [("patch", "nodes", "p-0")]


# --- budgets -----------------------------------------------------------------------------


async def test_a_budget_refusal_backs_the_pod_off_exponentially_up_to_a_cap() -> None:
    world = World("p-0")
    world.nodes.put(draining_since("p-0", START))
    world.pods.put(pod("web-1"))
    world.api.refuse["web-1"] = "web"

    delays = []
    for _ in range(6):
        progress = await world.drain()
        assert progress.retry_in is not None
        delays.append(progress.retry_in)
        # A pass before the backoff ends asks nothing of the API server.
        before = world.api.evictions()
        world.advance(progress.retry_in / 2)
        await world.drain()
        assert world.api.evictions() == before
        world.advance(progress.retry_in / 2)

    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert world.api.evictions("web-1") == 6


async def test_a_refusal_is_told_once_per_pod_and_budget_naming_both() -> None:
    world = World("p-0")
    world.nodes.put(draining_since("p-0", START))
    world.pods.put(pod("web-1"))
    world.api.refuse["web-1"] = "web"

    for _ in range(5):
        progress = await world.drain()
        world.advance(10)

    [warning] = world.warnings("DrainBlocked")
    assert "PodDisruptionBudget ns/web" in warning
    assert "pod ns/web-1" in warning
    assert progress.blocked == (warning,)


async def test_a_gone_pool_takes_its_drain_memory_with_it() -> None:
    world = World("p-0")
    world.nodes.put(draining_since("p-0", START))
    world.pods.put(pod("web-1"))
    world.api.refuse["web-1"] = "web"
    blocked = await world.drain()
    assert blocked.blocked  # remembered: told once, backed off

    world.lifecycle.forget_pool(POOL["metadata"]["name"])

    # A pool of the same name starts afresh: the refusal is asked at once and told again.
    before = world.api.evictions("web-1")
    again = await world.drain()
    assert world.api.evictions("web-1") == before + 1
    assert again.blocked
    assert len(world.warnings("DrainBlocked")) == 2


async def test_a_429_naming_no_budget_is_the_api_servers_throttling_not_a_budget() -> None:
    # The API server names the budget in every 429 it gives for one; a 429 without a name
    # is its own throttling: nothing is looked up, and no budget is blamed.
    world = World("p-0")
    world.nodes.put(draining_since("p-0", START))
    world.pods.put(pod("web-1"))
    world.api.refuse["web-1"] = None

    progress = await world.drain()

    assert "refused by the API server (429)" in progress.blocked[0]
    assert "PodDisruptionBudget" not in progress.blocked[0]
    assert not [c for c in world.api.calls if c[1] == "poddisruptionbudgets"]


async def test_a_pod_evicted_once_its_budget_allows_lets_the_drain_finish() -> None:
    world = World("p-0")
    world.nodes.put(draining_since("p-0", START))
    world.pods.put(pod("web-1"))
    world.api.refuse["web-1"] = "web"
    assert (await world.drain()).blocked

    del world.api.refuse["web-1"]
    world.advance(1)
    progress = await world.drain()
    assert progress.blocked == ()
    world.pods.remove("ns/web-1")
    assert (await world.drain()).done


# --- do-not-disrupt and the drain timeout ------------------------------------------------


async def test_do_not_disrupt_pods_are_never_evicted_and_block_visibly() -> None:
    world = World("p-0")
    world.nodes.put(draining_since("p-0", START))
    world.pods.put(pod("keep", annotations={wellknown.DO_NOT_DISRUPT_ANNOTATION: "true"}))
    world.pods.put(pod("ca", annotations={wellknown.SAFE_TO_EVICT_ANNOTATION: "false"}))

    for _ in range(3):
        progress = await world.drain()
        world.advance(3600)

    assert world.api.writes() == []
    assert not progress.done
    assert progress.retry_in is None  # nothing to wait for but an event
    assert len(progress.blocked) == 2
    assert len(world.warnings("DrainBlocked")) == 2


async def test_without_a_drain_timeout_nothing_is_ever_deleted() -> None:
    world = World("p-0")
    world.nodes.put(draining_since("p-0", START))
    world.pods.put(pod("web-1"))
    world.api.refuse["web-1"] = "web"

    for _ in range(20):
        await world.drain()
        world.advance(86_400)

    assert world.api.deleted_with == {}


async def test_an_expired_drain_timeout_deletes_the_pods_left_and_the_node_goes() -> None:
    world = World("p-0")
    world.nodes.put(draining_since("p-0", START))
    world.pods.put(pod("web-1", grace=0))
    world.pods.put(pod("keep", grace=0, annotations={wellknown.DO_NOT_DISRUPT_ANNOTATION: "true"}))
    world.api.refuse["web-1"] = "web"

    assert not (await world.drain(limit=600)).done
    assert world.api.deleted_with == {}
    world.advance(600)
    progress = await world.drain(limit=600)

    assert progress.done
    assert world.api.deleted_with == {"web-1": 0, "keep": 0}
    assert len(world.warnings("DrainTimeout")) == 1


async def test_a_pod_whose_grace_would_outlast_the_timeout_is_deleted_with_what_is_left() -> None:
    world = World("p-0")
    world.nodes.put(draining_since("p-0", START))
    world.pods.put(pod("slow", grace=120))
    world.api.refuse["slow"] = "web"

    await world.drain(limit=600)
    assert world.api.deleted_with == {}
    world.advance(500)  # 100 s left, less than its 120 s
    await world.drain(limit=600)

    assert world.api.deleted_with == {"slow": 100}


async def test_the_drain_timeout_counts_from_the_start_stamped_on_the_node() -> None:
    world = World("p-0")
    # Started 590 s ago by an operator that has since restarted: 10 s are left.
    world.nodes.put(draining_since("p-0", START - 590))
    world.pods.put(pod("web-1", grace=0))
    world.api.refuse["web-1"] = "web"

    progress = await world.drain(limit=600)
    assert progress.retry_in is not None
    assert progress.retry_in <= 10
    world.advance(10)
    assert (await world.drain(limit=600)).done


# --- the VM and the Node go after the pods ---------------------------------------------


async def test_a_scale_down_deletes_the_vm_then_the_node_only_after_the_pods_are_gone() -> None:
    world = World("p-0", "p-1")
    world.nodes.put(node("p-0"))
    world.nodes.put(node("p-1"))
    world.pods.put(pod("a", node_name="p-1", grace=300))
    world.pods.put(pod("b", node_name="p-1"))
    world.pods.put(pod("c", node_name="p-1"))
    world.pods.put(pod("x", node_name="p-0"))
    world.pods.put(pod("y", node_name="p-0"))
    world.pods.put(pod("z", node_name="p-0"))
    world.pods.put(pod("w", node_name="p-0"))
    pool = {**POOL, "spec": {"targetNodes": 1}}
    spec = nodepool_api.spec_of(pool)

    await world.lifecycle.converge(pool, spec, 1)
    world.nodes.put(draining_since("p-1", START))
    for name in ("a", "b", "c"):  # evicted: their deletions show in the cache
        world.pods.put(pod(name, node_name="p-1", grace=300, deleting_at=START + 300))
    world.advance(200)
    await world.lifecycle.converge(pool, spec, 1)
    assert world.cloud.deleted_at == {}

    for name in ("a", "b", "c"):
        world.pods.remove(f"ns/{name}")
    world.advance(1)
    await world.lifecycle.converge(pool, spec, 1)

    assert world.cloud.deleted_at == {"p-1": START + 201}
    assert world.api.calls[-1] == ("delete", "nodes", "p-1")


async def test_a_deleted_pool_drains_its_nodes_before_removing_them() -> None:
    world = World("p-0")
    world.nodes.put(node("p-0"))
    world.pods.put(pod("a"))
    pool = {**POOL, "spec": {"targetNodes": 1}}

    remaining, progress = await world.lifecycle.tear_down(pool)
    assert remaining == 2
    assert not progress.done
    assert world.api.evictions("a") == 1
    assert world.cloud.deleted_at == {}
    assert ("delete", "nodes", "p-0") not in world.api.calls

    world.pods.remove("ns/a")
    remaining, progress = await world.lifecycle.tear_down(pool)
    assert progress.done
    assert world.cloud.deleted_at == {"p-0": START}
    assert world.api.calls[-1] == ("delete", "nodes", "p-0")


# --- through the reconciler: bounded writes, a visible reason ---------------------------


async def test_a_blocked_drain_shows_in_scaling_and_waits_for_its_backoff_without_writes() -> None:
    world = World("p-0", "p-1")
    pools = FakeInformer({})
    pool = pool_object(nodepool_api.NodePoolSpec(target_nodes=1))
    pools.put(pool)
    world.nodes.put(node("p-0"))
    world.nodes.put(draining_since("p-1", START))
    world.pods.put(pod("web-1", node_name="p-1"))
    world.api.refuse["web-1"] = "web"
    reconciler = world.reconciler_for(pools)

    result = await reconciler.reconcile(Request(name="p"))
    [status] = world.api.status_patches
    [scaling] = [c for c in status["conditions"] if c["type"] == "Scaling"]
    assert scaling["reason"] == "DrainBlocked"
    assert "PodDisruptionBudget ns/web" in scaling["message"]
    assert "pod ns/web-1" in scaling["message"]
    assert result.requeue_after == 1.0  # the pod's backoff, not a fixed poll

    writes = len(world.api.writes())
    for _ in range(3):  # passes while it stays blocked: the retried eviction and nothing else
        world.advance(result.requeue_after or 0)
        result = await reconciler.reconcile(Request(name="p"))
    new = world.api.writes()[writes:]
    assert new == [("create", "pods/eviction", "web-1")] * 3
    assert len(world.warnings("DrainBlocked")) == 1
    assert result.requeue_after == 8.0


async def test_a_deletion_held_by_a_budget_says_so_in_scaling() -> None:
    world = World("p-0")
    pools = FakeInformer({})
    pool = pool_object(
        nodepool_api.NodePoolSpec(target_nodes=1), deletionTimestamp="2026-11-30T10:00:00Z"
    )
    pools.put(pool)
    world.nodes.put(node("p-0"))
    world.pods.put(pod("web-1", node_name="p-0"))
    world.api.refuse["web-1"] = "web"
    reconciler = world.reconciler_for(pools)

    await reconciler.reconcile(Request(name="p"))  # cordons, then the budget refuses
    world.advance(1.0)
    await reconciler.reconcile(Request(name="p"))

    [status, *_] = world.api.status_patches
    [scaling] = [c for c in status["conditions"] if c["type"] == "Scaling"]
    assert scaling["reason"] == "DrainBlocked"
    assert "PodDisruptionBudget ns/web" in scaling["message"]
    assert ("delete", "nodes", "p-0") not in world.api.writes()  # the node waits


async def test_nodes_with_do_not_disrupt_pods_or_annotation_are_seen_as_protected() -> None:
    world = World("p-0", "p-1", "p-2", "p-3")
    world.nodes.put(node("p-0"))
    world.nodes.put(node("p-1", annotations={wellknown.DO_NOT_DISRUPT_ANNOTATION: "true"}))
    world.nodes.put(node("p-2"))
    world.nodes.put(node("p-3"))
    world.pods.put(
        pod("keep", node_name="p-2", annotations={wellknown.DO_NOT_DISRUPT_ANNOTATION: "true"})
    )
    world.pods.put(
        pod("ca", node_name="p-3", annotations={wellknown.SAFE_TO_EVICT_ANNOTATION: "false"})
    )
    world.pods.put(
        pod("fine", node_name="p-0", annotations={wellknown.SAFE_TO_EVICT_ANNOTATION: "true"})
    )

    view = await world.lifecycle.observe({**POOL, "spec": {}})

    assert view.protected == {"p-1", "p-2", "p-3"}


def test_the_budget_is_read_from_the_refusal() -> None:
    assert evictions.budget_named_in(too_many_requests("web-pdb")) == "web-pdb"
    processing = errors.TooManyRequests(
        "Cannot evict pod as it would violate the pod's disruption budget.",
        details={"causes": [{"message": "The disruption budget db is still being processed"}]},
    )
    assert evictions.budget_named_in(processing) == "db"
    assert evictions.budget_named_in(too_many_requests(None)) is None
