"""How Nodes, and the nodes a pool registers next, look to the planner's simulation.

A Node's room is what its kubelet reports (the pool's template until it has); the taints
it is judged by leave out the ones a booting node carries for a moment; the nodes a pool
creates next get the names and labels the NodePool controller will give them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import quantity, wellknown
from nodepool_operator.controllers.autoscaler import constraints, simulation
from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.runtime import nodes as k8s_nodes
from nodepool_operator.runtime.client import Object

__all__ = [
    "EPHEMERAL_TAINTS",
    "Usage",
    "allocatable_of",
    "existing",
    "is_ready",
    "names_by_prefix",
    "startup_keys",
    "template_taints",
    "upcoming",
]


def allocatable_of(node: Mapping[str, Any], fallback: Mapping[str, int]) -> dict[str, int]:
    reported = (node.get("status") or {}).get("allocatable") or {}
    if not reported:
        return dict(fallback)  # registered a moment ago: the template's, as we register it
    found: dict[str, int] = {}
    for name, value in reported.items():
        try:
            if name == "cpu":
                found[name] = quantity.parse_cpu_millicores(str(value))
            elif name == "memory":
                found[name] = quantity.parse_memory_bytes(str(value))
            else:
                found[name] = int(quantity.parse_quantity(str(value)))
        except ValueError:
            continue
    return found


#: Taints a node carries while it boots (until the node-lifecycle controller notices it
#: is Ready, or the NodePool controller that its kubelet reported): counting them on a
#: booting node would make it useless to every pod and ask for more nodes while the first
#: ones come up (Karpenter ignores the same ones, its unregistered taint too). A node whose
#: kubelet reports Ready may still carry them for a few seconds (the node-lifecycle
#: controller removes them on its next look), so they are ignored there too. On a node
#: that reports NotReady or Unknown they mean what they say (a dead node is no room).
EPHEMERAL_TAINTS: Final = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.cloudprovider.kubernetes.io/uninitialized",
        wellknown.UNREGISTERED_TAINT_KEY,
    }
)


def is_ready(node: Mapping[str, Any]) -> bool:
    """Ready and past the unregistered taint: a node still carrying it is booting (its
    room is in flight, never unneeded), however early kwok or its kubelet says Ready."""
    return k8s_nodes.is_ready(node) and not wellknown.is_unregistered(node)


def _booting(node: Mapping[str, Any]) -> bool:
    """Not initialised yet: still carrying the unregistered taint, or with no Ready
    condition reported at all (no kubelet has spoken for it)."""
    conditions = (node.get("status") or {}).get("conditions") or ()
    return wellknown.is_unregistered(node) or not any(c.get("type") == "Ready" for c in conditions)


def startup_keys(template: nodepool_api.NodeTemplate | None) -> frozenset[tuple[str, str]]:
    if template is None:
        return frozenset()
    return frozenset((t.key, t.effect) for t in template.startup_taints)


def _taints(
    node: Mapping[str, Any], *, startup: frozenset[tuple[str, str]] = frozenset()
) -> tuple[constraints.NodeTaint, ...]:
    """The taints the scheduler will judge the node by once it is up: the booting ones
    (on a node still booting, or Ready and not yet rid of them) and its pool's startup
    taints (an agent removes them) left out."""
    booting = _booting(node) or k8s_nodes.is_ready(node)
    # Consolidation's own taint on a Node nobody is removing yet comes off as soon as pods
    # wait for room (``consolidation.decide``): that room is the pods', not a new node's.
    ours = () if wellknown.is_being_removed(node) else (wellknown.CONSOLIDATING_TAINT_KEY,)
    return tuple(
        constraints.NodeTaint(
            str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", ""))
        )
        for t in (node.get("spec") or {}).get("taints") or ()
        if not (booting and t.get("key") in EPHEMERAL_TAINTS)
        and (t.get("key"), t.get("effect")) not in startup
        and t.get("key") not in ours
    )


def template_taints(template: nodepool_api.NodeTemplate) -> tuple[constraints.NodeTaint, ...]:
    return tuple(constraints.NodeTaint(t.key, t.value or "", t.effect) for t in template.taints)


def names_by_prefix(nodes: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Node names by what precedes their last ``-``: a name ``vm_names`` gives pool P is
    ``P-<index>``, so the Nodes that may hold one of its names are those under P."""
    found: dict[str, list[str]] = {}
    for node in nodes:
        name = str(node["metadata"]["name"])
        found.setdefault(name.rpartition("-")[0], []).append(name)
    return found


def upcoming(
    pool: str, template: nodepool_api.NodeTemplate, taken: Iterable[str]
) -> Callable[[int, str | None], tuple[str, Mapping[str, str]]]:
    """Names and labels of the nodes the pool registers next, in the order it creates them.

    ``taken`` is ``names_taken``: the NodePool controller's own rule, so a name held by a
    Node the pool does not own is skipped here as it is there."""
    names = nodepool_api.vm_names(pool, taken)
    known: list[str] = []

    def upcoming(k: int, zone: str | None) -> tuple[str, Mapping[str, str]]:
        while len(known) <= k:
            known.append(next(names))
        name = known[k]
        labels = nodepool_api.node_labels(pool, template, zone=zone)
        return name, {**labels, wellknown.HOSTNAME_LABEL: name}

    return upcoming


def existing(
    node: Object,
    *,
    pool: str | None,
    allocatable: Mapping[str, int],
    bound: tuple[tuple[PodProfile, ...], tuple[PodProfile, ...], frozenset[str]],
    startup: frozenset[tuple[str, str]],
) -> simulation.ExistingNode:
    """A Node as the simulation sees it."""
    name = str(node["metadata"]["name"])
    labels = node["metadata"].get("labels") or {}
    hostname = labels.get(wellknown.HOSTNAME_LABEL, name)
    running, terminating, daemons = bound
    return simulation.ExistingNode(
        name=name,
        pool=pool,
        labels={**labels, wellknown.HOSTNAME_LABEL: hostname},
        taints=_taints(node, startup=startup),
        unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
        allocatable=allocatable,
        pods=running,
        terminating=terminating,
        daemon_sets=daemons,
    )


@dataclass(frozen=True)
class Usage:
    """How many of a pool's nodes are up, and which are unneeded."""

    ready: int
    cordoned: int
    unhealthy: int
    registered: tuple[str, ...]
    unneeded: tuple[str, ...]
    stalled: int = 0  # registered, NotReady within the timeouts (``plan.PoolFacts``)
