"""What scale-down would give back of one pool, and what it keeps and why: consolidation's
own rules (``choose``, which applies ``movable_problem``; ``usage_of``; ``NodeView``) run
read-only over the plan's view of the cluster, never a copy of them.

Consolidation itself stamps, waits ``unneededSeconds``, taints, and reads the
PodDisruptionBudgets just before it names a node; ``plan`` writes nothing and has no
timer, so it previews the choice those steps start from: which of the pool's underused
nodes could go now, in the order consolidation takes them, never more than the pool may
give up (``targetNodes - minNodes``), and every other node of the pool with the rule that
keeps it. Budgets are not read (a node a budget holds is named here and kept later).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from nodepool_operator import timestamps
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.controllers.autoscaler import simulation
from nodepool_operator.controllers.autoscaler.consolidation import NodeView, choose, usage_of
from nodepool_operator.controllers.autoscaler.consolidation.rules import pod_key, why_it_goes
from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.nodepool import inventory
from nodepool_operator.controllers.resources import NODES_BY_POOL, PODS_BY_NODE
from nodepool_operator.inspection import report
from nodepool_operator.runtime import nodes as k8s_nodes
from nodepool_operator.runtime import pods as k8s_pods
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.informer import Informer

__all__ = [
    "KARPENTER_DO_NOT_DISRUPT_ANNOTATION",
    "NODE_KEEP_ANNOTATIONS",
    "SCALE_DOWN_DISABLED_ANNOTATION",
    "Inputs",
    "is_pool_member",
    "preview",
]

#: Karpenter's node (and pod) annotation: the node is never disrupted voluntarily.
KARPENTER_DO_NOT_DISRUPT_ANNOTATION: Final = "karpenter.sh/do-not-disrupt"
#: cluster-autoscaler's node annotation: the node is never scaled down.
SCALE_DOWN_DISABLED_ANNOTATION: Final = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
#: A Node carrying any of these set to "true" is never removed by consolidation.
NODE_KEEP_ANNOTATIONS: Final = (
    nodepool_api.DO_NOT_DISRUPT_ANNOTATION,
    KARPENTER_DO_NOT_DISRUPT_ANNOTATION,
    SCALE_DOWN_DISABLED_ANNOTATION,
)


def is_pool_member(node: Mapping[str, Any], pool_uid: str) -> bool:
    """The Node is the pool's: an owner reference names the NodePool's uid (the pool label
    alone is not enough: anyone may set it). The NodePool controller's own rule
    (``inventory.owned_by``), until the shared one (``controllers/membership``) lands."""
    return inventory.owned_by(node, pool_uid)


def _held(node: Mapping[str, Any]) -> tuple[str, str] | None:
    """(rule, message) when the Node itself may not go, whatever runs on it; else None."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    for key in NODE_KEEP_ANNOTATIONS:
        if annotations.get(key) == "true":
            return "do-not-disrupt", f'the node carries {key}: "true"'
    spec = node.get("spec") or {}
    if any(t.get("key") == nodepool_api.UNREGISTERED_TAINT_KEY for t in spec.get("taints") or ()):
        return "unregistered", "its kubelet has not reported Ready and its allocatable yet"
    if not k8s_nodes.is_ready(node):
        return "not-ready", "not Ready (the NodePool controller repairs it)"
    if spec.get("unschedulable"):
        return "cordoned", "cordoned: a drain, or someone by hand, owns it now"
    return None


@dataclass(frozen=True)
class Inputs:
    """What the preview reads: the caches, and the plan's view of the whole cluster."""

    nodes: Informer
    pods: Informer
    profile: Callable[[Mapping[str, Any]], PodProfile | str]
    cluster: Sequence[simulation.ExistingNode]
    daemon_sets: Sequence[simulation.DaemonSetView]


def _view(node: Object, inputs: Inputs) -> NodeView:
    name = str(node["metadata"]["name"])
    bound = [
        p
        for p in inputs.pods.by_index(PODS_BY_NODE, name)
        if not k8s_pods.is_terminal(p) and not p["metadata"].get("deletionTimestamp")
    ]
    profiles = [inputs.profile(p) for p in bound]
    readable = [p for p in profiles if isinstance(p, PodProfile)]
    taints = (node.get("spec") or {}).get("taints") or ()
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return NodeView(
        name=name,
        obj=node,
        to_move=tuple(p for p in bound if not k8s_pods.is_daemon_or_mirror(p)),
        usage=usage_of(node, readable) if len(readable) == len(profiles) else 1.0,
        since=timestamps.parse_rfc3339(annotations.get(autoscaler_api.UNNEEDED_SINCE_ANNOTATION)),
        tainted=any(t.get("key") == autoscaler_api.CONSOLIDATING_TAINT_KEY for t in taints),
        eligible=_held(node) is None,
    )


def _fits(
    views: Sequence[NodeView], inputs: Inputs
) -> Callable[[Sequence[NodeView]], tuple[str, str] | None]:
    """Whether the pods of the chosen nodes all fit on the cluster's other nodes; nodes
    already leaving (tainted) or held are not counted as room, as consolidation does."""
    leaving = {v.name for v in views if v.tainted or not v.eligible}

    def fits(chosen: Sequence[NodeView]) -> tuple[str, str] | None:
        going = leaving | {v.name for v in chosen}
        moving = [p for v in chosen for p in v.to_move]
        profiles = [inputs.profile(p) for p in moving]
        for pod, profile in zip(moving, profiles, strict=True):
            if not isinstance(profile, PodProfile):
                return pod_key(pod), f"its requests cannot be read: {profile}"
        outcome = simulation.simulate(
            [p for p in profiles if isinstance(p, PodProfile)],
            nodes=[n for n in inputs.cluster if n.name not in going],
            pools=(),
            daemon_sets=inputs.daemon_sets,
        )
        if not outcome.unfit:
            return None
        first = min(outcome.unfit)
        return pod_key(moving[first]), outcome.unfit[first]

    return fits


def preview(
    inputs: Inputs,
    *,
    pool: str,
    pool_uid: str,
    room: int,
    threshold: float,
) -> tuple[list[report.Removable], list[report.KeptNode]]:
    """The pool's nodes scale-down would give back (at most ``room``: targetNodes -
    minNodes), in consolidation's order, and every other member node with what keeps it."""
    members = sorted(
        (
            node
            for node in inputs.nodes.by_index(NODES_BY_POOL, pool)
            if is_pool_member(node, pool_uid) and not node["metadata"].get("deletionTimestamp")
        ),
        key=lambda n: str(n["metadata"]["name"]),
    )
    views = [_view(node, inputs) for node in members]
    chosen, underused_kept = choose(views, threshold=threshold, fits=_fits(views, inputs))
    going = chosen[: max(0, room)]
    kept = [
        report.KeptNode(pool=pool, node=k.node, rule=k.rule, message=k.message)
        for k in underused_kept
    ]
    kept += [
        report.KeptNode(
            pool=pool,
            node=view.name,
            rule="min-nodes",
            message=f"the pool may give up {max(0, room)} nodes (targetNodes - minNodes)",
        )
        for view in chosen[len(going) :]
    ]
    judged = {v.name for v in chosen} | {k.node for k in kept}
    for view in views:
        if view.name in judged:
            continue
        held = _held(view.obj)
        if held is None:  # eligible, not underused
            held = (
                "busy",
                f"requests {view.usage:.0%} of its cpu or memory (threshold {threshold:.0%})",
            )
        kept.append(report.KeptNode(pool=pool, node=view.name, rule=held[0], message=held[1]))
    removals = [
        report.Removable(
            pool=pool,
            node=view.name,
            reason=why_it_goes(view),
            empty=view.empty,
            usage=round(view.usage, 3),
            pods=tuple(pod_key(p) for p in view.to_move),
        )
        for view in going
    ]
    return removals, sorted(kept, key=lambda k: k.node)
