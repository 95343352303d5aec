"""Which pending pods to nominate on which new Nodes, and which Nodes to release (pure).

A scale-up's Nodes wait for nominations (``api.nominations``). A pool's waiting Nodes are
released together, once the pool has every Node its target calls for and each waiting
one is Ready: before that, a Node still to come or to turn Ready makes kube-scheduler try
the pending pods again, fail on the waiting Nodes' taint, and clear the nominations. But
VMs boot at their own pace, and pods must not wait long on a Ready Node for a slow one:
once a waiting Node has been Ready for ``PATIENCE_SECONDS`` (its Ready condition's
lastTransitionTime), the Ready ones are released without the others. Their pods are
nominated there; the pods planned on the others are not nominated yet, so nothing of
theirs is cleared, and they can only take the released Nodes' room beyond what those
Nodes' own nominated pods hold (which moves no plan: it frees room on theirs). The
pods nominated are the pending ones this batch's plan put on a released Node (the plan
packs them on the Nodes as their kubelets report them), without a nomination of their own
(preemption's is kube-scheduler's and stays). A single new Node, with no other waiting
anywhere, is released without nominations: no pod planned elsewhere can take its room.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from nodepool_operator import timestamps
from nodepool_operator.api import nominations, wellknown
from nodepool_operator.controllers.autoscaler.constraints import pending_pods
from nodepool_operator.runtime import nodes as k8s_nodes

__all__ = ["PATIENCE_SECONDS", "Nomination", "NominationPlan", "plan_nominations"]

#: How long a Ready Node waits for the other waiting Nodes of its pool before it is
#: released (with the others Ready by then) on its own.
PATIENCE_SECONDS: Final = 5.0


@dataclass(frozen=True)
class Nomination:
    """Pending pod ``namespace/name`` (of ``uid``, read at ``resource_version``) goes on
    Node ``node``."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    node: str


@dataclass(frozen=True)
class NominationPlan:
    """The nominations to write, then the Nodes to mark nominated (released), by pool;
    the pools whose waiting Nodes still wait, with why (for the log); and the seconds
    until a Ready one's patience runs out (None: no such wait)."""

    pods: tuple[Nomination, ...] = ()
    release: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    waiting: Mapping[str, str] = field(default_factory=dict)
    check_in: float | None = None


def plan_nominations(
    *,
    pools: Mapping[str, int],
    nodes: Iterable[Mapping[str, Any]],
    requests_of: Callable[[str], Sequence[Mapping[str, Any]]],
    pending: Sequence[Mapping[str, Any]],
    placements: Sequence[str | None],
    now: float,
) -> NominationPlan:
    """``pools``: the pools planned for, with their target; ``nodes``: the cluster's;
    ``requests_of(pool)``: its ScaleRequests; ``pending`` and ``placements``: the plan's
    pending pods and the node it put each on (None: none)."""
    by_pool: dict[str, list[Mapping[str, Any]]] = {}
    for node in nodes:
        pool = wellknown.pool_of(node)
        if (
            pool is not None
            and pool in pools
            and not (node.get("metadata") or {}).get("deletionTimestamp")
        ):
            by_pool.setdefault(pool, []).append(node)
    release: dict[str, tuple[str, ...]] = {}
    waiting: dict[str, str] = {}
    checks: list[float] = []
    held_anywhere = 0
    for pool, target in sorted(pools.items()):
        members = by_pool.get(pool, [])
        requests = requests_of(pool)
        held = sorted(
            str(node["metadata"]["name"])
            for node in members
            if (until := nominations.held_until(node, requests)) is not None and until > now
        )
        if not held:
            continue
        held_anywhere += len(held)
        by_name = {str(node["metadata"]["name"]): node for node in members}
        ready = [name for name in held if k8s_nodes.is_ready(by_name[name])]
        if len(members) < target:
            why = f"{target - len(members)} of its {target} Nodes not registered yet"
        elif len(ready) < len(held):
            why = f"Nodes not Ready yet: {', '.join(n for n in held if n not in ready)}"
        else:
            release[pool] = tuple(held)
            continue
        first_ready = min(
            (t for name in ready if (t := _ready_since(by_name[name])) is not None), default=None
        )
        if first_ready is None or now - first_ready < PATIENCE_SECONDS:
            waiting[pool] = why
            if first_ready is not None:
                checks.append(first_ready + PATIENCE_SECONDS - now)
            continue
        release[pool] = tuple(ready)
    released = {name for names in release.values() for name in names}
    if len(released) == 1 and not waiting and held_anywhere == 1:
        # One new Node and no other on its way: whatever kube-scheduler binds there first,
        # no planned pod can lose its room to a pod planned on another (there is none),
        # so its pods need no nominations, and the writes are saved.
        return NominationPlan(release=release)
    pods = tuple(
        Nomination(
            namespace=str(pod["metadata"].get("namespace") or ""),
            name=str(pod["metadata"]["name"]),
            uid=str(pod["metadata"].get("uid") or ""),
            resource_version=str(pod["metadata"].get("resourceVersion") or ""),
            node=node,
        )
        for pod, node in zip(pending, placements, strict=True)
        if node is not None and node in released and pending_pods.nominated_node(pod) is None
    )
    return NominationPlan(
        pods=pods, release=release, waiting=waiting, check_in=min(checks, default=None)
    )


def _ready_since(node: Mapping[str, Any]) -> float | None:
    """When the Node's Ready condition last turned (its lastTransitionTime)."""
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return timestamps.parse_rfc3339(condition.get("lastTransitionTime"))
    return None
