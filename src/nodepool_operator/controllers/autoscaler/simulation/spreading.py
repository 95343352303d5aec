"""The spread counters of the classes being placed: made when a class is first judged,
filled from the pods already counted, and retired once the class is placed.
"""

from __future__ import annotations

from nodepool_operator.controllers.autoscaler.constraints import PodProfile, SpreadConstraint
from nodepool_operator.controllers.autoscaler.simulation.cluster import ClusterState
from nodepool_operator.controllers.autoscaler.simulation.model import HOSTNAME_LABEL
from nodepool_operator.controllers.autoscaler.simulation.tallies import Spread

__all__ = ["SpreadingState"]


class SpreadingState(ClusterState):
    """The cluster's state with each live class's spread counters (``ClusterState`` keeps
    them up to date as pods are placed and nodes added)."""

    def _spread(self, constraint: SpreadConstraint, profile: PodProfile) -> Spread:
        key = (constraint, profile)
        spread = self._spreads.get(key)
        if spread is None:
            by_node = self.pinned(profile)
            spread = self._spreads[key] = Spread(constraint, profile, pinned=by_node)
            topology = constraint.topology_key
            # Eligibility is judged once per static key (nodes alike but for their name)
            # unless the pod names nodes one by one; the order domains join in is moot.
            # Nodes of one static key share every label but the hostname: one domain.
            per_node = by_node or topology == HOSTNAME_LABEL
            nodes = self.nodes
            for static_id, indexes in self._by_static.items():
                if by_node:
                    eligible = [i for i in indexes if self._spread_eligible(spread, nodes[i])]
                    spread.eligible.update(eligible)
                elif self._spread_eligible(spread, nodes[indexes[0]]):
                    if topology == HOSTNAME_LABEL:
                        # Every class spreading by hostname reads these: kept, not rebuilt.
                        spread.add_empty_domains(self._hostnames[static_id])
                        continue
                    eligible = indexes if per_node else indexes[:1]
                else:
                    continue
                spread.add_domains([nodes[index].labels[topology] for index in eligible])
            for other, where in self._placed_for(constraint.selector):
                if self._spread_counts(constraint, profile, other):
                    self._feeds[other].spreads.append(spread)
                    for index, count in where.items():
                        node = nodes[index]
                        if self._counted_at(spread, node):
                            spread.add(node.labels[topology], count)
            self._live_spreads.append(spread)
            self.spreads_made.append(spread)
        return spread

    def retire(self, profile: PodProfile) -> None:
        """The class of ``profile`` is placed: its spreads are read no more."""
        if self._last_spreads[0] is profile:
            self._last_spreads = (None, [])
        for constraint, spread, _ in self._spreads_by_profile.pop(profile, ()):
            spread.retired = True
            self._live_spreads.remove(spread)
            del self._spreads[(constraint, profile)]
