"""The Autoscaler's pure decisions: effective target, scale-up, scale-down, hysteresis."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from nodepool_operator.api import nodepool as np
from nodepool_operator.controllers.autoscaler import plan
from nodepool_operator.controllers.autoscaler.fit import NodeShape, Resources

GI = 1024**3
SHAPE = NodeShape.of_pool("small", np.NodeTemplate(cpu="4", memory="16Gi", pods=110))
ONE_CPU = Resources(cpu=1000, memory=GI)


def pool(**overrides: Any) -> plan.PoolFacts:
    values: dict[str, Any] = {
        "name": "small",
        "min_nodes": 0,
        "max_nodes": 10,
        "target": 0,
        "ready": 0,
        "free": (),
        "shape": SHAPE,
        "open_request": False,
    }
    values.update(overrides)
    return plan.PoolFacts(**values)


def request(
    name: str,
    target: int,
    phase: str = "Pending",
    *,
    applied: int | None = None,
    version: str = "5",
) -> plan.RequestView:
    return plan.RequestView(
        name=name,
        created=f"2026-11-29T10:00:0{name[-1]}Z",
        target=target,
        phase=phase,
        applied=applied,
        version=version,
    )


def decide(p: plan.PoolFacts, pods: list[Resources], **kw: Any) -> plan.Decision:
    kw.setdefault("unneeded", [])
    kw.setdefault("unneeded_seconds", 60)
    kw.setdefault("blocked", None)
    return plan.decide(p, pods, **kw)


# -- effective target -----------------------------------------------------------------


def effective(target: int, requests: list[plan.RequestView], **kw: Any) -> int:
    values: dict[str, Any] = {"min_nodes": 0, "max_nodes": 10, "pool_version": "10"}
    values.update(kw)
    return plan.effective_target(target=target, requests=requests, **values)


def test_effective_target_is_the_spec_within_bounds_without_requests() -> None:
    assert effective(3, []) == 3
    assert effective(0, [], min_nodes=1) == 1
    assert effective(12, []) == 10


def test_the_newest_pending_request_wins_up_or_down() -> None:
    assert effective(1, [request("r1", 3), request("r2", 5)]) == 5
    assert effective(5, [request("r1", 7), request("r2", 2)]) == 2
    assert effective(5, [request("r1", 20)]) == 10


def test_answered_requests_no_longer_count_once_the_pool_shows_them() -> None:
    done = [request("r1", 3, "Applied", applied=3, version="8"), request("r2", 9, "Rejected")]
    assert effective(3, done) == 3
    # The user scaled the pool afterwards (a newer pool): the request is history.
    assert effective(1, [request("r1", 3, "Applied", applied=3, version="8")]) == 1


def test_an_applied_request_counts_while_the_cached_pool_predates_it() -> None:
    applied = request("r1", 3, "Applied", applied=3, version="12")
    assert effective(0, [applied], pool_version="10") == 3


# -- scale-up -------------------------------------------------------------------------


def test_ten_one_cpu_pods_and_no_nodes_ask_for_three() -> None:
    d = decide(pool(), [ONE_CPU] * 10)
    assert (d.action, d.current, d.target, d.limited) == ("scale-up", 0, 3, False)
    assert len(d.involved) == 10


def test_nodes_in_flight_absorb_the_pods_so_a_scan_during_scale_up_asks_nothing() -> None:
    booting = pool(target=3, ready=0)
    d = decide(booting, [ONE_CPU] * 10)
    assert (d.action, d.target) == ("none", 3)
    partly = pool(
        target=3,
        ready=2,
        free=(Resources(cpu=0, memory=0, pods=100), Resources(cpu=2000, memory=8 * GI, pods=100)),
    )
    assert decide(partly, [ONE_CPU] * 6).action == "none"  # 2 on the free room, 4 in flight


def test_free_room_on_ready_nodes_is_subtracted() -> None:
    p = pool(target=1, ready=1, free=(Resources(cpu=4000, memory=16 * GI, pods=110),))
    d = decide(p, [ONE_CPU] * 10)
    assert (d.current, d.target) == (1, 3)
    assert len(d.involved) == 6


def test_room_on_nodes_being_removed_is_not_counted() -> None:
    # A scale-down to 1 is under way: two of the three empty nodes are leaving.
    p = pool(target=1, ready=3, free=(SHAPE.capacity,) * 3)
    d = decide(p, [ONE_CPU] * 6)
    assert (d.action, d.current, d.target) == ("scale-up", 1, 2)


def test_a_node_cordoned_by_hand_is_neither_room_nor_in_flight() -> None:
    p = pool(target=2, ready=2, cordoned=1, free=(SHAPE.capacity,))
    assert p.in_flight == 0
    assert plan.scale_down_blocker(p, enabled=True, pending_fitting=0) is None
    assert decide(p, [ONE_CPU] * 6).target == 3


def test_the_need_growing_while_a_request_is_pending_asks_again() -> None:
    p = pool(target=3, ready=0, open_request=True)
    assert decide(p, [ONE_CPU] * 12).action == "none"
    d = decide(p, [ONE_CPU] * 13)
    assert (d.action, d.target) == ("scale-up", 4)


def test_max_nodes_clamps_the_request_and_says_so() -> None:
    d = decide(pool(max_nodes=2), [ONE_CPU] * 10)
    assert (d.action, d.target, d.wanted, d.limited) == ("scale-up", 2, 3, True)
    assert len(d.involved) == 8  # only the pods on the nodes granted
    assert "maxNodes=2" in d.reason
    at_max = decide(
        pool(max_nodes=2, target=2, ready=2, free=(Resources(cpu=0, memory=0, pods=0),) * 2),
        [ONE_CPU],
    )
    assert (at_max.action, at_max.limited) == ("none", True)


@given(st.integers(0, 60), st.integers(0, 5), st.integers(0, 5), st.integers(1, 20))
def test_scale_up_never_exceeds_max_and_never_lowers_the_target(
    pods: int, target: int, ready: int, top: int
) -> None:
    ready = min(ready, target)
    p = pool(
        target=min(target, top),
        ready=ready,
        max_nodes=top,
        free=(Resources(cpu=0, memory=0, pods=0),) * ready,
    )
    d = decide(p, [ONE_CPU] * pods)
    assert p.target <= d.target <= top
    assert d.target - p.target <= pods


# -- scale-down -----------------------------------------------------------------------


def test_unneeded_nodes_are_given_up_down_to_min_nodes() -> None:
    p = pool(target=3, ready=3, min_nodes=1, free=(SHAPE.capacity,) * 3)
    d = decide(p, [], unneeded=["a", "b", "c"])
    assert (d.action, d.target) == ("scale-down", 1)
    assert decide(pool(target=1, ready=1, min_nodes=1), [], unneeded=["a"]).action == "none"


def test_nodes_already_leaving_are_not_given_up_twice() -> None:
    # Three Ready nodes, target already 2 (one leaving), two unneeded: only one more goes.
    p = pool(target=2, ready=3, free=(SHAPE.capacity,) * 3)
    assert decide(p, [], unneeded=["a", "b"]).target == 1
    assert decide(p, [], unneeded=["a"]).action == "none"


def test_anything_in_flight_blocks_scale_down() -> None:
    assert plan.scale_down_blocker(pool(), enabled=False, pending_fitting=0) == "disabled"
    assert plan.scale_down_blocker(pool(open_request=True), enabled=True, pending_fitting=0) == (
        "request-pending"
    )
    booting = pool(target=3, ready=2)
    assert plan.scale_down_blocker(booting, enabled=True, pending_fitting=0) == (
        "capacity-in-flight"
    )
    settled = pool(target=3, ready=3)
    assert plan.scale_down_blocker(settled, enabled=True, pending_fitting=2) == "pods-pending"
    assert plan.scale_down_blocker(settled, enabled=True, pending_fitting=0) is None
    d = decide(settled, [], unneeded=["a"], blocked="pods-pending")
    assert (d.action, d.blocked) == ("none", "pods-pending")
