"""The NodePool controller end to end: real control plane, simcloud and operator processes."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from kubernetes_asyncio import client

from harness import MERGE, POOLS, Operator, SimCloud, kubectl, pool_body, settled, wait_for
from nodepool_devtools.cluster import audit, binaries
from nodepool_devtools.cluster.pytest_plugin import Cluster
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


async def test_scale_0_to_5_then_kubectl_scale(
    api_client: client.ApiClient,
    cluster: Cluster,
    start_simcloud: Any,
    start_operator: Any,
    pool_name: str,
) -> None:
    cloud: SimCloud = await start_simcloud("--create-latency", "2", "--latency-jitter", "0.5")
    operator: Operator = start_operator(cloud)
    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)
    await custom.create_cluster_custom_object(*POOLS, pool_body(pool_name))
    await wait_for(lambda: settled(custom, pool_name, 0), within=30)

    await custom.patch_cluster_custom_object(
        *POOLS, pool_name, {"spec": {"targetNodes": 5}}, _content_type=MERGE
    )
    pool = await wait_for(lambda: settled(custom, pool_name, 5), within=60)
    await assert_exactly(cloud, core, pool_name, 5)
    assert pool["status"]["selector"] == f"{wellknown.POOL_LABEL}={pool_name}"

    kubectl_path = binaries.ensure_binaries()["kubectl"]
    await kubectl(kubectl_path, cluster.kubeconfig, "scale", f"np/{pool_name}", "--replicas=7")
    await wait_for(lambda: settled(custom, pool_name, 7), within=60)
    await assert_exactly(cloud, core, pool_name, 7)

    table = await kubectl(kubectl_path, cluster.kubeconfig, "get", "np", pool_name)
    header, row = table.splitlines()[:2]
    assert header.split() == [
        "NAME", "TARGET", "CURRENT", "READY", "OPERATION", "DEGRADED", "REASON", "AGE"
    ]  # fmt: skip
    assert row.split()[:7] == [pool_name, "7", "7", "7", "inactive", "False", "AsExpected"]
    assert operator.errors_logged() == []


async def test_sigkill_during_scale_up_leaves_no_orphan_and_no_duplicate(
    api_client: client.ApiClient,
    start_simcloud: Any,
    start_operator: Any,
    pool_name: str,
) -> None:
    cloud: SimCloud = await start_simcloud("--create-latency", "2", "--latency-jitter", "1")
    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)
    await custom.create_cluster_custom_object(*POOLS, pool_body(pool_name, target=10))
    rng = random.Random(7)
    for _ in range(4):
        operator = start_operator(cloud)
        await asyncio.sleep(rng.uniform(0.5, 2.5))
        operator.kill()
    start_operator(cloud)
    await wait_for(lambda: settled(custom, pool_name, 10), within=90)
    await assert_exactly(cloud, core, pool_name, 10)


async def test_concurrent_label_writer_loses_nothing_and_scale_completes(
    api_client: client.ApiClient,
    cluster: Cluster,
    start_simcloud: Any,
    start_operator: Any,
    pool_name: str,
) -> None:
    cloud: SimCloud = await start_simcloud("--create-latency", "1", "--latency-jitter", "0.5")
    operator: Operator = start_operator(cloud)
    custom = client.CustomObjectsApi(api_client)
    await custom.create_cluster_custom_object(*POOLS, pool_body(pool_name))
    await wait_for(lambda: settled(custom, pool_name, 0), within=30)

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
            await custom.patch_cluster_custom_object(*POOLS, pool_name, patch, _content_type=MERGE)
            written.append(count)
            await asyncio.sleep(0.02)

    task = asyncio.create_task(writer())
    try:
        await wait_for(lambda: asyncio.sleep(0, len(written) >= 10), within=10)
        await custom.patch_cluster_custom_object(
            *POOLS, pool_name, {"spec": {"targetNodes": 6}}, _content_type=MERGE
        )
        await wait_for(lambda: settled(custom, pool_name, 6), within=60)
    finally:
        stop.set()
        await task
    pool = await get_pool(custom, pool_name)
    last = written[-1]
    assert len(written) > 20  # the writer kept writing through the whole scale-up
    assert pool["metadata"]["labels"]["writer/count"] == str(last)
    for count in range(max(1, last - 49), last + 1):
        assert pool["metadata"]["annotations"][f"writer/note-{count % 50}"] == str(count)
    assert pool["spec"]["targetNodes"] == 6
    assert operator.errors_logged() == []


@pytest.mark.slow
async def test_idle_operator_makes_no_writes_and_label_change_causes_no_work(
    api_client: client.ApiClient,
    cluster: Cluster,
    start_simcloud: Any,
    start_operator: Any,
    pool_name: str,
) -> None:
    log = cluster.audit_log()
    cloud: SimCloud = await start_simcloud("--create-latency", "1", "--latency-jitter", "0")
    start_operator(cloud)
    custom = client.CustomObjectsApi(api_client)
    await custom.create_cluster_custom_object(*POOLS, pool_body(pool_name, target=3))
    await wait_for(lambda: settled(custom, pool_name, 3), within=60)
    await asyncio.sleep(2)  # let the last status write and its events land
    assert cloud.client is not None
    calls_before = (await cloud.client.stats()).calls_total
    # The filter below can see the operator: it wrote while scaling up.
    assert audit.writes(log.events(), user=OPERATOR_USER) != []
    log.mark()
    await custom.patch_cluster_custom_object(
        *POOLS, pool_name, {"metadata": {"labels": {"team": "blue"}}}, _content_type=MERGE
    )
    await asyncio.sleep(60)
    assert audit.writes(log.events_since_mark(), user=OPERATOR_USER) == []
    assert (await cloud.client.stats()).calls_total == calls_before
