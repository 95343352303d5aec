"""Consolidation within the pool's disruption budgets, end to end: with ``nodes: "1"``
three empty Nodes go one at a time, never two tainted or named at once, each kept one
told which budget holds it. Control plane, scheduler, kwok, simcloud and operator
processes."""

from __future__ import annotations

import asyncio
import time

from e2e.consolidating import (
    UNNEEDED,
    autoscaler_events,
    consolidating,
    pool_nodes,
    pool_settled,
)
from e2e.scenes import World
from harness import MERGE, POOLS, REQUESTS, wait_for
from nodepool_operator.api import wellknown

NODES = 3


async def test_a_budget_of_one_node_takes_three_empty_nodes_one_at_a_time(world: World) -> None:
    _, operator = await world.operated(latency=0)
    await world.create_pool(max_nodes=10)
    await world.custom.patch_cluster_custom_object(
        *POOLS,
        world.pool,
        {"spec": {"targetNodes": NODES, "disruption": {"budgets": [{"nodes": "1"}]}}},
        _content_type=MERGE,
    )
    await wait_for(lambda: pool_settled(world.custom, world.pool, NODES), within=90, every=0.5)
    await world.create_autoscaler(unneeded_seconds=UNNEEDED)

    most_tainted = 0
    deadline = time.monotonic() + 150
    while not await pool_settled(world.custom, world.pool, 0):
        assert time.monotonic() < deadline, "the pool did not come down to 0 in 150 s"
        nodes = await pool_nodes(world.core, world.pool)
        most_tainted = max(most_tainted, sum(1 for n in nodes if consolidating(n)))
        await asyncio.sleep(0.05)

    assert most_tainted == 1
    requests = await world.custom.list_cluster_custom_object(
        *REQUESTS, label_selector=wellknown.pool_selector(world.pool)
    )
    named = [r["spec"].get("removeNodes", []) for r in requests["items"]]
    removals = [names for names in named if names]
    assert len(removals) == NODES, named
    assert all(len(names) == 1 for names in removals), named
    kept = await autoscaler_events(world.core, world.autoscaler, "ConsolidationKept")
    assert any("budget nodes=1: 1 of 1 in use" in m and "disruption-budget" in m for m in kept)
    assert operator.errors_logged() == []
