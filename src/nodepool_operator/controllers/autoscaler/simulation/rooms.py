"""The simulated nodes and their room trees: a node's room and host ports as pods are
charged to it, and the max-trees that find the leftmost node with room for a pod without
scanning the full ones.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.controllers.autoscaler.constraints import HostPort, PodProfile, Taint
from nodepool_operator.controllers.autoscaler.simulation.model import HOSTNAME_LABEL

__all__ = [
    "BEYOND_MAX",
    "BOOTING",
    "NEW",
    "READY",
    "TOPOLOGY_LABELS",
    "Group",
    "RoomTree",
    "SimNode",
]

TOPOLOGY_LABELS: Final = frozenset({nodepool_api.ZONE_LABEL, nodepool_api.REGION_LABEL})

# -- the simulated nodes ------------------------------------------------------------------

READY, BOOTING, NEW, BEYOND_MAX = "ready", "booting", "new", "beyond-max"


@dataclass(eq=False, slots=True)
class SimNode:
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
    # Everything the static filters read but the name: equal keys, equal verdicts.
    static_key: tuple[object, ...] = field(init=False, default=())
    static_id: int = field(init=False, default=-1)  # the key's number in its cluster
    # The static key without zone and region: the nodes searched together.
    group_key: tuple[object, ...] = field(init=False, default=())
    shared_labels: tuple[tuple[str, str], ...] = field(init=False, default=())  # its group's
    slot: int = 0  # its leaf in its group's room tree
    group: Group = field(init=False)  # set when the node is added to the cluster
    stale: bool = False  # its room changed since its tree was last written

    def __post_init__(self) -> None:
        labels = tuple(sorted((k, v) for k, v in self.labels.items() if k != HOSTNAME_LABEL))
        self.static_key = (labels, self.taints, self.unschedulable)
        shared = tuple((k, v) for k, v in labels if k not in TOPOLOGY_LABELS)
        self.shared_labels = shared
        self.group_key = (shared, self.taints, self.unschedulable)

    def room(self, name: str) -> int:
        return self.allocatable.get(name, 0) - self.used.get(name, 0)

    def charge(self, profile: PodProfile, copies: int) -> None:
        """Take the room and host ports of ``copies`` pods of ``profile``."""
        for name, amount in profile.requests.items():
            self.used[name] = self.used.get(name, 0) + amount * copies
        self.ports.extend(profile.ports)


class RoomTree:
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
    MIXES: Final = ((1, 4), (4, 1))
    _TREES: Final = 6  # cpu, memory, pods, balance, one per mix

    def __init__(self, scale: tuple[int, int]) -> None:
        self.size = 1
        self.count = 0
        self.cpu_weight, self.memory_weight = scale
        self.trees: list[list[int]] = [[-1, -1] for _ in range(self._TREES)]

    def _keys(self, cpu: int, memory: int) -> tuple[int, int, int]:
        """Balance, then the weighed smaller share for each mix (``MIXES``, written out:
        this runs for every node changed and every search)."""
        if cpu < 0 or memory < 0:
            return -1, -1, -1
        relative_cpu = cpu * self.cpu_weight
        relative_memory = (memory >> 20) * self.memory_weight
        return (
            relative_cpu + relative_memory,
            min(relative_cpu, 4 * relative_memory),
            min(4 * relative_cpu, relative_memory),
        )

    def _grow(self) -> None:
        size = self.size
        self.size = grown = 2 * size
        for d, tree in enumerate(self.trees):
            leaves = tree[size : size + self.count]
            tree = self.trees[d] = [-1] * (2 * grown)
            tree[grown : grown + len(leaves)] = leaves
            for n in range(grown - 1, 0, -1):
                left, right = tree[2 * n], tree[2 * n + 1]
                tree[n] = left if left > right else right

    def append(self) -> None:
        """One more leaf, without room (every leaf past the count has none)."""
        if self.count == self.size:
            self._grow()
        self.count += 1

    def set(self, index: int, room: Sequence[int]) -> None:
        leaf = self.size + index
        cpu, memory, pods = room
        balance, cpu_mix, memory_mix = self._keys(cpu, memory)
        trees = self.trees
        for tree, value in (
            (trees[0], cpu),
            (trees[1], memory),
            (trees[2], pods),
            (trees[3], balance),
            (trees[4], cpu_mix),
            (trees[5], memory_mix),
        ):
            if tree[leaf] == value:
                continue
            tree[leaf] = value
            # Up while the parent's maximum changes: a sibling's value may hold it.
            n = leaf
            while n > 1:
                sibling = tree[n ^ 1]
                if sibling > value:
                    value = sibling
                n >>= 1
                if tree[n] == value:
                    break
                tree[n] = value

    def find(self, need: Sequence[int], start: int, names: Sequence[int]) -> Iterator[int]:
        """``names`` of the leaves from ``start`` on with room for ``need``, leftmost first."""
        c, m, p = need
        cpu, memory, pods, balance, cpu_shape, memory_shape = self.trees
        # ``_keys``, written out: this runs for every search.
        relative_cpu = c * self.cpu_weight
        relative_memory = (m >> 20) * self.memory_weight
        b = relative_cpu + relative_memory
        if relative_memory > relative_cpu:  # heavier in memory
            shape, s = memory_shape, min(4 * relative_cpu, relative_memory)
        else:
            shape, s = cpu_shape, min(relative_cpu, 4 * relative_memory)
        size = self.size
        if cpu[1] < c or memory[1] < m or pods[1] < p or balance[1] < b or shape[1] < s:
            return
        # Leaves before ``start`` are skipped by their position: a subtree is pushed only
        # when it may have room in every dimension and ends after ``start``.
        first = size + start
        height = size.bit_length() - 1
        stack = [1]
        pop, push = stack.pop, stack.append
        while stack:
            n = pop()
            if n >= size:
                yield names[n - size]
                continue
            right = 2 * n + 1
            if (
                shape[right] >= s
                and balance[right] >= b
                and cpu[right] >= c
                and memory[right] >= m
                and pods[right] >= p
            ):
                push(right)
            left = right - 1
            # The left subtree is skipped whole when its last leaf comes before ``start``.
            if (
                shape[left] >= s
                and balance[left] >= b
                and cpu[left] >= c
                and memory[left] >= m
                and pods[left] >= p
                and (start == 0 or ((right << (height - left.bit_length() + 1)) - 1 >= first))
            ):
                push(left)


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

    def find(self, need: Sequence[int], start: int) -> Iterator[int]:
        indexes = self.indexes
        return self.tree.find(need, bisect.bisect_left(indexes, start), indexes)


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
