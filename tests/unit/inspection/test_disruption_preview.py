"""``plan --dry-run`` lists what would be disrupted next and what holds it: the pool's
expired and drifted Nodes the NodePool controller would replace (within its disruption
budgets, or held by one, or by a do-not-disrupt annotation), and consolidation's
candidates within the same budgets, which count the Nodes being replaced already."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import pytest

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.api.disruption import Budget, Disruption
from nodepool_operator.controllers.autoscaler.consolidator import PDBS
from nodepool_operator.inspection import planning, report, snapshot
from unit.inspection import recordings
from unit.inspection.recordings import CREATED, TEMPLATE

POOL = "small"
NAMES = ("n1", "n2", "n3")
ONE_AT_A_TIME = (Budget(nodes="1"),)


def _pool(*, budgets: Sequence[Budget], expire_after: str = "Never") -> dict[str, Any]:
    spec = nodepool_api.NodePoolSpec(
        target_nodes=len(NAMES),
        max_nodes=10,
        template=TEMPLATE,
        disruption=Disruption(budgets=tuple(budgets)),
        expire_after=expire_after,
    )
    found = nodepool_api.manifest(POOL, spec)
    found["metadata"].update(uid=f"uid-{POOL}", creationTimestamp=CREATED)
    return found


def _nodes() -> list[dict[str, Any]]:
    """Three empty Ready nodes of the pool, created when the pool was (ten minutes before
    the snapshot)."""
    nodes = [recordings.node(name, POOL) for name in NAMES]
    for node in nodes:
        node["metadata"]["annotations"] = {}
    return nodes


async def _plan(pool: dict[str, Any], nodes: list[dict[str, Any]]) -> report.ClusterPlan:
    recorded = recordings.recording(pools=[pool], nodes=nodes, pods=[])
    return await planning.plan_cluster(planning.reads_of(recorded))


def _replacing(node: dict[str, Any]) -> None:
    node["spec"]["taints"] = [
        {"key": wellknown.DISRUPTED_TAINT_KEY, "value": "Drifted", "effect": "NoSchedule"}
    ]


async def test_expired_nodes_are_listed_next_or_held_by_the_budget_or_do_not_disrupt() -> None:
    nodes = _nodes()
    nodes[2]["metadata"]["annotations"] = {wellknown.DO_NOT_DISRUPT_ANNOTATION: "true"}

    planned = await _plan(_pool(budgets=ONE_AT_A_TIME, expire_after="5m"), nodes)

    listed = {d.node: (d.reason, d.state, d.held_by) for d in planned.disruptions}
    assert listed["n1"] == ("Expired", "next", None)
    assert listed["n2"] == ("Expired", "held", "budget nodes=1: 1 of 1 in use")
    reason, state, holder = listed["n3"]
    assert (reason, state) == ("Expired", "held")
    assert holder is not None
    assert wellknown.DO_NOT_DISRUPT_ANNOTATION in holder
    out = io.StringIO()
    report.print_plan(planned, out=out)
    assert "Nodes the NodePool controller replaces (drift, expiry)" in out.getvalue()
    assert "budget nodes=1: 1 of 1 in use" in out.getvalue()


async def test_a_node_being_replaced_is_listed_and_holds_consolidation_to_the_budget() -> None:
    nodes = _nodes()
    _replacing(nodes[0])

    planned = await _plan(_pool(budgets=ONE_AT_A_TIME), nodes)

    assert [(d.node, d.state) for d in planned.disruptions] == [("n1", "in-progress")]
    assert planned.removable == ()  # n1 is not a candidate; its replacement uses the budget
    kept = {k.node: (k.rule, k.message) for k in planned.kept}
    assert kept["n2"][0] == "disruption-budget"
    assert "budget nodes=1: 1 of 1 in use" in kept["n2"][1]
    assert kept["n3"][0] == "disruption-budget"
    assert kept["n1"] == ("being-replaced", "the NodePool controller replaces it (Drifted)")


async def test_consolidation_previews_as_many_empty_nodes_as_the_budget_allows() -> None:
    planned = await _plan(_pool(budgets=ONE_AT_A_TIME), _nodes())

    assert [r.node for r in planned.removable] == ["n1"]
    kept = {k.node: k.rule for k in planned.kept}
    assert kept == {"n2": "disruption-budget", "n3": "disruption-budget"}
    assert planned.disruptions == ()


async def test_a_zero_budget_window_open_at_the_snapshot_holds_every_candidate() -> None:
    # The snapshot is taken at 00:10 UTC, inside the window that opens at midnight.
    window = Budget(nodes="0", schedule="0 0 * * *", duration="1h")

    planned = await _plan(_pool(budgets=(window,)), _nodes())

    assert planned.removable == ()
    assert all("schedule '0 0 * * *' for 1h" in k.message for k in planned.kept)
    assert len(planned.kept) == len(NAMES)


def _budget(name: str, app: str, *, allowed: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": recordings.NAMESPACE, "uid": f"uid-{name}"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
        "status": {"disruptionsAllowed": allowed},
    }


def _on(node: str, app: str) -> dict[str, Any]:
    found = recordings.pod(f"{app}-on-{node}", "100m", node=node)
    found["metadata"]["labels"] = {"app": app}
    return found


async def _plan_with_budgets(
    pool: dict[str, Any],
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    budgets: list[dict[str, Any]] | None,
) -> report.ClusterPlan:
    """The plan of a snapshot that recorded ``budgets`` (None: one taken before
    snapshots recorded them)."""
    recorded = recordings.recording(pools=[pool], nodes=nodes, pods=pods)
    if budgets is not None:
        recorded.caches[snapshot.cache_key(PDBS, None, None, None)] = budgets
    return await planning.plan_cluster(
        planning.reads_of(recorded), budgets=snapshot.budgets_in(recorded)
    )


async def test_a_pod_disruption_budget_allowing_none_holds_the_nodes_it_covers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nodes = _nodes()
    _replacing(nodes[1])  # being drained already: its pod's eviction is refused
    pods = [_on("n1", "db"), _on("n2", "db"), _on("n3", "web")]
    budgets = [_budget("db", "db", allowed=0), _budget("web", "web", allowed=1)]

    planned = await _plan_with_budgets(
        _pool(budgets=(Budget(nodes="3"),), expire_after="5m"), nodes, pods, budgets
    )

    listed = {d.node: (d.state, d.held_by) for d in planned.disruptions}
    held = f"PodDisruptionBudget {recordings.NAMESPACE}/db (0 disruptions allowed)"
    assert listed["n1"] == ("next", held)
    assert listed["n2"] == ("in-progress", held)
    assert listed["n3"] == ("next", None)  # its budget allows one
    monkeypatch.setenv("COLUMNS", "200")  # a table row on one line
    out = io.StringIO()
    report.print_plan(planned, out=out)
    assert held in out.getvalue()


async def test_a_budget_of_another_namespace_or_selector_or_none_recorded_holds_nothing() -> None:
    other_namespace = _budget("db", "db", allowed=0)
    other_namespace["metadata"]["namespace"] = "elsewhere"
    other_app = _budget("cache", "cache", allowed=0)
    pods = [_on("n1", "db")]
    pool = _pool(budgets=(Budget(nodes="3"),), expire_after="5m")

    unrelated = await _plan_with_budgets(pool, _nodes(), pods, [other_namespace, other_app])
    unrecorded = await _plan_with_budgets(pool, _nodes(), pods, None)

    assert {d.held_by for d in unrelated.disruptions} == {None}
    assert {d.held_by for d in unrecorded.disruptions} == {None}
    assert len(unrecorded.disruptions) == len(NAMES)
