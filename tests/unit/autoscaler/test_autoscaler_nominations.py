"""Nominations, the Autoscaler's side: which pending pods are nominated on which new
Nodes and when the Nodes are released (``decide.nominations``), and how the nominations
are written (``act.nominations``)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY

from nodepool_operator.api import scalerequest, wellknown
from nodepool_operator.controllers.autoscaler.act.nominations import (
    CONFIRM_ROUNDS,
    CONFIRM_SECONDS,
    CachedPod,
    Nominator,
)
from nodepool_operator.controllers.autoscaler.constraints.parsing import profile_of
from nodepool_operator.controllers.autoscaler.decide.nominations import (
    MOST_NOMINATIONS,
    PATIENCE_SECONDS,
    Nomination,
    NominationPlan,
    PoolToRelease,
    plan_nominations,
)
from nodepool_operator.runtime import conditions
from nodepool_operator.runtime.client import Object, Resource
from nodepool_operator.runtime.testing import FakeApiServer, FakeWallClock
from unit.autoscaler.planning_world import node, pod

NOW = 1_800_000_000.0
UNREGISTERED = {"key": wellknown.UNREGISTERED_TAINT_KEY, "effect": "NoSchedule"}


def booting(
    name: str, *, ready: bool = True, made: float = NOW - 2, ready_since: float = NOW - 1
) -> Object:
    """A Node of pool ``small`` made for a scale-up, Ready (since ``ready_since``) or not,
    still tainted."""
    found = node(name, ready=ready)
    found["spec"]["taints"] = [UNREGISTERED]
    found["metadata"]["creationTimestamp"] = conditions.rfc3339(made)
    found["status"]["conditions"][0]["lastTransitionTime"] = conditions.rfc3339(ready_since)
    return found


def request(*, wait: int | None = 20, made: float = NOW - 3) -> Object:
    spec = scalerequest.ScaleRequestSpec(
        node_pool_name="small", target_nodes=2, await_nominations_seconds=wait
    )
    body = scalerequest.manifest("small-up", spec)
    body["metadata"]["creationTimestamp"] = conditions.rfc3339(made)
    return body


def planned(
    nodes: list[Object],
    placements: list[str | None],
    *,
    target: int = 2,
    requests: list[Object] | None = None,
    pending: list[Object] | None = None,
    known: frozenset[str] | None = None,
) -> NominationPlan:
    """The plan of nominations for pods planned at ``placements``: by default pods of
    1, 2, 3... CPU (no two alike), ``p0``, ``p1``..."""
    pods = pending or [pod(f"p{i}", cpu=str(i + 1)) for i in range(len(placements))]
    return plan_nominations(
        pools={"small": PoolToRelease(target=target, uid="small-uid")},
        nodes=nodes,
        known=frozenset(n["metadata"]["name"] for n in nodes) if known is None else known,
        requests_of=lambda _: [request()] if requests is None else requests,
        pending=pods,
        profiles=[profile_of(p) for p in pods],
        placements=placements,
        now=NOW,
    )


def test_the_pods_planned_on_the_waiting_nodes_are_nominated_and_the_nodes_released() -> None:
    made = planned([booting("a"), booting("b"), node("old")], ["a", "b", "a", "old", None])
    assert [(n.name, n.node) for n in made.pods] == [("p0", "a"), ("p1", "b"), ("p2", "a")]
    assert made.release == {"small": ("a", "b")}
    assert made.waiting == {}


def test_a_single_new_node_is_released_without_nominations() -> None:
    made = planned([booting("a"), node("old")], ["a", "a", "old"], target=2)
    assert made.release == {"small": ("a",)}
    assert made.pods == ()


def test_a_single_new_node_is_nominated_when_pods_wait_for_other_capacity_too() -> None:
    # A new node elsewhere (another pool's VM in flight) is planned a pod too: it could
    # take a's room first, so a's pods are nominated.
    made = planned([booting("a"), node("b")], ["a", "a", "elsewhere-vm"], target=2)
    assert made.release == {"small": ("a",)}
    assert [n.name for n in made.pods] == ["p0", "p1"]


def test_alike_pods_are_not_nominated() -> None:
    alike = [pod(f"p{i}", cpu="1") for i in range(4)]
    made = planned([booting("a"), booting("b")], ["a", "b", "a", "b"], pending=alike)
    assert made.release == {"small": ("a", "b")}
    assert made.pods == ()


def test_the_largest_pods_are_nominated_first_and_no_more_than_the_most(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from nodepool_operator.controllers.autoscaler.decide import nominations as module

    monkeypatch.setattr(module, "MOST_NOMINATIONS", 2)
    made = planned([booting("a"), booting("b")], ["a", "b", "a", "b"])
    assert sorted(n.name for n in made.pods) == ["p2", "p3"]  # 3 and 4 CPU
    assert MOST_NOMINATIONS == 1000


def test_a_node_the_plan_did_not_know_waits_for_the_next_batch() -> None:
    made = planned([booting("a"), booting("b")], ["a", "a"], known=frozenset({"a"}))
    assert made.release == {}
    assert made.waiting == {"small": "Nodes registered while the plan was made: b"}


def test_a_node_labelled_for_the_pool_but_not_owned_by_it_is_left_alone() -> None:
    foreign = booting("x")
    foreign["metadata"]["ownerReferences"] = []
    made = planned([booting("a"), booting("b"), foreign], ["a", "b", "x"], target=2)
    assert made.release == {"small": ("a", "b")}


def test_nothing_is_released_while_a_node_of_the_target_is_missing() -> None:
    made = planned([booting("a")], ["a"], target=2)
    assert made.pods == ()
    assert made.release == {}
    assert made.waiting == {"small": "1 of its 2 Nodes not registered yet"}


def test_nothing_is_released_while_a_waiting_node_is_not_ready() -> None:
    made = planned([booting("a"), booting("b", ready=False)], ["a", "b"])
    assert made.pods == ()
    assert made.release == {}
    assert made.waiting == {"small": "Nodes not Ready yet: b"}
    assert made.check_in == PATIENCE_SECONDS - 1  # a Ready since NOW - 1


def test_a_node_ready_past_the_patience_is_released_without_the_slow_one() -> None:
    slow = booting("b", ready=False, made=NOW - 6)
    made = planned(
        [booting("a", made=NOW - 6, ready_since=NOW - 5), slow],
        ["a", "b", "a"],
        requests=[request(made=NOW - 7)],
    )
    assert made.release == {"small": ("a",)}
    # Only the pods planned on the released Node: b's get theirs once b is Ready.
    assert [(n.name, n.node) for n in made.pods] == [("p0", "a"), ("p2", "a")]
    assert made.check_in is None


def test_nodes_whose_wait_ran_out_or_asked_for_none_are_left_to_the_nodepool_controller() -> None:
    assert planned([booting("a", made=NOW - 30), booting("b")], ["a", "b"]).release == {
        "small": ("b",)
    }
    assert planned([booting("a"), booting("b")], ["a", "b"], requests=[request(wait=None)]) == (
        NominationPlan()
    )


def test_a_pod_nominated_by_preemption_keeps_its_nomination() -> None:
    preempting = pod("p0")
    preempting["status"]["nominatedNodeName"] = "old"
    pods = [preempting, pod("p1", cpu="2")]
    made = planned([booting("a"), booting("b")], ["a", "b"], pending=pods)
    assert [n.name for n in made.pods] == ["p1"]


class Recording(FakeApiServer):
    """Records every patch; a pod named in ``changed`` moves on (``changed[name]`` applied
    to it) just before our first patch of it, which is then refused with 409. A pod named
    in ``after`` moves on just after each of our patches of it, ``after[name]`` applied in
    turn (kube-scheduler clearing the nomination as it tries the pod and fails, say)."""

    def __init__(
        self,
        changed: dict[str, Any] | None = None,
        after: dict[str, list[Callable[[Object], None]]] | None = None,
    ) -> None:
        super().__init__(wall_clock=FakeWallClock(NOW))
        self.changed = dict(changed or {})
        self.after = {name: list(changes) for name, changes in (after or {}).items()}
        self.patches: list[tuple[str, str, str | None, Any]] = []

    async def patch(self, resource: Resource, name: str, body: Any, **kw: Any) -> Object:
        self.patches.append((resource.plural, name, kw.get("subresource"), copy.deepcopy(body)))
        if resource.plural == "pods" and name in self.changed:
            self.edit("pods", name, self.changed.pop(name), namespace="apps")
        written = await super().patch(resource, name, body, **kw)
        if resource.plural == "pods" and self.after.get(name):
            self.edit("pods", name, self.after[name].pop(0), namespace="apps")
        return written

    def pod(self, name: str) -> Object:
        return next(o for o in self.stored("pods") if o["metadata"]["name"] == name)

    def cached_pod(self, namespace: str, name: str) -> Object | None:
        """The pod as an informer's cache that heard every write would hold it."""
        return next(
            (
                o
                for o in self.stored("pods")
                if o["metadata"]["name"] == name and o["metadata"].get("namespace") == namespace
            ),
            None,
        )


class Pauses:
    """A clock whose sleeps return at once, each recorded."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    def now(self) -> float:
        return NOW

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def nominator_of(
    api: Recording, *, pauses: Pauses | None = None, cache: CachedPod | None = None
) -> Nominator:
    return Nominator(
        client=api,
        cached_pod=api.cached_pod if cache is None else cache,
        clock=pauses or Pauses(),
        wall_clock=FakeWallClock(NOW),
        parallelism=4,
    )


def nomination(api: Recording, name: str, node_name: str) -> Nomination:
    """The nomination of pod ``name`` as a plan reading it now would make it."""
    version = str(api.pod(name)["metadata"]["resourceVersion"])
    return Nomination(
        namespace="apps", name=name, uid=name, resource_version=version, node=node_name
    )


def _bind(obj: Object) -> None:
    obj["spec"]["nodeName"] = "old"


def _nominate_elsewhere(obj: Object) -> None:
    obj["status"]["nominatedNodeName"] = "old"


def _judge_again(obj: Object) -> None:
    obj["status"]["message"] = "still unschedulable"


def _clear_nomination(obj: Object) -> None:
    obj["status"].pop("nominatedNodeName", None)


async def test_the_pods_are_nominated_first_then_the_nodes_marked() -> None:
    api = Recording()
    for found in (pod("p0"), pod("p1")):
        api.put("pods", found)
    for found in (booting("a"), booting("b")):
        api.put("nodes", found)
    nominator = nominator_of(api)
    await nominator.write(
        NominationPlan(
            pods=(nomination(api, "p0", "a"), nomination(api, "p1", "b")),
            release={"small": ("a", "b")},
        )
    )
    kinds_in_order = [plural for plural, *_ in api.patches]
    assert kinds_in_order == ["pods", "pods", "nodes", "nodes"]
    assert {p[1]: p[3]["status"]["nominatedNodeName"] for p in api.patches[:2]} == {
        "p0": "a",
        "p1": "b",
    }
    assert all(p[2] == "status" for p in api.patches[:2])
    marks = [p[3]["metadata"]["annotations"] for p in api.patches[2:]]
    assert marks == [{wellknown.NOMINATED_ANNOTATION: conditions.rfc3339(NOW)}] * 2
    assert api.pod("p0")["status"]["nominatedNodeName"] == "a"


async def test_a_pod_changed_meanwhile_is_read_again_and_nominated_if_it_still_waits() -> None:
    api = Recording(changed={"p0": _judge_again})
    api.put("pods", pod("p0"))
    api.put("nodes", booting("a"))
    read_at = str(api.pod("p0")["metadata"]["resourceVersion"])
    nominator = nominator_of(api)
    await nominator.write(
        NominationPlan(pods=(nomination(api, "p0", "a"),), release={"small": ("a",)})
    )
    tries = [p[3]["metadata"]["resourceVersion"] for p in api.patches if p[0] == "pods"]
    assert len(tries) == 2
    assert tries[0] == read_at
    assert tries[1] != read_at
    # Read again by listing, as the operator's role allows (it has no GET on pods).
    assert [c[0] for c in api.calls if c[1] == "pods"] == ["patch", "list", "patch"]
    assert api.pod("p0")["status"]["nominatedNodeName"] == "a"


async def test_a_pod_bound_or_nominated_by_the_scheduler_meanwhile_is_left_alone() -> None:
    api = Recording(changed={"p0": _bind, "p1": _nominate_elsewhere})
    for found in (pod("p0"), pod("p1")):
        api.put("pods", found)
    api.put("nodes", booting("a"))
    nominator = nominator_of(api)
    await nominator.write(
        NominationPlan(
            pods=(nomination(api, "p0", "a"), nomination(api, "p1", "a")), release={"small": ("a",)}
        )
    )
    assert [p[1] for p in api.patches if p[0] == "pods"] == ["p0", "p1"]  # one try each
    assert api.pod("p1")["status"]["nominatedNodeName"] == "old"
    assert "nominatedNodeName" not in api.pod("p0")["status"]
    # The Node is released all the same: its pods are scheduled as without nominations.
    assert [p[1] for p in api.patches if p[0] == "nodes"] == ["a"]


async def test_nothing_to_release_writes_nothing() -> None:
    api = Recording()
    nominator = nominator_of(api)
    await nominator.write(NominationPlan(waiting={"small": "Nodes not Ready yet: b"}))
    assert api.patches == []


async def test_a_nomination_cleared_by_kube_scheduler_is_written_again_before_the_marks() -> None:
    """kube-scheduler tried p0 (on an event just before the write), failed on the taint and
    cleared its nomination: it is written again, and only then are the Nodes marked."""
    api = Recording(after={"p0": [_clear_nomination]})
    for found in (pod("p0"), pod("p1")):
        api.put("pods", found)
    for found in (booting("a"), booting("b")):
        api.put("nodes", found)
    pauses = Pauses()
    await nominator_of(api, pauses=pauses).write(
        NominationPlan(
            pods=(nomination(api, "p0", "a"), nomination(api, "p1", "b")),
            release={"small": ("a", "b")},
        )
    )
    order = [(plural, name) for plural, name, *_ in api.patches]
    assert sorted(order[:2]) == [("pods", "p0"), ("pods", "p1")]
    assert order[2:] == [("pods", "p0"), ("nodes", "a"), ("nodes", "b")]
    assert api.pod("p0")["status"]["nominatedNodeName"] == "a"
    assert api.pod("p1")["status"]["nominatedNodeName"] == "b"
    # Read after the writes, and again after the write again, which held.
    assert pauses.slept == [CONFIRM_SECONDS, CONFIRM_SECONDS]


async def test_nominations_cleared_every_time_are_written_again_a_bounded_number_of_times() -> None:
    api = Recording(after={"p0": [_clear_nomination] * 100})
    api.put("pods", pod("p0"))
    api.put("nodes", booting("a"))
    pauses = Pauses()
    await nominator_of(api, pauses=pauses).write(
        NominationPlan(pods=(nomination(api, "p0", "a"),), release={"small": ("a",)})
    )
    assert [p[0] for p in api.patches] == ["pods"] * (1 + CONFIRM_ROUNDS) + ["nodes"]
    assert len(pauses.slept) == CONFIRM_ROUNDS


async def test_a_pod_bound_meanwhile_or_not_yet_seen_by_the_cache_is_not_written_again() -> None:
    """p0's nomination was cleared and it was bound elsewhere (it found room there): left
    alone. p1's was cleared too, but the cache still holds p1 as read before the write: the
    write is not heard of yet, so nothing says its nomination was cleared."""
    api = Recording(
        after={"p0": [lambda o: (_clear_nomination(o), _bind(o))], "p1": [_clear_nomination]}
    )
    for found in (pod("p0"), pod("p1")):
        api.put("pods", found)
    api.put("nodes", booting("a"))
    read_before = api.pod("p1")

    def cache(namespace: str, name: str) -> Object | None:
        return read_before if name == "p1" else api.cached_pod(namespace, name)

    pauses = Pauses()
    await nominator_of(api, pauses=pauses, cache=cache).write(
        NominationPlan(
            pods=(nomination(api, "p0", "a"), nomination(api, "p1", "a")),
            release={"small": ("a",)},
        )
    )
    assert sorted(p[1] for p in api.patches if p[0] == "pods") == ["p0", "p1"]
    assert [p[1] for p in api.patches if p[0] == "nodes"] == ["a"]
    # p1 not heard of since the write: looked at again each round, then released anyway.
    assert pauses.slept == [CONFIRM_SECONDS] * CONFIRM_ROUNDS


async def test_nothing_nominated_marks_at_once() -> None:
    api = Recording()
    api.put("nodes", booting("a"))
    pauses = Pauses()
    await nominator_of(api, pauses=pauses).write(NominationPlan(release={"small": ("a",)}))
    assert [p[1] for p in api.patches] == ["a"]
    assert pauses.slept == []


async def test_a_cache_still_at_the_version_read_again_after_a_409_is_no_clear() -> None:
    """p0 changed before our write (409), was read again at a newer version and nominated
    there; the cache still holds that read-again version, without the nomination: the
    write is not heard of yet, nothing was cleared, nothing is written again."""
    api = Recording(changed={"p0": _judge_again})
    api.put("pods", pod("p0"))
    api.put("nodes", booting("a"))

    def cache(namespace: str, name: str) -> Object | None:
        found = api.cached_pod(namespace, name)
        assert found is not None
        tries = [p[3]["metadata"]["resourceVersion"] for p in api.patches if p[0] == "pods"]
        found["status"].pop("nominatedNodeName", None)
        found["metadata"]["resourceVersion"] = tries[-1]  # the version read again
        return found

    pauses = Pauses()
    await nominator_of(api, pauses=pauses, cache=cache).write(
        NominationPlan(pods=(nomination(api, "p0", "a"),), release={"small": ("a",)})
    )
    assert [p[0] for p in api.patches] == ["pods", "pods", "nodes"]  # refused, written, mark
    assert pauses.slept == [CONFIRM_SECONDS] * CONFIRM_ROUNDS


async def test_the_writes_again_are_counted_apart() -> None:
    def count(result: str) -> float:
        found = REGISTRY.get_sample_value(
            "nodepool_autoscaler_nominations_total", {"result": result}
        )
        return found or 0.0

    before = {r: count(r) for r in ("written", "rewritten", "skipped")}
    api = Recording(after={"p0": [_clear_nomination]})
    for found in (pod("p0"), pod("p1")):
        api.put("pods", found)
    api.put("nodes", booting("a"))
    await nominator_of(api).write(
        NominationPlan(
            pods=(nomination(api, "p0", "a"), nomination(api, "p1", "a")),
            release={"small": ("a",)},
        )
    )
    assert {r: count(r) - before[r] for r in before} == {
        "written": 2.0,
        "rewritten": 1.0,
        "skipped": 0.0,
    }
