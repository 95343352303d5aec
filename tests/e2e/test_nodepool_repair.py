"""Repair end to end: a Node kept NotReady past its pool's timeout is replaced, a Node and
a VM deleted out of band come back, and a cloud whose listing comes back empty makes the
operator delete nothing (it says so in ``Degraded`` instead), and a whole pool NotReady at
once (a partition, not broken machines) is not replaced but waited for.

kwok makes every Node it manages Ready, so a Node is kept NotReady by taking it out of
kwok's hands (its ``kwok.x-k8s.io/node`` annotation) and writing its Ready condition
through the status subresource, as a kubelet that stopped reporting would leave it.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kubernetes_asyncio import client

from e2e import scenes
from e2e.node_faults import pool_nodes, stop_reporting
from e2e.scenes import World
from harness import MERGE, POOLS, settled, wait_for
from nodepool_operator.cloud.provider import VmName, VmState
from nodepool_operator.cloud.simcloud import wire


async def condition(custom: client.CustomObjectsApi, pool: str, kind: str) -> dict[str, Any]:
    found = await custom.get_cluster_custom_object(*POOLS, pool)
    for item in found.get("status", {}).get("conditions", []):
        if item["type"] == kind:
            return dict(item)
    return {}


async def test_a_node_kept_not_ready_is_replaced(world: World) -> None:
    _, operator, custom = await scenes.settled_pool(world, target=2, notReadyTimeoutSeconds=5)
    before = await pool_nodes(world.core, world.pool)
    broken = f"{world.pool}-1"

    await world.core.patch_node(
        broken, {"metadata": {"annotations": {"kwok.x-k8s.io/node": None}}}, _content_type=MERGE
    )
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    await world.core.patch_node_status(
        broken,
        {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "False",
                        "reason": "KubeletStopped",
                        "message": "e2e",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ]
            }
        },
    )

    async def replaced() -> bool:
        nodes = await pool_nodes(world.core, world.pool)
        return before[broken] not in nodes.values() and len(nodes) == 2

    await wait_for(replaced, within=60)
    await wait_for(lambda: settled(custom, world.pool, 2), within=60)
    after = await pool_nodes(world.core, world.pool)
    assert after[f"{world.pool}-0"] == before[f"{world.pool}-0"]  # the healthy one stayed
    assert "event=node-repair" in operator.output()
    assert operator.errors_logged() == []


async def test_a_whole_pool_not_ready_at_once_is_not_replaced_and_comes_back(world: World) -> None:
    cloud, operator, custom = await scenes.settled_pool(
        world, target=5, create_latency=0.2, notReadyTimeoutSeconds=3
    )
    before = await pool_nodes(world.core, world.pool)
    assert len(before) == 5

    await asyncio.gather(*(stop_reporting(world.core, name) for name in before))

    async def held() -> bool:
        found = await condition(custom, world.pool, "Degraded")
        return found.get("reason") == "RepairHeld"

    await wait_for(held, within=60)
    found = await condition(custom, world.pool, "Degraded")
    assert "5 of 5 nodes are NotReady at once" in found["message"]
    await asyncio.sleep(8)  # well past notReadyTimeoutSeconds, several passes
    after = await pool_nodes(world.core, world.pool)
    assert len(set(before.values()) - set(after.values())) <= 1  # at most one replaced
    assert cloud.client is not None
    assert (await cloud.client.stats()).deletions_started <= 1

    # They come back: kwok reports for them again.
    await asyncio.gather(
        *(
            world.core.patch_node(
                name,
                {"metadata": {"annotations": {"kwok.x-k8s.io/node": "fake"}}},
                _content_type=MERGE,
            )
            for name in after
        )
    )
    await wait_for(lambda: settled(custom, world.pool, 5), within=60)

    async def healthy() -> bool:
        found = await condition(custom, world.pool, "Degraded")
        return found.get("status") == "False"

    await wait_for(healthy, within=30)
    assert len(await pool_nodes(world.core, world.pool)) == 5
    assert "event=repair-held" in operator.output()
    assert operator.errors_logged() == []


async def test_a_node_and_a_vm_deleted_out_of_band_come_back(world: World) -> None:
    cloud, operator, custom = await scenes.settled_pool(world, target=2)
    before = await pool_nodes(world.core, world.pool)
    assert cloud.client is not None

    # The VM first: nothing tells the operator (the cloud has no watch) until it lists
    # the pool again, which the Node's deletion below makes it do at once.
    await cloud.client.delete_vm(VmName(f"{world.pool}-0"))
    await world.core.delete_node(f"{world.pool}-1")

    async def back() -> bool:
        nodes = await pool_nodes(world.core, world.pool)
        return len(nodes) == 2 and not set(nodes.values()) & set(before.values())

    await wait_for(back, within=60)
    await wait_for(lambda: settled(custom, world.pool, 2), within=60)
    vms = await cloud.client.list_vms(pool=world.pool)
    assert sum(1 for vm in vms if vm.state == VmState.RUNNING) == 2
    assert operator.errors_logged() == []


async def test_an_empty_vm_listing_deletes_nothing(world: World) -> None:
    cloud, _, custom = await scenes.settled_pool(world, target=2)
    before = await pool_nodes(world.core, world.pool)
    assert cloud.client is not None

    await cloud.client.set_faults(wire.Faults(list_empty=True))
    try:
        # Any change to one of its Nodes makes the operator look at the pool again.
        await world.core.patch_node(
            f"{world.pool}-0",
            {"metadata": {"labels": {"e2e.nodepool.dev/touch": "1"}}},
            _content_type=MERGE,
        )

        async def degraded() -> bool:
            found = await condition(custom, world.pool, "Degraded")
            return found.get("reason") == "CloudListEmpty" and found.get("status") == "True"

        await wait_for(degraded, within=30)
        await asyncio.sleep(5)  # several passes on a backoff
        assert await pool_nodes(world.core, world.pool) == before
        stats = await cloud.client.stats()
        assert stats.deletions_started == 0
    finally:
        await cloud.client.set_faults(wire.Faults(list_empty=False))

    async def recovered() -> bool:
        found = await condition(custom, world.pool, "Degraded")
        return found.get("status") == "False"

    await wait_for(recovered, within=60)
    assert await pool_nodes(world.core, world.pool) == before
