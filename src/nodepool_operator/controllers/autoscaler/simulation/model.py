"""What the simulation is given and what it answers: the nodes, DaemonSets and pools it
reads, and the outcome per pool. Plain values, so callers build them without the
simulation's internals.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler import constraints
from nodepool_operator.controllers.autoscaler.constraints import NodeTaint, PodProfile

__all__ = [
    "HOSTNAME_LABEL",
    "MAIN_RESOURCES",
    "NO_AUTOSCALER",
    "NO_NODE_LEFT",
    "ZONE_LABEL",
    "DaemonSetView",
    "ExistingNode",
    "PoolOutcome",
    "PoolTemplate",
    "PoolZones",
    "SimulationOutcome",
]

#: Why no pool is even tried for a pod: none is planned for its namespace.
NO_AUTOSCALER: Final = "no Autoscaler plans for its namespace"
#: Why no node hosts a pod when there is no node to try (and no pool).
NO_NODE_LEFT: Final = "no node is left"

HOSTNAME_LABEL: Final = wellknown.HOSTNAME_LABEL
ZONE_LABEL: Final = wellknown.ZONE_LABEL
MAIN_RESOURCES: Final = constraints.MAIN_RESOURCES


@dataclass(frozen=True)
class ExistingNode:
    """A Node in the cache: Ready, or registered and still booting."""

    name: str
    pool: str | None
    labels: Mapping[str, str]
    taints: tuple[NodeTaint, ...]
    unschedulable: bool
    allocatable: Mapping[str, int]
    pods: tuple[PodProfile, ...]  # bound, not finished
    terminating: tuple[PodProfile, ...] = ()  # bound and being deleted: room, no spread
    daemon_sets: frozenset[str] = frozenset()  # DaemonSets with a pod bound here


@dataclass(frozen=True)
class DaemonSetView:
    uid: str
    profile: PodProfile  # its pod template, with the DaemonSet controller's tolerations


@dataclass(frozen=True)
class PoolZones:
    """Where a pool's nodes are and where new ones may go (``api.zones``).

    ``names``: the template's zones a new node may go to (backed-off ones left out), in
    the template's order; empty for a pool without zones. ``counts``: the pool's Nodes
    per zone. ``in_flight``: the zone of each VM requested but without a Node yet.
    """

    names: tuple[str, ...] = ()
    counts: Mapping[str, int] = field(default_factory=dict)
    in_flight: tuple[str | None, ...] = ()


@dataclass(frozen=True)
class PoolTemplate:
    """A pool that can grow: its node shape and the names of the nodes it creates next.

    ``upcoming(k, zone)`` is the name and labels of the k-th node the pool will register
    from now on, put in ``zone``; the first ``in_flight`` of them are already requested
    (VMs without a Node, in the zones ``zoning.in_flight`` says).
    """

    name: str
    weight: int
    taints: tuple[NodeTaint, ...]
    allocatable: Mapping[str, int]
    upcoming: Callable[[int, str | None], tuple[str, Mapping[str, str]]]
    in_flight: int
    headroom: int  # nodes it may still add beyond the target (maxNodes - target)
    zones: int  # how many zones a new node may go to (1 without zones)
    namespaces: frozenset[str] | None  # whose pods its Autoscaler plans for; None: all
    zoning: PoolZones = field(default_factory=PoolZones)
    # The catalog's price per hour of one node (a pool with requirements: the type's
    # cheapest offering); None without one (a single-shape pool).
    price: float | None = None


@dataclass(frozen=True)
class PoolOutcome:
    new_nodes: int  # nodes to add, within maxNodes
    wanted_nodes: int  # nodes the pods would need without maxNodes
    triggering: tuple[int, ...]  # pending pods (by index) placed on the granted new nodes
    hosted: tuple[int, ...]  # pending pods placed on any node of the pool
    beyond: tuple[int, ...] = ()  # pending pods placed on nodes maxNodes does not allow
    # Of ``triggering``, the pods a pool ranked before this one (by weight, then least
    # waste) would have hosted had it been able to grow (at maxNodes, or every zone backed
    # off), with that pool's name: they are sent here instead.
    passed_over: tuple[tuple[int, str], ...] = ()
    # Of ``new_nodes``, how many go to each zone (none for a pool without zones).
    new_node_zones: Mapping[str, int] = field(default_factory=dict)
    # The zone of each node opened (granted or beyond maxNodes), in the order opened: a
    # spreading pod's next run opens these from the start.
    opened_zones: tuple[str | None, ...] = ()
    # A pool with requirements (``offering_plan``): of ``new_nodes``, how many of each
    # offering, by (instance type, zone, capacity type); empty for a single-shape pool.
    new_node_offerings: Mapping[tuple[str, str, str], int] = field(default_factory=dict)
    # Per pod of ``triggering`` or ``beyond``: the offering its node is and the cheaper
    # ones it was refused on, in words (``explain pod``).
    offering_notes: Mapping[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SimulationOutcome:
    pools: Mapping[str, PoolOutcome]
    placements: tuple[str | None, ...]  # per pending pod: the node it went to
    unfit: Mapping[int, str]  # pending pods no node could host, and why
