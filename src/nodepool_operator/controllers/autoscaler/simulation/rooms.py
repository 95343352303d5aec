"""The simulated nodes and their room trees: a node's room and host ports as pods are
charged to it, and the max-trees that find the leftmost node with room for a pod without
scanning the full ones.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler.constraints import HostPort, NodeTaint, PodProfile

__all__ = [
    "BEYOND_MAX",
    "BOOTING",
    "NEW",
    "READY",
    "TOPOLOGY_LABELS",
    "Group",
    "NodeShape",
    "RoomTree",
    "SimNode",
]

TOPOLOGY_LABELS: Final = frozenset({wellknown.ZONE_LABEL, wellknown.REGION_LABEL})

# -- the simulated nodes ------------------------------------------------------------------

READY, BOOTING, NEW, BEYOND_MAX = "ready", "booting", "new", "beyond-max"


@dataclass(eq=False, slots=True)
class SimNode:
    index: int
    name: str
    pool: str | None
    labels: Mapping[str, str]
    taints: tuple[NodeTaint, ...]
    unschedulable: bool
    allocatable: Mapping[str, int]
    kind: str
    used: dict[str, int] = field(default_factory=dict)
    # The host ports taken: a tuple, the empty one shared, since most nodes take none and
    # a list for each would be one more object per node for the collector to track.
    ports: tuple[HostPort, ...] = ()
    # Everything the static filters read but the name: equal keys, equal verdicts.
    static_key: tuple[object, ...] = field(init=False, default=())
    static_id: int = field(init=False, default=-1)  # the key's number in its cluster
    # The static key without zone and region: the nodes searched together.
    group_key: tuple[object, ...] = field(init=False, default=())
    shared_labels: tuple[tuple[str, str], ...] = field(init=False, default=())  # its group's
    slot: int = 0  # its leaf in its group's room tree
    # Its group's room tree, set when the node is added to the cluster. The tree, not the
    # group: a group holds nodes (``kinds``), and a node holding its group would make
    # the simulation's nodes a cycle that only the garbage collector frees, not
    # reference counting as the simulation returns.
    tree: RoomTree = field(init=False)
    stale: bool = False  # its room changed since its tree was last written

    def shape_as(self, shape: NodeShape) -> None:
        """Take the static and group keys of ``shape`` (made from this node's labels but
        the hostname, its taints and cordon)."""
        self.static_key, self.static_id = shape.static_key, shape.static_id
        self.group_key, self.shared_labels = shape.group_key, shape.shared_labels

    def room(self, name: str) -> int:
        return self.allocatable.get(name, 0) - self.used.get(name, 0)

    def charge(self, profile: PodProfile, copies: int) -> None:
        """Take the room and host ports of ``copies`` pods of ``profile``."""
        used = self.used
        if copies == 1:  # most charges: one pod, no product per request
            for name, amount in profile.requests.items():
                used[name] = used.get(name, 0) + amount
        else:
            for name, amount in profile.requests.items():
                used[name] = used.get(name, 0) + amount * copies
        if profile.ports:
            self.ports = (*self.ports, *profile.ports)


@dataclass(eq=False, slots=True)
class NodeShape:
    """What the static filters and the room search read of a node but its name: nodes made
    from one template (a pool's, in one zone) share it, so it is worked out once for them.
    ``rest``: its labels but the hostname."""

    rest: dict[str, str]
    taints: tuple[NodeTaint, ...]
    unschedulable: bool
    static_id: int = field(init=False, default=-1)  # its static key's number in the cluster
    static_key: tuple[object, ...] = field(init=False)
    group_key: tuple[object, ...] = field(init=False)
    shared_labels: tuple[tuple[str, str], ...] = field(init=False)

    def __post_init__(self) -> None:
        labels = tuple(sorted(self.rest.items()))
        self.static_key = (labels, self.taints, self.unschedulable)
        shared = tuple((k, v) for k, v in labels if k not in TOPOLOGY_LABELS)
        self.shared_labels = shared
        self.group_key = (shared, self.taints, self.unschedulable)

    def fits(
        self, rest: dict[str, str], taints: tuple[NodeTaint, ...], unschedulable: bool
    ) -> bool:
        """Whether a node with these labels (but the hostname), taints and cordon has it."""
        return self.unschedulable == unschedulable and self.taints == taints and self.rest == rest


class RoomTree:
    """Leftmost node with room for (cpu, memory, pods): a max-tree over packed keys.

    A tree node holds, for the leaves under it, the largest of each of several keys,
    packed in one integer (a field per key, a guard bit above each, always set in the
    tree): whether a subtree may have room for a pod is one subtraction, true when no
    field borrows from its guard (every field at least the pod's). The keys are the
    node's free cpu, memory and pod slots, and what a node with room for a pod must have
    at least as much of as the pod: its *balance* (cpu and memory, each relative to the
    largest node, added up) and, for mixes of the two, the smaller of its cpu and memory
    weighed by that mix. A subtree whose most cpu and most memory are on different nodes
    passes the first three yet has no room for a pod needing both; with every request
    different, searches would spend most of their time in such subtrees, and the mix
    nearest the pod's own shape refuses most of them. The keys only prune what cannot
    fit: the result is still exact first fit.

    The last leaf is kept apart, its place in the tree without room, and packed and
    written to the tree only when a leaf is added after it: pods fill the node opened last
    one after the other, and its room then changes without a packing or an update up the
    tree. A search that finds no leaf in the tree reads its room (``rooms``) last, as the
    leaf to the right of all: a leaf's packed keys pass a need exactly when its cpu,
    memory and pod slots do (the other keys only grow with those), so three comparisons
    judge it as the packed keys would.
    """

    #: Mixes of (cpu, memory) weights, each relative to the largest node: a mix for every
    #: power of two a pod's shape may lean to one side, as far as 1:64.
    MIXES: Final = tuple((1 << max(0, -k), 1 << max(0, k)) for k in range(-6, 7))
    _PLAIN: Final = 4  # the fields before the mixes: cpu, memory, pods, balance

    def __init__(self, scale: tuple[int, int]) -> None:
        self.size = 1
        self.count = 0
        self.cpu_weight, self.memory_weight = scale
        self.rooms: list[tuple[int, int, int]] = []  # each leaf's, to repack when widened
        # Below these a room's every key fits its field; they grow with the rooms set.
        self.caps = (scale[1] + 1, (scale[0] + 1) << 20, 1 << 10)
        self._layout()
        self.tree: list[int] = [self.guards] * 2

    def _layout(self) -> None:
        """Fields wide enough for every key of a room below ``caps``, and the constants
        that compute them all at once."""
        cpu, memory, pods = self.caps
        relative_cpu, relative_memory = cpu * self.cpu_weight, (memory >> 20) * self.memory_weight
        heaviest = max(w for mix in self.MIXES for w in mix)
        largest = max(
            memory,
            pods,
            relative_cpu + relative_memory,
            heaviest * relative_cpu,
            heaviest * relative_memory,
        )
        width = self.width = largest.bit_length() + 1
        step = width + 1
        fields = self._PLAIN + len(self.MIXES)
        self.shifts = tuple(f * step for f in range(fields))
        self.guards = sum(1 << (shift + width) for shift in self.shifts)
        self._wants: dict[tuple[int, int, int], int] = {}  # needs packed in this layout
        self.units = sum(1 << shift for shift in self.shifts)  # a 1 in every field
        mixes = self.shifts[self._PLAIN :]
        self.cpu_mix = sum(a << shift for (a, _), shift in zip(self.MIXES, mixes, strict=True))
        self.memory_mix = sum(b << shift for (_, b), shift in zip(self.MIXES, mixes, strict=True))
        # What ``pack`` reads, in one tuple: it runs for every room set and need searched.
        self._packing = (
            self.cpu_weight,
            self.memory_weight,
            self.cpu_mix,
            self.memory_mix,
            self.guards,
            width,
            self.units,
            self.shifts,
        )

    def pack(self, cpu: int, memory: int, pods: int) -> int:
        """Every key of a room (or a need), each plus one so that a room of -1 (none) is 0
        and a need of 0 passes it."""
        if cpu < 0 or memory < 0 or pods < 0:
            _, memory_at, pods_at = self.shifts[:3]
            return (
                (max(cpu + 1, 0))
                | (max(memory + 1, 0) << memory_at)
                | (max(pods + 1, 0) << pods_at)
            )
        cpu_weight, memory_weight, cpu_mix, memory_mix, guards, width, units, at = self._packing
        relative_cpu = cpu * cpu_weight
        relative_memory = (memory >> 20) * memory_weight
        by_cpu, by_memory = relative_cpu * cpu_mix, relative_memory * memory_mix
        # The smaller of the two in every mix field at once: where by_cpu's field is at
        # least by_memory's, its guard bit survives the subtraction (and less its shift
        # down by the width, the field's every bit).
        at_least = ((by_cpu | guards) - by_memory) & guards
        smaller = by_cpu ^ ((by_cpu ^ by_memory) & (at_least - (at_least >> width)))
        return (
            smaller
            + units
            + cpu
            + (memory << at[1])
            + (pods << at[2])
            + ((relative_cpu + relative_memory) << at[3])
        )

    def _rebuild(self) -> None:
        guards, width = self.guards, self.width
        size, tree = self.size, [guards] * (2 * self.size)
        for index, room in enumerate(self.rooms):
            tree[size + index] = self.pack(*room) | guards
        if self.rooms:  # the last leaf apart
            tree[size + self.count - 1] = guards
        for n in range(size - 1, 0, -1):
            a, b = tree[2 * n], tree[2 * n + 1]
            at_least = (a - (b ^ guards)) & guards
            tree[n] = b ^ ((a ^ b) & (at_least - (at_least >> width)))
        self.tree = tree

    def append(self) -> None:
        """One more leaf, without room (every leaf past the count has none); the one
        before it, the last till now, joins the tree."""
        if self.count:
            self._write(self.count - 1, self.pack(*self.rooms[-1]) | self.guards)
        self.count += 1
        self.rooms.append((-1, -1, -1))
        if self.count > self.size:
            self._double()

    def _double(self) -> None:
        """Twice the leaves, the new ones without room: the old tree is the new root's left
        subtree, each of its levels the left half of the level below, and the new root's
        maxima are the old root's. Copied, not packed and compared again."""
        old, size = self.tree, self.size
        tree = [self.guards] * (4 * size)
        tree[1] = old[1]
        width = 1
        while width <= size:
            tree[2 * width : 3 * width] = old[width : 2 * width]
            width *= 2
        self.tree, self.size = tree, 2 * size

    def set(self, index: int, room: tuple[int, int, int]) -> None:
        cpu, memory, pods = room
        self.rooms[index] = room
        caps = self.caps
        if cpu >= caps[0] or memory >= caps[1] or pods >= caps[2]:
            self.caps = (max(caps[0], 2 * cpu), max(caps[1], 2 * memory), max(caps[2], 2 * pods))
            self._layout()
            self._rebuild()
        elif index != self.count - 1:  # the last leaf: kept apart till one comes after it
            self._write(index, self.pack(cpu, memory, pods) | self.guards)

    def _write(self, index: int, value: int) -> None:
        """Put a leaf's packed keys in the tree, and its maxima up."""
        guards, width, tree = self.guards, self.width, self.tree
        n = self.size + index
        if tree[n] == value:
            return
        tree[n] = value
        # Up while the parent's maxima change: a sibling's fields may hold them. The larger
        # of two in every field at once, as ``pack`` takes the smaller: with both guards
        # set, a field's guard survives ``a - b`` (``b``'s guards taken off) where a >= b.
        # A sibling with no room anywhere under it (guards only: the leaves past the last
        # node, the right of most of the last node's path) leaves the maxima as they are.
        while n > 1:
            sibling = tree[n ^ 1]
            if sibling != guards:
                at_least = (value - (sibling ^ guards)) & guards
                value = sibling ^ ((value ^ sibling) & (at_least - (at_least >> width)))
            n >>= 1
            if tree[n] == value:
                break
            tree[n] = value

    def first(self, need: tuple[int, int, int], start: int) -> int:
        """The leftmost leaf from ``start`` on with room for ``need``; -1 when none has.

        The subtrees after ``start`` are read left to right (from the root when ``start``
        is 0): one that may have room is entered at its left child, one that has none
        gives way to the next subtree on its right. A subtree's maxima may come from
        different leaves, so one entered may still have none: the walk goes on right.
        One check per subtree read, no stack: this runs once per pod placed. The last
        leaf, kept apart, is read when the tree has none.
        """
        c, m, p = need
        caps = self.caps
        if c >= caps[0] or m >= caps[1] or p >= caps[2] or start >= self.count:
            return -1  # more than any room set, or no leaf from ``start`` on
        # A class searches again and again with one need: packed once (per layout).
        want = self._wants.get(need)
        if want is None:
            want = self._wants[need] = self.pack(c, m, p)
        tree, guards, size, last = self.tree, self.guards, self.size, self.count - 1
        if start < last:  # leaves in the tree from ``start`` on (checked once, not per step)
            n = size + start if start else 1
            fits = (tree[n] - want) & guards == guards
            while True:
                if fits:
                    if n >= size:
                        return n - size
                    n <<= 1  # its left child; when that has none, its right one
                    if (tree[n] - want) & guards == guards:
                        continue
                    n += 1
                    fits = (tree[n] - want) & guards == guards
                    continue
                while n & 1:  # the last subtree of its parent: the parent's next one
                    n >>= 1
                if not n:
                    break  # past the tree's leaves
                n += 1
                fits = (tree[n] - want) & guards == guards
        if last < 0:
            return -1
        room_cpu, room_memory, room_pods = self.rooms[last]
        return last if room_cpu >= c and room_memory >= m and room_pods >= p else -1


class Group:
    """Nodes equal in all but name and topology (a pool's nodes, whatever their zone), in
    cluster order, and the room tree over them."""

    def __init__(self, scale: tuple[int, int]) -> None:
        self.tree = RoomTree(scale)
        self.indexes: list[int] = []  # cluster index of each leaf, increasing
        # One node of each static key in the group (one per zone): a pod may use the
        # group when one of them passes its static filters.
        self.kinds: list[SimNode] = []
        self._static_ids: set[int] = set()

    def add(self, node: SimNode) -> int:
        """A leaf for ``node``, without room until its room is set."""
        if node.static_id not in self._static_ids:
            self._static_ids.add(node.static_id)
            self.kinds.append(node)
        self.indexes.append(node.index)
        self.tree.append()
        return len(self.indexes) - 1

    def first(self, need: tuple[int, int, int], start: int) -> int:
        """The first leaf with room for ``need`` among the group's nodes from cluster index
        ``start`` on (its node is ``indexes[leaf]``); -1 when none has."""
        return self.tree.first(need, bisect.bisect_left(self.indexes, start) if start else 0)


def copies_that_fit(profile: PodProfile, node: SimNode, wanted: int) -> int:
    fits = wanted
    have, used = node.allocatable, node.used  # ``SimNode.room``, written out: runs per pod
    for name, amount in profile.requests.items():
        if amount > 0:
            room = (have.get(name, 0) - used.get(name, 0)) // amount
            if room < fits:
                fits = room
    return max(0, fits)


def has_room(profile: PodProfile, node: SimNode) -> bool:
    """Whether the node has room for one more pod of ``profile``."""
    have, used = node.allocatable, node.used
    for name, amount in profile.requests.items():
        if have.get(name, 0) - used.get(name, 0) < amount:
            return False
    return True


def selector_labels(profile: PodProfile) -> list[tuple[str, str]]:
    """The labels the pod's nodeSelector asks of a node, topology (zone, region) aside:
    a node refuses the pod statically unless it carries each of them."""
    return [item for item in profile.node_selector.items() if item[0] not in TOPOLOGY_LABELS]
