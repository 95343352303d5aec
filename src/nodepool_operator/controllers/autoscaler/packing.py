"""First-fit-decreasing bin packing of pods onto nodes, exact and fast enough for 50,000 pods.

Items are sorted by their dominant share of a node (the largest of cpu, memory and pod
slots as a fraction of the template), largest first, and each goes to the first bin with
room for it in every dimension: the existing bins in the order given (free room on Ready
nodes, then empty nodes already requested), then new template nodes, opened only when
nothing before them fits. That is textbook FFD; two things make it fast without changing
a single placement:

* identical items are placed as a group: first fit would put the next copy in the same
  bin until it is full, so the group fills that bin at once;
* "the first bin with room" is found in a max-tree over the bins (one per dimension), so
  a search skips every subtree that lacks room in some dimension instead of scanning all
  bins; opening a bin appends a leaf, and the tree doubles when it is full.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from nodepool_operator.controllers.autoscaler.fit import Resources

__all__ = ["UNPLACED", "Packing", "decreasing", "pack"]

#: The bin of an item that fits neither an existing bin nor an empty node.
UNPLACED: Final = -1


@dataclass(frozen=True)
class Packing:
    """Where each item went (bin index, in input order) and how many new nodes were opened.

    Bins ``0 .. len(existing) - 1`` are the existing ones; higher indexes are new nodes.
    """

    bins: tuple[int, ...]
    new_nodes: int


def _share(amount: int, capacity: int) -> float:
    if amount <= 0:
        return 0.0
    return amount / capacity if capacity > 0 else float("inf")


def decreasing(items: Sequence[Resources], node: Resources) -> list[int]:
    """Indexes of ``items``, largest dominant share of ``node`` first; ties keep input order.

    Equal items get equal keys, so they end up next to each other and can be grouped.
    """

    def key(index: int) -> tuple[float, int, int, int]:
        r = items[index]
        share = max(
            _share(r.cpu, node.cpu), _share(r.memory, node.memory), _share(r.pods, node.pods)
        )
        return (-share, -r.cpu, -r.memory, -r.pods)

    return sorted(range(len(items)), key=key)


class _FirstFit:
    """The leftmost bin with room for an item: a max-tree per dimension over the bins."""

    def __init__(self, free: Sequence[Resources]) -> None:
        self.count = 0
        self.size = 1
        self.cpu = [-1, -1]
        self.memory = [-1, -1]
        self.pods = [-1, -1]
        self._rebuild(max(1, len(free)), list(free))

    def _rebuild(self, at_least: int, leaves: list[Resources]) -> None:
        size = 1
        while size < at_least:
            size *= 2
        cpu, memory, pods = [-1] * (2 * size), [-1] * (2 * size), [-1] * (2 * size)
        for index, room in enumerate(leaves):
            cpu[size + index], memory[size + index], pods[size + index] = (
                room.cpu,
                room.memory,
                room.pods,
            )
        for node in range(size - 1, 0, -1):
            left, right = 2 * node, 2 * node + 1
            cpu[node] = max(cpu[left], cpu[right])
            memory[node] = max(memory[left], memory[right])
            pods[node] = max(pods[left], pods[right])
        self.size, self.count = size, len(leaves)
        self.cpu, self.memory, self.pods = cpu, memory, pods

    def room(self, index: int) -> Resources:
        leaf = self.size + index
        return Resources(cpu=self.cpu[leaf], memory=self.memory[leaf], pods=self.pods[leaf])

    def find(self, need: Resources) -> int:
        """The leftmost bin with room for ``need``, or UNPLACED."""
        cpu, memory, pods = self.cpu, self.memory, self.pods
        c, m, p = need.cpu, need.memory, need.pods
        size = self.size
        stack = [1]
        while stack:
            node = stack.pop()
            if cpu[node] < c or memory[node] < m or pods[node] < p:
                continue  # no bin below has room in every dimension
            if node >= size:
                return node - size
            stack.append(2 * node + 1)
            stack.append(2 * node)  # popped first: the left subtree holds earlier bins
        return UNPLACED

    def set(self, index: int, room: Resources) -> None:
        cpu, memory, pods = self.cpu, self.memory, self.pods
        node = self.size + index
        cpu[node], memory[node], pods[node] = room.cpu, room.memory, room.pods
        node //= 2
        while node:
            left, right = 2 * node, 2 * node + 1
            c = max(cpu[left], cpu[right])
            m = max(memory[left], memory[right])
            p = max(pods[left], pods[right])
            if (c, m, p) == (cpu[node], memory[node], pods[node]):
                return  # nothing above changes either
            cpu[node], memory[node], pods[node] = c, m, p
            node //= 2

    def open(self, room: Resources) -> int:
        """Append a bin; returns its index."""
        if self.count == self.size:
            leaves = [self.room(i) for i in range(self.count)]
            self._rebuild(2 * self.size, leaves)
        index = self.count
        self.count += 1
        self.set(index, room)
        return index


def _copies(room: Resources, need: Resources, *, wanted: int) -> int:
    """How many copies of ``need`` fit in ``room``, at most ``wanted``."""
    fits = wanted
    if need.cpu > 0:
        fits = min(fits, room.cpu // need.cpu)
    if need.memory > 0:
        fits = min(fits, room.memory // need.memory)
    if need.pods > 0:
        fits = min(fits, room.pods // need.pods)
    return fits


def pack(items: Sequence[Resources], *, existing: Sequence[Resources], node: Resources) -> Packing:
    """First-fit-decreasing of ``items`` into ``existing`` bins, then new ``node``-sized bins."""
    bins = [UNPLACED] * len(items)
    tree = _FirstFit(existing)
    order = decreasing(items, node)
    start = 0
    while start < len(order):
        need = items[order[start]]
        end = start + 1
        while end < len(order) and items[order[end]] == need:
            end += 1
        members = order[start:end]
        placed = 0
        while placed < len(members):
            index = tree.find(need)
            if index == UNPLACED:
                if not need.fits_in(node):
                    break  # too big for an empty node: the rest of the group stays unplaced
                index = tree.open(node)
            room = tree.room(index)
            # find() or an empty node guarantees room for at least one copy.
            copies = max(1, _copies(room, need, wanted=len(members) - placed))
            for member in members[placed : placed + copies]:
                bins[member] = index
            tree.set(
                index,
                Resources(
                    cpu=room.cpu - copies * need.cpu,
                    memory=room.memory - copies * need.memory,
                    pods=room.pods - copies * need.pods,
                ),
            )
            placed += copies
        start = end
    return Packing(bins=tuple(bins), new_nodes=max(0, tree.count - len(existing)))
