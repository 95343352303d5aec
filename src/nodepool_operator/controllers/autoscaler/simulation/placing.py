"""The simulation loop: pods grouped into classes, placed in first-fit-decreasing order on
the nodes that exist or the pools' next nodes, and run again while a spread opens more
nodes; then the outcome per pool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.autoscaler.simulation import classes, outcomes
from nodepool_operator.controllers.autoscaler.simulation.model import (
    HOSTNAME_LABEL,
    DaemonSetView,
    ExistingNode,
    PoolTemplate,
    SimulationOutcome,
)
from nodepool_operator.controllers.autoscaler.simulation.pools import Simulation
from nodepool_operator.controllers.autoscaler.simulation.rooms import (
    SimNode,
    copies_that_fit,
    has_room,
)
from nodepool_operator.controllers.autoscaler.simulation.rounds import Rounds
from nodepool_operator.runtime import gcpause

__all__ = ["simulate"]

#: Most rounds of the simulation when pods spread over topology (see ``simulate``): two in
#: the common case; a spread over hostnames whose pods also fit a node that is already
#: coming can take four before the nodes it opens stop changing.
_SPREAD_ROUNDS: Final = 8


def simulate(
    pending: Sequence[PodProfile],
    *,
    nodes: Sequence[ExistingNode],
    pools: Sequence[PoolTemplate],
    daemon_sets: Sequence[DaemonSetView] = (),
) -> SimulationOutcome:
    """Place ``pending`` (oldest first) as kube-scheduler would, opening pool nodes as needed.

    A pod nominated to a node (preemption is making room for it there) is among that
    node's ``pods``: it holds its room as a bound pod does (``gather``).

    A topology spread judged while new nodes open one after the other would let the first
    ones fill up before the later domains exist; the real scheduler sees the new nodes
    together. So when a pending pod spreads, the simulation runs again with the nodes the
    last run opened there from the start, until it opens the same nodes it started with.
    A run that comes back to the nodes of an earlier one would go round that cycle: the
    rounds end there too, and at ``_SPREAD_ROUNDS`` at most. Ending a round early would
    answer with a run that opened nodes one after the other, the skew this is here to avoid;
    only a first run whose second would provably come out the same, node for node, is kept
    without it (``first_run_stands``: a spread over zones the cluster has, say).

    The garbage collector is paused while it runs (``runtime.gcpause``): a run makes a
    simulated node, memo entries and counters by the ten thousand, all alive until it
    returns and none in a reference cycle, so the collections they would trigger free
    nothing, and reference counting frees them all as it returns.
    """
    with gcpause.collector_paused():
        return _simulate_rounds(pending, nodes=nodes, pools=pools, daemon_sets=daemon_sets)


def _simulate_rounds(
    pending: Sequence[PodProfile],
    *,
    nodes: Sequence[ExistingNode],
    pools: Sequence[PoolTemplate],
    daemon_sets: Sequence[DaemonSetView],
) -> SimulationOutcome:
    alike = classes.Alike(
        [*pending, *(p for n in nodes for p in n.pods), *(d.profile for d in daemon_sets)]
    )
    pending = [alike.of(profile) for profile in pending]
    nodes = [alike.node(node) for node in nodes]
    opened: dict[str, tuple[str | None, ...]] = {}
    spreading = any(profile.spread for profile in pending)
    tried: list[dict[str, tuple[str | None, ...]]] = []
    for _ in range(_SPREAD_ROUNDS):
        outcome, simulation = _simulate_once(
            pending,
            nodes=nodes,
            pools=pools,
            daemon_sets=daemon_sets,
            opened=opened,
            counting=alike.pods_read,
        )
        wanted = {name: p.opened_zones for name, p in outcome.pools.items() if p.wanted_nodes}
        if not spreading or wanted == opened or wanted in tried:
            break
        if not opened and first_run_stands(simulation, outcome, pending, len(nodes)):
            break  # the next run would come out the same, node for node
        del simulation  # its nodes and counters, before the next run makes its own
        tried.append(opened)
        opened = wanted
    return outcome


def _simulate_once(
    pending: Sequence[PodProfile],
    *,
    nodes: Sequence[ExistingNode],
    pools: Sequence[PoolTemplate],
    daemon_sets: Sequence[DaemonSetView],
    opened: Mapping[str, Sequence[str | None]],
    counting: bool,
) -> tuple[SimulationOutcome, Simulation]:
    simulation = Simulation(nodes, pools, daemon_sets, opened, counting=counting)
    cluster = simulation.cluster
    reference = simulation.reference
    # Pods that need other pods near them go after the pods that need nobody, so that a
    # pending pod they are affine to is placed first (the scheduler retries them until it is).
    found = classes.ordered(pending, reference)
    placements: list[str | None] = [None] * len(pending)
    unfit: dict[int, str] = {}
    existing_fit, place, others = simulation.existing_fit, cluster.place, found.others
    for first in found.firsts:
        profile = pending[first]
        if profile.unsupported is not None:
            for member in found.members(first):
                unfit[member] = profile.unsupported
            continue
        # ``has_pod_constraints``, written out: a property call per class (per pod here).
        if first not in others and not (
            profile.affinity or profile.anti_affinity or profile.spread or profile.ports
        ):
            # One pod that only takes room (every pod of the random mix): what
            # ``_ClassPlacement`` does for it, without a class's state (it has no spread
            # to retire either).
            chosen = existing_fit(profile, 0) or _new_node(simulation, profile, 1)
            if isinstance(chosen, str):
                unfit[first] = chosen
                continue
            place(profile, chosen, 1, counted=True)
            placements[first] = chosen.name
            continue
        members = found.members(first)
        _ClassPlacement(simulation, profile, members, placements, unfit).run()
        cluster.retire(profile)
    return outcomes.outcome_of(simulation, placements, unfit), simulation


def first_run_stands(
    simulation: Simulation, outcome: SimulationOutcome, pending: Sequence[PodProfile], existing: int
) -> bool:
    """Whether a run that started with no node opened (``simulation``, its ``outcome``) is
    what the next run, with the nodes it opened there from the start, would answer.

    The next run differs only by those nodes being there early: empty but for their
    DaemonSet pods, after every node this run had when it placed each pod. Each pod then
    sees the same verdicts on the nodes this run had, so it goes to the node it went to
    here: the same node that existed, or the opened node, the first of the early ones
    (which took it here). The verdicts are the same when the early nodes' DaemonSet pods
    count in no spread or pod affinity term and have no anti-affinity, and each early
    node that would be a new domain of a spread is so only for spreads whose smallest
    count never rose above 0 (an empty domain more leaves it 0). The next run adds
    each pool's nodes together, pools by name: where that puts two nodes in another
    order, no pending pod may use both. And no node may be beyond maxNodes (found another
    way), no pod unfit (a reason may name the next node) and no pool passed over
    (recorded only when a node opens).
    """
    if outcome.unfit or simulation.passed_over_for:
        return False
    if any(state.beyond for state in simulation.pools.values()):
        return False
    cluster = simulation.cluster
    opened = {i for state in simulation.pools.values() for i in state.new_nodes}
    if not opened:
        return True
    added = cluster.nodes[existing:]  # in flight and opened, in the order added
    classes_ = {cluster.rules_id(p): p for p in set(pending)}  # one pod per node rules
    if not _same_order_for_every_pod(simulation, added, list(classes_.values())):
        return False
    early = {cluster.nodes[i].static_id: cluster.nodes[i] for i in sorted(opened)}
    before = {node.static_id: node for node in cluster.nodes if node.index not in opened}
    daemons = {id(p): p for node in early.values() for p in cluster.daemons_for(node)}
    terms = cluster.counted_terms()
    for daemon in daemons.values():
        if daemon.anti_affinity or any(cluster.term_matches(t, daemon) for t in terms):
            return False
    for spread in cluster.spreads_made:
        constraint, owner = spread.constraint, spread.owner
        if spread.pinned:
            return False  # eligibility node by node: not judged here
        if any(cluster.spread_counts(constraint, owner, d) for d in daemons.values()):
            return False
        if not spread.rose_above_zero:
            continue
        # One node of each static key stands for all: spread eligibility and a domain
        # other than the hostname are the same for nodes alike but for their name.
        topology = constraint.topology_key
        domains = {
            node.labels[topology]
            for node in before.values()
            if cluster.judge_spread_eligible(constraint, owner, node)
        }
        for node in early.values():
            new_domain = topology == HOSTNAME_LABEL or node.labels.get(topology) not in domains
            if new_domain and cluster.judge_spread_eligible(constraint, owner, node):
                return False
    return True


def _same_order_for_every_pod(
    simulation: Simulation, added: Sequence[SimNode], pods: Sequence[PodProfile]
) -> bool:
    """Whether no pod of ``pods`` may use two of the ``added`` nodes that the next run,
    adding each pool's nodes together (pools by name), would put in another order."""
    rank = {name: index for index, name in enumerate(simulation.pools)}  # sorted by name
    seen: dict[int, dict[int, SimNode]] = {}  # per pool's rank: a node of each static key
    inverted: dict[tuple[int, int], tuple[SimNode, SimNode]] = {}  # by their static keys
    for node in added:
        mine = rank.get(node.pool or "", -1)
        for other, kinds in seen.items():
            if other > mine:  # added before this node here, after it in the next run
                for kind in kinds.values():
                    inverted.setdefault((kind.static_id, node.static_id), (kind, node))
        seen.setdefault(mine, {}).setdefault(node.static_id, node)
        if len(inverted) > 64:
            return False  # many pools interleaved: not worth judging
    if inverted and any(simulation.cluster.pinned(pod) for pod in pods):
        return False  # its verdicts are per node, not per static key
    problem = simulation.cluster.static_problem
    return not any(
        problem(pod, first) is None and problem(pod, second) is None
        for first, second in inverted.values()
        for pod in pods
    )


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
        # The class filled the node it used last (a simple class fills each node it uses):
        # that node refuses it now, so the search from there finds the next node first when
        # it takes the pod, and nothing when it was the cluster's last.
        filled: SimNode | None = None
        while self.done < len(members):
            if self.floors and self._rounds_repeated():
                break
            if filled is None:
                node = self.simulation.existing_fit(profile, self.cursor)
            elif filled.index == len(cluster.nodes) - 1:
                node = None
            else:
                node = self.simulation.following(profile, filled)
                node = node or self.simulation.existing_fit(profile, self.cursor)
            node = node or self._new_node()
            if node is None:
                break
            if monotone:
                self.cursor = node.index
            left = len(members) - self.done
            copies = max(1, copies_that_fit(profile, node, left) if simple else 1)
            cluster.place(profile, node, copies, counted=True)
            filled = node if simple and not has_room(profile, node) else None
            for member in members[self.done : self.done + copies]:
                self.placements[member] = node.name
            self.done += copies
            if self.rounds is not None:
                self.rounds.went_to(node)

    def _rounds_repeated(self) -> bool:
        """Follow the spreads' smallest counts; True when repeated rounds placed them all."""
        now = self.cluster.spread_floors(self.profile)
        if now == self.floors:  # most pods: no smallest count moved
            return False
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
        found = _new_node(self.simulation, self.profile, len(self.members) - self.done)
        if isinstance(found, str):
            self._unfit(found)
            return None
        return found

    def _unfit(self, reason: str) -> None:
        for member in self.members[self.done :]:
            self.unfit[member] = reason


def _new_node(simulation: Simulation, profile: PodProfile, remaining: int) -> SimNode | str:
    """The node opened for the pod (or one past maxNodes that takes it), with ``remaining``
    pods of its class to place; or why no pool can host it."""
    state, where, beyond, passed_over = simulation.new_node(profile, remaining)
    if state is None:
        return str(where)
    assert isinstance(where, int)
    node = simulation.existing_fit(profile, 0, beyond_max=True) if beyond else None
    if node is None:
        node = simulation.open_for(state, where, beyond=beyond)
        if passed_over is not None:
            simulation.passed_over_for[node.index] = passed_over
        if simulation.room_only(profile):
            return node  # the candidate ``new_node`` judged, with nothing placed since
    problem = simulation.cluster.problem(profile, node)
    if problem is not None:
        return problem
    return node
