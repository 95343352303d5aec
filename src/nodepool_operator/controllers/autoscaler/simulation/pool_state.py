"""A pool in the simulation: the nodes it opened and where, the zone its next node goes to
(``api.zones``), and what ranks its next node against other pools'.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from nodepool_operator.api import zones as zones_api
from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.autoscaler.simulation.model import ExistingNode, PoolTemplate
from nodepool_operator.controllers.autoscaler.simulation.rooms import SimNode

__all__ = ["Hosting", "PoolState", "plans_for", "reference", "waste"]


def reference(pools: Sequence[PoolTemplate], nodes: Sequence[ExistingNode]) -> dict[str, int]:
    """The largest allocatable of any node or template, per resource: the unit shares are
    counted in."""
    found: dict[str, int] = {}
    for allocatable in [*(p.allocatable for p in pools), *(n.allocatable for n in nodes)]:
        for name, amount in allocatable.items():
            found[name] = max(found.get(name, 0), amount)
    return found


@dataclass
class PoolState:
    template: PoolTemplate
    opened: int = 0  # upcoming nodes opened (in flight ones included)
    new_nodes: list[int] = field(default_factory=list)  # indexes of granted new nodes
    beyond: list[int] = field(default_factory=list)  # indexes of nodes beyond maxNodes
    zone_counts: Counter[str] = field(default_factory=Counter)  # the pool's nodes per zone
    # The zone order for the current counts: it changes only when a node opens.
    _choices: list[str | None] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.zone_counts.update(self.template.zoning.counts)

    def zone_choices(self) -> list[str | None]:
        """The zones a new node may go to, least-filled first; [None] without zones."""
        if self._choices is None:
            names = self.template.zoning.names
            self._choices = list(zones_api.balanced_order(names, self.zone_counts)) or [None]
        return self._choices

    def count_node(self, zone: str | None) -> None:
        """One more node of the pool opened, in ``zone``."""
        self.opened += 1
        if zone is not None:
            self.zone_counts[zone] += 1
            self._choices = None

    def zone_at(self, ahead: int) -> str | None:
        """The ``ahead``-th least-filled zone (the last one past the end: a template that
        counts more zones than it may use, such as one built by hand)."""
        choices = self.zone_choices()
        return choices[min(ahead, len(choices) - 1)]


@dataclass
class Hosting:
    """The pools that may host pods of some node rules, as of ``seen`` pools opened."""

    seen: int
    pools: list[PoolState] = field(default_factory=list)
    names: set[str] = field(default_factory=set)

    def add(self, state: PoolState) -> None:
        self.pools.append(state)
        self.names.add(state.template.name)


def plans_for(template: PoolTemplate, profile: PodProfile) -> bool:
    """Whether the pool's Autoscaler plans for the pod's namespace."""
    return template.namespaces is None or profile.namespace in template.namespaces


def waste(profile: PodProfile, node: SimNode, copies: int) -> float:
    fractions = []
    for name in ("cpu", "memory"):
        have = node.allocatable.get(name, 0)
        if have > 0:
            fractions.append(
                1 - (node.used.get(name, 0) + copies * profile.requests.get(name, 0)) / have
            )
    return sum(fractions) / len(fractions) if fractions else 0.0
