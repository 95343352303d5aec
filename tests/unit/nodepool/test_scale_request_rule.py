"""The one rule for what a pool's ScaleRequests do to it (``scalerequest_api.answer_requests``):
order, basis, bounds, and the phase each request gets."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.runtime import versions

CREATED = "2027-01-15T08:00:00Z"


def spec(target: int, *, min_nodes: int = 0, max_nodes: int = 10) -> nodepool_api.NodePoolSpec:
    return nodepool_api.NodePoolSpec(target_nodes=target, min_nodes=min_nodes, max_nodes=max_nodes)


def request(
    name: str,
    target: int,
    *,
    based_on: int | None = None,
    created: str = CREATED,
    version: str = "10",
    phase: scalerequest_api.Phase = "Pending",
) -> scalerequest_api.RequestFacts:
    return scalerequest_api.RequestFacts(
        name=name,
        order=versions.creation_order(created=created, version=version, name=name),
        phase=phase,
        target_nodes=target,
        based_on_target_nodes=based_on,
    )


def answer(
    pool: nodepool_api.NodePoolSpec, *requests: scalerequest_api.RequestFacts
) -> scalerequest_api.Outcome:
    return scalerequest_api.answer_requests(requests, pool=pool)


def phases(outcome: scalerequest_api.Outcome) -> list[tuple[str, str]]:
    return [(a.name, a.phase) for a in outcome.answers]


def test_a_scale_up_is_applied_and_clamped_to_max_nodes() -> None:
    applied = answer(spec(3), request("r", 5))
    assert applied.target_nodes == 5
    assert applied.answers == (
        scalerequest_api.Answer(
            name="r", phase="Applied", applied_target_nodes=5, message="targetNodes 3 -> 5"
        ),
    )
    clamped = answer(spec(3, max_nodes=4), request("r", 9))
    assert clamped.target_nodes == 4
    assert clamped.answers[0].message == "targetNodes 3 -> 4 (clamped to maxNodes)"


def test_a_scale_up_at_max_nodes_is_rejected_and_reports_the_target_kept() -> None:
    outcome = answer(spec(4, max_nodes=4), request("r", 9))
    assert outcome.target_nodes == 4
    [rejected] = outcome.answers
    assert (rejected.phase, rejected.applied_target_nodes) == ("Rejected", 4)
    assert rejected.message == "pool is at maxNodes=4; cannot grow"


def test_a_scale_down_stops_at_min_nodes() -> None:
    assert answer(spec(5, min_nodes=1), request("r", 2)).target_nodes == 2
    clamped = answer(spec(5, min_nodes=3), request("r", 0))
    assert clamped.target_nodes == 3
    assert clamped.answers[0].message == "targetNodes 5 -> 3 (clamped to minNodes)"
    at_min = answer(spec(3, min_nodes=3), request("r", 1))
    assert (at_min.target_nodes, at_min.answers[0].phase) == (3, "Rejected")
    assert at_min.answers[0].message == "pool is at minNodes=3; cannot shrink"


def test_a_request_for_the_current_target_is_applied_without_change() -> None:
    outcome = answer(spec(4), request("r", 4))
    assert (outcome.target_nodes, phases(outcome)) == (4, [("r", "Applied")])


def test_a_request_based_on_another_target_is_superseded_and_changes_nothing() -> None:
    outcome = answer(spec(2), request("r", 4, based_on=3))
    assert outcome.target_nodes == 2
    [stale] = outcome.answers
    assert (stale.phase, stale.applied_target_nodes) == ("Superseded", None)
    assert stale.message == (
        "based on targetNodes=3, but the pool's targetNodes is now 2; not applied"
    )
    assert answer(spec(2), request("r", 4, based_on=2)).target_nodes == 4
    assert answer(spec(2), request("r", 4)).target_nodes == 4  # by hand: no basis


def test_the_newest_by_creation_then_resource_version_decides_not_the_name() -> None:
    # Same second: resourceVersion decides, as a number ("9" < "10"), not as text.
    a = request("a", 3, version="10")
    b = request("b", 7, version="9")
    # An earlier second is older whatever its version and name.
    z = request("z", 1, created="2027-01-15T07:59:59Z", version="99")
    for given_order in ((a, b, z), (z, a, b), (b, z, a)):
        outcome = answer(spec(1), *given_order)
        assert outcome.target_nodes == 3
        assert phases(outcome) == [("z", "Superseded"), ("b", "Superseded"), ("a", "Applied")]
        assert outcome.answers[0].message == "superseded by a"


def test_only_pending_requests_are_answered() -> None:
    done = request("done", 9, phase="Applied", version="11")
    outcome = answer(spec(2), done, request("r", 3))
    assert (outcome.target_nodes, phases(outcome)) == (3, [("r", "Applied")])
    nothing = answer(spec(2), done)
    assert (nothing.target_nodes, nothing.answers, nothing.decisive) == (2, (), None)


def test_requests_for_a_missing_pool_are_all_rejected_with_its_name() -> None:
    answers = scalerequest_api.reject_requests(
        [request("b", 2, version="11"), request("a", 1), request("x", 1, phase="Applied")],
        pool_name="ghost",
    )
    assert [(a.name, a.phase, a.applied_target_nodes) for a in answers] == [
        ("a", "Rejected", None),
        ("b", "Rejected", None),
    ]
    assert {a.message for a in answers} == {"NodePool 'ghost' does not exist"}


@given(
    target=st.integers(0, 20),
    low=st.integers(0, 20),
    high=st.integers(0, 20),
    asked=st.lists(st.integers(0, 30), min_size=1, max_size=5),
)
def test_the_target_is_the_newest_request_within_bounds_and_every_request_is_answered(
    target: int, low: int, high: int, asked: list[int]
) -> None:
    pool = spec(target, min_nodes=min(low, high), max_nodes=max(low, high))
    requests = [request(f"r{i}", n, version=str(10 + i)) for i, n in enumerate(asked)]
    outcome = answer(pool, *reversed(requests))
    expected = nodepool_api.within_bounds(
        asked[-1], min_nodes=pool.min_nodes, max_nodes=pool.max_nodes
    )
    assert outcome.target_nodes == expected
    assert [a.name for a in outcome.answers] == [r.name for r in requests]
    decisive = outcome.decisive
    assert decisive is not None
    assert decisive.phase == (
        "Applied" if expected != target or asked[-1] == target else "Rejected"
    )
    assert all(a.phase == "Superseded" for a in outcome.answers[:-1])
