"""Which pending pods to nominate on which new Nodes, and which Nodes to release (pure).

A scale-up's Nodes wait for nominations (``api.nominations``). A pool's waiting Nodes are
released together, once the pool has every Node its target calls for and each waiting
one is Ready: before that, a Node still to come or to turn Ready makes kube-scheduler try
the pending pods again, fail on the waiting Nodes' taint, and clear the nominations. The
pods nominated are the pending ones this batch's plan put on a released Node (the plan
packs them on the Nodes as their kubelets report them), without a nomination of their own
(preemption's is kube-scheduler's and stays).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodepool_operator.api import nominations, wellknown
from nodepool_operator.controllers.autoscaler.constraints import pending_pods
from nodepool_operator.runtime import nodes as k8s_nodes

__all__ = ["Nomination", "NominationPlan", "plan_nominations"]


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
    and the pools whose waiting Nodes still wait, with why (for the log)."""

    pods: tuple[Nomination, ...] = ()
    release: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    waiting: Mapping[str, str] = field(default_factory=dict)


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
        if len(members) < target:
            waiting[pool] = f"{target - len(members)} of its {target} Nodes not registered yet"
            continue
        unready = [
            str(node["metadata"]["name"])
            for node in members
            if str(node["metadata"]["name"]) in held and not k8s_nodes.is_ready(node)
        ]
        if unready:
            waiting[pool] = f"Nodes not Ready yet: {', '.join(unready)}"
            continue
        release[pool] = tuple(held)
    released = {name for names in release.values() for name in names}
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
    return NominationPlan(pods=pods, release=release, waiting=waiting)
