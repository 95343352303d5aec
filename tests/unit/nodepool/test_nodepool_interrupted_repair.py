"""The NodePool controller's repair, unchanged, replaces a Ready Node that carries the
cloud's interruption notice (``controllers.health`` reads it): drained through the
Eviction API first, then its VM and Node go and the size check launches anew."""

from __future__ import annotations

from nodepool_operator.controllers.interruptions import notice
from nodepool_operator.runtime import testing
from nodepool_operator.runtime.client import Object
from unit.nodepool import drain_world as fakes
from unit.nodepool.repair_world import World


def interrupted(name: str, *, extra: Object | None = None) -> Object:
    node = fakes.node(name)
    warning = notice.Notice(
        kind=notice.SPOT_INTERRUPTION, noticed_at=fakes.START, terminate_at=fakes.START + 120
    )
    testing.merge(node, notice.marks(node, warning))
    if extra is not None:
        testing.merge(node, extra)
    node["metadata"].pop("resourceVersion", None)
    return node


async def test_a_ready_node_with_a_spot_notice_is_drained_then_replaced_at_once() -> None:
    world = World("p-0", "p-1")
    world.nodes.put(fakes.node("p-0"))
    world.nodes.put(interrupted("p-1"))
    world.pods.put(fakes.pod("a", node_name="p-1"))

    await world.converge(2)
    [warning] = world.warnings("NodeRepair")
    assert "p-1" in warning
    assert world.api.evictions("a") == 1  # through the Eviction API, before anything goes
    assert world.cloud.deleted_at == {}

    world.pods.remove("ns/a")
    started = fakes.draining_since("p-1", fakes.START)
    world.nodes.put(interrupted("p-1", extra={"metadata": started["metadata"]}))
    await world.converge(2)
    assert world.cloud.deleted_at == {"p-1": fakes.START}
    assert world.nodes_deleted() == ["p-1"]

    world.nodes.remove("p-1")
    world.cloud.remove("p-1")
    await world.converge(2)
    assert world.cloud.order[-1] == "create p-1"


async def test_a_rebalance_recommendation_alone_replaces_nothing() -> None:
    world = World("p-0")
    node = fakes.node("p-0")
    rebalance = notice.Notice(kind=notice.REBALANCE, noticed_at=fakes.START)
    testing.merge(node, notice.marks(node, rebalance))
    node["metadata"].pop("resourceVersion", None)
    world.nodes.put(node)
    world.pods.put(fakes.pod("a", node_name="p-0"))

    await world.converge(1)

    assert world.warnings("NodeRepair") == []
    assert world.api.evictions() == 0
