"""What scale-down would give back, and what it keeps and why: consolidation's own pieces
run read-only over the plan's view of the cluster, never a copy of them: the pool's member
Nodes as consolidation reads them (``consolidation_views.NodeViews``: ``membership``,
``usage_of``, the Node's own do-not-disrupt annotations), the batch's choice over every
pool together (``consolidation_rules.choose_together``, which applies ``movable_problem``),
and a dry run's preview of each pool's part (``consolidation_choice.preview``).

Consolidation itself stamps, waits ``unneededSeconds``, taints, and reads the
PodDisruptionBudgets just before it names a node; ``plan`` writes nothing and has no
timer, so it previews the choice those steps start from: which of the pool's underused
nodes could go now, in the order consolidation takes them, never more than the pool may
give up (``targetNodes - minNodes``), one request may name, nor the pool's disruption
budgets allow at the snapshot's time (``spec.disruption.budgets``, counting the Nodes
being disrupted already), and every other node of the pool with the rule that keeps it
(``disruption-budget`` naming the budget that holds). PodDisruptionBudgets are not
recorded in a snapshot, so not read (a node one of them holds is named here and kept
later).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler import simulation
from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.autoscaler.decide import (
    consolidation_choice,
    consolidation_rules,
)
from nodepool_operator.controllers.autoscaler.decide.consolidation_proof import Proof
from nodepool_operator.controllers.autoscaler.decide.consolidation_rules import pod_key
from nodepool_operator.controllers.autoscaler.snapshot.consolidation_views import NodeViews
from nodepool_operator.inspection import report
from nodepool_operator.runtime import nodes as k8s_nodes
from nodepool_operator.runtime.informer import Informer

__all__ = ["Inputs", "PoolToPreview", "preview"]


def _held(node: Mapping[str, Any]) -> tuple[str, str] | None:
    """(rule, message) when the Node itself may not go, whatever runs on it; else None:
    the reasons ``NodeViews`` folds into a view's ``eligible``, told apart."""
    refused = wellknown.do_not_disrupt_reason(node, node=True)
    if refused is not None:
        return "do-not-disrupt", f"the node carries {refused}"
    spec = node.get("spec") or {}
    if any(t.get("key") == wellknown.UNREGISTERED_TAINT_KEY for t in spec.get("taints") or ()):
        return "unregistered", "its kubelet has not reported Ready and its allocatable yet"
    if not k8s_nodes.is_ready(node):
        return "not-ready", "not Ready (the NodePool controller repairs it)"
    if spec.get("unschedulable"):
        return "cordoned", "cordoned: a drain, or someone by hand, owns it now"
    for taint in spec.get("taints") or ():
        if taint.get("key") == wellknown.DISRUPTED_TAINT_KEY:
            why = taint.get("value") or "drift or expiry"
            return "being-replaced", f"the NodePool controller replaces it ({why})"
    return None


@dataclass(frozen=True)
class Inputs:
    """What the preview reads: the caches, and the plan's view of the whole cluster."""

    nodes: Informer
    pods: Informer
    profile: Callable[[Mapping[str, Any]], PodProfile | str]
    cluster: Sequence[simulation.ExistingNode]
    daemon_sets: Sequence[simulation.DaemonSetView]


@dataclass(frozen=True)
class PoolToPreview:
    """A pool an Autoscaler plans for, as consolidation's turn sees it."""

    pool: str
    pool_uid: str | None
    room: int  # targetNodes - minNodes
    threshold: float  # its Autoscaler's scaleDown.utilizationThreshold
    # Its disruption budgets and the Nodes being repaired, as consolidation's turn has them.
    budgets: consolidation_choice.PoolBudgets = field(
        default_factory=consolidation_choice.PoolBudgets
    )


def preview(
    inputs: Inputs, pools: Sequence[PoolToPreview], *, now: float
) -> tuple[list[report.Removable], list[report.KeptNode]]:
    """The nodes scale-down would give back, in consolidation's order, at most ``room``
    of each pool (one request's worth, and what its budgets allow at ``now``), and every
    other member node with what keeps it. The candidates of every pool are checked
    together, as the controller does."""
    viewer = NodeViews(nodes=inputs.nodes, pods=inputs.pods, profile=inputs.profile)
    views = {p.pool: viewer.of_pool(p.pool, pool_uid=p.pool_uid) for p in pools}
    every = [v for found in views.values() for v in found]
    groups = [(views[p.pool], p.threshold) for p in pools]
    fits = Proof(
        views=every, cluster=inputs.cluster, daemon_sets=inputs.daemon_sets, profile=inputs.profile
    )
    chosen, kept = consolidation_rules.choose_together(
        groups, fits=fits, fit_together=fits.together
    )
    removals: list[report.Removable] = []
    staying: list[report.KeptNode] = []
    for pool in pools:
        names = {v.name for v in views[pool.pool]}
        choice = consolidation_choice.Choice(
            views=tuple(views[pool.pool]),
            chosen=tuple(v for v in chosen if v.name in names),
            kept=tuple(k for k in kept if k.node in names),
            gone=viewer.deleting(pool.pool, pool_uid=pool.pool_uid),
        )
        going, held = _pool_preview(choice, pool, now=now)
        removals += going
        staying += held
    return removals, staying


def _pool_preview(
    choice: consolidation_choice.Choice, pool: PoolToPreview, *, now: float
) -> tuple[list[report.Removable], list[report.KeptNode]]:
    per_request = scalerequest_api.MAX_REMOVE_NODES
    previewed = consolidation_choice.preview(
        choice, room=pool.room, per_request=per_request, now=now, budgets=pool.budgets
    )
    going = [v for v in choice.chosen if v.name in previewed.would_remove]
    kept = [
        report.KeptNode(pool=pool.pool, node=k.node, rule=k.rule, message=k.message)
        for k in (*choice.kept, *previewed.held)
    ]
    budgeted = {k.node for k in previewed.held}
    for index, view in enumerate(choice.chosen):
        if view.name in previewed.would_remove or view.name in budgeted:
            continue
        if index >= pool.room:
            rule, message = (
                "min-nodes",
                (f"the pool may give up {max(0, pool.room)} nodes (targetNodes - minNodes)"),
            )
        else:
            rule, message = "next-request", f"one request names at most {per_request} nodes"
        kept.append(report.KeptNode(pool=pool.pool, node=view.name, rule=rule, message=message))
    judged = {v.name for v in choice.chosen} | {k.node for k in kept}
    for view in choice.views:
        if view.name in judged:
            continue
        held = _held(view.obj) or (
            "busy",
            f"requests {view.usage:.0%} of its cpu or memory (threshold {pool.threshold:.0%})",
        )
        kept.append(report.KeptNode(pool=pool.pool, node=view.name, rule=held[0], message=held[1]))
    removals = [
        report.Removable(
            pool=pool.pool,
            node=view.name,
            reason=previewed.reasons[view.name],
            empty=view.empty,
            usage=round(view.usage, 3),
            pods=tuple(pod_key(p) for p in view.to_move),
        )
        for view in going
    ]
    return removals, sorted(kept, key=lambda k: k.node)
