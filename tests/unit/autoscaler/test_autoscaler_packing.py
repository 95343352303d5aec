"""First-fit-decreasing packing: never overfills, never wastes a node, and is exactly FFD."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from nodepool_operator.controllers.autoscaler import packing
from nodepool_operator.controllers.autoscaler.fit import Resources

NODE = Resources(cpu=4000, memory=16 * 1024**3, pods=110)
GI = 1024**3


def naive_ffd(
    items: Sequence[Resources], existing: Sequence[Resources], node: Resources
) -> tuple[list[int], int]:
    """Textbook FFD: a linear scan of the bins for each item, in the same order."""
    rooms = list(existing)
    bins = [packing.UNPLACED] * len(items)
    for index in packing.decreasing(items, node):
        need = items[index]
        for b, room in enumerate(rooms):
            if need.fits_in(room):
                bins[index] = b
                rooms[b] = room.minus(need)
                break
        else:
            if need.fits_in(node):
                rooms.append(node.minus(need))
                bins[index] = len(rooms) - 1
    return bins, len(rooms) - len(existing)


resources = st.builds(
    Resources,
    cpu=st.integers(0, 5000),
    memory=st.integers(0, 20 * GI),
    pods=st.integers(1, 3),
)
# A few distinct shapes repeated, like the pods of a handful of Deployments.
repeated = st.lists(resources, min_size=1, max_size=4).flatmap(
    lambda shapes: st.lists(st.sampled_from(shapes), max_size=60)
)
nodes = st.builds(
    Resources, cpu=st.integers(1, 8000), memory=st.integers(1, 32 * GI), pods=st.integers(1, 12)
)


def room_left(
    items: Sequence[Resources], existing: Sequence[Resources], node: Resources, p: packing.Packing
) -> list[Resources]:
    rooms = [*existing, *([node] * p.new_nodes)]
    for item, b in zip(items, p.bins, strict=True):
        if b != packing.UNPLACED:
            rooms[b] = rooms[b].minus(item)
    return rooms


@settings(max_examples=300, deadline=None)
@given(st.lists(resources, max_size=40) | repeated, st.lists(resources, max_size=5), nodes)
def test_packing_never_overfills_a_node(
    items: list[Resources], existing: list[Resources], node: Resources
) -> None:
    p = packing.pack(items, existing=existing, node=node)
    for room in room_left(items, existing, node, p):
        assert room.cpu >= 0
        assert room.memory >= 0
        assert room.pods >= 0


@settings(max_examples=300, deadline=None)
@given(st.lists(resources, max_size=40) | repeated, st.lists(resources, max_size=5), nodes)
def test_never_more_new_nodes_than_pods_placed_on_them(
    items: list[Resources], existing: list[Resources], node: Resources
) -> None:
    p = packing.pack(items, existing=existing, node=node)
    on_new = {b for b in p.bins if b >= len(existing)}
    assert p.new_nodes == len(on_new)  # every new node holds at least one pod
    assert p.new_nodes <= len(items)


@settings(max_examples=300, deadline=None)
@given(st.lists(resources, max_size=40) | repeated, st.lists(resources, max_size=5), nodes)
def test_only_pods_too_big_for_every_bin_stay_unplaced(
    items: list[Resources], existing: list[Resources], node: Resources
) -> None:
    p = packing.pack(items, existing=existing, node=node)
    for item, b in zip(items, p.bins, strict=True):
        if item.fits_in(node):
            assert b != packing.UNPLACED


@settings(max_examples=300, deadline=None)
@given(st.lists(resources, max_size=40) | repeated, st.lists(resources, max_size=5), nodes)
def test_grouped_tree_search_places_exactly_like_textbook_ffd(
    items: list[Resources], existing: list[Resources], node: Resources
) -> None:
    p = packing.pack(items, existing=existing, node=node)
    assert (list(p.bins), p.new_nodes) == naive_ffd(items, existing, node)


def test_ten_one_cpu_pods_on_four_cpu_nodes_need_three() -> None:
    p = packing.pack([Resources(cpu=1000, memory=GI)] * 10, existing=[], node=NODE)
    assert p.new_nodes == 3


def test_free_room_and_requested_nodes_are_used_before_new_ones() -> None:
    free = [Resources(cpu=2000, memory=4 * GI, pods=100)]
    in_flight = [NODE]
    p = packing.pack([Resources(cpu=1000, memory=GI)] * 10, existing=[*free, *in_flight], node=NODE)
    assert p.new_nodes == 1  # 2 on the free room, 4 on the requested node, 4 on one new
    assert sorted(p.bins).count(0) == 2


def test_larger_pods_go_first() -> None:
    items = [
        Resources(cpu=1000, memory=0),
        Resources(cpu=3000, memory=0),
        Resources(cpu=1000, memory=0),
    ]
    p = packing.pack(items, existing=[], node=Resources(cpu=4000, memory=GI, pods=110))
    assert p.new_nodes == 2
    assert p.bins[1] == 0  # the 3-cpu pod opened the first node


def test_the_tree_grows_past_its_first_size() -> None:
    p = packing.pack([Resources(cpu=4000, memory=0)] * 1000, existing=[], node=NODE)
    assert p.new_nodes == 1000
    assert sorted(p.bins) == list(range(1000))
