"""The simulation loop: pods grouped into classes, placed in first-fit-decreasing order on
the nodes that exist or the pools' next nodes, and run again while a spread opens more
nodes; then the outcome per pool.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.autoscaler.simulation.model import (
    MAIN_RESOURCES,
    DaemonSetView,
    ExistingNode,
    Outcome,
    PoolOutcome,
    PoolTemplate,
)
from nodepool_operator.controllers.autoscaler.simulation.pools import Simulation, copies_that_fit
from nodepool_operator.controllers.autoscaler.simulation.rooms import BEYOND_MAX, NEW, SimNode
from nodepool_operator.controllers.autoscaler.simulation.rounds import Rounds

__all__ = ["simulate"]

#: Rounds of the simulation when pods spread over topology (see ``simulate``).
_SPREAD_ROUNDS: Final = 3


def _share(profile: PodProfile, reference: Mapping[str, int]) -> float:
    shares = [
        amount / reference[name] if reference.get(name) else float("inf")
        for name, amount in profile.requests.items()
        if amount > 0 and name in MAIN_RESOURCES
    ]
    return max(shares, default=0.0)


def _classes(pods: Sequence[PodProfile]) -> list[tuple[PodProfile, list[int]]]:
    grouped: dict[PodProfile, list[int]] = {}
    for index, profile in enumerate(pods):
        grouped.setdefault(profile, []).append(index)
    return list(grouped.items())


class _Alike:
    """One profile for the pods that differ only by labels no selector in the cluster reads.

    Pod (anti-)affinity and spread selectors are the only readers of a pod's labels; a
    label none of them names (``statefulset.kubernetes.io/pod-name``, a Job's completion
    index) changes no verdict, so pods that differ only by such labels are one class,
    placed under the first of their profiles (its other labels are never read), and the
    simulation's counters and memos per profile stay as few as the classes.
    """

    def __init__(self, profiles: Iterable[PodProfile]) -> None:
        keys: set[str] = set()
        # Pods of one workload share their terms and differ in labels: read each set of
        # terms once, not once per pod.
        terms_read: set[tuple[object, ...]] = set()
        for profile in profiles:
            terms = (profile.affinity, profile.anti_affinity, profile.spread)
            if terms != ((), (), ()) and terms not in terms_read:
                terms_read.add(terms)
                keys.update(profile.label_keys_read)
        self._keys = frozenset(keys)
        self._seen: dict[PodProfile, PodProfile] = {}
        self._first: dict[tuple[object, ...], PodProfile] = {}

    def of(self, profile: PodProfile) -> PodProfile:
        found = self._seen.get(profile)
        if found is None:
            keys = self._keys
            read = tuple(sorted(item for item in profile.labels.items() if item[0] in keys))
            alike = (profile.namespace, read, profile.key[2:])
            found = self._seen[profile] = self._first.setdefault(alike, profile)
        return found

    def node(self, node: ExistingNode) -> ExistingNode:
        return dataclasses.replace(
            node,
            pods=tuple(self.of(p) for p in node.pods),
            terminating=tuple(self.of(p) for p in node.terminating),
        )


def simulate(
    pending: Sequence[PodProfile],
    *,
    nodes: Sequence[ExistingNode],
    pools: Sequence[PoolTemplate],
    daemon_sets: Sequence[DaemonSetView] = (),
    nominated: Sequence[tuple[PodProfile, str]] = (),
) -> Outcome:
    """Place ``pending`` (oldest first) as kube-scheduler would, opening pool nodes as needed.

    ``nominated`` pods keep their room on the node preemption chose for them.

    A topology spread judged while new nodes open one after the other would let the first
    ones fill up before the later domains exist; the real scheduler sees the new nodes
    together. So when a pending pod spreads, the simulation runs again with the nodes the
    last run opened there from the start, until it opens no more (at most a few rounds).
    """
    alike = _Alike(
        [
            *pending,
            *(p for n in nodes for p in n.pods),
            *(p for p, _ in nominated),
            *(d.profile for d in daemon_sets),
        ]
    )
    pending = [alike.of(profile) for profile in pending]
    nodes = [alike.node(node) for node in nodes]
    nominated = [(alike.of(profile), name) for profile, name in nominated]
    opened: dict[str, tuple[str | None, ...]] = {}
    spreading = any(profile.spread for profile in pending)
    for _ in range(_SPREAD_ROUNDS):
        outcome = _simulate_once(
            pending,
            nodes=nodes,
            pools=pools,
            daemon_sets=daemon_sets,
            nominated=nominated,
            opened=opened,
        )
        wanted = {name: p.opened_zones for name, p in outcome.pools.items() if p.wanted_nodes}
        if not spreading or wanted == opened:
            break
        opened = wanted
    return outcome


def _simulate_once(
    pending: Sequence[PodProfile],
    *,
    nodes: Sequence[ExistingNode],
    pools: Sequence[PoolTemplate],
    daemon_sets: Sequence[DaemonSetView],
    nominated: Sequence[tuple[PodProfile, str]],
    opened: Mapping[str, Sequence[str | None]],
) -> Outcome:
    simulation = Simulation(nodes, pools, daemon_sets, opened)
    cluster = simulation.cluster
    by_name = {node.name: node for node in cluster.nodes}
    for profile, node_name in nominated:
        target = by_name.get(node_name)
        if target is not None:
            cluster.place(profile, target, 1, counted=True)
    reference = simulation.reference
    classes = _classes(pending)
    # Pods that need other pods near them go after the pods that need nobody, so that a
    # pending pod they are affine to is placed first (the scheduler retries them until it is).
    classes.sort(key=lambda c: (-c[0].priority, bool(c[0].affinity), -_share(c[0], reference)))
    placements: list[str | None] = [None] * len(pending)
    unfit: dict[int, str] = {}
    for profile, members in classes:
        if profile.unsupported is not None:
            for member in members:
                unfit[member] = profile.unsupported
            continue
        _ClassPlacement(simulation, profile, members, placements, unfit).run()
        cluster.retire(profile)
    return _outcome(simulation, placements, unfit)


class _ClassPlacement:
    """The pods of one class, placed in turn: each on the first node that takes it, or on
    the next node of the pool that can host it.

    A refusal stands while one class is placed (room only shrinks, counts only grow), so
    the search resumes from the last node used, unless pod affinity can turn a refusal,
    or a spread's smallest count rises: a refusal made under a floor holds while the
    floor is no higher.
    """

    def __init__(
        self,
        simulation: Simulation,
        profile: PodProfile,
        members: list[int],
        placements: list[str | None],
        unfit: dict[int, str],
    ) -> None:
        self.simulation = simulation
        self.cluster = simulation.cluster
        self.profile = profile
        self.members = members
        self.placements = placements
        self.unfit = unfit
        self.floors = self.cluster.spread_floors(profile)
        self.rounds = Rounds(self.cluster, profile) if Rounds.applies(profile) else None
        self.cursor = 0
        self.done = 0

    def run(self) -> None:
        profile, members, cluster = self.profile, self.members, self.cluster
        monotone = not profile.affinity
        simple = not profile.has_pod_constraints
        while self.done < len(members):
            if self.floors and self._rounds_repeated():
                break
            node = self.simulation.existing_fit(profile, self.cursor) or self._new_node()
            if node is None:
                break
            if monotone:
                self.cursor = node.index
            left = len(members) - self.done
            copies = max(1, copies_that_fit(profile, node, left) if simple else 1)
            cluster.place(profile, node, copies, counted=True)
            for member in members[self.done : self.done + copies]:
                self.placements[member] = node.name
            self.done += copies
            if self.rounds is not None:
                self.rounds.went_to(node)

    def _rounds_repeated(self) -> bool:
        """Follow the spreads' smallest counts; True when repeated rounds placed them all."""
        now = self.cluster.spread_floors(self.profile)
        if not any(n > f for n, f in zip(now, self.floors, strict=True)):
            self.floors = tuple(min(n, f) for n, f in zip(now, self.floors, strict=True))
            return False
        self.cursor = 0
        if self.rounds is not None:
            self.done = self.rounds.repeat(self.members, self.done, self.placements)
            if self.done == len(self.members):
                return True
            now = self.cluster.spread_floors(self.profile)
        self.floors = now
        return False

    def _new_node(self) -> SimNode | None:
        """The node opened for the pod (or one past maxNodes that takes it); None, with the
        rest of the class unfit, when no pool can host it."""
        simulation, profile = self.simulation, self.profile
        state, where, beyond, passed_over = simulation.new_node(
            profile, len(self.members) - self.done
        )
        if state is None:
            self._unfit(str(where))
            return None
        assert isinstance(where, int)
        node = simulation.existing_fit(profile, 0, beyond_max=True) if beyond else None
        if node is None:
            node = simulation.open_for(state, where, beyond=beyond)
            if passed_over is not None:
                simulation.passed_over_for[node.index] = passed_over
        problem = self.cluster.problem(profile, node)
        if problem is not None:
            self._unfit(problem)
            return None
        return node

    def _unfit(self, reason: str) -> None:
        for member in self.members[self.done :]:
            self.unfit[member] = reason


def _outcome(
    simulation: Simulation, placements: list[str | None], unfit: dict[int, str]
) -> Outcome:
    nodes = simulation.cluster.nodes
    pool_of_node = {node.name: node for node in nodes}
    hosted: dict[str, list[int]] = {}
    triggering: dict[str, list[int]] = {}
    beyond: dict[str, list[int]] = {}
    passed_over: dict[str, list[tuple[int, str]]] = {}
    for index, name in enumerate(placements):
        if name is None:
            continue
        node = pool_of_node[name]
        if node.pool is None:
            continue
        hosted.setdefault(node.pool, []).append(index)
        if node.kind == NEW:
            triggering.setdefault(node.pool, []).append(index)
            preferred = simulation.passed_over_for.get(node.index)
            if preferred is not None:
                passed_over.setdefault(node.pool, []).append((index, preferred))
        elif node.kind == BEYOND_MAX:
            beyond.setdefault(node.pool, []).append(index)
    used = {name for name in placements if name is not None}
    for state in simulation.pools.values():
        # Opened ahead by an earlier round and needed by nothing now: the last nodes of the
        # pool's queue (beyond maxNodes ones come last) are given back.
        for opened in (state.beyond, state.new_nodes):
            while opened and nodes[opened[-1]].name not in used:
                opened.pop()
            if opened:
                break
    pools = {
        name: PoolOutcome(
            new_nodes=len(state.new_nodes),
            wanted_nodes=len(state.new_nodes) + len(state.beyond),
            triggering=tuple(triggering.get(name, ())),
            hosted=tuple(hosted.get(name, ())),
            beyond=tuple(beyond.get(name, ())),
            passed_over=tuple(passed_over.get(name, ())),
            new_node_zones=simulation.new_node_zones(state),
            opened_zones=simulation.opened_zones(state),
        )
        for name, state in simulation.pools.items()
    }
    return Outcome(pools=pools, placements=tuple(placements), unfit=unfit)
