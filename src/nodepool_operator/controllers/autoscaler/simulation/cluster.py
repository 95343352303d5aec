"""The simulated cluster's state: nodes added in order and grouped for the room search,
pods placed and counted for affinity and spread, node rules numbered once per profile.
The filters that read this state are in ``filters``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from nodepool_operator.controllers.autoscaler.constraints import (
    AffinityTerm,
    NodeTaint,
    PodProfile,
    Selector,
    SpreadConstraint,
    node_affinity_problem,
    terms_name_nodes,
    untolerated,
)
from nodepool_operator.controllers.autoscaler.simulation.model import (
    HOSTNAME_LABEL,
    ZONE_LABEL,
    DaemonSetView,
)
from nodepool_operator.controllers.autoscaler.simulation.rooms import (
    Group,
    NodeShape,
    SimNode,
    selector_labels,
)
from nodepool_operator.controllers.autoscaler.simulation.tallies import (
    Counts,
    Feeds,
    Spread,
    TermIndex,
)

__all__ = ["ClusterState"]


class ClusterState:
    """The simulated cluster: its nodes, grouped by their static rules, and the pods
    counted on them for affinity and spread. The filters are in ``filters.SimulatedCluster``."""

    def __init__(
        self, daemon_sets: Sequence[DaemonSetView], scale: tuple[int, int], *, counting: bool
    ) -> None:
        self.nodes: list[SimNode] = []
        # Whether any pod in the simulation has pod (anti-)affinity or spread: without one,
        # nothing ever reads where pods are, so placing a pod only takes its room.
        self.counting = counting
        self.scale = scale  # weights of cpu and memory (MiB) in a room tree's balance
        # One room tree per group of nodes that agree on everything static but their name
        # (a pool's zone, say): a pod skips a whole group its selectors or taints refuse.
        self.groups: dict[tuple[object, ...], Group] = {}
        # The groups by each label their nodes share: a pod whose nodeSelector names a
        # label (a pool's, say) looks only at the groups that carry it.
        self._groups_by_label: dict[tuple[str, str], list[Group]] = {}
        # Node rules numbered once per profile: every static verdict, and which groups a
        # pod may use, is shared by the pods with equal rules, whatever their size.
        self._rules_ids: dict[tuple[object, ...], int] = {}
        self._rules_of: dict[PodProfile, int] = {}
        # The profile asked for last, its rules and their number: a class asks again and
        # again, and a profile's hash is a call (the filters ask for every node a pod is
        # judged on); the next class most often has equal rules (classes of one pod each,
        # with no node rules at all), found by comparing them, not by a lookup.
        self._last_rules_of: PodProfile | None = None
        self._last_rules: tuple[object, ...] | None = None
        self._last_rules_id = -1
        self._pinned: dict[int, bool] = {}
        self._usable: dict[int, tuple[int, list[Group], list[bool]]] = {}
        self._kinds_seen = 0  # node kinds across all groups: the usable lists' version
        self.daemon_sets = daemon_sets
        self._terms: dict[AffinityTerm, Counts] = {}
        self._term_match: dict[tuple[AffinityTerm, PodProfile], bool] = {}
        self._anti_owners: dict[AffinityTerm, Counts] = {}
        self._spreads: dict[tuple[SpreadConstraint, PodProfile], Spread] = {}
        self._spreads_by_profile: dict[PodProfile, list[tuple[SpreadConstraint, Spread, int]]] = {}
        # The profile whose spreads were asked for last, and them (``spreads_of``).
        self._last_spreads: tuple[PodProfile | None, list[tuple[SpreadConstraint, Spread, int]]]
        self._last_spreads = (None, [])
        self._static: dict[tuple[int, int], str | None] = {}  # by rules and static id
        # Per profile: the term counters and spreads a pod of it counts in, and how many of
        # each were looked at (both only grow, so only the new ones are checked again).
        self._feeds: dict[PodProfile, Feeds] = {}
        # The profile counted last, with its ``_where`` and ``_feeds`` (both kept, only
        # updated in place): a profile's hash is a call, and a class counts pod after pod.
        self._last_counted: tuple[PodProfile | None, Counter[int] | None, Feeds | None] = (
            None,
            None,
            None,
        )
        self._term_index = TermIndex()  # the terms counted (``_terms``), in order
        # The spreads of the classes not placed yet: the only ones a new node must join.
        self._live_spreads: list[Spread] = []
        self.spreads_made: list[Spread] = []  # and of those placed, in the order made
        self._anti_terms = TermIndex()
        self._hits: dict[PodProfile, tuple[int, list[AffinityTerm]]] = {}
        # Where the counted pods of each profile are: a new term or spread counts its
        # matches from the profiles it matches, not from every pod of every node.
        self._where: dict[PodProfile, Counter[int]] = {}
        # The counted profiles by each of their labels: a selector asking for a label value
        # reads only the profiles that carry it, not every class placed before.
        self._placed_by_label: dict[tuple[str, str], list[PodProfile]] = {}
        self._static_ids: dict[tuple[object, ...], int] = {}
        # The last node shape made per pool and zone (``make_node``).
        self._shapes: dict[tuple[str | None, str | None], NodeShape] = {}
        self._by_static: dict[int, list[int]] = {}  # indexes of the added nodes, per static id
        # And their hostnames, each a domain with no pod yet: every spread over hostnames
        # made later starts from these (a dict copied, not built for each).
        self._hostnames: dict[int, dict[str, int]] = {}
        self._group_of_static: dict[int, Group] = {}
        # Nodes whose room changed since the room trees were last read: a node opened, given
        # its DaemonSet pods and filled before the next search is written to its tree once.
        self._stale: list[SimNode] = []

    # -- building --------------------------------------------------------------------

    def add_node(self, node: SimNode) -> SimNode:
        """Add ``node``, made by ``make_node`` just before (its index is its place)."""
        if node.index != len(self.nodes):
            raise ValueError(f"node {node.name} was made for another place in the cluster")
        self.nodes.append(node)
        static_id = node.static_id
        alike = self._by_static.get(static_id)  # ``get``: no list or dict made per node
        if alike is None:
            alike = self._by_static[static_id] = []
            self._hostnames[static_id] = {}
        alike.append(node.index)
        hostname = node.labels.get(HOSTNAME_LABEL)
        if hostname is not None:
            self._hostnames[static_id].setdefault(hostname, 0)
        # By static id first: a key is a deep tuple, hashed anew at every lookup.
        group = self._group_of_static.get(node.static_id)
        if group is None:
            group = self.groups.get(node.group_key)
            if group is None:
                group = self.groups[node.group_key] = Group(self.scale)
                for label in node.shared_labels:
                    self._groups_by_label.setdefault(label, []).append(group)
            self._group_of_static[node.static_id] = group
        kinds = len(group.kinds)
        node.tree = group.tree
        node.slot = group.add(node)
        self._kinds_seen += len(group.kinds) - kinds
        self._mark_stale(node)
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
        taints: tuple[NodeTaint, ...],
        unschedulable: bool,
        allocatable: Mapping[str, int],
        kind: str,
    ) -> SimNode:
        """The next node of the cluster, not added yet (``add_node`` adds it)."""
        node = SimNode(
            len(self.nodes), name, pool, labels, taints, unschedulable, allocatable, kind
        )
        rest = dict(labels)
        rest.pop(HOSTNAME_LABEL, None)
        # A pool's nodes in one zone differ by their name only: their keys (sorted labels,
        # taints) are worked out and hashed once, for the first of them.
        where = (pool, rest.get(ZONE_LABEL))
        shape = self._shapes.get(where)
        if shape is None or not shape.fits(rest, taints, unschedulable):
            shape = self._shapes[where] = NodeShape(rest, taints, unschedulable)
            # The caches of static verdicts are keyed by the static key's number: hashing
            # the key itself (labels and taints) at every lookup is what would cost.
            shape.static_id = self._static_ids.setdefault(shape.static_key, len(self._static_ids))
        node.shape_as(shape)
        return node

    def _mark_stale(self, node: SimNode) -> None:
        if not node.stale:
            node.stale = True
            self._stale.append(node)

    def refresh_rooms(self) -> None:
        """Write the room of the nodes changed since the last search to their trees."""
        for node in self._stale:
            node.stale = False
            if node.unschedulable:
                room = (-1, -1, -1)  # never searched; tolerating pods are rare and go new
            else:
                # ``MAIN_RESOURCES``, written out: this runs for every node changed.
                have, used = node.allocatable, node.used
                cpu = have.get("cpu", 0) - used.get("cpu", 0)
                memory = have.get("memory", 0) - used.get("memory", 0)
                pods = have.get("pods", 0) - used.get("pods", 0)
                room = (
                    cpu if cpu > -1 else -1,
                    memory if memory > -1 else -1,
                    pods if pods > -1 else -1,
                )
            node.tree.set(node.slot, room)
        self._stale.clear()

    def place(self, profile: PodProfile, node: SimNode, copies: int, *, counted: bool) -> None:
        """Put ``copies`` pods of ``profile`` on ``node``; ``counted`` for spread and affinity."""
        node.charge(profile, copies)
        if counted and self.counting:
            self._count(profile, node, copies)
        self._mark_stale(node)

    def count_in(self, profile: PodProfile, node: SimNode, copies: int) -> None:
        """Count ``copies`` pods of ``profile``, already charged to ``node``, for spread and
        affinity."""
        if self.counting:
            self._count(profile, node, copies)

    def _count(self, profile: PodProfile, node: SimNode, copies: int) -> None:
        last, where, feeds = self._last_counted
        if profile is not last:  # a class counts pod after pod: its two lookups kept
            where = self._where.get(profile)
            if where is None:
                where = self._where[profile] = Counter()
                for label in profile.labels.items():
                    self._placed_by_label.setdefault(label, []).append(profile)
            feeds = self._feeds.get(profile)
        assert where is not None
        where[node.index] = where.get(node.index, 0) + copies
        if feeds is None or feeds.terms_seen < len(self._term_index.terms):
            feeds = self._feeds_of(profile)
        self._last_counted = (profile, where, feeds)
        for counts in feeds.counts:
            counts.add(node, copies)
        for term in profile.anti_affinity:
            owners = self._anti_owners.get(term)
            if owners is None:
                owners = self._anti_owners[term] = Counts(term.topology_key)
                self._anti_terms.add(term)
            owners.add(node, copies)
        for spread in feeds.spreads:
            if spread.retired:
                continue
            value = node.labels.get(spread.constraint.topology_key)
            if value is None:
                continue
            counted = None if spread.pinned else spread.eligible_by_key.get(node.static_id)
            if counted or (counted is None and self._counted_at(spread, node)):
                spread.add(value, copies)

    def _feeds_of(self, profile: PodProfile) -> Feeds:
        feeds = self._feeds.get(profile)
        if feeds is None:
            # A spread made later joins the feeds of the profiles it counts (``_spread``).
            feeds = self._feeds[profile] = Feeds()
            if self._live_spreads:
                feeds.spreads = [
                    spread
                    for spread in self._live_spreads
                    if self._spread_counts(spread.constraint, spread.owner, profile)
                ]
        index = self._term_index
        if feeds.terms_seen < len(index.terms):
            for term in index.may_match(profile.labels, feeds.terms_seen):
                if self._matches(term, profile):
                    feeds.counts.append(self._terms[term])
            feeds.terms_seen = len(index.terms)
        return feeds

    def _anti_hits(self, profile: PodProfile) -> list[AffinityTerm]:
        """The running pods' anti-affinity terms that match ``profile``."""
        found = self._hits.get(profile)  # no default made: this runs for every node judged
        seen, hits = (0, []) if found is None else found
        count = len(self._anti_terms.terms)
        if seen == count:
            return hits
        for term in self._anti_terms.may_match(profile.labels, seen):
            if self._matches(term, profile):
                hits = [*hits, term]
        self._hits[profile] = (count, hits)
        return hits

    # -- matching ---------------------------------------------------------------------

    @property
    def anti_affinity_counted(self) -> bool:
        """Whether a counted pod has anti-affinity (its terms may refuse any pod)."""
        return bool(self._anti_terms.terms)

    def counted_terms(self) -> list[AffinityTerm]:
        """The pod affinity and anti-affinity terms judged so far (their counters kept)."""
        return list(self._term_index.terms)

    def term_matches(self, term: AffinityTerm, profile: PodProfile) -> bool:
        return self._matches(term, profile)

    def spread_counts(
        self, constraint: SpreadConstraint, owner: PodProfile, other: PodProfile
    ) -> bool:
        """Whether pods of ``other`` count in the spread ``constraint`` of ``owner``."""
        return self._spread_counts(constraint, owner, other)

    def judge_spread_eligible(
        self, constraint: SpreadConstraint, profile: PodProfile, node: SimNode
    ) -> bool:
        """Whether the node's domain counts in the pod's spread (not cached)."""
        return self._judge_spread_eligible(constraint, profile, node)

    def _matches(self, term: AffinityTerm, profile: PodProfile) -> bool:
        key = (term, profile)
        found = self._term_match.get(key)
        if found is None:
            found = self._term_match[key] = term.matches(profile.namespace, profile.labels)
        return found

    def _counts(self, term: AffinityTerm) -> Counts:
        counts = self._terms.get(term)
        if counts is None:
            counts = self._terms[term] = Counts(term.topology_key)
            self._term_index.add(term)
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

    def _spread_eligible(self, spread: Spread, node: SimNode) -> bool:
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

    def _counted_at(self, spread: Spread, node: SimNode) -> bool:
        """Whether pods on the (added) node count in the spread."""
        if spread.pinned:
            return node.index in spread.eligible
        return self._spread_eligible(spread, node)

    def _judge_spread_eligible(
        self, constraint: SpreadConstraint, profile: PodProfile, node: SimNode
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

    def rules_id(self, profile: PodProfile) -> int:
        """The number of the profile's node rules (equal rules, equal number)."""
        if profile is self._last_rules_of:
            return self._last_rules_id
        self._last_rules_of = profile
        if profile.node_rules == self._last_rules:
            return self._last_rules_id
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
        self._last_rules, self._last_rules_id = profile.node_rules, found
        return found

    def groups_for(self, profile: PodProfile) -> Iterable[Group]:
        """The groups whose nodes carry every label the pod's nodeSelector names outside
        topology (fewer than all groups only then): the others refuse it statically."""
        labels = selector_labels(profile)
        if not labels:
            return self.groups.values()
        by_label = self._groups_by_label
        return min((by_label.get(label, []) for label in labels), key=len)

    def pinned(self, profile: PodProfile) -> bool:
        """Whether the pod's node rules name nodes one by one (so groups do not decide)."""
        return self._pinned[self.rules_id(profile)]
