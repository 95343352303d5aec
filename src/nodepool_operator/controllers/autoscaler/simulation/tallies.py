"""The counters pod affinity and topology spread read: matching pods per domain, kept up
to date as pods are placed rather than recounted for each pod judged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from nodepool_operator.controllers.autoscaler.constraints import (
    AffinityTerm,
    PodProfile,
    SpreadConstraint,
)
from nodepool_operator.controllers.autoscaler.simulation.rooms import SimNode

__all__ = ["Counts", "Feeds", "Spread", "TermIndex"]


class Counts:
    """How many pods matching one term sit in each domain of the term's topology key."""

    def __init__(self, topology_key: str) -> None:
        self.topology_key = topology_key
        self.total = 0
        self.by_domain: Counter[str] = Counter()

    def add(self, node: SimNode, count: int) -> None:
        self.total += count
        value = node.labels.get(self.topology_key)
        if value is not None:
            by_domain = self.by_domain  # ``get``, not ``+=``: no ``Counter.__missing__`` call
            by_domain[value] = by_domain.get(value, 0) + count


class Spread:
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
        self.low = 0  # the smallest count (read, never written, outside)
        # The smallest count was above zero once: a pod may have been judged against it
        # (one by one or a round repeated), where one more empty domain would have made it 0.
        self.rose_above_zero = False
        self._at_low = 0

    def add_domain(self, value: str) -> None:
        if value not in self.counts:
            self.add_domains((value,))

    def add_domains(self, values: Iterable[str]) -> None:
        """New, empty domains (values already counted are left as they are)."""
        self.add_empty_domains(dict.fromkeys(values, 0))

    def add_empty_domains(self, fresh: dict[str, int]) -> None:
        """``add_domains`` given the domains as a dict of zeros, which is only read: a
        static key's hostnames, kept for every spread that counts them."""
        counts = self.counts
        before = len(counts)
        # Often every node's hostname, one static key's nodes at a time: added at once
        # where none is counted yet (hostnames are new domains but for a node named twice).
        if counts.keys().isdisjoint(fresh):
            dict.update(counts, fresh)
        else:
            for value in fresh:
                if value not in counts:
                    counts[value] = 0
        added = len(counts) - before
        if not added:
            return
        if self.low == 0 and self._at_low:
            self._at_low += added
        else:
            self.low, self._at_low = 0, added

    def add(self, value: str, copies: int) -> None:
        before = self.counts.get(value)
        if before is None:
            self.add_domain(value)
            before = 0
        self.counts[value] = before + copies
        if before == self.low and copies:
            self._at_low -= 1
            if self._at_low == 0:
                self.low = min(self.counts.values())
                self._at_low = sum(1 for c in self.counts.values() if c == self.low)
                self.rose_above_zero = self.rose_above_zero or self.low > 0

    def minimum(self, extra_domain: str | None, min_domains: int) -> int:
        new = extra_domain is not None and extra_domain not in self.counts
        if len(self.counts) + new < min_domains:
            return 0
        return 0 if new else self.low


@dataclass(eq=False)
class Feeds:
    """What a placed pod of one profile must update: the counters whose terms match it."""

    counts: list[Counts] = field(default_factory=list)
    spreads: list[Spread] = field(default_factory=list)
    terms_seen: int = 0


class TermIndex:
    """Pod (anti-)affinity terms in the order first seen (the counted pods' anti-affinity
    terms, say), indexed by the label values their selector's first ``In`` requirement
    accepts: a pod's own labels name the only terms that may match it, so a class judged
    or counted for the first time reads those, not every term of every class before."""

    def __init__(self) -> None:
        self.terms: list[AffinityTerm] = []
        self._by_label: dict[tuple[str, str], list[int]] = {}
        self._unindexed: list[int] = []  # positions of terms without an ``In`` requirement

    def add(self, term: AffinityTerm) -> None:
        position = len(self.terms)
        self.terms.append(term)
        if term.selector is None:
            return  # matches no pod
        for key, operator, values in term.selector.requirements:
            if operator == "In":
                for value in values:
                    self._by_label.setdefault((key, value), []).append(position)
                return
        self._unindexed.append(position)

    def may_match(self, labels: Mapping[str, str], since: int) -> list[AffinityTerm]:
        """The terms from position ``since`` on that a pod with ``labels`` may match, in order."""
        if len(self.terms) - since <= 8:
            return self.terms[since:]
        positions = {p for p in self._unindexed if p >= since}
        for label in labels.items():
            positions.update(p for p in self._by_label.get(label, ()) if p >= since)
        return [self.terms[p] for p in sorted(positions)]
