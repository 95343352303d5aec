"""kube-scheduler's filters over the simulated cluster, in the scheduler's order, so the
first refusal named is the one the scheduler would report; and which node groups a pod
may search at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from nodepool_operator.controllers.autoscaler.constraints import (
    UNSCHEDULABLE_TAINT,
    NodeTaint,
    PodProfile,
    SpreadConstraint,
    node_affinity_problem,
    untolerated,
)
from nodepool_operator.controllers.autoscaler.simulation.model import DaemonSetView
from nodepool_operator.controllers.autoscaler.simulation.rooms import Group, SimNode
from nodepool_operator.controllers.autoscaler.simulation.spreading import SpreadingState
from nodepool_operator.controllers.autoscaler.simulation.tallies import Spread

__all__ = ["SimulatedCluster"]


class SimulatedCluster(SpreadingState):
    """The cluster with kube-scheduler's filters over it, in the scheduler's order:
    static (cordon, taints, node affinity, volumes), host ports, resources, spread, then
    pod affinity; the first that refuses is the reason given."""

    def __init__(
        self, daemon_sets: Sequence[DaemonSetView], scale: tuple[int, int], *, counting: bool
    ) -> None:
        super().__init__(daemon_sets, scale, counting=counting)
        # The DaemonSet pods a node of each static key runs (``daemons_for``): found once
        # per key unless a DaemonSet's node rules name nodes one by one.
        self._daemons_pinned = any(self.pinned(daemon.profile) for daemon in daemon_sets)
        self._daemons_by_static: dict[int, list[PodProfile]] = {}

    def daemons_for(self, node: SimNode, present: frozenset[str] = frozenset()) -> list[PodProfile]:
        """The pods of the DaemonSets that would run on ``node`` and are not there yet."""
        if not present and not self._daemons_pinned:
            # Static verdicts: the same for every node of a static key (every node a pool
            # opens in a zone), so found once for them. Only read by the callers.
            found = self._daemons_by_static.get(node.static_id)
            if found is None:
                found = self._daemons_by_static[node.static_id] = self._daemons_judged(node)
            return found
        return self._daemons_judged(node, present)

    def _daemons_judged(
        self, node: SimNode, present: frozenset[str] = frozenset()
    ) -> list[PodProfile]:
        return [
            daemon.profile
            for daemon in self.daemon_sets
            if daemon.uid not in present and self._static_problem(daemon.profile, node) is None
        ]

    def add_daemon_pods(self, node: SimNode, *, present: frozenset[str] = frozenset()) -> None:
        """Charge a node with the DaemonSet pods that would run on it and are not there."""
        for profile in self.daemons_for(node, present):
            self.place(profile, node, 1, counted=True)

    # -- filters ------------------------------------------------------------------------

    def static_problem(self, profile: PodProfile, node: SimNode) -> str | None:
        """What refuses the pod on the node whatever is placed: cordon, taints, node
        selectors and affinity, volumes."""
        return self._static_problem(profile, node)

    def _static_problem(self, profile: PodProfile, node: SimNode) -> str | None:
        """What never changes for the node: cordon, taints, selectors, volumes."""
        rules = self.rules_id(profile)
        pinned = self._pinned[rules]
        key = (rules, node.static_id)
        if not pinned:
            try:
                return self._static[key]
            except KeyError:
                pass  # not judged yet
        problem = None
        # In kube-scheduler's order (NodeUnschedulable, TaintToleration, NodeAffinity, then
        # the volume filters), so the first refusal named is the one the scheduler reports.
        if node.unschedulable and untolerated(
            profile.tolerations, (NodeTaint(UNSCHEDULABLE_TAINT, "", "NoSchedule"),)
        ):
            problem = "node is cordoned"
        if problem is None:
            taint = untolerated(profile.tolerations, node.taints)
            if taint is not None:
                value = f"={taint.value}" if taint.value else ""
                problem = f"taint {taint.key}{value}:{taint.effect} is not tolerated"
        if problem is None:
            why = node_affinity_problem(
                profile.node_selector, profile.node_affinity, labels=node.labels, name=node.name
            )
            problem = f"{why} does not match" if why else None
        if problem is None and profile.volumes is not None:
            problem = profile.volumes.problem(node.labels, node.name)
        if not pinned:
            self._static[key] = problem
        return problem

    def usable_groups(self, profile: PodProfile) -> tuple[list[Group], list[bool]]:
        """The groups whose nodes the pod's static filters may pass, and for each whether
        they pass every one of its nodes (the nodes need no static check then)."""
        rules = self.rules_id(profile)
        found = self._usable.get(rules)  # no default made: this runs for every pod searched
        if found is not None and found[0] == self._kinds_seen:
            return found[1], found[2]
        # Groups and their kinds only grow: the lists stand until one of them does.
        pinned = self._pinned[rules]
        usable: list[Group] = []
        whole: list[bool] = []
        for group in self.groups.values() if pinned else self.groups_for(profile):
            if pinned:
                usable.append(group)
                whole.append(False)  # its verdicts are per node, not per kind
                continue
            passed = [self._static_problem(profile, n) is None for n in group.kinds]
            if any(passed):
                usable.append(group)
                whole.append(all(passed))
        self._usable[rules] = (self._kinds_seen, usable, whole)
        return usable, whole

    @staticmethod
    def _resource_problem(profile: PodProfile, node: SimNode) -> str | None:
        allocatable, used = node.allocatable, node.used
        for name, amount in profile.requests.items():
            if allocatable.get(name, 0) - used.get(name, 0) < amount:
                have = allocatable.get(name, 0)
                if have < amount:
                    return f"requests {amount} of {name}, a node offers {have}"
                return f"not enough free {name}"
        return None

    @staticmethod
    def _port_problem(profile: PodProfile, node: SimNode) -> str | None:
        for port in profile.ports:
            if any(port.conflicts(taken) for taken in node.ports):
                return f"host port {port.port}/{port.protocol} is taken"
        return None

    def _affinity_problem(self, profile: PodProfile, node: SimNode) -> str | None:
        for term in profile.affinity:
            value = node.labels.get(term.topology_key)
            if value is None:
                return f"pod affinity: node has no {term.topology_key} label"
            counts = self._counts(term)
            if counts.by_domain.get(value, 0) > 0:  # ``get``: no ``__missing__`` call
                continue
            # The first pod of a group that is affine to itself may go anywhere.
            if counts.total == 0 and self._matches(term, profile):
                continue
            return f"pod affinity over {term.topology_key}: no matching pod in {value}"
        for term in profile.anti_affinity:
            value = node.labels.get(term.topology_key)
            if value is not None and self._counts(term).by_domain.get(value):
                return f"pod anti-affinity over {term.topology_key}: a matching pod in {value}"
        for term in self._anti_hits(profile):
            owners = self._anti_owners[term]
            if owners.total:
                value = node.labels.get(term.topology_key)
                if value is not None and owners.by_domain.get(value):
                    return f"another pod's anti-affinity over {term.topology_key} in {value}"
        return None

    def spreads_of(self, profile: PodProfile) -> list[tuple[SpreadConstraint, Spread, int]]:
        """The pod's spreads, each with 1 when the pod counts in its own spread, else 0.

        Kept per profile: a constraint is a deep value, and hashing it for every node a
        pod is judged on is what a lookup by (constraint, profile) would cost.
        """
        if not profile.spread:
            return []
        last, remembered = self._last_spreads  # asked for every pod placed and node judged
        if profile is last:
            return remembered
        found = self._spreads_by_profile.get(profile)
        if found is None:
            found = self._spreads_by_profile[profile] = [
                (c, self._spread(c, profile), int(self._spread_counts(c, profile, profile)))
                for c in profile.spread
            ]
        self._last_spreads = (profile, found)
        return found

    def _spread_problem(self, profile: PodProfile, node: SimNode, *, candidate: bool) -> str | None:
        for constraint, spread, mine in self.spreads_of(profile):
            key = constraint.topology_key
            value = node.labels.get(key)
            if value is None:
                return f"topology spread: node has no {key} label"
            counts = spread.counts
            if candidate and self._spread_eligible(spread, node):
                low = spread.minimum(value, constraint.min_domains)
            else:  # ``Spread.minimum`` with no new domain, written out
                low = 0 if len(counts) < constraint.min_domains else spread.low
            if counts.get(value, 0) + mine - low > constraint.max_skew:
                return f"topology spread over {key} (maxSkew {constraint.max_skew}) in {value}"
        return None

    def spread_floors(self, profile: PodProfile) -> tuple[int, ...]:
        """The smallest count each of the pod's spreads compares an added node with."""
        # ``Spread.minimum`` with no new domain, written out: this runs for every pod placed.
        return tuple(
            [
                0 if len(spread.counts) < constraint.min_domains else spread.low
                for constraint, spread, _ in self.spreads_of(profile)
            ]
        )

    def problem(
        self,
        profile: PodProfile,
        node: SimNode,
        *,
        candidate: bool = False,
        room_found: bool = False,
    ) -> str | None:
        """Why ``profile`` cannot go on ``node`` now, or None. ``candidate``: not added yet.
        ``room_found``: the node is known to have room for every request of the pod (the
        room search found it for one that asks for nothing but cpu, memory and pod slots).

        The filters that read nothing for the pod (no host port, no spread, no pod affinity
        of its own or of a counted pod) are not called: this runs for every node a pod is
        judged on.
        """
        found = self._static_problem(profile, node)
        if not found and profile.ports:  # NodePorts runs before NodeResourcesFit
            found = self._port_problem(profile, node)
        if not found and not room_found:
            found = self._resource_problem(profile, node)
        if not found and profile.spread:
            found = self._spread_problem(profile, node, candidate=candidate)
        if not found and (profile.affinity or profile.anti_affinity or self._anti_terms.terms):
            found = self._affinity_problem(profile, node)  # InterPodAffinity runs last
        return found or None
