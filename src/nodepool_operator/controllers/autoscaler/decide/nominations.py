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
Nodes' own nominated pods hold (which moves no plan: it frees room on theirs).

The pods nominated are the pending ones this batch's plan put on a released Node (the plan
packs them on the Nodes as their kubelets report them), without a nomination of their own
(preemption's is kube-scheduler's and stays), the largest first and at most
``MOST_NOMINATIONS`` a batch: a pod left without one takes only room no nominated pod
holds. None is written where kube-scheduler cannot strand a pod whatever order it binds
them in: when all the pods the plan puts on capacity still to come go to one released
Node, or when they are all alike (the same requests and node rules, nothing that reads
other pods).

Only Nodes the plan's snapshot knew are released: a Node registered while the plan was
made may be where the plan put pods under another name, and waits for the next batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from nodepool_operator.api import nominations, wellknown
from nodepool_operator.controllers import membership
from nodepool_operator.controllers.autoscaler.constraints import pending_pods
from nodepool_operator.controllers.autoscaler.constraints.profile import PodProfile
from nodepool_operator.runtime import nodes as k8s_nodes

__all__ = [
    "MOST_NOMINATIONS",
    "PATIENCE_SECONDS",
    "Nomination",
    "NominationPlan",
    "PoolToRelease",
    "plan_nominations",
]

#: How long a Ready Node waits for the other waiting Nodes of its pool before it is
#: released (with the others Ready by then) on its own.
PATIENCE_SECONDS: Final = 5.0
#: Pods nominated per batch at most (a pods/status patch each), the largest first.
MOST_NOMINATIONS: Final = 1000


@dataclass(frozen=True)
class PoolToRelease:
    """A pool planned for: its target and uid (its Nodes are those it owns)."""

    target: int
    uid: str


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
    pools: Mapping[str, PoolToRelease],
    nodes: Iterable[Mapping[str, Any]],
    known: frozenset[str],
    requests_of: Callable[[str], Sequence[Mapping[str, Any]]],
    pending: Sequence[Mapping[str, Any]],
    profiles: Sequence[PodProfile],
    placements: Sequence[str | None],
    now: float,
) -> NominationPlan:
    """``pools``: the pools planned for; ``nodes``: the cluster's Nodes now; ``known``: the
    names of those the plan's snapshot held; ``requests_of(pool)``: its ScaleRequests;
    ``pending``, ``profiles`` and ``placements``: the plan's pending pods, their profiles
    and the node it put each on (None: none)."""
    every = list(nodes)
    by_pool: dict[str, list[Mapping[str, Any]]] = {}
    for node in every:
        pool = wellknown.pool_of(node)
        if (
            pool is not None
            and pool in pools
            and membership.is_member(node, pool_name=pool, pool_uid=pools[pool].uid)
            and not (node.get("metadata") or {}).get("deletionTimestamp")
        ):
            by_pool.setdefault(pool, []).append(node)
    release: dict[str, tuple[str, ...]] = {}
    waiting: dict[str, str] = {}
    checks: list[float] = []
    for pool, facts in sorted(pools.items()):
        members = by_pool.get(pool, [])
        requests = requests_of(pool)
        held = sorted(
            str(node["metadata"]["name"])
            for node in members
            if (until := nominations.held_until(node, requests)) is not None and until > now
        )
        if not held:
            continue
        by_name = {str(node["metadata"]["name"]): node for node in members}
        ready = [name for name in held if k8s_nodes.is_ready(by_name[name])]
        unknown = [name for name in ready if name not in known]
        if unknown:
            waiting[pool] = f"Nodes registered while the plan was made: {', '.join(unknown)}"
            continue
        if len(members) < facts.target:
            why = f"{facts.target - len(members)} of its {facts.target} Nodes not registered yet"
        elif len(ready) < len(held):
            why = f"Nodes not Ready yet: {', '.join(n for n in held if n not in ready)}"
        else:
            release[pool] = tuple(held)
            continue
        first_ready = min(
            (t for name in ready if (t := nominations.ready_since(by_name[name])) is not None),
            default=None,
        )
        if first_ready is None or now - first_ready < PATIENCE_SECONDS:
            waiting[pool] = why
            if first_ready is not None:
                checks.append(first_ready + PATIENCE_SECONDS - now)
            continue
        release[pool] = tuple(ready)
    check_in = min(checks, default=None)
    released = {name for names in release.values() for name in names}
    if not released:
        return NominationPlan(waiting=waiting, check_in=check_in)
    schedulable = {
        str(node["metadata"]["name"])
        for node in every
        if k8s_nodes.is_ready(node)
        and not wellknown.is_unregistered(node)
        and not (node.get("spec") or {}).get("unschedulable")
    }
    # The pods the plan puts on capacity still to come: released Nodes, Nodes still
    # waiting or booting, VMs in flight, new nodes.
    coming = [
        i for i, name in enumerate(placements) if name is not None and name not in schedulable
    ]
    if not _could_strand(coming, released, profiles=profiles, placements=placements):
        return NominationPlan(release=release, waiting=waiting, check_in=check_in)
    chosen = sorted(
        (
            i
            for i in coming
            if placements[i] in released and pending_pods.nominated_node(pending[i]) is None
        ),
        key=lambda i: (tuple(-n for n in profiles[i].main_need), i),
    )[:MOST_NOMINATIONS]
    pods = tuple(
        Nomination(
            namespace=str(pending[i]["metadata"].get("namespace") or ""),
            name=str(pending[i]["metadata"]["name"]),
            uid=str(pending[i]["metadata"].get("uid") or ""),
            resource_version=str(pending[i]["metadata"].get("resourceVersion") or ""),
            node=str(placements[i]),
        )
        for i in sorted(chosen)
    )
    return NominationPlan(pods=pods, release=release, waiting=waiting, check_in=check_in)


def _could_strand(
    coming: Sequence[int],
    released: set[str],
    *,
    profiles: Sequence[PodProfile],
    placements: Sequence[str | None],
) -> bool:
    """Whether kube-scheduler, binding the pods planned on capacity still to come in
    whatever order, could leave one without room the plan had for it: not when they all go
    to one released Node (no other pod competes for its room), nor when they are all alike
    (any of them fits wherever another would)."""
    if len(released) == 1 and all(placements[i] in released for i in coming):
        return False
    shapes = {(profiles[i].main_need, profiles[i].node_rules) for i in coming}
    return len(shapes) > 1 or not all(profiles[i].room_only for i in coming)
