"""Consolidation within the pool's disruption budgets (``spec.disruption.budgets``): no more
of the pool's Nodes tainted than the budget in force allows, counting those the NodePool
controller is replacing; a Node it is replacing is never a candidate; a budget's window
holds the Nodes until it closes, and the next look is when it does."""

from __future__ import annotations

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import wellknown
from nodepool_operator.api.disruption import Budget
from nodepool_operator.runtime.informer import object_key
from unit.autoscaler.reconcile_world import World, stamp, taints

CONSOLIDATING = wellknown.CONSOLIDATING_TAINT_KEY
NAMES = ("n1", "n2", "n3")
MINUTE = 60


def consolidating(world: World) -> list[str]:
    return [n for n in NAMES if world.nodes.get(n) and CONSOLIDATING in taints(world, n)]


def named(world: World) -> list[list[str]]:
    return [r["spec"].get("removeNodes", []) for r in world.api.made("scalerequests")]


def kept_messages(world: World) -> list[str]:
    """The ConsolidationKept events on Nodes (each is told on the Autoscaler too)."""
    return [
        str(e["message"])
        for e in world.api.events("ConsolidationKept")
        if e["involvedObject"]["kind"] == "Node"
    ]


def three_empty_nodes(world: World, budgets: list[Budget], *, scan: int = 10) -> None:
    world.autoscaler(
        scan_interval_seconds=scan,
        scale_down=autoscaler_api.ScaleDownPolicy(unneeded_seconds=MINUTE),
    )
    world.pool(target=3, budgets=budgets)
    for name in NAMES:
        world.node(name)


def removed(world: World, name: str) -> None:
    """The NodePool controller drained and deleted the Node its request named."""
    node = world.nodes.get(name)
    assert node is not None
    world.nodes.remove(object_key(node))


def replacing_for_drift(world: World, name: str) -> None:
    """The NodePool controller tainted the Node for its drift replacement (not cordoned)."""
    node = world.nodes.get(name)
    assert node is not None
    node["spec"]["taints"] = [
        {"key": wellknown.DISRUPTED_TAINT_KEY, "value": "Drifted", "effect": "NoSchedule"}
    ]
    world.nodes.put(node)


async def test_a_budget_of_one_node_lets_consolidation_taint_one_empty_node_at_a_time() -> None:
    world = World()
    three_empty_nodes(world, [Budget(nodes="1")])
    await world.reconcile()  # stamped
    stamps = {n: stamp(world, n) for n in NAMES}
    assert all(stamps.values())
    await world.clock.advance(MINUTE)
    await world.reconcile()
    assert consolidating(world) == ["n1"]
    kept = kept_messages(world)
    assert {m.split()[1] for m in kept} == {"n2", "n3"}
    assert all("budget nodes=1: 1 of 1 in use" in m and "(disruption-budget)" in m for m in kept)
    await world.reconcile()  # the taint shows: named, and still no other tainted
    assert named(world) == [["n1"]]
    assert consolidating(world) == ["n1"]
    # The others keep their stamps: they go as soon as the budget allows, no new wait.
    assert stamp(world, "n2") == stamps["n2"]
    assert stamp(world, "n3") == stamps["n3"]
    world.show_requests(phase="Applied", applied=2)
    world.pool(target=2, budgets=[Budget(nodes="1")])
    removed(world, "n1")
    await world.reconcile()
    assert consolidating(world) == ["n2"]
    await world.reconcile()
    assert named(world)[-1] == ["n2"]
    assert consolidating(world) == ["n2"]


async def test_without_a_budget_every_empty_node_is_tainted_at_once() -> None:
    world = World()
    three_empty_nodes(world, [])
    await world.reconcile()
    await world.clock.advance(MINUTE)
    await world.reconcile()
    assert consolidating(world) == list(NAMES)


async def test_a_zero_budget_in_its_window_holds_every_node_until_the_window_closes() -> None:
    # The wall clock starts at 08:00 UTC: the window is open for its first half hour.
    window = Budget(nodes="0", reasons=("Empty",), schedule="0 8 * * *", duration="30m")
    world = World()
    three_empty_nodes(world, [window], scan=3600)
    await world.reconcile()
    await world.clock.advance(MINUTE)
    result = await world.reconcile()
    assert consolidating(world) == []
    assert named(world) == []
    kept = kept_messages(world)
    assert len(kept) == 3
    assert all("schedule '0 8 * * *' for 30m" in m for m in kept)
    # The next look is when the window closes (29 minutes on), not the hour's scan.
    assert result.requeue_after is not None
    assert 29 * MINUTE - 1 <= result.requeue_after <= 29 * MINUTE
    await world.clock.advance(29 * MINUTE - 1)
    await world.reconcile()
    assert consolidating(world) == []
    await world.clock.advance(1)
    await world.reconcile()
    assert consolidating(world) == list(NAMES)
    await world.reconcile()
    assert named(world) == [list(NAMES)]
    assert len(kept_messages(world)) == 3  # told once each, not every pass


async def test_a_node_being_replaced_for_drift_is_never_a_consolidation_candidate() -> None:
    world = World()
    three_empty_nodes(world, [])
    replacing_for_drift(world, "n1")
    await world.reconcile()
    assert stamp(world, "n1") is None
    await world.clock.advance(MINUTE)
    await world.reconcile()
    await world.reconcile()
    assert taints(world, "n1") == [wellknown.DISRUPTED_TAINT_KEY]
    assert consolidating(world) == ["n2", "n3"]
    assert named(world) == [["n2", "n3"]]


async def test_a_node_being_replaced_uses_the_budget_consolidation_shares() -> None:
    world = World()
    three_empty_nodes(world, [Budget(nodes="1")])
    replacing_for_drift(world, "n1")
    await world.reconcile()
    await world.clock.advance(MINUTE)
    await world.reconcile()
    await world.reconcile()
    assert consolidating(world) == []
    assert named(world) == []
    assert len(kept_messages(world)) == 2
    # Replaced (the pool back at its size without it): its room in the budget is free.
    world.pool(target=2, budgets=[Budget(nodes="1")])
    removed(world, "n1")
    await world.reconcile()
    assert consolidating(world) == ["n2"]
