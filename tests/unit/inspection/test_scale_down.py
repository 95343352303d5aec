"""``plan --dry-run`` previews scale-down with consolidation's own rules: a pool's empty and
underused nodes whose pods fit elsewhere, never more than ``targetNodes - minNodes`` of
them, and every other node of the pool with the rule that keeps it; Nodes that carry the
pool label without being the pool's, and Nodes annotated do-not-disrupt (ours, Karpenter's)
or scale-down-disabled (cluster-autoscaler's), are never previewed for removal."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import pytest

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.api import wellknown
from nodepool_operator.api.disruption import Budget, Disruption
from nodepool_operator.inspection import planning, report, snapshot
from unit.inspection import recordings
from unit.inspection.recordings import CREATED, NAMESPACE, TEMPLATE

POOL = "small"
REPLICATED = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs-web"}]


def _pool(*, target: int, min_nodes: int = 0, budgets: Sequence[Budget] = ()) -> dict[str, Any]:
    """The pool; ``budgets``: its disruption budgets (none unless a test is about them)."""
    spec = nodepool_api.NodePoolSpec(
        target_nodes=target,
        min_nodes=min_nodes,
        max_nodes=max(10, target),
        template=TEMPLATE,
        disruption=Disruption(budgets=tuple(budgets)),
    )
    found = nodepool_api.manifest(POOL, spec)
    found["metadata"].update(uid=f"uid-{POOL}", creationTimestamp=CREATED)
    return found


def _node(name: str, *, owned: bool = True, annotations: dict[str, str] | None = None) -> Any:
    """A Ready 4-cpu node with the pool's label, the pool's own (an owner reference to its
    uid) unless ``owned`` is off."""
    node = recordings.node(name, POOL)
    owner = {"apiVersion": nodepool_api.API_VERSION, "kind": nodepool_api.KIND, "name": POOL}
    node["metadata"]["annotations"] = dict(annotations or {})
    node["metadata"]["ownerReferences"] = [{**owner, "uid": f"uid-{POOL}"}] if owned else []
    return node


def _pod(name: str, cpu: str, *, node: str, owners: Any = REPLICATED) -> dict[str, Any]:
    """A running pod on ``node``, replicated (a controller owns it) unless ``owners`` is
    empty."""
    pod = recordings.pod(name, cpu, node=node, pool=None)
    pod["metadata"]["ownerReferences"] = [{**ref, "controller": True} for ref in owners]
    return pod


def _recording(
    nodes: list[Any],
    pods: list[Any],
    *,
    target: int,
    min_nodes: int = 0,
    budgets: Sequence[Budget] = (),
) -> snapshot.CacheRecording:
    pools = [_pool(target=target, min_nodes=min_nodes, budgets=budgets)]
    return recordings.recording(pools=pools, nodes=nodes, pods=pods)


def _three_nodes(*, min_nodes: int = 0) -> snapshot.CacheRecording:
    """busy-0 at 62%; light-1 with one 1-cpu replica (25%) that fits on busy-0; empty-2."""
    nodes = [_node("busy-0"), _node("light-1"), _node("empty-2")]
    pods = [_pod("big", "2500m", node="busy-0"), _pod("small", "1", node="light-1")]
    return _recording(nodes, pods, target=3, min_nodes=min_nodes)


async def _plan(recorded: snapshot.CacheRecording) -> report.ClusterPlan:
    return await planning.plan_cluster(planning.reads_of(recorded))


def _kept(plan: report.ClusterPlan) -> dict[str, tuple[str, str]]:
    return {k.node: (k.rule, k.message) for k in plan.kept}


async def test_an_underused_node_whose_pods_fit_elsewhere_is_previewed_with_its_reason() -> None:
    planned = await _plan(_three_nodes())

    assert [(r.node, r.empty) for r in planned.removable] == [
        ("empty-2", True),  # empty nodes first, as consolidation takes them
        ("light-1", False),
    ]
    light = planned.removable[1]
    assert light.usage == 0.25
    assert light.pods == (f"{NAMESPACE}/small",)
    assert light.reason == "underused (25% requested); its 1 pods fit on other nodes"
    assert planned.removable[0].reason == "empty (DaemonSet and mirror pods only)"
    assert _kept(planned) == {
        "busy-0": ("busy", "requests 62% of its cpu or memory (threshold 50%)")
    }
    [pool] = planned.scale_down
    assert (pool.pool, pool.target_nodes, pool.min_nodes, pool.may_give_up) == (POOL, 3, 0, 3)
    assert pool.waits_for is None


async def test_no_more_removals_than_target_nodes_minus_min_nodes() -> None:
    planned = await _plan(_three_nodes(min_nodes=2))

    assert [r.node for r in planned.removable] == ["empty-2"]
    rule, message = _kept(planned)["light-1"]
    assert rule == "min-nodes"
    assert "may give up 1 nodes" in message
    assert planned.scale_down[0].may_give_up == 1


async def test_a_pool_at_min_nodes_previews_no_removal() -> None:
    planned = await _plan(_three_nodes(min_nodes=3))

    assert planned.removable == ()
    assert {n for n, (rule, _) in _kept(planned).items() if rule == "min-nodes"} == {
        "empty-2",
        "light-1",
    }


@pytest.mark.parametrize(
    "annotation",
    [
        wellknown.DO_NOT_DISRUPT_ANNOTATION,
        wellknown.KARPENTER_DO_NOT_DISRUPT_ANNOTATION,
        wellknown.SCALE_DOWN_DISABLED_ANNOTATION,
    ],
)
async def test_a_node_annotated_not_to_be_disrupted_is_kept_and_the_annotation_named(
    annotation: str,
) -> None:
    nodes = [_node("busy-0"), _node("empty-1", annotations={annotation: "true"}), _node("empty-2")]
    recorded = _recording(nodes, [_pod("big", "2500m", node="busy-0")], target=3)

    planned = await _plan(recorded)

    assert [r.node for r in planned.removable] == ["empty-2"]
    assert _kept(planned)["empty-1"] == ("do-not-disrupt", f'the node carries {annotation}: "true"')


async def test_a_node_with_the_pool_label_that_the_pool_does_not_own_is_not_the_pools() -> None:
    nodes = [_node("busy-0"), _node("foreign-1", owned=False)]
    recorded = _recording(nodes, [_pod("big", "2500m", node="busy-0")], target=1)

    planned = await _plan(recorded)

    assert planned.removable == ()
    assert set(_kept(planned)) == {"busy-0"}


async def test_a_node_kept_by_a_pod_names_the_pod_and_the_rule() -> None:
    nodes = [_node("busy-0"), _node("bare-1"), _node("pinned-2")]
    pods = [
        _pod("big", "3500m", node="busy-0"),
        _pod("lonely", "500m", node="bare-1", owners=[]),  # no controller recreates it
        _pod("pinned", "1500m", node="pinned-2"),
    ]
    pods[2]["spec"]["nodeSelector"] = {wellknown.HOSTNAME_LABEL: "pinned-2"}

    planned = await _plan(_recording(nodes, pods, target=3))

    assert planned.removable == ()
    kept = _kept(planned)
    assert kept["bare-1"][0] == "not-replicated"
    assert f"{NAMESPACE}/lonely" in kept["bare-1"][1]
    assert kept["pinned-2"][0] == "no-room"
    assert kept["pinned-2"][1].startswith(f"pod {NAMESPACE}/pinned fits on no other node")


async def test_the_table_lists_removals_with_their_reason_and_kept_nodes_with_their_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps at 80 columns when not on a terminal
    planned = await _plan(_three_nodes(min_nodes=2))
    out = io.StringIO()

    report.print_plan(planned, out=out)

    text = out.getvalue()
    assert "empty (DaemonSet and mirror pods only)" in text
    assert "min-nodes" in text
    assert "and 1 busy nodes" in text
    assert '"reason": "empty (DaemonSet and mirror pods only)"' in report.to_json(planned)


async def test_a_pool_whose_scale_down_waits_says_what_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    nodes = [_node("busy-0"), _node("empty-1")]
    waiting = recordings.pod("waiting", "500m", pool=POOL)  # unschedulable, for the pool
    recorded = _recording(nodes, [_pod("big", "2500m", node="busy-0"), waiting], target=2)

    planned = await _plan(recorded)
    out = io.StringIO()
    report.print_plan(planned, out=out)

    assert planned.scale_down[0].waits_for == "pods-pending"
    assert f"scale-down of {POOL} waits: pods wait for the pool" in out.getvalue()


async def test_empty_nodes_past_one_requests_worth_go_in_a_later_request() -> None:
    count = scalerequest_api.MAX_REMOVE_NODES + 2
    nodes = [_node(f"empty-{index:03d}") for index in range(count)]

    planned = await _plan(_recording(nodes, [], target=count))

    assert len(planned.removable) == scalerequest_api.MAX_REMOVE_NODES
    later = [node for node, (rule, _) in _kept(planned).items() if rule == "next-request"]
    assert later == [f"empty-{index:03d}" for index in range(count - 2, count)]
