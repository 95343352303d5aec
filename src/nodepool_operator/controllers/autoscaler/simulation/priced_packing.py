"""Cost-aware packing: pending pods onto new nodes, each node's offering chosen so that the
nodes added cost as little per hour as we can find, over every pool and type the pods allow.

The input is what the simulation knows once the filters have run: pods grouped into
demands (equal requests and equal allowed offerings, with a count), and the priced
offerings (pool, instance type, zone, capacity type, price per hour, allocatable per
resource, the pool's weight and how many nodes it may still add).

The algorithm (``plan_cheapest``) runs three packings and keeps the cheapest plan (then
the one with fewer nodes, then the first):

* **price per worth** (``RATIO``). Every pod has a *worth*: what its dominant resource
  costs at the cheapest unit price among the offerings it may use
  (``max(need.r * min(price / allocatable.r))``). Pods are taken largest worth first
  (first-fit decreasing). For the largest pod left, each offering that holds it is judged
  by its price over the worth it would be filled with: the pod's own, plus the share of
  the pods left (of every group that may use it) that fits its room on the resource that
  binds first; the ``SHORTLIST`` offerings best by that measure for the pods left alone
  are judged (all that hold the pod when none of those does). The lowest price per worth
  opens the node; within ``NEAR`` of it, the higher pool weight, then the larger node
  (fewer nodes for the same price), then the order given. It is filled first-fit
  decreasing from every group that may use it, and then *right-sized*: the node gets the
  cheapest offering that every pod on it allows and that holds them all (ties: higher
  weight, then least waste, then the order given).
* **matched shapes** (``MATCHED``): the same, with each pod allowed only the shapes
  (memory per cpu, to half a power of two: a family) whose price for its dominant
  resource is within ``SHAPE_SLACK`` of its best shape's, so cpu-heavy and memory-heavy
  pods do not share a node that wastes one of the two (worth and order as above;
  right-sizing still looks at every offering the pods allow).
* **largest, then cheapest** (``LARGEST``), Karpenter's way: each node opens as the
  largest offering the pod may use, is filled first-fit decreasing, and is then
  right-sized the same way.

So the plan never costs more than Karpenter's rule packed node by node (``LARGEST``);
Karpenter itself first-fits every pod over all the nodes it opened in the round, which
the tests compare against too (``tests/priced_mixes.karpenter``). Where the pods' mix fits
one type's shape better than the largest's, the other two fill nodes of that type. The
lower bound the plans are measured against is ``price_bound.price_lower_bound``;
docs/autoscaling.md states both and the measured ratio.

Filling a node looks at each group's pods from the largest down until ``LOOKAHEAD`` in a
row do not fit, then from the smallest up (a third as many), so the time of a plan is
``O(nodes * (offerings + groups * LOOKAHEAD) + pods)``, not ``O(nodes * pods)``. Equal
pods are taken together (as many as the room holds at once).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

__all__ = [
    "LARGEST",
    "LOOKAHEAD",
    "MATCHED",
    "RATIO",
    "SHAPE_SLACK",
    "SHORTLIST",
    "PackingPlan",
    "PlannedNode",
    "PodDemand",
    "PricedCandidate",
    "pack",
    "plan_cheapest",
]

RATIO: Final = "price-per-worth"
MATCHED: Final = "matched-shapes"
#: How much dearer than its best-suited shape a pod's node may be under ``MATCHED``.
SHAPE_SLACK: Final = 0.15
LARGEST: Final = "largest-then-cheapest"
#: Candidates judged for each node opened (``_Packer._shortlist``).
SHORTLIST: Final = 6
#: Pods in a row that do not fit before a node's fill stops looking from the largest end
#: (from the smallest end, a third of it: those are the pods that fit most easily).
LOOKAHEAD: Final = 18
_END: Final = -1
_TIE: Final = 1e-9
#: Prices per worth this close (relative) are equal when a node opens: then the larger
#: node, which takes more of the pods left (fewer nodes to launch, fewer DaemonSet pods).
NEAR: Final = 0.01


@dataclass(frozen=True)
class PricedCandidate:
    """One offering a new node may be made of, in one pool."""

    pool: str
    instance_type: str
    zone: str | None
    capacity_type: str
    price: float  # per hour
    allocatable: Mapping[str, int]  # cpu in millicores, memory in bytes, "pods" slots...
    weight: int = 0  # the pool's
    #: How many nodes the pool may still add (``maxNodes`` less its target); None: no cap.
    headroom: int | None = None
    #: What a node of it counts against its pool's ``limits`` (the VM's capacity, by
    #: resource), and how much of that the pool may still add (None: no limit). A node that
    #: would go beyond is never opened, as a pool at ``maxNodes``.
    capacity: Mapping[str, int] | None = None
    limits_left: Mapping[str, int] | None = None


@dataclass(frozen=True)
class PodDemand:
    """``count`` equal pods: their requests and the candidates (indices) they allow."""

    requests: Mapping[str, int]
    allowed: frozenset[int]
    count: int = 1


@dataclass(frozen=True)
class PlannedNode:
    candidate: int  # index into the candidates
    pods: tuple[tuple[int, int], ...]  # (demand index, how many of its pods)


@dataclass(frozen=True)
class PackingPlan:
    nodes: tuple[PlannedNode, ...]
    price: float  # per hour, of every node
    #: Pods no offering they allow could take (none holds them, or their pools are full),
    #: per demand index.
    unplaced: Mapping[int, int]
    strategy: str


def plan_cheapest(
    demands: Sequence[PodDemand], candidates: Sequence[PricedCandidate]
) -> PackingPlan:
    """The cheapest of the packings (module docstring): fewer pods unplaced first, then
    the lower price, then fewer nodes, then the order price per worth, matched shapes,
    largest then cheapest."""
    ratio = _Packer(demands, candidates, RATIO)
    largest = ratio.fresh(LARGEST)  # the same groups and order, worked out once
    matched = ratio.regrouped(MATCHED, _matched(ratio))
    plans = [ratio.run(), matched.run(), largest.run()]
    return min(
        plans,
        key=lambda plan: (sum(plan.unplaced.values()), round(plan.price, 9), len(plan.nodes)),
    )


def pack(
    demands: Sequence[PodDemand], candidates: Sequence[PricedCandidate], strategy: str
) -> PackingPlan:
    """Every pod of ``demands`` on new nodes of ``candidates``, by ``strategy``."""
    packer = _Packer(demands, candidates, strategy)
    if strategy == MATCHED:
        packer = packer.regrouped(MATCHED, _matched(packer))
    return packer.run()


def _shape(candidate: PricedCandidate) -> float | None:
    """A candidate's shape: its memory per cpu, to half a power of two (a family: ``c``,
    ``m``, ``r``); None without both."""
    cpu, memory = candidate.allocatable.get("cpu", 0), candidate.allocatable.get("memory", 0)
    if cpu <= 0 or memory <= 0:
        return None
    return round(2 * math.log2(memory / cpu)) / 2


def _matched(packer: _Packer) -> list[frozenset[int]]:
    """Each demand's allowed set cut to the shapes that suit it: those whose price for its
    dominant resource (``max(need.r * price / allocatable.r)`` at the shape's cheapest unit
    prices) is within ``SHAPE_SLACK`` of its best shape's, among shapes one of whose
    candidates holds it. Pods of a memory-heavy mix then fill memory-cheap nodes and
    cpu-heavy pods cpu-cheap ones, instead of sharing a node that wastes one of the two."""
    candidates, resources = packer.candidates, packer.resources
    families_of: dict[frozenset[int], list[_Family]] = {}
    allowed_of: dict[tuple[frozenset[int], tuple[int, ...]], frozenset[int]] = {}
    found: list[frozenset[int]] = []
    for need, allowed in zip(packer.need, packer.allowed, strict=True):
        families = families_of.get(allowed)
        if families is None:
            families = _families(allowed, candidates, resources)
            families_of[allowed] = families
        # Loops written out: this runs once per demand, tens of thousands of times.
        costs: list[tuple[float, int]] = []
        best = math.inf
        for index, family in enumerate(families):
            for have in family.largest:
                if _holds(have, need):
                    break
            else:
                continue
            cost = 0.0
            for n, u in zip(need, family.unit, strict=True):
                if n and n * u > cost:
                    cost = n * u
            costs.append((cost, index))
            best = min(best, cost)
        if not costs:
            found.append(allowed)
            continue
        chosen = tuple(index for cost, index in costs if cost <= best * (1 + SHAPE_SLACK))
        key = (allowed, chosen)
        cut = allowed_of.get(key)
        if cut is None:
            cut = frozenset().union(*(families[i].members for i in chosen))
            allowed_of[key] = cut
        found.append(cut)
    return found


@dataclass(frozen=True)
class _Family:
    members: frozenset[int]  # candidate indices
    unit: tuple[float, ...]  # the cheapest price per unit of each resource
    largest: tuple[tuple[int, ...], ...]  # the allocatables no other member's exceeds


def _families(
    allowed: frozenset[int], candidates: Sequence[PricedCandidate], resources: Sequence[str]
) -> list[_Family]:
    members: dict[float, list[int]] = {}
    for c in sorted(allowed):
        if 0 <= c < len(candidates):
            shape = _shape(candidates[c])
            members.setdefault(shape if shape is not None else -c - 1.5, []).append(c)
    found = []
    for indices in members.values():
        allocs = {tuple(candidates[c].allocatable.get(r, 0) for r in resources) for c in indices}
        largest = tuple(
            have
            for have in sorted(allocs)
            if not any(other != have and _holds(other, have) for other in allocs)
        )
        unit = tuple(
            min(
                (
                    candidates[c].price / candidates[c].allocatable[r]
                    for c in indices
                    if candidates[c].allocatable.get(r, 0) > 0
                ),
                default=math.inf,
            )
            for r in resources
        )
        found.append(_Family(frozenset(indices), unit, largest))
    return found


class _Packer:
    """One packing's state: the demands and candidates as vectors over ``resources``, the
    demands grouped by allowed set, and what is left to place."""

    def __init__(
        self, demands: Sequence[PodDemand], candidates: Sequence[PricedCandidate], strategy: str
    ) -> None:
        self.strategy = strategy
        self.candidates = candidates
        self.resources = sorted(
            {name for c in candidates for name in c.allocatable}
            | {name for d in demands for name, amount in d.requests.items() if amount > 0}
        )
        self.alloc = [tuple(c.allocatable.get(r, 0) for r in self.resources) for c in candidates]
        self.need = [tuple(d.requests.get(r, 0) for r in self.resources) for d in demands]
        self.left = [max(0, d.count) for d in demands]
        self.headroom: dict[str, int | None] = {}
        for c in candidates:
            known = self.headroom.get(c.pool, c.headroom)
            self.headroom[c.pool] = (
                c.headroom if known is None or c.headroom is None else min(known, c.headroom)
            )
        # Per pool with limits: what it may still add, by resource (shared by its candidates).
        self.limits_left: dict[str, dict[str, int]] = {
            c.pool: dict(c.limits_left) for c in candidates if c.limits_left is not None
        }
        self.unplaced: dict[int, int] = {}
        self.nothing = (0,) * len(self.resources)
        self.shortlists: dict[int, tuple[float, list[int]]] = {}
        self.counts = list(self.left)
        self.allowed = [d.allowed for d in demands]
        self.given_allowed = list(self.allowed)
        self.worth: list[float] = []
        self.worth_order: list[int] | None = None
        self.right_sizes: dict[frozenset[frozenset[int]], list[int]] = {}
        self._group()

    def regrouped(self, strategy: str, allowed: Sequence[frozenset[int]]) -> _Packer:
        """A packer of the same demands allowed ``allowed`` instead, before either has
        run (the vectors are shared)."""
        other = copy.copy(self)
        other.strategy = strategy
        other.allowed = list(allowed)
        other.left = list(self.counts)
        other.unplaced = {}
        other.headroom = dict(self.headroom)
        other.limits_left = {pool: dict(left) for pool, left in self.limits_left.items()}
        other.shortlists = {}
        other._group()
        return other

    def _group(self) -> None:
        """Demands by allowed set (a group), each group's candidates (those no other of
        the group beats: as large in every resource, cheaper), its worth order and totals."""
        # The demands are walked largest worth first, so each group's members come out in
        # that order; regrouped, they keep the worth and order the first grouping gave them.
        if self.worth_order is None:
            self.worth_order = self._by_worth()
        by_allowed: dict[frozenset[int], list[int]] = {}
        for index in self.worth_order:
            if self.left[index]:
                by_allowed.setdefault(self.allowed[index], []).append(index)
        width = len(self.resources)
        self.group_allowed: list[frozenset[int]] = []
        self.group_candidates: list[list[int]] = []
        self.largest_first: list[list[int]] = []
        self.order: list[list[int]] = []
        self.next: list[list[int]] = []
        self.prev: list[list[int]] = []
        self.head: list[int] = []
        self.tail: list[int] = []
        self.floor: list[tuple[int, ...]] = []
        self.totals: list[list[int]] = []
        self.worth_total: list[float] = []
        # Per demand (lists, not dictionaries: read once per pod placed).
        self.group_of: list[int] = [-1] * len(self.allowed)
        self.positions: list[int] = [-1] * len(self.allowed)
        self.groups_of_candidate: dict[int, list[int]] = {}
        for allowed, members in by_allowed.items():
            usable = _undominated(
                [c for c in sorted(allowed) if 0 <= c < len(self.candidates)],
                self.alloc,
                self.candidates,
            )
            fitting: list[int] = []
            largest = _maximal({self.alloc[c] for c in usable})
            worth = self.worth
            for d in members:
                need = self.need[d]
                if any(_holds(have, need) for have in largest):
                    fitting.append(d)
                else:
                    self.unplaced[d] = self.left[d]
                    self.left[d] = 0
            if not fitting:
                continue
            group = len(self.group_allowed)
            self.group_allowed.append(allowed)
            self.group_candidates.append(usable)
            self.largest_first.append(
                sorted(usable, key=lambda c: (self.alloc[c], -self.candidates[c].price, -c))[::-1]
            )
            self.order.append(fitting)
            size = len(fitting)
            self.next.append([i + 1 if i + 1 < size else _END for i in range(size)])
            self.prev.append([i - 1 for i in range(size)])
            self.head.append(0)
            self.tail.append(size - 1)
            self.floor.append(tuple(min(self.need[d][r] for d in fitting) for r in range(width)))
            totals = [0] * width
            worth_total = 0.0
            for d in fitting:
                count = self.left[d]
                worth_total += worth[d] * count
                for r, amount in enumerate(self.need[d]):
                    totals[r] += amount * count
            self.totals.append(totals)
            self.worth_total.append(worth_total)
            for position, d in enumerate(fitting):
                self.group_of[d] = group
                self.positions[d] = position
            for c in allowed:
                self.groups_of_candidate.setdefault(c, []).append(group)

    def _by_worth(self) -> list[int]:
        """Every demand's worth (at the cheapest unit prices of the offerings it allows),
        and the demands largest worth first (then in the order given)."""
        width = len(self.resources)
        units: dict[frozenset[int], list[float]] = {}
        self.worth = [0.0] * len(self.allowed)
        for d, allowed in enumerate(self.allowed):
            unit = units.get(allowed)
            if unit is None:
                usable = [c for c in allowed if 0 <= c < len(self.candidates)]
                unit = [
                    min(
                        (
                            self.candidates[c].price / self.alloc[c][r]
                            for c in usable
                            if self.alloc[c][r] > 0
                        ),
                        default=0.0,
                    )
                    for r in range(width)
                ]
                units[allowed] = unit
            worth = 0.0
            for n, u in zip(self.need[d], unit, strict=True):
                if n * u > worth:
                    worth = n * u
            self.worth[d] = worth
        order = list(range(len(self.allowed)))
        order.sort(key=self.worth.__getitem__, reverse=True)  # stable: ties keep their order
        return order

    def fresh(self, strategy: str) -> _Packer:
        """A packer of the same demands by ``strategy``, before either has run: the
        groups, worths and order are shared, what a run changes is copied."""
        other = copy.copy(self)
        other.strategy = strategy
        other.left = list(self.left)
        other.unplaced = dict(self.unplaced)
        other.headroom = dict(self.headroom)
        other.limits_left = {pool: dict(left) for pool, left in self.limits_left.items()}
        other.next = [list(links) for links in self.next]
        other.prev = [list(links) for links in self.prev]
        other.head = list(self.head)
        other.tail = list(self.tail)
        other.totals = [list(totals) for totals in self.totals]
        other.worth_total = list(self.worth_total)
        other.shortlists = {}
        return other

    def run(self) -> PackingPlan:
        nodes: list[PlannedNode] = []
        price = 0.0
        while True:
            driver = self._largest_left()
            if driver is None:
                break
            group = self.group_of[driver]
            opened = self._open(driver, group)
            if opened is None:
                self._give_up(group)
                continue
            placed, used = self._fill(opened, driver)
            chosen = self._right_size(placed, used, opened)
            pool = self.candidates[chosen].pool
            if self.headroom.get(pool) is not None:
                self.headroom[pool] = (self.headroom[pool] or 0) - 1
            left = self.limits_left.get(pool)
            if left is not None:
                for name, amount in (self.candidates[chosen].capacity or {}).items():
                    if name in left:
                        left[name] -= amount
            price += self.candidates[chosen].price
            nodes.append(PlannedNode(chosen, tuple(sorted(placed.items()))))
        return PackingPlan(tuple(nodes), price, dict(sorted(self.unplaced.items())), self.strategy)

    def _largest_left(self) -> int | None:
        best: int | None = None
        for group, head in enumerate(self.head):
            if head == _END:
                continue
            d = self.order[group][head]
            if best is None or self.worth[d] > self.worth[best]:
                best = d
        return best

    def _open(self, driver: int, group: int) -> int | None:
        """The candidate a node for ``driver`` opens as, or None: none may grow."""
        need = self.need[driver]
        if self.strategy == LARGEST:
            for c in self.largest_first[group]:
                if _holds(self.alloc[c], need) and self._may_grow(c):
                    return c
            return None
        listed = [
            c for c in self._shortlist(group) if _holds(self.alloc[c], need) and self._may_grow(c)
        ]
        if not listed:
            listed = [
                c
                for c in self.group_candidates[group]
                if _holds(self.alloc[c], need) and self._may_grow(c)
            ]
        best: tuple[float, int, float, int] | None = None
        chosen = None
        for c in listed:
            rank = (
                self._price_per_worth(c, driver),
                -self.candidates[c].weight,
                -_size(self.alloc[c], self.alloc[listed[0]]),
                c,
            )
            if best is None or _better(rank, best, tie=NEAR):
                best, chosen = rank, c
        return chosen

    def _shortlist(self, group: int) -> list[int]:
        """The ``SHORTLIST`` candidates of the group cheapest per worth were a node filled
        with the pods left alone (no driver), made again once the pods left are worth a
        tenth less: while many pods are left, the node's first pod changes little, and
        judging every candidate for every node is most of a plan's time."""
        worth = self.worth_total[group]
        kept = self.shortlists.get(group)
        if kept is not None and worth >= kept[0] * 0.9 and worth > 0:
            return kept[1]
        ranked = sorted(
            (c for c in self.group_candidates[group] if self._may_grow(c)),
            key=lambda c: (self._price_per_worth(c, None), -self.candidates[c].weight, c),
        )
        listed = ranked[:SHORTLIST]
        self.shortlists[group] = (worth, listed)
        return listed

    def _price_per_worth(self, candidate: int, driver: int | None) -> float:
        alloc = self.alloc[candidate]
        need = self.need[driver] if driver is not None else self.nothing
        driver_worth = self.worth[driver] if driver is not None else 0.0
        groups = self.groups_of_candidate.get(candidate, ())
        fraction = 1.0
        for r, have in enumerate(alloc):
            room = have - need[r]
            demand = sum(self.totals[g][r] for g in groups) - need[r]
            if demand > 0:
                fraction = min(fraction, room / demand)
        worth = sum(self.worth_total[g] for g in groups) - driver_worth
        filled = driver_worth + max(0.0, fraction) * max(0.0, worth)
        return self.candidates[candidate].price / filled if filled > 0 else float("inf")

    def _may_grow(self, candidate: int) -> bool:
        pool = self.candidates[candidate].pool
        room = self.headroom.get(pool)
        if self.limits_left and pool in self.limits_left:  # only a pool with limits
            capacity = self.candidates[candidate].capacity or {}
            if any(capacity.get(r, 0) > left for r, left in self.limits_left[pool].items()):
                return False
        return room is None or room > 0

    def _fill(self, candidate: int, driver: int) -> tuple[dict[int, int], list[int]]:
        room = list(self.alloc[candidate])
        placed: dict[int, int] = {}
        self._take(driver, 1, room, placed)
        first = self.group_of[driver]
        groups = [first] + [g for g in self.groups_of_candidate.get(candidate, ()) if g != first]
        for group in groups:
            if not _holds(room, self.floor[group]):
                continue
            self._scan(group, room, placed, forward=True)
            self._scan(group, room, placed, forward=False)
        used = [have - free for have, free in zip(self.alloc[candidate], room, strict=True)]
        return placed, used

    def _scan(self, group: int, room: list[int], placed: dict[int, int], *, forward: bool) -> None:
        order = self.order[group]
        step = self.next[group] if forward else self.prev[group]
        position = self.head[group] if forward else self.tail[group]
        misses = 0
        left, needs, worth, totals = self.left, self.need, self.worth, self.totals[group]
        patience = LOOKAHEAD if forward else LOOKAHEAD // 3
        while position != _END and misses < patience:
            following = step[position]
            d = order[position]
            count = left[d]
            for amount, free in zip(needs[d], room, strict=True):
                if amount:
                    fits = free // amount
                    if fits < count:
                        count = fits
                        if not count:
                            break
            if count:
                # ``_take``, inlined: this loop runs once per pod placed.
                for r, amount in enumerate(needs[d]):
                    if amount:
                        room[r] -= amount * count
                        totals[r] -= amount * count
                self.worth_total[group] -= worth[d] * count
                placed[d] = placed.get(d, 0) + count
                left[d] -= count
                if not left[d]:
                    self._unlink(group, position)
                misses = 0
            else:
                misses += 1
            position = following

    def _take(self, d: int, count: int, room: list[int], placed: dict[int, int]) -> None:
        group = self.group_of[d]
        need = self.need[d]
        totals = self.totals[group]
        for r, amount in enumerate(need):
            room[r] -= amount * count
            totals[r] -= amount * count
        self.worth_total[group] -= self.worth[d] * count
        placed[d] = placed.get(d, 0) + count
        self.left[d] -= count
        if not self.left[d]:
            self._unlink(group, self.positions[d])

    def _unlink(self, group: int, position: int) -> None:
        after, before = self.next[group][position], self.prev[group][position]
        if before == _END:
            self.head[group] = after
        else:
            self.next[group][before] = after
        if after == _END:
            self.tail[group] = before
        else:
            self.prev[group][after] = before

    def _give_up(self, group: int) -> None:
        """No candidate of the group that holds its largest pod may grow: that pod stays
        unplaced (smaller pods of the group may still fit a pool with room)."""
        d = self.order[group][self.head[group]]
        self.unplaced[d] = self.unplaced.get(d, 0) + self.left[d]
        count = self.left[d]
        totals = self.totals[group]
        for r, amount in enumerate(self.need[d]):
            totals[r] -= amount * count
        self.worth_total[group] -= self.worth[d] * count
        self.left[d] = 0
        self._unlink(group, self.positions[d])

    def _right_size(self, placed: Mapping[int, int], used: Sequence[int], opened: int) -> int:
        """The cheapest candidate that every pod placed allows and that holds them all
        (``opened`` does: the fill kept within it). Allowed as the demands were given: a
        strategy that narrowed them to pack (``MATCHED``) still right-sizes to any."""
        sets = frozenset(self.given_allowed[d] for d in placed)
        looked = self.right_sizes.get(sets)
        if looked is None:
            common = frozenset.intersection(*sets)
            looked = sorted(
                _undominated(
                    [c for c in common if 0 <= c < len(self.candidates)],
                    self.alloc,
                    self.candidates,
                ),
                key=self._price_order,
            )
            self.right_sizes[sets] = looked
        best: tuple[float, int, float, int] | None = None
        chosen = opened
        for c in looked:
            price = self.candidates[c].price
            if best is not None and price > best[0] + _TIE * max(abs(best[0]), 1e-12):
                break
            if not _holds(self.alloc[c], used) or not self._may_grow(c):
                continue
            rank = (
                price,
                -self.candidates[c].weight,
                _waste(self.alloc[c], used, self.resources),
                c,
            )
            if best is None or _better(rank, best):
                best, chosen = rank, c
        return chosen

    def _price_order(self, c: int) -> tuple[float, int, int]:
        return (self.candidates[c].price, -self.candidates[c].weight, c)


def _maximal(allocs: set[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The allocatables no other one holds: a pod fits one of them or none of the set."""
    return [
        have for have in sorted(allocs) if not any(o != have and _holds(o, have) for o in allocs)
    ]


def _holds(alloc: Sequence[int], need: Sequence[int]) -> bool:
    # A loop, not all() over a generator: this is the packing's most frequent call.
    for n, a in zip(need, alloc, strict=True):  # noqa: SIM110
        if n > a:
            return False
    return True


def _waste(alloc: Sequence[int], used: Sequence[int], resources: Sequence[str]) -> float:
    """Cluster-autoscaler's least-waste measure: the unused share of cpu and memory."""
    fractions = [
        1 - used[r] / alloc[r]
        for r, name in enumerate(resources)
        if name in ("cpu", "memory") and alloc[r] > 0
    ]
    return sum(fractions) / len(fractions) if fractions else 0.0


def _size(alloc: Sequence[int], reference: Sequence[int]) -> float:
    """How large ``alloc`` is next to ``reference``: the mean of its shares of it."""
    shares = [a / b for a, b in zip(alloc, reference, strict=True) if b > 0]
    return sum(shares) / len(shares) if shares else 0.0


def _better(
    rank: tuple[float, int, float, int], best: tuple[float, int, float, int], *, tie: float = _TIE
) -> bool:
    """Lower price (or price per worth) first, within a relative tie; then the rest."""
    if abs(rank[0] - best[0]) > tie * max(abs(rank[0]), abs(best[0]), 1e-12):
        return rank[0] < best[0]
    return rank[1:] < best[1:]


def _undominated(
    indices: list[int], alloc: Sequence[tuple[int, ...]], candidates: Sequence[PricedCandidate]
) -> list[int]:
    """The candidates no other of the same pool beats: at least as large in every resource
    and cheaper (or as cheap with a higher weight, or the same in all of it and listed
    first). Only within a pool, so a pool at its headroom leaves another's in the running,
    and not within a pool with limits (a smaller node may fit under them);
    a group's pods accept any of its candidates, whatever their zone."""
    by_shape: dict[tuple[str, tuple[int, ...]], int] = {}
    for c in indices:
        shape = (candidates[c].pool, alloc[c])
        kept = by_shape.get(shape)
        if kept is None or (candidates[c].price, -candidates[c].weight, c) < (
            candidates[kept].price,
            -candidates[kept].weight,
            kept,
        ):
            by_shape[shape] = c
    shapes = sorted(by_shape.values(), key=lambda c: (candidates[c].price, c))
    found: list[int] = []
    for c in shapes:
        # Under a pool's limits a smaller node may fit where the larger cheaper one does
        # not: none of such a pool's candidates is dropped for another.
        if candidates[c].limits_left is not None or not any(
            candidates[o].pool == candidates[c].pool
            and _holds(alloc[o], alloc[c])
            and (candidates[o].price, -candidates[o].weight)
            < (candidates[c].price, -candidates[c].weight)
            for o in found
        ):
            found.append(c)
    return sorted(found)
