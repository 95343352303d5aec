"""Placing a spreading class round after round at once while its rounds come out the
same, instead of one search per pod.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.autoscaler.simulation.filters import SimulatedCluster
from nodepool_operator.controllers.autoscaler.simulation.rooms import SimNode

__all__ = ["Rounds"]


class Rounds:
    """Repeats a spreading class's last round of placements while it would come out the same.

    Pods that spread over zones with ``maxSkew`` 1 go one per zone, round after round:
    placing them one by one costs a search per pod. A round ends when a spread's smallest
    count rises (the search starts over from the first node). When a round leaves every
    spread's counts as they were relative to its smallest count, and opened no node, the
    next round sees the same verdicts node for node (a spread judges a count against the
    smallest; the nodes it refused for room have no more room now; no other pod moves in
    between), so it makes the same choices as long as the nodes it used have room for
    them: that many rounds are placed at once, each pod on the node it would have had.
    Classes with pod (anti-)affinity or host ports are left alone: a copy there changes
    what the next one may do beyond the counts compared here.
    """

    def __init__(self, cluster: SimulatedCluster, profile: PodProfile) -> None:
        self.cluster = cluster
        self.profile = profile
        self.nodes: list[SimNode] = []  # where each pod of the current round went
        # The state the current round began in; the class's first round begins with the
        # class, its search from the first node as after any rise of a smallest count.
        self.start: tuple[object, ...] | None = self._state()

    @staticmethod
    def applies(profile: PodProfile) -> bool:
        return bool(profile.spread) and not (
            profile.affinity or profile.anti_affinity or profile.ports
        )

    def went_to(self, node: SimNode) -> None:
        self.nodes.append(node)

    def _state(self) -> tuple[object, ...] | None:
        """The counts relative to each spread's smallest, and the cluster's size; None when
        reading them would cost more than the round did (many domains, few pods)."""
        spreads = self.cluster.spreads_of(self.profile)
        if sum(len(spread.counts) for _, spread, _ in spreads) > 8 * len(self.nodes) + 64:
            return None
        lows = self.cluster.spread_floors(self.profile)
        return (
            len(self.cluster.nodes),
            *(
                tuple((domain, count - low) for domain, count in spread.counts.items())
                for (_, spread, _), low in zip(spreads, lows, strict=True)
            ),
        )

    def repeat(self, members: Sequence[int], done: int, placements: list[str | None]) -> int:
        """At the end of a round: place as many more rounds like it as will come out the
        same, and return how many members are placed now."""
        state = self._state()
        last, self.nodes = self.nodes, []
        previous, self.start = self.start, state
        if state is None or state != previous or not last:
            return done
        uses = Counter(last)
        times = (len(members) - done) // len(last)
        for node, used in uses.items():
            for name, amount in self.profile.requests.items():
                if amount > 0:
                    times = min(times, node.room(name) // (amount * used))
        if times <= 0:
            return done
        for node, used in uses.items():
            self.cluster.place(self.profile, node, used * times, counted=True)
        names = [node.name for node in last]
        for _ in range(times):
            for name in names:
                placements[members[done]] = name
                done += 1
        return done
