"""The NodePool controller end to end: real control plane, simcloud and operator processes."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from kubernetes_asyncio import client

from e2e.scenes import World
from harness import MERGE, POOLS, SimCloud, kubectl, pool_body, settled, wait_for
from nodepool_devtools.cluster import audit, binaries
from nodepool_operator.api import wellknown

OPERATOR_USER = "nodepool-operator"


async def get_pool(custom: client.CustomObjectsApi, name: str) -> dict[str, Any]:
    pool: dict[str, Any] = await custom.get_cluster_custom_object(*POOLS, name)
    return pool


async def pool_nodes(core: client.CoreV1Api, name: str) -> list[Any]:
    found = await core.list_node(label_selector=f"{wellknown.POOL_LABEL}={name}")
    return list(found.items)


def ready(node: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


async def assert_exactly(cloud: SimCloud, core: client.CoreV1Api, name: str, count: int) -> None:
    assert cloud.client is not None
    vms = await cloud.client.list_vms(pool=name)
    nodes = await pool_nodes(core, name)
    assert sorted(vm.name for vm in vms) == sorted(n.metadata.name for n in nodes)
    assert len(vms) == count
    assert all(vm.state == "Running" for vm in vms)
    assert all(ready(n) for n in nodes)
    stats = await cloud.client.stats()
    duplicates = {vm: n for vm, n in stats.creations_by_name.items() if n > 1}
    assert duplicates == {}


async def test_scale_0_to_5_then_kubectl_scale(world: World) -> None:
    cloud, operator = await world.operated(latency=2, jitter=0.5)
    await world.custom.create_cluster_custom_object(*POOLS, pool_body(world.pool))
    await wait_for(lambda: settled(world.custom, world.pool, 0), within=30)

    await world.custom.patch_cluster_custom_object(
        *POOLS, world.pool, {"spec": {"targetNodes": 5}}, _content_type=MERGE
    )
    pool = await wait_for(lambda: settled(world.custom, world.pool, 5), within=60)
    await assert_exactly(cloud, world.core, world.pool, 5)
    assert pool["status"]["selector"] == f"{wellknown.POOL_LABEL}={world.pool}"

    kubectl_path = binaries.ensure_binaries()["kubectl"]
    await kubectl(
        kubectl_path, world.cluster.kubeconfig, "scale", f"np/{world.pool}", "--replicas=7"
    )
    await wait_for(lambda: settled(world.custom, world.pool, 7), within=60)
    await assert_exactly(cloud, world.core, world.pool, 7)

    table = await kubectl(kubectl_path, world.cluster.kubeconfig, "get", "np", world.pool)
    header, row = table.splitlines()[:2]
    columns = header.split()
    assert columns == [
        "NAME", "TARGET", "CURRENT", "READY", "OPERATION", "DRIFTED", "DEGRADED", "REASON", "AGE"
    ]  # fmt: skip
    # kubectl aligns each cell under its header and leaves an unset one blank (DRIFTED,
    # while no Node has drifted): read the cells by position, not as the row's n-th word.
    starts = [header.index(f"{name} ") if name != "AGE" else header.index(name) for name in columns]
    cells = [row[a:b].strip() for a, b in zip(starts, [*starts[1:], len(row)], strict=True)]
    assert cells[:8] == [world.pool, "7", "7", "7", "inactive", "", "False", "AsExpected"]
    assert operator.errors_logged() == []


async def test_sigkill_during_scale_up_leaves_no_orphan_and_no_duplicate(world: World) -> None:
    cloud = await world.cloud(latency=2, jitter=1)
    await world.custom.create_cluster_custom_object(*POOLS, pool_body(world.pool, target=10))
    rng = random.Random(7)
    for _ in range(4):
        operator = world.start_operator(cloud)
        await asyncio.sleep(rng.uniform(0.5, 2.5))
        operator.kill()
    world.start_operator(cloud)
    await wait_for(lambda: settled(world.custom, world.pool, 10), within=90)
    await assert_exactly(cloud, world.core, world.pool, 10)


async def test_concurrent_label_writer_loses_nothing_and_scale_completes(world: World) -> None:
    _, operator = await world.operated(latency=1, jitter=0.5)
    await world.custom.create_cluster_custom_object(*POOLS, pool_body(world.pool))
    await wait_for(lambda: settled(world.custom, world.pool, 0), within=30)

    stop = asyncio.Event()
    written: list[int] = []

    async def writer() -> None:
        count = 0
        while not stop.is_set():
            count += 1
            patch = {
                "metadata": {
                    "labels": {"writer/count": str(count)},
                    "annotations": {f"writer/note-{count % 50}": str(count)},
                }
            }
            await world.custom.patch_cluster_custom_object(
                *POOLS, world.pool, patch, _content_type=MERGE
            )
            written.append(count)
            await asyncio.sleep(0.02)

    task = asyncio.create_task(writer())
    try:
        await wait_for(lambda: asyncio.sleep(0, len(written) >= 10), within=10)
        await world.custom.patch_cluster_custom_object(
            *POOLS, world.pool, {"spec": {"targetNodes": 6}}, _content_type=MERGE
        )
        await wait_for(lambda: settled(world.custom, world.pool, 6), within=60)
    finally:
        stop.set()
        await task
    pool = await get_pool(world.custom, world.pool)
    last = written[-1]
    assert len(written) > 20  # the writer kept writing through the whole scale-up
    assert pool["metadata"]["labels"]["writer/count"] == str(last)
    for count in range(max(1, last - 49), last + 1):
        assert pool["metadata"]["annotations"][f"writer/note-{count % 50}"] == str(count)
    assert pool["spec"]["targetNodes"] == 6
    assert operator.errors_logged() == []


@pytest.mark.slow
def idle_calls(stats: Any) -> int:
    """The cloud calls an idle operator must not make: all but the interruption stream's
    long polls, which wait for the cloud's notices by design (one every few seconds)."""
    return int(stats.calls_total) - int(stats.calls.get("GET /v1/events", 0))


async def test_idle_operator_makes_no_writes_and_label_change_causes_no_work(world: World) -> None:
    log = world.cluster.audit_log()
    cloud = await world.cloud(latency=1)
    world.start_operator(cloud)
    await world.custom.create_cluster_custom_object(*POOLS, pool_body(world.pool, target=3))
    await wait_for(lambda: settled(world.custom, world.pool, 3), within=60)
    await asyncio.sleep(2)  # let the last status write and its events land
    assert cloud.client is not None
    calls_before = idle_calls(await cloud.client.stats())
    # The filter below can see the operator: it wrote while scaling up.
    assert audit.writes(log.events(), user=OPERATOR_USER) != []
    log.mark()
    await world.custom.patch_cluster_custom_object(
        *POOLS, world.pool, {"metadata": {"labels": {"team": "blue"}}}, _content_type=MERGE
    )
    await asyncio.sleep(60)
    assert audit.writes(log.events_since_mark(), user=OPERATOR_USER) == []
    assert idle_calls(await cloud.client.stats()) == calls_before
