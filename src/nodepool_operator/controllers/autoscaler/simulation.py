"""The scheduling simulation: where kube-scheduler would put the pending pods, and which
pool's new nodes they need. Pure code: no I/O, no clock.

The simulated cluster holds the nodes that exist (Ready, or registered and booting; a
pool's or not: a node of no pool hosts pods and counts for affinity and spread, and is
never grown nor removed), the
nodes requested but not registered yet, and the new nodes the simulation opens. A pod
goes to the first node that passes every filter kube-scheduler would apply
(``NodeUnschedulable``, ``NodeAffinity``, ``VolumeBinding`` and ``VolumeZone`` (as
``volumes`` reads a pod's claims), ``TaintToleration``, ``NodeResourcesFit``, ``NodePorts``,
``InterPodAffinity``, ``PodTopologySpread``) given the pods already there
and those placed before it; a pod that fits nowhere opens the next node of the pool that
can host it: highest ``weight`` first, then least waste (cluster-autoscaler's expander),
then name. A node that is not there yet has its template's allocatable minus the
DaemonSet pods that would run on it.

Pods are placed by class: pods whose profiles are equal but for labels no selector in
the cluster reads (replicas, a StatefulSet's pods with their own pod-name labels) are one
class, placed one after the other (a node's worth at a time when nothing but resources
constrains them; round after round at once while a spreading class's rounds come out the
same), in first-fit-decreasing order. A max-tree over the nodes' free cpu, memory and pod slots
finds the leftmost node with room without scanning the full ones, and a per-class
cursor skips the nodes the class was already refused on (a node only fills up while one
class is placed, so a refusal stands, except where pod affinity can change it or a
spread's smallest count rises). Verdicts of the static filters are kept per node rules
(selector, node affinity, tolerations), so pods of every size with equal rules share them.

Nodes are registered in the pool's VM order (``<pool>-<index>``, lowest free index
first) and each VM's zone follows from its index, so the nodes opened here are, name for
name, the ones the NodePool controller will create.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.controllers.autoscaler.constraints import (
    UNSCHEDULABLE_TAINT,
    AffinityTerm,
    HostPort,
    PodProfile,
    Selector,
    SpreadConstraint,
    Taint,
    node_affinity_problem,
    terms_name_nodes,
    untolerated,
)

__all__ = [
    "DaemonSetView",
    "ExistingNode",
    "NodeAnswer",
    "Outcome",
    "PoolOutcome",
    "PoolTemplate",
    "Verdicts",
    "simulate",
    "verdicts",
]

HOSTNAME_LABEL: Final = nodepool_api.HOSTNAME_LABEL
_TOPOLOGY_LABELS: Final = frozenset({nodepool_api.ZONE_LABEL, nodepool_api.REGION_LABEL})
_MAIN: Final = ("cpu", "memory", "pods")
#: Rounds of the simulation when pods spread over topology (see ``simulate``).
_SPREAD_ROUNDS: Final = 3


@dataclass(frozen=True)
class ExistingNode:
    """A Node in the cache: Ready, or registered and still booting."""

    name: str
    pool: str | None
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
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
class PoolTemplate:
    """A pool that can grow: its node shape and the names of the nodes it creates next.

    ``upcoming(k)`` is the name and labels of the k-th node the pool will register from
    now on; the first ``in_flight`` of them are already requested (VMs without a Node).
    """

    name: str
    weight: int
    taints: tuple[Taint, ...]
    allocatable: Mapping[str, int]
    upcoming: Callable[[int], tuple[str, Mapping[str, str]]]
    in_flight: int
    headroom: int  # nodes it may still add beyond the target (maxNodes - target)
    zones: int  # how many zones its nodes rotate through (1 without zones)
    namespaces: frozenset[str] | None  # whose pods its Autoscaler plans for; None: all


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


@dataclass(frozen=True)
class Outcome:
    pools: Mapping[str, PoolOutcome]
    placements: tuple[str | None, ...]  # per pending pod: the node it went to
    unfit: Mapping[int, str]  # pending pods no node could host, and why


# -- the simulated nodes ------------------------------------------------------------------

_READY, _BOOTING, _NEW, _BEYOND_MAX = "ready", "booting", "new", "beyond-max"


@dataclass(eq=False)
class _Node:
    index: int
    name: str
    pool: str | None
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    allocatable: Mapping[str, int]
    kind: str
    used: dict[str, int] = field(default_factory=dict)
    ports: list[HostPort] = field(default_factory=list)
    pods: Counter[PodProfile] = field(default_factory=Counter)
    # Everything the static filters read but the name: equal keys, equal verdicts.
    static_key: tuple[object, ...] = field(init=False, default=())
    static_id: int = field(init=False, default=-1)  # the key's number in its cluster
    # The static key without zone and region: the nodes searched together.
    group_key: tuple[object, ...] = field(init=False, default=())
    slot: int = 0  # its leaf in its group's room tree

    def __post_init__(self) -> None:
        labels = tuple(sorted((k, v) for k, v in self.labels.items() if k != HOSTNAME_LABEL))
        self.static_key = (labels, self.taints, self.unschedulable)
        shared = tuple((k, v) for k, v in labels if k not in _TOPOLOGY_LABELS)
        self.group_key = (shared, self.taints, self.unschedulable)

    def room(self, name: str) -> int:
        return self.allocatable.get(name, 0) - self.used.get(name, 0)

    def charge(self, profile: PodProfile, copies: int) -> None:
        """Take the room and host ports of ``copies`` pods of ``profile``."""
        for name, amount in profile.requests.items():
            self.used[name] = self.used.get(name, 0) + amount * copies
        self.ports.extend(profile.ports)


class _RoomTree:
    """Leftmost node with room for (cpu, memory, pods): a max-tree per dimension.

    A subtree whose maximum cpu comes from one node and maximum memory from another has no
    room for a pod needing both, yet passes the per-dimension test; with every request
    different, searches spend most of their time in such subtrees. So more max-trees keep
    what a node with room for a pod must have at least as much of as the pod: its
    *balance* (cpu and memory, each relative to the largest node, added up) and, for a
    few mixes of the two, the smaller of its cpu and memory weighed by that mix (a node
    rich in one only does not count). A search reads the mix nearest the pod's own. They
    only prune what cannot fit: the result is still exact first fit.
    """

    #: Mixes of (cpu, memory) weights, each relative to the largest node: a pod heavier in
    #: cpu reads the first, one heavier in memory the second (its two terms are closer).
    MIXES: Final = ((1, 2), (2, 1))

    def __init__(self, scale: tuple[int, int]) -> None:
        self.size = 1
        self.count = 0
        self.cpu_weight, self.memory_weight = scale
        self.trees: list[list[int]] = [[-1, -1] for _ in range(4 + len(self.MIXES))]

    def _keys(self, cpu: int, memory: int) -> list[int]:
        """Balance, then the weighed smaller share for each mix."""
        if cpu < 0 or memory < 0:
            return [-1] * (1 + len(self.MIXES))
        relative_cpu = cpu * self.cpu_weight
        relative_memory = (memory >> 20) * self.memory_weight
        return [
            relative_cpu + relative_memory,
            *(min(a * relative_cpu, b * relative_memory) for a, b in self.MIXES),
        ]

    def _grow(self) -> None:
        leaves = [[t[self.size + i] for i in range(self.count)] for t in self.trees]
        self.size *= 2
        self.trees = [[-1] * (2 * self.size) for _ in self.trees]
        for d, tree in enumerate(self.trees):
            for i, value in enumerate(leaves[d]):
                tree[self.size + i] = value
            for n in range(self.size - 1, 0, -1):
                tree[n] = max(tree[2 * n], tree[2 * n + 1])

    def append(self, room: Sequence[int]) -> None:
        if self.count == self.size:
            self._grow()
        self.count += 1
        self.set(self.count - 1, room)

    def set(self, index: int, room: Sequence[int]) -> None:
        values = (*room, *self._keys(room[0], room[1]))
        leaf = self.size + index
        for tree, value in zip(self.trees, values, strict=True):
            n = leaf
            tree[n] = value
            n >>= 1
            while n:
                left = tree[2 * n]
                right = tree[2 * n + 1]
                best = left if left > right else right
                if tree[n] == best:
                    break
                tree[n] = best
                n >>= 1

    def find(self, need: Sequence[int], start: int) -> Iterable[int]:
        """Nodes from ``start`` on with room for ``need``, leftmost first."""
        c, m, p = need
        balance_of_pod, *shares = self._keys(c, m)
        heavier_in_memory = (m >> 20) * self.memory_weight > c * self.cpu_weight
        cpu, memory, pods, balance = self.trees[:4]
        shape = self.trees[5 if heavier_in_memory else 4]
        b, s = balance_of_pod, shares[1 if heavier_in_memory else 0]
        size = self.size
        if cpu[1] < c or memory[1] < m or pods[1] < p or balance[1] < b or shape[1] < s:
            return
        # Leaves before ``start`` are skipped by their position: a subtree is pushed only
        # when it may have room in every dimension and ends after ``start``.
        first = size + start
        height = size.bit_length() - 1
        stack = [1]
        while stack:
            n = stack.pop()
            if n >= size:
                yield n - size
                continue
            left, right = 2 * n, 2 * n + 1
            if (
                shape[right] >= s
                and balance[right] >= b
                and cpu[right] >= c
                and memory[right] >= m
                and pods[right] >= p
            ):
                stack.append(right)
            # The left subtree is skipped whole when its last leaf comes before ``start``.
            if (
                shape[left] >= s
                and balance[left] >= b
                and cpu[left] >= c
                and memory[left] >= m
                and pods[left] >= p
                and (start == 0 or ((left + 1) << (height - left.bit_length() + 1)) - 1 >= first)
            ):
                stack.append(left)


class _Group:
    """Nodes equal in all but name and topology (a pool's nodes, whatever their zone), in
    cluster order, and the room tree over them."""

    def __init__(self, scale: tuple[int, int]) -> None:
        self.tree = _RoomTree(scale)
        self.indexes: list[int] = []  # cluster index of each leaf, increasing
        # One node of each static key in the group (one per zone): a pod may use the
        # group when one of them passes its static filters.
        self.kinds: list[_Node] = []
        self._keys: set[tuple[object, ...]] = set()

    def add(self, node: _Node, room: Sequence[int]) -> int:
        if node.static_key not in self._keys:
            self._keys.add(node.static_key)
            self.kinds.append(node)
        self.indexes.append(node.index)
        self.tree.append(room)
        return len(self.indexes) - 1

    def find(self, need: Sequence[int], start: int) -> Iterable[int]:
        indexes = self.indexes
        for slot in self.tree.find(need, bisect.bisect_left(indexes, start)):
            yield indexes[slot]


class _Counts:
    """How many pods matching one term sit in each domain of the term's topology key."""

    def __init__(self, topology_key: str) -> None:
        self.topology_key = topology_key
        self.total = 0
        self.by_domain: Counter[str] = Counter()

    def add(self, node: _Node, count: int) -> None:
        self.total += count
        value = node.labels.get(self.topology_key)
        if value is not None:
            self.by_domain[value] += count


class _Spread:
    """One spread constraint of one pod class: matching pods per eligible domain.

    Counts only grow and domains are only added, so the smallest count is kept up to date
    as they move (with how many domains hold it) instead of being searched for each pod.
    """

    def __init__(self, constraint: SpreadConstraint, owner: PodProfile, *, pinned: bool) -> None:
        self.constraint = constraint
        self.owner = owner
        self.pinned = pinned  # its pod's node rules name nodes: eligibility is per node
        self.counts: Counter[str] = Counter()
        self.eligible: set[int] = set()  # indexes of the nodes whose domains count, if pinned
        self.eligible_by_key: dict[int, bool] = {}  # by a node's static id, if not
        # Its class is placed: nothing reads it again, so nothing keeps it up to date.
        self.retired = False
        self._low = 0
        self._at_low = 0

    def add_domain(self, value: str) -> None:
        if value in self.counts:
            return
        self.counts[value] = 0
        if self._low == 0 and self._at_low:
            self._at_low += 1
        else:
            self._low, self._at_low = 0, 1

    def add(self, value: str, copies: int) -> None:
        before = self.counts.get(value)
        if before is None:
            self.add_domain(value)
            before = 0
        self.counts[value] = before + copies
        if before == self._low and copies:
            self._at_low -= 1
            if self._at_low == 0:
                self._low = min(self.counts.values())
                self._at_low = sum(1 for c in self.counts.values() if c == self._low)

    def minimum(self, extra_domain: str | None, min_domains: int) -> int:
        new = extra_domain is not None and extra_domain not in self.counts
        if len(self.counts) + new < min_domains:
            return 0
        return 0 if new else self._low


@dataclass(eq=False)
class _Feeds:
    """What a placed pod of one profile must update: the counters whose terms match it."""

    counts: list[_Counts] = field(default_factory=list)
    spreads: list[_Spread] = field(default_factory=list)
    terms_seen: int = 0


class _Cluster:
    def __init__(self, daemon_sets: Sequence[DaemonSetView], scale: tuple[int, int]) -> None:
        self.nodes: list[_Node] = []
        self.scale = scale  # weights of cpu and memory (MiB) in a room tree's balance
        # One room tree per group of nodes that agree on everything static but their name
        # (a pool's zone, say): a pod skips a whole group its selectors or taints refuse.
        self.groups: dict[tuple[object, ...], _Group] = {}
        # Node rules numbered once per profile: every static verdict, and which groups a
        # pod may use, is shared by the pods with equal rules, whatever their size.
        self._rules_ids: dict[tuple[object, ...], int] = {}
        self._rules_of: dict[PodProfile, int] = {}
        self._pinned: dict[int, bool] = {}
        self._usable: dict[int, tuple[int, list[_Group]]] = {}
        self._kinds_seen = 0  # node kinds across all groups: the usable lists' version
        self.daemon_sets = daemon_sets
        self._terms: dict[AffinityTerm, _Counts] = {}
        self._term_match: dict[tuple[AffinityTerm, PodProfile], bool] = {}
        self._anti_owners: dict[AffinityTerm, _Counts] = {}
        self._spreads: dict[tuple[SpreadConstraint, PodProfile], _Spread] = {}
        self._spreads_by_profile: dict[PodProfile, list[tuple[SpreadConstraint, _Spread, int]]] = {}
        self._static: dict[tuple[int, int], str | None] = {}  # by rules and static id
        # Per profile: the term counters and spreads a pod of it counts in, and how many of
        # each were looked at (both only grow, so only the new ones are checked again).
        self._feeds: dict[PodProfile, _Feeds] = {}
        self._term_list: list[tuple[AffinityTerm, _Counts]] = []
        # The spreads of the classes not placed yet: the only ones a new node must join.
        self._live_spreads: list[_Spread] = []
        self._anti_list: list[AffinityTerm] = []
        self._hits: dict[PodProfile, tuple[int, list[AffinityTerm]]] = {}
        # Where the counted pods of each profile are: a new term or spread counts its
        # matches from the profiles it matches, not from every pod of every node.
        self._where: dict[PodProfile, Counter[int]] = {}
        # The counted profiles by each of their labels: a selector asking for a label value
        # reads only the profiles that carry it, not every class placed before.
        self._placed_by_label: dict[tuple[str, str], list[PodProfile]] = {}
        self._static_ids: dict[tuple[object, ...], int] = {}
        self._by_static: dict[int, list[int]] = {}  # indexes of the added nodes, per static id

    # -- building --------------------------------------------------------------------

    def add_node(self, node: _Node) -> _Node:
        """Add ``node``, made by ``make_node`` just before (its index is its place)."""
        if node.index != len(self.nodes):
            raise ValueError(f"node {node.name} was made for another place in the cluster")
        self.nodes.append(node)
        self._by_static.setdefault(node.static_id, []).append(node.index)
        group = self.groups.get(node.group_key)
        if group is None:
            group = self.groups[node.group_key] = _Group(self.scale)
        kinds = len(group.kinds)
        node.slot = group.add(node, self._main_room(node))
        self._kinds_seen += len(group.kinds) - kinds
        for spread in self._live_spreads:
            value = node.labels.get(spread.constraint.topology_key)
            if value is not None and self._spread_eligible(spread, node):
                spread.add_domain(value)  # a new, empty domain (or one more node in it)
                if spread.pinned:
                    spread.eligible.add(node.index)
        return node

    def make_node(
        self,
        *,
        name: str,
        pool: str | None,
        labels: Mapping[str, str],
        taints: tuple[Taint, ...],
        unschedulable: bool,
        allocatable: Mapping[str, int],
        kind: str,
    ) -> _Node:
        """The next node of the cluster, not added yet (``add_node`` adds it)."""
        node = _Node(len(self.nodes), name, pool, labels, taints, unschedulable, allocatable, kind)
        # The caches of static verdicts are keyed by the static key's number: hashing the
        # key itself (labels and taints) at every lookup is what would cost.
        node.static_id = self._static_ids.setdefault(node.static_key, len(self._static_ids))
        return node

    def daemons_for(self, node: _Node, present: frozenset[str] = frozenset()) -> list[PodProfile]:
        """The pods of the DaemonSets that would run on ``node`` and are not there yet."""
        return [
            daemon.profile
            for daemon in self.daemon_sets
            if daemon.uid not in present and self._static_problem(daemon.profile, node) is None
        ]

    def add_daemon_pods(self, node: _Node, *, present: frozenset[str] = frozenset()) -> None:
        """Charge a node with the DaemonSet pods that would run on it and are not there."""
        for profile in self.daemons_for(node, present):
            self.place(profile, node, 1, counted=True)

    def _main_room(self, node: _Node) -> list[int]:
        if node.unschedulable:
            return [-1, -1, -1]  # never searched; tolerating pods are rare and go new
        return [max(-1, node.room(name)) for name in _MAIN]

    def place(self, profile: PodProfile, node: _Node, copies: int, *, counted: bool) -> None:
        """Put ``copies`` pods of ``profile`` on ``node``; ``counted`` for spread and affinity."""
        node.charge(profile, copies)
        if counted:
            node.pods[profile] += copies
            where = self._where.get(profile)
            if where is None:
                where = self._where[profile] = Counter()
                for label in profile.labels.items():
                    self._placed_by_label.setdefault(label, []).append(profile)
            where[node.index] += copies
            feeds = self._feeds_of(profile)
            for counts in feeds.counts:
                counts.add(node, copies)
            for term in profile.anti_affinity:
                owners = self._anti_owners.get(term)
                if owners is None:
                    owners = self._anti_owners[term] = _Counts(term.topology_key)
                    self._anti_list.append(term)
                owners.add(node, copies)
            for spread in feeds.spreads:
                if spread.retired:
                    continue
                value = node.labels.get(spread.constraint.topology_key)
                if value is not None and self._counted_at(spread, node):
                    spread.add(value, copies)
        self.groups[node.group_key].tree.set(node.slot, self._main_room(node))

    def _feeds_of(self, profile: PodProfile) -> _Feeds:
        feeds = self._feeds.get(profile)
        if feeds is None:
            # A spread made later joins the feeds of the profiles it counts (``_spread``).
            feeds = self._feeds[profile] = _Feeds()
            if self._live_spreads:
                feeds.spreads = [
                    spread
                    for spread in self._live_spreads
                    if self._spread_counts(spread.constraint, spread.owner, profile)
                ]
        for term, counts in self._term_list[feeds.terms_seen :]:
            if self._matches(term, profile):
                feeds.counts.append(counts)
        feeds.terms_seen = len(self._term_list)
        return feeds

    def _anti_hits(self, profile: PodProfile) -> list[AffinityTerm]:
        """The running pods' anti-affinity terms that match ``profile``."""
        seen, hits = self._hits.get(profile, (0, []))
        for term in self._anti_list[seen:]:
            if self._matches(term, profile):
                hits = [*hits, term]
        self._hits[profile] = (len(self._anti_list), hits)
        return hits

    # -- matching ---------------------------------------------------------------------

    def _matches(self, term: AffinityTerm, profile: PodProfile) -> bool:
        key = (term, profile)
        found = self._term_match.get(key)
        if found is None:
            found = self._term_match[key] = term.matches(profile.namespace, profile.labels)
        return found

    def _counts(self, term: AffinityTerm) -> _Counts:
        counts = self._terms.get(term)
        if counts is None:
            counts = self._terms[term] = _Counts(term.topology_key)
            self._term_list.append((term, counts))
            for profile, where in self._placed_for(term.selector):
                if self._matches(term, profile):
                    for index, count in where.items():
                        counts.add(self.nodes[index], count)
        return counts

    def _placed_for(self, selector: Selector | None) -> Iterable[tuple[PodProfile, Counter[int]]]:
        """The counted profiles ``selector`` may match, and where their pods are: those
        with a value its first ``In`` requirement accepts, or all when it has none."""
        if selector is None:
            return ()
        for key, operator, values in selector.requirements:
            if operator == "In":
                where = self._where
                return [
                    (profile, where[profile])
                    for value in values
                    for profile in self._placed_by_label.get((key, value), ())
                ]
        return list(self._where.items())

    @staticmethod
    def _spread_counts(constraint: SpreadConstraint, owner: PodProfile, other: PodProfile) -> bool:
        if constraint.selector is None or other.namespace != owner.namespace:
            return False
        return constraint.selector.matches(other.labels)

    def _spread_eligible(self, spread: _Spread, node: _Node) -> bool:
        """Whether the node's domain counts for the spread: a static fact, cached per
        static key unless the pod's node rules name nodes one by one."""
        if spread.pinned:
            return self._judge_spread_eligible(spread.constraint, spread.owner, node)
        found = spread.eligible_by_key.get(node.static_id)
        if found is None:
            found = spread.eligible_by_key[node.static_id] = self._judge_spread_eligible(
                spread.constraint, spread.owner, node
            )
        return found

    def _counted_at(self, spread: _Spread, node: _Node) -> bool:
        """Whether pods on the (added) node count in the spread."""
        if spread.pinned:
            return node.index in spread.eligible
        return self._spread_eligible(spread, node)

    def _judge_spread_eligible(
        self, constraint: SpreadConstraint, profile: PodProfile, node: _Node
    ) -> bool:
        if constraint.topology_key not in node.labels:
            return False
        if constraint.honor_node_affinity and node_affinity_problem(
            profile.node_selector, profile.node_affinity, labels=node.labels, name=node.name
        ):
            return False
        return not (
            constraint.honor_taints and untolerated(profile.tolerations, node.taints) is not None
        )

    def _spread(self, constraint: SpreadConstraint, profile: PodProfile) -> _Spread:
        key = (constraint, profile)
        spread = self._spreads.get(key)
        if spread is None:
            by_node = self.pinned(profile)
            spread = self._spreads[key] = _Spread(constraint, profile, pinned=by_node)
            topology = constraint.topology_key
            # Eligibility is judged once per static key (nodes alike but for their name)
            # unless the pod names nodes one by one; the order domains join in is moot.
            # Nodes of one static key share every label but the hostname: one domain.
            per_node = by_node or topology == HOSTNAME_LABEL
            nodes = self.nodes
            for indexes in self._by_static.values():
                if by_node:
                    eligible = [i for i in indexes if self._spread_eligible(spread, nodes[i])]
                    spread.eligible.update(eligible)
                elif self._spread_eligible(spread, nodes[indexes[0]]):
                    eligible = indexes if per_node else indexes[:1]
                else:
                    continue
                for index in eligible:
                    spread.add_domain(nodes[index].labels[topology])
            for other, where in self._placed_for(constraint.selector):
                if self._spread_counts(constraint, profile, other):
                    self._feeds[other].spreads.append(spread)
                    for index, count in where.items():
                        node = nodes[index]
                        if self._counted_at(spread, node):
                            spread.add(node.labels[topology], count)
            self._live_spreads.append(spread)
        return spread

    def retire(self, profile: PodProfile) -> None:
        """The class of ``profile`` is placed: its spreads are read no more."""
        for constraint, spread, _ in self._spreads_by_profile.pop(profile, ()):
            spread.retired = True
            self._live_spreads.remove(spread)
            del self._spreads[(constraint, profile)]

    # -- filters ------------------------------------------------------------------------

    def _static_problem(self, profile: PodProfile, node: _Node) -> str | None:
        """What never changes for the node: cordon, taints, selectors, volumes."""
        rules = self.rules_id(profile)
        pinned = self._pinned[rules]
        key = (rules, node.static_id)
        if not pinned and key in self._static:
            return self._static[key]
        problem = None
        # In kube-scheduler's order (NodeUnschedulable, TaintToleration, NodeAffinity, then
        # the volume filters), so the first refusal named is the one the scheduler reports.
        if node.unschedulable and untolerated(
            profile.tolerations, (Taint(UNSCHEDULABLE_TAINT, "", "NoSchedule"),)
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

    def rules_id(self, profile: PodProfile) -> int:
        """The number of the profile's node rules (equal rules, equal number)."""
        found = self._rules_of.get(profile)
        if found is None:
            found = self._rules_ids.setdefault(profile.node_rules, len(self._rules_ids))
            self._rules_of[profile] = found
            if found not in self._pinned:
                self._pinned[found] = (
                    HOSTNAME_LABEL in profile.node_selector
                    or terms_name_nodes(profile.node_affinity or ())
                    or (profile.volumes is not None and profile.volumes.names_nodes)
                )
        return found

    def pinned(self, profile: PodProfile) -> bool:
        """Whether the pod's node rules name nodes one by one (so groups do not decide)."""
        return self._pinned[self.rules_id(profile)]

    def candidates(self, profile: PodProfile, need: Sequence[int], start: int) -> Iterable[int]:
        """Nodes from ``start`` on with room for ``need``, in order, in groups it may use."""
        rules = self.rules_id(profile)
        seen, usable = self._usable.get(rules, (-1, []))
        if seen != self._kinds_seen:
            # Groups and their kinds only grow: the list stands until one of them does.
            pinned = self._pinned[rules]
            usable = [
                group
                for group in self.groups.values()
                if pinned or any(self._static_problem(profile, n) is None for n in group.kinds)
            ]
            self._usable[rules] = (self._kinds_seen, usable)
        if len(usable) == 1:
            return usable[0].find(need, start)
        return heapq.merge(*(group.find(need, start) for group in usable))

    @staticmethod
    def _resource_problem(profile: PodProfile, node: _Node) -> str | None:
        for name, amount in profile.requests.items():
            if node.room(name) < amount:
                have = node.allocatable.get(name, 0)
                if have < amount:
                    return f"requests {amount} of {name}, a node offers {have}"
                return f"not enough free {name}"
        return None

    @staticmethod
    def _port_problem(profile: PodProfile, node: _Node) -> str | None:
        for port in profile.ports:
            if any(port.conflicts(taken) for taken in node.ports):
                return f"host port {port.port}/{port.protocol} is taken"
        return None

    def _affinity_problem(self, profile: PodProfile, node: _Node) -> str | None:
        for term in profile.affinity:
            value = node.labels.get(term.topology_key)
            if value is None:
                return f"pod affinity: node has no {term.topology_key} label"
            counts = self._counts(term)
            if counts.by_domain[value] > 0:
                continue
            # The first pod of a group that is affine to itself may go anywhere.
            if counts.total == 0 and self._matches(term, profile):
                continue
            return f"pod affinity over {term.topology_key}: no matching pod in {value}"
        for term in profile.anti_affinity:
            value = node.labels.get(term.topology_key)
            if value is not None and self._counts(term).by_domain[value]:
                return f"pod anti-affinity over {term.topology_key}: a matching pod in {value}"
        for term in self._anti_hits(profile):
            owners = self._anti_owners[term]
            if owners.total:
                value = node.labels.get(term.topology_key)
                if value is not None and owners.by_domain[value]:
                    return f"another pod's anti-affinity over {term.topology_key} in {value}"
        return None

    def spreads_of(self, profile: PodProfile) -> list[tuple[SpreadConstraint, _Spread, int]]:
        """The pod's spreads, each with 1 when the pod counts in its own spread, else 0.

        Kept per profile: a constraint is a deep value, and hashing it for every node a
        pod is judged on is what a lookup by (constraint, profile) would cost.
        """
        if not profile.spread:
            return []
        found = self._spreads_by_profile.get(profile)
        if found is None:
            found = self._spreads_by_profile[profile] = [
                (c, self._spread(c, profile), int(self._spread_counts(c, profile, profile)))
                for c in profile.spread
            ]
        return found

    def _spread_problem(self, profile: PodProfile, node: _Node, *, candidate: bool) -> str | None:
        for constraint, spread, mine in self.spreads_of(profile):
            key = constraint.topology_key
            value = node.labels.get(key)
            if value is None:
                return f"topology spread: node has no {key} label"
            eligible = candidate and self._spread_eligible(spread, node)
            extra = value if eligible else None
            low = spread.minimum(extra, constraint.min_domains)
            if spread.counts.get(value, 0) + mine - low > constraint.max_skew:
                return f"topology spread over {key} (maxSkew {constraint.max_skew}) in {value}"
        return None

    def spread_floors(self, profile: PodProfile) -> tuple[int, ...]:
        """The smallest count each of the pod's spreads compares an added node with."""
        return tuple(
            spread.minimum(None, constraint.min_domains)
            for constraint, spread, _ in self.spreads_of(profile)
        )

    def problem(self, profile: PodProfile, node: _Node, *, candidate: bool = False) -> str | None:
        """Why ``profile`` cannot go on ``node`` now, or None. ``candidate``: not added yet."""
        return (
            self._static_problem(profile, node)
            or self._port_problem(profile, node)  # NodePorts runs before NodeResourcesFit
            or self._resource_problem(profile, node)
            or self._spread_problem(profile, node, candidate=candidate)
            or self._affinity_problem(profile, node)  # InterPodAffinity runs last
        )


# -- placing ---------------------------------------------------------------------------


def _reference(pools: Sequence[PoolTemplate], nodes: Sequence[ExistingNode]) -> dict[str, int]:
    """The largest allocatable of any node or template, per resource: the unit shares are
    counted in."""
    found: dict[str, int] = {}
    for allocatable in [*(p.allocatable for p in pools), *(n.allocatable for n in nodes)]:
        for name, amount in allocatable.items():
            found[name] = max(found.get(name, 0), amount)
    return found


def _share(profile: PodProfile, reference: Mapping[str, int]) -> float:
    shares = [
        amount / reference[name] if reference.get(name) else float("inf")
        for name, amount in profile.requests.items()
        if amount > 0 and name in _MAIN
    ]
    return max(shares, default=0.0)


def _copies(profile: PodProfile, node: _Node, wanted: int) -> int:
    fits = wanted
    for name, amount in profile.requests.items():
        if amount > 0:
            fits = min(fits, node.room(name) // amount)
    return max(0, fits)


@dataclass
class _PoolState:
    template: PoolTemplate
    opened: int = 0  # upcoming nodes opened (in flight ones included)
    new_nodes: list[int] = field(default_factory=list)  # indexes of granted new nodes
    beyond: list[int] = field(default_factory=list)  # indexes of nodes beyond maxNodes


class _Simulation:
    def __init__(
        self,
        nodes: Sequence[ExistingNode],
        pools: Sequence[PoolTemplate],
        daemon_sets: Sequence[DaemonSetView],
        opened: Mapping[str, int],
    ) -> None:
        self.reference = _reference(pools, nodes)
        # cpu relative to the largest node's, plus memory relative to its: both scaled by
        # the product of the two, to stay in integers.
        scale = (
            max(1, self.reference.get("memory", 0) >> 20),
            max(1, self.reference.get("cpu", 0)),
        )
        self.cluster = _Cluster(daemon_sets, scale)
        self.pools = {p.name: _PoolState(p) for p in sorted(pools, key=lambda p: p.name)}
        # The pool the last ``new_node`` ranked first but could not grow, when it chose
        # another; and, per new node opened so, that pool (``PoolOutcome.passed_over``).
        self.passed_over: str | None = None
        self.passed_over_for: dict[int, str] = {}
        for existing in nodes:
            node = self.cluster.add_node(
                self.cluster.make_node(
                    name=existing.name,
                    pool=existing.pool,
                    labels=existing.labels,
                    taints=existing.taints,
                    unschedulable=existing.unschedulable,
                    allocatable=existing.allocatable,
                    kind=_READY,
                )
            )
            for profile in existing.pods:
                self.cluster.place(profile, node, 1, counted=True)
            for profile in existing.terminating:
                self.cluster.place(profile, node, 1, counted=False)
            # Any node, a pool's or not, gets the DaemonSet pods it does not run yet.
            self.cluster.add_daemon_pods(node, present=existing.daemon_sets)
        for state in self.pools.values():
            for _ in range(state.template.in_flight):
                self._open(state, kind=_BOOTING)
            for _ in range(opened.get(state.template.name, 0)):
                beyond = state.opened - state.template.in_flight >= state.template.headroom
                self._open(state, kind=_BEYOND_MAX if beyond else _NEW)

    def _open(self, state: _PoolState, *, kind: str) -> _Node:
        node = self.cluster.add_node(self._upcoming(state, 0, kind=kind))
        state.opened += 1
        self.cluster.add_daemon_pods(node)
        if kind == _NEW:
            state.new_nodes.append(node.index)
        elif kind == _BEYOND_MAX:
            state.beyond.append(node.index)
        return node

    def _candidate(self, state: _PoolState, ahead: int) -> _Node:
        """The pool's node ``ahead`` places down its queue, as it would be; not added."""
        node = self._upcoming(state, ahead, kind=_NEW)
        for profile in self.cluster.daemons_for(node):
            node.charge(profile, 1)
        return node

    def _upcoming(self, state: _PoolState, ahead: int, *, kind: str) -> _Node:
        template = state.template
        name, labels = template.upcoming(state.opened + ahead)
        return self.cluster.make_node(
            name=name,
            pool=template.name,
            labels=labels,
            taints=template.taints,
            unschedulable=False,
            allocatable=template.allocatable,
            kind=kind,
        )

    def existing_fit(
        self, profile: PodProfile, start: int, *, beyond_max: bool = False
    ) -> _Node | None:
        """The first node from ``start`` on that takes the pod: a node that exists or may
        come (``beyond_max`` False), or one of the nodes past a pool's maxNodes opened so
        far (True). Room past maxNodes never comes, so it is used only where no pool may
        grow for the pod: a pod another pool can host is never packed onto it."""
        need = [profile.requests.get(name, 0) for name in _MAIN]
        cluster = self.cluster
        for index in cluster.candidates(profile, need, start):
            node = cluster.nodes[index]
            if (node.kind == _BEYOND_MAX) != beyond_max:
                continue
            if cluster.problem(profile, node) is None:
                return node
        return None

    def new_node(
        self, profile: PodProfile, remaining: int
    ) -> tuple[_PoolState, int, bool] | tuple[None, str, bool]:
        """The pool (and how far down its queue) whose next node would host the pod."""
        options: list[tuple[tuple[object, ...], _PoolState, int, bool]] = []
        reasons: list[str] = []
        for state in self.pools.values():
            template = state.template
            if template.namespaces is not None and profile.namespace not in template.namespaces:
                continue
            for ahead in range(max(1, template.zones)):
                node = self._candidate(state, ahead)
                problem = self.cluster.problem(profile, node, candidate=True)
                if problem is None:
                    beyond = state.opened - template.in_flight + ahead >= template.headroom
                    copies = max(1, _copies(profile, node, remaining))
                    waste = _waste(profile, node, copies)
                    rank = (beyond, -template.weight, waste, ahead, template.name)
                    options.append((rank, state, ahead, beyond))
                    break
                if ahead == 0:
                    reasons.append(f"{template.name}: {problem}")
        self.passed_over = None
        if not options:
            return None, "; ".join(reasons) or "no Autoscaler plans for its namespace", False
        _, state, ahead, beyond = min(options, key=lambda o: o[0])
        preferred = min(options, key=lambda o: o[0][1:])  # as if every pool could grow
        if not beyond and preferred[3] and preferred[1] is not state:
            self.passed_over = preferred[1].template.name
        return state, ahead, beyond

    def open_for(self, state: _PoolState, ahead: int, *, beyond: bool) -> _Node:
        kind = _BEYOND_MAX if beyond else _NEW
        for _ in range(ahead):
            filler_beyond = state.opened - state.template.in_flight >= state.template.headroom
            self._open(state, kind=_BEYOND_MAX if filler_beyond else _NEW)
        return self._open(state, kind=kind)


def _waste(profile: PodProfile, node: _Node, copies: int) -> float:
    fractions = []
    for name in ("cpu", "memory"):
        have = node.allocatable.get(name, 0)
        if have > 0:
            fractions.append(
                1 - (node.used.get(name, 0) + copies * profile.requests.get(name, 0)) / have
            )
    return sum(fractions) / len(fractions) if fractions else 0.0


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
        for profile in set(profiles):
            if profile.affinity or profile.anti_affinity or profile.spread:
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
    opened: dict[str, int] = {}
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
        wanted = {name: p.wanted_nodes for name, p in outcome.pools.items() if p.wanted_nodes}
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
    opened: Mapping[str, int],
) -> Outcome:
    simulation = _Simulation(nodes, pools, daemon_sets, opened)
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
        # A refusal stands while one class is placed (room only shrinks, counts only
        # grow), unless pod affinity can turn it, or a spread's smallest count rises: a
        # refusal made under a floor holds while the floor is no higher.
        monotone = not profile.affinity
        floors = cluster.spread_floors(profile)
        simple = not profile.has_pod_constraints
        rounds = _Rounds(cluster, profile) if _Rounds.applies(profile) else None
        cursor = 0
        done = 0
        while done < len(members):
            if floors:
                now = cluster.spread_floors(profile)
                if any(n > f for n, f in zip(now, floors, strict=True)):
                    cursor = 0
                    if rounds is not None:
                        done = rounds.repeat(members, done, placements)
                        if done == len(members):
                            break
                        now = cluster.spread_floors(profile)
                    floors = now
                else:
                    floors = tuple(min(n, f) for n, f in zip(now, floors, strict=True))
            node = simulation.existing_fit(profile, cursor)
            if node is None:
                state, where, beyond = simulation.new_node(profile, len(members) - done)
                if state is None:
                    for member in members[done:]:
                        unfit[member] = str(where)
                    break
                assert isinstance(where, int)
                if beyond:
                    node = simulation.existing_fit(profile, 0, beyond_max=True)
                if node is None:
                    passed_over = simulation.passed_over
                    node = simulation.open_for(state, where, beyond=beyond)
                    if passed_over is not None:
                        simulation.passed_over_for[node.index] = passed_over
                if cluster.problem(profile, node) is not None:
                    for member in members[done:]:
                        unfit[member] = cluster.problem(profile, node) or ""
                    break
            if monotone:
                cursor = node.index
            copies = _copies(profile, node, len(members) - done) if simple else 1
            copies = max(1, copies)
            cluster.place(profile, node, copies, counted=True)
            for member in members[done : done + copies]:
                placements[member] = node.name
            done += copies
            if rounds is not None:
                rounds.went_to(node)
        cluster.retire(profile)
    return _outcome(simulation, placements, unfit)


class _Rounds:
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

    def __init__(self, cluster: _Cluster, profile: PodProfile) -> None:
        self.cluster = cluster
        self.profile = profile
        self.nodes: list[_Node] = []  # where each pod of the current round went
        # The state the current round began in; the class's first round begins with the
        # class, its search from the first node as after any rise of a smallest count.
        self.start: tuple[object, ...] | None = self._state()

    @staticmethod
    def applies(profile: PodProfile) -> bool:
        return bool(profile.spread) and not (
            profile.affinity or profile.anti_affinity or profile.ports
        )

    def went_to(self, node: _Node) -> None:
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


def _outcome(
    simulation: _Simulation, placements: list[str | None], unfit: dict[int, str]
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
        if node.kind == _NEW:
            triggering.setdefault(node.pool, []).append(index)
            preferred = simulation.passed_over_for.get(node.index)
            if preferred is not None:
                passed_over.setdefault(node.pool, []).append((index, preferred))
        elif node.kind == _BEYOND_MAX:
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
        )
        for name, state in simulation.pools.items()
    }
    return Outcome(pools=pools, placements=tuple(placements), unfit=unfit)


# -- one pod, every node and pool ---------------------------------------------------------


@dataclass(frozen=True)
class NodeAnswer:
    pool: str | None
    booting: bool  # requested and not Ready yet (a VM without a Node, or a Node booting)
    problem: str | None  # the first filter that refuses, None where the pod fits


@dataclass(frozen=True)
class Verdicts:
    """For one pod: each node's answer and each pool's, None where it fits. A problem is
    the first filter that refuses, in the order the scheduler runs them."""

    nodes: Mapping[str, NodeAnswer]  # existing and booting nodes
    pools: Mapping[str, str | None]  # the pool's next new node (any of its zones)


def verdicts(
    profile: PodProfile,
    *,
    nodes: Sequence[ExistingNode],
    pools: Sequence[PoolTemplate],
    daemon_sets: Sequence[DaemonSetView] = (),
    nominated: Sequence[tuple[PodProfile, str]] = (),
) -> Verdicts:
    """Judge ``profile`` against the cluster as it is, with the filters ``simulate`` uses
    and before any pending pod is placed: what ``nodepool-operator explain`` shows."""
    simulation = _Simulation(nodes, pools, daemon_sets, {})
    cluster = simulation.cluster
    by_name = {node.name: node for node in cluster.nodes}
    for other, node_name in nominated:
        if node_name in by_name:
            cluster.place(other, by_name[node_name], 1, counted=True)
    if profile.unsupported is not None:
        return Verdicts(
            nodes={
                node.name: NodeAnswer(node.pool, node.kind == _BOOTING, profile.unsupported)
                for node in cluster.nodes
            },
            pools={name: profile.unsupported for name in simulation.pools},
        )
    on_nodes = {
        node.name: NodeAnswer(node.pool, node.kind == _BOOTING, cluster.problem(profile, node))
        for node in cluster.nodes
    }
    on_pools: dict[str, str | None] = {}
    for name, state in simulation.pools.items():
        template = state.template
        if template.namespaces is not None and profile.namespace not in template.namespaces:
            on_pools[name] = f"its Autoscaler does not watch namespace {profile.namespace}"
            continue
        first: str | None = None
        for ahead in range(max(1, template.zones)):
            problem = cluster.problem(profile, simulation._candidate(state, ahead), candidate=True)
            if problem is None:
                first = None
                break
            first = first or problem
        on_pools[name] = first
    return Verdicts(nodes=on_nodes, pools=on_pools)
