"""Consolidation by price (``decide.consolidation_replace``): underused Nodes replaced by
one strictly cheaper Node when their pods fit on it, judged with the real scheduling
simulation; and the record on the victims a restarted operator continues from."""

from __future__ import annotations

import dataclasses
from typing import Any

from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler import simulation
from nodepool_operator.controllers.autoscaler.constraints import PodProfile, profile_of
from nodepool_operator.controllers.autoscaler.decide import consolidation_replace as replace
from nodepool_operator.controllers.autoscaler.decide import consolidation_rules
from nodepool_operator.controllers.autoscaler.simulation.offering_plan import PlannedOffering
from nodepool_operator.controllers.autoscaler.snapshot.consolidation_views import NodeView
from nodepool_operator.controllers.autoscaler.snapshot.pod_profiles import ProfileCache

OWNED = [{"kind": "ReplicaSet", "name": "web-1", "uid": "rs", "controller": True}]
GIB = 1 << 30
PRICES = {"small": 0.1, "large": 0.4}  # $/h, by instance type
CPU = {"small": 2, "large": 4}
ZONE = "zone-a"


def pod(name: str, cpu: str = "500m") -> Any:
    return {
        "metadata": {"name": name, "namespace": "apps", "uid": name, "ownerReferences": OWNED},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
    }


def profile(obj: Any) -> PodProfile:
    found = profile_of(obj)
    assert isinstance(found, PodProfile)
    return found


def labels(kind: str) -> dict[str, str]:
    return {
        wellknown.INSTANCE_TYPE_LABEL: kind,
        wellknown.ZONE_LABEL: ZONE,
        wellknown.CAPACITY_TYPE_LABEL: "on-demand",
    }


def node_obj(
    name: str, kind: str, *, created: str = "2026-12-06T10:00:00Z", ready: bool = True
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels(kind), "creationTimestamp": created},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def view(name: str, kind: str, *pods: Any, tainted: bool = False) -> NodeView:
    used = sum(profile(p).requests.get("cpu", 0) for p in pods) / (CPU[kind] * 1000)
    return NodeView(
        name=name,
        obj=node_obj(name, kind),
        to_move=tuple(pods),
        usage=used,
        since=None,
        tainted=tainted,
        eligible=True,
    )


def existing(name: str, kind: str, *pods: Any) -> simulation.ExistingNode:
    return simulation.ExistingNode(
        name=name,
        pool="p",
        labels={wellknown.HOSTNAME_LABEL: name, **labels(kind)},
        taints=(),
        unschedulable=False,
        allocatable={"cpu": CPU[kind] * 1000, "memory": 16 * GIB, "pods": 110},
        pods=tuple(profile(p) for p in pods),
    )


def offering(kind: str, price: float | None = None) -> PlannedOffering:
    return PlannedOffering(
        key=(kind, ZONE, "on-demand"),
        price=PRICES[kind] if price is None else price,
        allocatable={"cpu": CPU[kind] * 1000, "memory": 16 * GIB, "pods": 110},
        labels=labels(kind),
    )


def price_of(v: NodeView) -> float | None:
    found = replace.node_offering(v.obj)
    return None if found is None else PRICES.get(found[0])


def choose(
    views: list[NodeView],
    room: list[simulation.ExistingNode],
    offerings: list[PlannedOffering] | None,
    *,
    prices: Any = price_of,
    threshold: float = 1.0,
) -> replace.Replacement | replace.Unreplaceable | None:
    fits = replace.ReplacementFit(
        pool="p",
        room=room,
        taints=(),
        daemon_sets=(),
        candidates=views,
        profile=ProfileCache().get,
        threshold=threshold,
    )
    return replace.choose_replacement(
        replace.replacement_order(views), offerings=offerings, price_of=prices, fits=fits
    )


def two_underused_large() -> tuple[list[NodeView], list[simulation.ExistingNode]]:
    a = [pod("a1"), pod("a2")]
    b = [pod("b1"), pod("b2")]
    views = [view("large-1", "large", *a), view("large-2", "large", *b)]
    return views, [existing("large-1", "large", *a), existing("large-2", "large", *b)]


def test_two_underused_large_nodes_are_replaced_by_one_cheaper_small_node() -> None:
    views, room = two_underused_large()
    chosen = choose(views, room, [offering("small"), offering("large")])
    assert isinstance(chosen, replace.Replacement)
    assert chosen.victims == ("large-1", "large-2")
    assert chosen.offering == ("small", ZONE, "on-demand")
    assert (chosen.price_per_hour, chosen.replaced_per_hour) == (0.1, 0.8)
    assert "$0.8000/h" in chosen.describe()
    assert "$0.1000/h" in chosen.describe()


def test_an_offering_as_expensive_as_the_nodes_it_replaces_is_never_taken() -> None:
    # One small node, one pod: the only offering costs what the node does.
    views = [view("small-1", "small", pod("a"))]
    room = [existing("small-1", "small", pod("a"))]
    chosen = choose(views, room, [offering("small"), offering("large")])
    assert isinstance(chosen, replace.Unreplaceable)
    assert "no offering the pool allows is cheaper than their $0.1000/h" in chosen.why


def test_never_onto_a_more_expensive_type_even_when_only_it_holds_the_pods() -> None:
    # 3 CPU of pods on one large node: only a large node holds them, and it is no cheaper.
    views = [view("large-1", "large", pod("big", "3"))]
    room = [existing("large-1", "large", pod("big", "3"))]
    chosen = choose(views, room, [offering("small"), offering("large", price=0.5)])
    assert isinstance(chosen, replace.Unreplaceable)
    assert chosen.why.startswith("their pods fit on no cheaper node")
    assert "small" in chosen.why


def test_a_pod_that_fits_no_cheaper_node_keeps_its_nodes() -> None:
    big = pod("big", "2500m")  # more than a small node holds
    views = [view("large-1", "large", big)]
    room = [existing("large-1", "large", big)]
    chosen = choose(views, room, [offering("small"), offering("large")])
    assert isinstance(chosen, replace.Unreplaceable)
    assert chosen.nodes == ("large-1",)


def test_with_one_disruption_allowed_each_candidate_is_weighed_alone() -> None:
    """The disruption budget allows one Node at a time. The first candidate (fewest pods),
    a small Node with 500m free, has nothing cheaper; the second, a large Node of 1.5 CPU
    whose pods fit on no other Node, is replaced by a small one. (The cost bench's
    scale-down ended on a c-1x and an m-8x where an s-8x held the m-8x's pods: only the
    c-1x was weighed.) With no Node allowed to go, nothing is chosen."""
    busy = pod("s1", "1500m")
    moved = (pod("l1"), pod("l2"), pod("l3"))
    small = view("small-1", "small", busy)
    large = view("large-1", "large", *moved)
    room = [existing("small-1", "small", busy), existing("large-1", "large", *moved)]
    fits = replace.ReplacementFit(
        pool="p",
        room=room,
        taints=(),
        daemon_sets=(),
        candidates=[small, large],
        profile=ProfileCache().get,
    )

    def chosen_with(allowed: int) -> replace.Replacement | replace.Unreplaceable | None:
        return replace.choose_replacement(
            replace.replacement_order([small, large]),
            offerings=[offering("small"), offering("large")],
            price_of=price_of,
            fits=fits,
            max_victims=allowed,
        )

    chosen = chosen_with(1)
    assert isinstance(chosen, replace.Replacement)
    assert chosen.victims == ("large-1",)
    assert chosen.offering == ("small", ZONE, "on-demand")
    refused = chosen_with(0)
    assert isinstance(refused, replace.Unreplaceable)
    assert refused.why == "no node of the pool may go now"


def test_multi_node_takes_the_largest_first_n_one_node_holds_cheapest_to_remove_first() -> None:
    # Three large nodes with 1, 2 and 3 pods of 500m: a small node (2 CPU) holds the pods of
    # the first two (1.5 CPU), not of all three (3 CPU). The busiest stays.
    one = [pod("a1")]
    two = [pod("b1"), pod("b2")]
    three = [pod("c1"), pod("c2"), pod("c3")]
    views = [
        view("large-3", "large", *three),
        view("large-1", "large", *one),
        view("large-2", "large", *two),
    ]
    room = [
        existing("large-1", "large", *one),
        existing("large-2", "large", *two),
        existing("large-3", "large", *three),
    ]
    chosen = choose(views, room, [offering("small")])
    assert isinstance(chosen, replace.Replacement)
    assert chosen.victims == ("large-1", "large-2")
    assert chosen.offering[0] == "small"
    # With the large type allowed too, one large node ($0.4/h) holds all three's pods and
    # is cheaper than the three ($1.2/h) together.
    every = choose(views, room, [offering("small"), offering("large")])
    assert isinstance(every, replace.Replacement)
    assert every.victims == ("large-1", "large-2", "large-3")
    assert every.offering[0] == "large"


def test_the_room_of_the_nodes_that_stay_counts_beside_the_new_node() -> None:
    # 3 CPU of pods on two large nodes: one small node (2 CPU) holds only part; another
    # small node that stays, with 1.5 CPU free, holds the rest.
    a, b = [pod("a1", "1500m")], [pod("b1", "1500m")]
    views = [view("large-1", "large", *a), view("large-2", "large", *b)]
    stays = existing("small-stays", "small", pod("x"))
    room = [stays, existing("large-1", "large", *a), existing("large-2", "large", *b)]
    chosen = choose(views, room, [offering("small")])
    assert isinstance(chosen, replace.Replacement)
    assert chosen.victims == ("large-1", "large-2")
    # Without that room, only one of them is replaced by a small node.
    alone = choose(views, room[1:], [offering("small")])
    assert isinstance(alone, replace.Replacement)
    assert len(alone.victims) == 1


def test_nothing_is_replaced_when_the_catalog_is_unknown() -> None:
    views, room = two_underused_large()
    chosen = choose(views, room, None)
    assert chosen == replace.Unreplaceable(
        ("large-1", "large-2"), "the catalog of offerings is unknown"
    )


def test_nothing_is_replaced_when_a_nodes_price_is_unknown() -> None:
    views, room = two_underused_large()

    def unknown_for_large_2(v: NodeView) -> float | None:
        return None if v.name == "large-2" else price_of(v)

    chosen = choose(views, room, [offering("small")], prices=unknown_for_large_2)
    # large-1 alone could be replaced; large-2's price is unknown, so never with it.
    assert isinstance(chosen, replace.Replacement)
    assert chosen.victims == ("large-1",)
    only_unknown = choose(views[1:], room, [offering("small")], prices=unknown_for_large_2)
    assert isinstance(only_unknown, replace.Unreplaceable)
    assert "node large-2's price is unknown" in only_unknown.why


def marked(v: NodeView, value: str) -> NodeView:
    obj = {**v.obj, "metadata": {**v.obj["metadata"], "annotations": {}}}
    obj["metadata"]["annotations"][replace.REPLACEMENT_ANNOTATION] = value
    return dataclasses.replace(v, obj=obj, tainted=True)


def marked_victims() -> tuple[list[NodeView], replace.Replacement]:
    """The two large nodes, marked with their replacement by one small node, and that
    replacement as read back from the marks."""
    views, room = two_underused_large()
    chosen = choose(views, room, [offering("small")])
    assert isinstance(chosen, replace.Replacement)
    victims = [marked(v, replace.mark(chosen, now=1_796_000_000.0)) for v in views]
    record = replace.read_mark(victims[0])
    assert record is not None
    return victims, record


def request(name: str, kind: str, *, created: str, phase: str = "Applied") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {
            "nodePoolName": "p",
            "targetNodes": 3,
            "newNodeOfferings": [
                {"instanceType": kind, "zone": ZONE, "capacityType": "on-demand", "count": 1}
            ],
        },
        "status": {"phase": phase, "message": "node pool is gone" if phase == "Rejected" else ""},
    }


def test_a_restarted_operator_continues_from_the_marks_on_the_victims() -> None:
    views, room = two_underused_large()
    chosen = choose(views, room, [offering("small")])
    assert isinstance(chosen, replace.Replacement)
    now = 1_796_000_000.0  # 2026-11-30T...
    victims = [marked(v, replace.mark(chosen, now=now)) for v in views]
    # Everything a pass needs is read back from the Nodes: victims, offering, both prices.
    read = [replace.read_mark(v) for v in victims]
    assert read == [dataclasses.replace(chosen, since=now)] * 2
    record = read[0]
    assert record is not None
    earlier = node_obj("small-old", "small", created="2026-01-01T00:00:00Z")
    nodes = [v.obj for v in victims] + [earlier]
    # A request older than the mark, or for another offering, is not the replacement's.
    old = request("old", "small", created="2026-01-01T00:00:00Z")
    other = request("other", "large", created="2026-12-06T11:00:00Z")
    assert replace.request_state(record, [old, other]) == "none"
    ours = request("ours", "small", created="2026-12-06T11:00:00Z")
    assert replace.request_state(record, [old, ours]) == "open"

    def step(found: list[dict[str, Any]], requested: Any, *, settled: bool = False) -> Any:
        return replace.next_step(
            record, views=victims, nodes=found, requested=requested, settled=settled
        )

    # No request for the replacement yet: launch it; asked for: wait. A small node older
    # than the mark is not the replacement.
    assert step(nodes, "none", settled=True) == "launch"
    assert step(nodes, "open") == "wait"
    booting = node_obj("small-new", "small", created="2026-12-06T12:00:00Z", ready=False)
    assert step([*nodes, booting], "open") == "wait"
    ready = node_obj("small-new", "small", created="2026-12-06T12:00:00Z")
    assert replace.replacement_node(record, [*nodes, ready]) == ("small-new", True)
    assert step([*nodes, ready], "open", settled=True) == "recheck"


def test_a_replacement_that_never_came_or_was_refused_is_called_off() -> None:
    victims, record = marked_victims()
    # The request was answered and nothing is in flight, yet no small node came: the
    # NodePool controller fell back to another offering, or the cloud refused.
    fell_back = replace.next_step(record, views=victims, nodes=[], requested="open", settled=True)
    assert isinstance(fell_back, replace.Unreplaceable)
    assert "no small node came of the request" in fell_back.why
    refused = request("ours", "small", created="2026-12-06T11:00:00Z", phase="Rejected")
    said = replace.request_state(record, [refused])
    assert isinstance(said, replace.Unreplaceable)
    assert said.why == "ScaleRequest ours for the replacement was Rejected: node pool is gone"


def test_a_victim_no_longer_tainted_calls_the_replacement_off() -> None:
    victims, record = marked_victims()
    untainted = [victims[0], dataclasses.replace(victims[1], tainted=False)]
    step = replace.next_step(record, views=untainted, nodes=[], requested="open", settled=False)
    assert step == replace.Unreplaceable(
        ("large-1", "large-2"), "node large-2 is no longer a victim"
    )


def test_an_unreadable_or_foreign_mark_is_no_replacement() -> None:
    [first, _] = two_underused_large()[0]
    assert replace.read_mark(marked(first, "not json")) is None
    other = replace.Replacement(("large-9",), ("small", ZONE, "on-demand"), 0.1, 0.4)
    assert replace.read_mark(marked(first, replace.mark(other, now=1.0))) is None


def test_victims_named_already_are_on_their_way_not_called_off() -> None:
    victims, record = marked_victims()
    # Named by an open request (not eligible, no room) or drained: the NodePool
    # controller's; the mark goes with the Nodes.
    named = [dataclasses.replace(v, eligible=False, gives_room=False) for v in victims]
    step = replace.next_step(record, views=named, nodes=[], requested="open", settled=False)
    assert step == "done"
    draining = [dataclasses.replace(v, eligible=False, removing=True) for v in victims]
    step = replace.next_step(record, views=draining, nodes=[], requested="open", settled=True)
    assert step == "done"


def candidates(views: list[NodeView], *, no_room: tuple[str, ...] = ()) -> list[str]:
    found = replace.replacement_candidates(
        views, no_room=no_room, threshold=0.5, movable=consolidation_rules.movable_problem
    )
    return [v.name for v in found]


def test_a_well_used_node_a_cheaper_type_holds_is_replaced_as_karpenter_would() -> None:
    # A large node half used by one pod (no removal candidate: at the 0.5 threshold) whose
    # pod a small node holds: before, only underused Nodes were offered for a replace, and
    # this one stayed at 4x the price (the on-demand scale-down row of the cost bench).
    busy = view("large-1", "large", pod("a", "2"))
    assert busy.usage >= 0.5
    assert candidates([busy]) == ["large-1"]
    chosen = choose([busy], [], [offering("small")], threshold=0.5)
    assert isinstance(chosen, replace.Replacement)
    assert (chosen.victims, chosen.offering[0]) == (("large-1",), "small")


def test_the_underused_kept_for_room_come_first_then_the_well_used_cheapest_to_move() -> None:
    underused = view("large-1", "large", pod("a"))  # 0.125 used: a no-room Node
    busy_two = view("large-2", "large", pod("b1", "1"), pod("b2", "1"))
    busy_one = view("large-3", "large", pod("c", "3"))
    found = candidates([busy_two, busy_one, underused], no_room=("large-1",))
    assert found == ["large-1", "large-3", "large-2"]


def test_a_well_used_node_a_drain_may_not_empty_is_no_candidate() -> None:
    bare = {**pod("bare", "3"), "metadata": {"name": "bare", "namespace": "apps", "uid": "x"}}
    on_disk = pod("disk", "3")
    on_disk["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    views = [
        view("large-1", "large", bare),
        view("large-2", "large", on_disk),
        view("large-3", "large", pod("c", "3"), tainted=True),
        dataclasses.replace(view("large-4", "large", pod("d", "3")), eligible=False),
        dataclasses.replace(view("large-5", "large", pod("e", "3")), disrupting=True),
        view("large-6", "large"),  # empty: it simply goes
        view("large-7", "large", pod("f", "1")),  # underused, not kept for room
    ]
    assert candidates(views) == []


def test_a_well_used_node_whose_pods_fit_on_the_others_gets_no_new_node() -> None:
    # Its pods fit on large-2's room: no new Node is needed, and whether it may simply go
    # is the utilisation threshold's call, not a replacement's.
    busy = view("large-1", "large", pod("a", "2"))
    room = [existing("large-1", "large", pod("a", "2")), existing("large-2", "large")]
    chosen = choose([busy], room, [offering("small")], threshold=0.5)
    assert isinstance(chosen, replace.Unreplaceable)
    assert "no new node is needed" in chosen.why


def test_at_most_ten_well_used_nodes_are_weighed_in_a_pass() -> None:
    busy = [view(f"large-{i:02}", "large", pod(f"p{i}", "3")) for i in range(15)]
    assert candidates(busy) == [f"large-{i:02}" for i in range(replace.MAX_WELL_USED_CANDIDATES)]


def test_a_node_is_never_replaced_by_its_own_type_whose_price_rounds_up() -> None:
    # Karpenter kwok's c-16x spot costs $0.30405181685759997/h: the Node's price, read
    # through the catalog rounded to six places, is $0.304052/h, and the unrounded offering
    # was "cheaper" -- the cost bench's spot scale-down replaced c-16x by c-16x every 13 s.
    exact = 0.30405181685759997
    busy = view("large-1", "large", pod("a", "3"))
    chosen = choose(
        [busy],
        [],
        [offering("large", exact)],
        prices=lambda v: round(exact, 6),
        threshold=0.5,
    )
    assert isinstance(chosen, replace.Unreplaceable)
    assert "no offering the pool allows is cheaper" in chosen.why
