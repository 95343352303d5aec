"""The pools in the simulation: the nodes already requested, which pool's next node a pod
would open (weight, then least waste, then name: cluster-autoscaler's expander), and the
nodes opened in each pool's VM order, each in a zone: the pod's if it needs one, else the
one with the fewest of the pool's nodes (``api.zones``). ``ahead`` counts down that order
of zones: the pool's next node in its ``ahead``-th least-filled zone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.autoscaler.simulation.filters import SimulatedCluster
from nodepool_operator.controllers.autoscaler.simulation.model import (
    MAIN_RESOURCES,
    NO_AUTOSCALER,
    NO_NODE_LEFT,
    DaemonSetView,
    ExistingNode,
    PoolTemplate,
)
from nodepool_operator.controllers.autoscaler.simulation.pool_state import (
    Hosting,
    PoolState,
    plans_for,
    reference,
    waste,
)
from nodepool_operator.controllers.autoscaler.simulation.rooms import (
    BEYOND_MAX,
    BOOTING,
    NEW,
    READY,
    SimNode,
    copies_that_fit,
    selector_labels,
)

__all__ = ["PoolState", "Simulation"]

#: Distinct node refusals named in a reason at most: an event's message stays short.
_REFUSALS_TOLD: Final = 3


class Simulation:
    def __init__(
        self,
        nodes: Sequence[ExistingNode],
        pools: Sequence[PoolTemplate],
        daemon_sets: Sequence[DaemonSetView],
        opened: Mapping[str, Sequence[str | None]],
        *,
        counting: bool = True,
    ) -> None:
        """``counting`` False: no pod in the simulation has pod (anti-)affinity or spread."""
        self.reference = reference(pools, nodes)
        # cpu relative to the largest node's, plus memory relative to its: both scaled by
        # the product of the two, to stay in integers.
        scale = (
            max(1, self.reference.get("memory", 0) >> 20),
            max(1, self.reference.get("cpu", 0)),
        )
        self.cluster = SimulatedCluster(daemon_sets, scale, counting=counting)
        self.pools = {p.name: PoolState(p) for p in sorted(pools, key=lambda p: p.name)}
        # Per new node opened in place of one of a pool ranked before it that could not
        # grow, that pool (``PoolOutcome.passed_over``).
        self.passed_over_for: dict[int, str] = {}
        # Each pool's next node as judged before it opens, by (pool, nodes opened, zone):
        # every pod that opens a node judges the next node of every pool, and most of
        # those stay the same until their pool opens one.
        self._candidates: dict[tuple[str, int, str | None], SimNode] = {}
        # The pools that opened a node, in order: their next nodes changed since.
        self._opened_log: list[PoolState] = []
        # Per node rules and namespace: the pools that may host such a pod, as of how much
        # of ``_opened_log`` (``_hosting``).
        self._hosting: dict[tuple[int, str], Hosting] = {}
        # The pools by each label their next nodes share (``_pools_with``), as of how much
        # of ``_opened_log``.
        self._pools_by_label: dict[tuple[str, str], list[PoolState]] | None = None
        self._pools_indexed = 0
        for existing in nodes:
            node = self.cluster.add_node(
                self.cluster.make_node(
                    name=existing.name,
                    pool=existing.pool,
                    labels=existing.labels,
                    taints=existing.taints,
                    unschedulable=existing.unschedulable,
                    allocatable=existing.allocatable,
                    kind=READY,
                )
            )
            # Equal pods (a Deployment's replicas on one node) placed at once.
            for profile, copies in Counter(existing.pods).items():
                self.cluster.place(profile, node, copies, counted=True)
            for profile, copies in Counter(existing.terminating).items():
                self.cluster.place(profile, node, copies, counted=False)
            # Any node, a pool's or not, gets the DaemonSet pods it does not run yet.
            self.cluster.add_daemon_pods(node, present=existing.daemon_sets)
        for state in self.pools.values():
            booting = state.template.zoning.in_flight
            for k in range(state.template.in_flight):
                zone = booting[k] if k < len(booting) else state.zone_choices()[0]
                self._open(state, kind=BOOTING, zone=zone)
            for zone in opened.get(state.template.name, ()):
                beyond = state.opened - state.template.in_flight >= state.template.headroom
                self._open(state, kind=BEYOND_MAX if beyond else NEW, zone=zone)

    def _open(self, state: PoolState, *, kind: str, zone: str | None = None) -> SimNode:
        """The pool's next node, in ``zone`` (default: the least-filled)."""
        if zone is None:
            zone = state.zone_choices()[0]
        cluster = self.cluster
        node = self._candidates.pop((state.template.name, state.opened, zone), None)
        if node is None:
            node = cluster.add_node(self._upcoming(state, zone, kind=kind))
            cluster.add_daemon_pods(node)
        else:  # judged as a candidate: its DaemonSet pods are charged, and now counted
            node.index, node.kind = len(cluster.nodes), kind
            cluster.add_node(node)
            if cluster.counting:
                for profile in cluster.daemons_for(node):
                    cluster.count_in(profile, node, 1)
        for other in state.zone_choices():  # the pool's other candidates are not next now
            self._candidates.pop((state.template.name, state.opened, other), None)
        state.count_node(zone)
        self._opened_log.append(state)
        if kind == NEW:
            state.new_nodes.append(node.index)
        elif kind == BEYOND_MAX:
            state.beyond.append(node.index)
        return node

    def candidate(self, state: PoolState, ahead: int) -> SimNode:
        """The pool's next node in its ``ahead``-th least-filled zone, as it would be;
        not added."""
        zone = state.zone_at(ahead)
        key = (state.template.name, state.opened, zone)
        node = self._candidates.get(key)
        if node is None:
            node = self._candidates[key] = self._upcoming(state, zone, kind=NEW)
            for profile in self.cluster.daemons_for(node):
                node.charge(profile, 1)
        return node

    def _upcoming(self, state: PoolState, zone: str | None, *, kind: str) -> SimNode:
        template = state.template
        name, labels = template.upcoming(state.opened, zone)
        return self.cluster.make_node(
            name=name,
            pool=template.name,
            labels=labels,
            taints=template.taints,
            unschedulable=False,
            allocatable=template.allocatable,
            kind=kind,
        )

    def room_only(self, profile: PodProfile) -> bool:
        """Whether only the room filter may refuse the pod where the static filters pass:
        it has no pod constraint and asks for nothing but cpu, memory and pod slots, and
        no counted pod has anti-affinity."""
        return profile.room_only and not self.cluster.anti_affinity_counted

    def existing_fit(
        self, profile: PodProfile, start: int, *, beyond_max: bool = False
    ) -> SimNode | None:
        """The first node from ``start`` on that takes the pod: a node that exists or may
        come (``beyond_max`` False), or one of the nodes past a pool's maxNodes opened so
        far (True). Room past maxNodes never comes, so it is used only where no pool may
        grow for the pod: a pod another pool can host is never packed onto it.

        The room search finds the nodes with room for its cpu, memory and pod slots; the
        filters judge them, unless they cannot refuse: a pod that asks for nothing else
        and reads no other pod, in a cluster with no anti-affinity counted, on a group
        whose every node passes its static filters. A node the room search found has room
        for every request of a pod that asks for nothing else: its filters skip the room.
        """
        need, main_only = profile.main_need, profile.main_only
        cluster = self.cluster
        cluster.refresh_rooms()  # nothing is placed while the groups are read below
        groups, whole = cluster.usable_groups(profile)
        judged = not profile.room_only or cluster.anti_affinity_counted  # ``room_only``
        nodes, problem = cluster.nodes, cluster.problem
        if len(groups) == 1:
            judge = judged or not whole[0]
            # Leaf by leaf in the group's one tree: a node refused (past maxNodes or not,
            # a filter) resumes the search at the next leaf, not at a cluster index.
            group = groups[0]
            tree, indexes = group.tree, group.indexes
            leaf = group.first(need, start)
            while leaf >= 0:
                node = nodes[indexes[leaf]]
                if (node.kind == BEYOND_MAX) == beyond_max and (
                    not judge or problem(profile, node, room_found=main_only) is None
                ):
                    return node
                leaf = tree.first(need, leaf + 1)
            return None
        # The groups' nodes merged in cluster order: each group's next one, the least first.
        judges = [judged or not passes_all for passes_all in whole]
        leaves = [group.first(need, start) for group in groups]
        while True:
            index, at = -1, -1
            for k, leaf in enumerate(leaves):
                if leaf >= 0:
                    head = groups[k].indexes[leaf]
                    if index < 0 or head < index:
                        index, at = head, k
            if index < 0:
                return None
            node = nodes[index]
            if (node.kind == BEYOND_MAX) == beyond_max and (
                not judges[at] or problem(profile, node, room_found=main_only) is None
            ):
                return node
            leaves[at] = groups[at].tree.first(need, leaves[at] + 1)

    def following(self, profile: PodProfile, node: SimNode) -> SimNode | None:
        """The node right after ``node`` in the cluster when it takes the pod and the room
        search would return it (room in every searched dimension, schedulable, within
        maxNodes); else None."""
        nodes = self.cluster.nodes
        if node.index + 1 >= len(nodes):
            return None
        after = nodes[node.index + 1]
        if after.kind == BEYOND_MAX or after.unschedulable:
            return None
        requests = profile.requests
        for name in MAIN_RESOURCES:
            if after.room(name) < requests.get(name, 0):
                return None
        return after if self.cluster.problem(profile, after) is None else None

    def new_node(
        self, profile: PodProfile, remaining: int
    ) -> tuple[PoolState, int, bool, str | None] | tuple[None, str, bool, None]:
        """The pool (and how far down its queue) whose next node would host the pod, and
        the pool ranked before it that could not grow for it, if there is one."""
        hosts: list[tuple[PoolState, int, SimNode, bool]] = []
        problem = self.cluster.problem
        for state in self._may_host(profile):
            template = state.template
            for ahead in range(len(state.zone_choices())):
                node = self.candidate(state, ahead)
                if problem(profile, node, candidate=True) is None:
                    beyond = state.opened - template.in_flight >= template.headroom
                    hosts.append((state, ahead, node, beyond))
                    break
        if not hosts:
            return None, self._refusals(profile), False, None
        if len(hosts) == 1:  # nothing to rank, and no pool ranked before it
            state, ahead, _, beyond = hosts[0]
            return state, ahead, beyond, None
        # Where every pool that may host it has a catalog price, the cheaper for the pod
        # ranks first (ties, and pools without a price: weight, then least waste).
        priced = all(state.template.price is not None for state, _, _, _ in hosts)
        options: list[tuple[tuple[object, ...], PoolState, int, bool]] = []
        for state, ahead, node, beyond in hosts:
            template = state.template
            copies = max(1, copies_that_fit(profile, node, remaining))
            wasted = waste(profile, node, copies)
            cost = _pod_cost(profile, node, template.price) if priced else 0.0
            rank = (beyond, cost, -template.weight, wasted, ahead, template.name)
            options.append((rank, state, ahead, beyond))
        _, state, ahead, beyond = min(options, key=lambda o: o[0])
        preferred = min(options, key=lambda o: o[0][1:])  # as if every pool could grow
        passed_over = None
        if not beyond and preferred[3] and preferred[1] is not state:
            passed_over = preferred[1].template.name
        return state, ahead, beyond, passed_over

    def _refusals(self, profile: PodProfile) -> str:
        """Why no pool's next node takes the pod: each pool's first refusal. With no pool
        at all (consolidation's proof: only the nodes that stay), why no node takes it."""
        if not self.pools:
            return self._node_refusals(profile)
        problem = self.cluster.problem
        reasons = [
            f"{state.template.name}: {problem(profile, self.candidate(state, 0), candidate=True)}"
            for state in self.pools.values()
            if plans_for(state.template, profile)
        ]
        return "; ".join(reasons) or NO_AUTOSCALER

    def _node_refusals(self, profile: PodProfile) -> str:
        """Each node's first refusal, with how many nodes gave it, most given first (as
        kube-scheduler sums up a pod it cannot place): the ones that name the pod's own
        rules, a volume it cannot leave say, are there beside the nodes that are full."""
        given = Counter(self.cluster.problem(profile, node) for node in self.cluster.nodes)
        given.pop(None, None)
        if not given:
            return NO_NODE_LEFT
        ranked = sorted(given.items(), key=lambda item: (-item[1], str(item[0])))
        told = [f"{count} {'node' if count == 1 else 'nodes'}: {why}" for why, count in ranked]
        if len(told) > _REFUSALS_TOLD:
            told[_REFUSALS_TOLD:] = [f"{len(told) - _REFUSALS_TOLD} more refusals"]
        return "; ".join(told)

    def _may_host(self, profile: PodProfile) -> list[PoolState]:
        """The pools whose next node the pod's static filters (namespace, taints, node
        selectors) do not refuse in every zone: only these are ranked.

        A static verdict holds for every node of a pool's zone but the one named by its
        hostname, so a refusal stands until the pool opens a node (which may change what
        its next node is); pods whose rules name nodes one by one rank every pool.
        """
        cluster = self.cluster
        if cluster.pinned(profile):
            return [s for s in self.pools.values() if plans_for(s.template, profile)]
        key = (cluster.rules_id(profile), profile.namespace)
        hosting = self._hosting.get(key)
        if hosting is None:
            hosting = self._hosting[key] = Hosting(len(self._opened_log))
            for state in self._pools_with(selector_labels(profile)):
                if not self._refused(profile, state):
                    hosting.add(state)
            return hosting.pools
        for state in self._opened_log[hosting.seen :]:
            if state.template.name not in hosting.names and not self._refused(profile, state):
                hosting.add(state)
        hosting.seen = len(self._opened_log)
        return hosting.pools

    def _pools_with(self, labels: Sequence[tuple[str, str]]) -> Iterable[PoolState]:
        """The pools whose next node may carry every one of ``labels`` (all without any):
        those indexed with the rarest of them, and those that opened a node since."""
        if not labels:
            return self.pools.values()
        if self._pools_by_label is None:
            self._pools_indexed = len(self._opened_log)
            self._pools_by_label = {}
            for state in self.pools.values():
                shared = {
                    label
                    for ahead in range(len(state.zone_choices()))
                    for label in self.candidate(state, ahead).shared_labels
                }
                for label in shared:
                    self._pools_by_label.setdefault(label, []).append(state)
        by_label = self._pools_by_label
        found = min((by_label.get(label, []) for label in labels), key=len)
        names = {state.template.name for state in found}
        since = {state.template.name: state for state in self._opened_log[self._pools_indexed :]}
        return [*found, *(state for name, state in since.items() if name not in names)]

    def _refused(self, profile: PodProfile, state: PoolState) -> bool:
        """Whether the pool's next node refuses the pod statically in every zone."""
        if not plans_for(state.template, profile):
            return True
        return all(
            self.cluster.static_problem(profile, self.candidate(state, ahead)) is not None
            for ahead in range(len(state.zone_choices()))
        )

    def open_for(self, state: PoolState, ahead: int, *, beyond: bool) -> SimNode:
        """The pool's next node, in the zone ``new_node`` chose for it: no filler."""
        zone = state.zone_at(ahead)
        return self._open(state, kind=BEYOND_MAX if beyond else NEW, zone=zone)

    def opened_zones(self, state: PoolState) -> tuple[str | None, ...]:
        """The zone of each node the pool opened, granted or beyond maxNodes, in order."""
        nodes = self.cluster.nodes
        return tuple(
            nodes[i].labels.get(wellknown.ZONE_LABEL)
            for i in sorted((*state.new_nodes, *state.beyond))
        )

    def new_node_zones(self, state: PoolState) -> dict[str, int]:
        """How many of the pool's granted new nodes each zone has."""
        found = Counter(
            self.cluster.nodes[i].labels.get(wellknown.ZONE_LABEL) for i in state.new_nodes
        )
        return {zone: n for zone, n in sorted(found.items()) if zone is not None}


def _pod_cost(profile: PodProfile, node: SimNode, price: float | None) -> float:
    """What the pod costs on a new node of a priced pool: the node's price times the
    largest share of its cpu or memory the pod takes (rounded, so that near-equal costs
    tie and fall to weight and waste)."""
    share = 0.0
    for name in ("cpu", "memory"):
        have = node.allocatable.get(name, 0)
        if have > 0:
            share = max(share, profile.requests.get(name, 0) / have)
    return round((price or 0.0) * share, 9)
