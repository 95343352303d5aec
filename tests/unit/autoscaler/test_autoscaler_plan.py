"""The Autoscaler's pure decisions: effective target, scale-up, scale-down, hysteresis."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from nodepool_operator.controllers.autoscaler.decide import scaling
from nodepool_operator.controllers.autoscaler.simulation import PoolOutcome
from nodepool_operator.controllers.autoscaler.snapshot import pool_facts

NOTHING = PoolOutcome(new_nodes=0, wanted_nodes=0, triggering=(), hosted=())


def pool(**overrides: Any) -> pool_facts.PoolFacts:
    values: dict[str, Any] = {
        "name": "small",
        "min_nodes": 0,
        "max_nodes": 10,
        "target": 0,
        "ready": 0,
        "open_request": False,
    }
    values.update(overrides)
    return pool_facts.PoolFacts(**values)


def up(new: int, *, wanted: int | None = None, triggering: int = 0, hosted: int = 0) -> PoolOutcome:
    return PoolOutcome(
        new_nodes=new,
        wanted_nodes=new if wanted is None else wanted,
        triggering=tuple(range(triggering)),
        hosted=tuple(range(hosted)),
    )


def request(
    name: str,
    target: int,
    phase: str = "Pending",
    *,
    applied: int | None = None,
    version: str = "5",
    created: str | None = None,
    based_on: int | None = None,
) -> pool_facts.RequestView:
    return pool_facts.RequestView(
        name=name,
        created=created or f"2026-11-29T10:00:0{name[-1]}Z",
        target=target,
        phase=phase,
        applied=applied,
        version=version,
        based_on=based_on,
    )


def decide(
    p: pool_facts.PoolFacts, outcome: PoolOutcome = NOTHING, **kw: Any
) -> scaling.ScalingDecision:
    kw.setdefault("unneeded", [])
    kw.setdefault("unneeded_seconds", 60)
    kw.setdefault("blocked", None)
    return scaling.decide(p, outcome, **kw)


# -- base and effective target ------------------------------------------------------------


def base(target: int, requests: list[pool_facts.RequestView] = [], **kw: Any) -> int:  # noqa: B006
    values: dict[str, Any] = {"min_nodes": 0, "max_nodes": 10, "pool_version": "10"}
    values.update(kw)
    return pool_facts.base_target(target=target, requests=requests, **values)


def effective(b: int, requests: list[pool_facts.RequestView], **kw: Any) -> int:
    values: dict[str, Any] = {"min_nodes": 0, "max_nodes": 10}
    values.update(kw)
    return pool_facts.effective_target(base=b, requests=requests, **values)


def test_the_base_is_the_spec_within_bounds() -> None:
    assert base(3) == 3
    assert base(0, min_nodes=1) == 1
    assert base(12) == 10


def test_answered_requests_no_longer_count_once_the_pool_shows_them() -> None:
    done = [request("r1", 3, "Applied", applied=3, version="8"), request("r2", 9, "Rejected")]
    assert base(3, done) == 3
    # The user scaled the pool afterwards (a newer pool): the request is history.
    assert base(1, [request("r1", 3, "Applied", applied=3, version="8")]) == 1


def test_an_applied_request_counts_while_the_cached_pool_predates_it() -> None:
    applied = request("r1", 3, "Applied", applied=3, version="12")
    assert base(0, [applied], pool_version="10") == 3


def test_a_request_marked_zones_served_later_is_no_pool_write_the_cache_missed() -> None:
    # r1 applied 0 -> 2, then r2 2 -> 3 (the pool, version 10, shows 3). Once their Nodes
    # registered, both were marked zonesServed, which moved r1's resourceVersion past the
    # pool's: r1 must not read as a pool write not seen yet (the differential test's seed
    # 15, where every new request was based on 2 and Superseded).
    marked = dataclasses.replace(
        request("r1", 2, "Applied", applied=2, version="14"), zones_served=True
    )
    assert base(3, [marked, request("r2", 3, "Applied", applied=3, version="15")]) == 3


def test_without_pending_requests_the_effective_target_is_the_base() -> None:
    assert effective(3, [request("r1", 7, "Applied", applied=7)]) == 3


def test_the_newest_pending_request_wins_up_or_down() -> None:
    assert effective(1, [request("r1", 3), request("r2", 5)]) == 5
    assert effective(5, [request("r1", 7), request("r2", 2)]) == 2
    assert effective(5, [request("r1", 20)]) == 10
    assert effective(5, [request("r1", 0)], min_nodes=2) == 2


def test_the_newest_is_by_creation_time_not_by_name() -> None:
    early = request("z1", 3, created="2026-11-29T10:00:00Z")
    late = request("a2", 6, created="2026-11-29T10:00:05Z")
    assert effective(0, [late, early]) == 6


def test_a_request_computed_from_another_target_counts_for_nothing_as_the_pool_answers_it() -> None:
    # The NodePool controller supersedes it (the user scaled in between); the Autoscaler
    # predicts with the same rule, so it does not count on nodes that will never come.
    assert effective(4, [request("r1", 6, based_on=2)]) == 4
    assert effective(4, [request("r1", 6, based_on=4)]) == 6


# -- scale-up -------------------------------------------------------------------------


def test_new_nodes_of_the_simulation_are_asked_for() -> None:
    d = decide(pool(), up(3, triggering=10, hosted=10))
    assert (d.action, d.current, d.target, d.wanted, d.limited) == ("scale-up", 0, 3, 3, False)
    assert d.involved == tuple(range(10))
    assert "10 pending pods need 3 more nodes" in d.reason


def test_no_new_node_asks_nothing_so_a_scan_during_scale_up_is_quiet() -> None:
    booting = pool(target=3, ready=0)
    d = decide(booting, up(0, hosted=10))
    assert (d.action, d.target, d.reason) == ("none", 3, "no change")


def test_new_nodes_add_to_the_effective_target() -> None:
    d = decide(pool(target=3, ready=1, open_request=True), up(1, triggering=1, hosted=13))
    assert (d.action, d.current, d.target) == ("scale-up", 3, 4)
    assert "after 1 ready and 2 requested" in d.reason


def test_max_nodes_clamps_the_request_and_says_so() -> None:
    d = decide(pool(max_nodes=2), up(2, wanted=3, triggering=8, hosted=10))
    assert (d.action, d.target, d.wanted, d.limited) == ("scale-up", 2, 3, True)
    assert len(d.involved) == 8  # only the pods on the nodes granted
    assert "maxNodes=2" in d.reason


def test_at_max_nodes_nothing_is_asked_but_the_limit_shows() -> None:
    at_max = decide(pool(max_nodes=2, target=2, ready=2), up(0, wanted=1, hosted=1))
    assert (at_max.action, at_max.target, at_max.limited) == ("none", 2, True)


def test_a_scale_up_wins_over_unneeded_nodes() -> None:
    d = decide(pool(target=3, ready=3), up(1, triggering=1, hosted=1), unneeded=["a"])
    assert (d.action, d.target) == ("scale-up", 4)


@given(st.integers(0, 5), st.integers(0, 5), st.integers(0, 5), st.integers(1, 20))
def test_scale_up_never_exceeds_max_and_never_lowers_the_target(
    new: int, beyond: int, target: int, top: int
) -> None:
    target = min(target, top)
    new = min(new, top - target)  # the simulation grants at most maxNodes - target
    d = decide(pool(target=target, max_nodes=top), up(new, wanted=new + beyond))
    assert target <= d.target <= top
    assert d.wanted >= d.target


# -- the pool's facts --------------------------------------------------------------------


def test_nodes_requested_and_not_ready_are_in_flight() -> None:
    assert pool(target=3, ready=1).in_flight == 2
    assert pool(target=1, ready=3).in_flight == 0


def test_ready_nodes_beyond_the_target_are_leaving_cordoned_ones_first() -> None:
    assert pool(target=1, ready=3).leaving == 2
    assert pool(target=1, ready=3, cordoned=1).leaving == 1


def test_a_node_cordoned_by_hand_is_not_in_flight() -> None:
    p = pool(target=2, ready=2, cordoned=1)
    assert p.in_flight == 0
    assert scaling.scale_down_blocker(p, enabled=True, pending_fitting=0) is None


# -- scale-down -----------------------------------------------------------------------


def test_unneeded_nodes_are_given_up_down_to_min_nodes() -> None:
    d = decide(pool(target=3, ready=3, min_nodes=1), unneeded=["a", "b", "c"])
    assert (d.action, d.target) == ("scale-down", 1)
    assert "2 of 3 nodes unneeded for 60s (minNodes=1)" in d.reason
    assert decide(pool(target=1, ready=1, min_nodes=1), unneeded=["a"]).action == "none"


def test_nodes_already_leaving_are_not_given_up_twice() -> None:
    # Three Ready nodes, target already 2 (one leaving), two unneeded: only one more goes.
    p = pool(target=2, ready=3)
    assert decide(p, unneeded=["a", "b"]).target == 1
    assert decide(p, unneeded=["a"]).action == "none"


def test_anything_in_flight_blocks_scale_down() -> None:
    assert scaling.scale_down_blocker(pool(), enabled=False, pending_fitting=0) == "disabled"
    assert scaling.scale_down_blocker(pool(open_request=True), enabled=True, pending_fitting=0) == (
        "request-pending"
    )
    booting = pool(target=3, ready=2)
    assert scaling.scale_down_blocker(booting, enabled=True, pending_fitting=0) == (
        "capacity-in-flight"
    )
    settled = pool(target=3, ready=3)
    assert scaling.scale_down_blocker(settled, enabled=True, pending_fitting=2) == "pods-pending"
    assert scaling.scale_down_blocker(settled, enabled=True, pending_fitting=0) is None


def test_a_blocked_scale_down_decides_nothing_and_says_why() -> None:
    d = decide(pool(target=3, ready=3), unneeded=["a"], blocked="pods-pending")
    assert (d.action, d.target, d.blocked) == ("none", 3, "pods-pending")
    assert d.reason == "scale-down blocked: pods-pending"
