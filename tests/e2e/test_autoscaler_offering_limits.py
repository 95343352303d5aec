"""A pool with requirements and ``limits``, on the real control plane with simcloud
selling a catalog: the Autoscaler never asks for a node that would take the pool past
its limits (so the NodePool controller never has to refuse one with ``LimitReached``),
and the pod the limits leave without a node is told why."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

import catalogs
import workloads
from e2e.autoscaling import events, make_autoscaler, pod, running
from e2e.scenes import World
from harness import POOLS, REQUESTS, SimCloud, wait_for
from nodepool_operator.api import wellknown

ZONES = ("sim-1a",)
TYPES = (("c2", 2, 4, 0.10), ("c8", 8, 16, 0.36), ("c32", 32, 64, 1.30))


@pytest.fixture
async def cloud(world: World, tmp_path: Path) -> SimCloud:
    sold = catalogs.catalog_file(tmp_path / "instance_types.json", TYPES, ZONES)
    return await world.cloud("--catalog", str(sold), latency=0.2)


async def test_the_plan_stays_within_the_pools_limits_and_tells_the_pod_left(
    world: World, cloud: SimCloud
) -> None:
    operator = world.start_operator(cloud)
    custom, core = world.custom, world.core
    pool_name, autoscaler_name, namespace = world.pool, world.autoscaler, world.namespace
    pool = catalogs.many_types_pool(pool_name, TYPES, ZONES)
    pool["spec"]["limits"] = {"cpu": "9"}
    await custom.create_cluster_custom_object(*POOLS, pool)
    await make_autoscaler(custom, autoscaler_name, pool=pool_name, namespace=namespace)
    for i in range(6):
        spec = {
            "nodeSelector": {wellknown.POOL_LABEL: pool_name},
            "containers": [workloads.container("1500m", memory="64Mi")],
        }
        await core.create_namespaced_pod(namespace, pod(f"p{i}", spec))

    # A c8 (7.9 cpu after the 100m reserve) holds five; the sixth would need a c2, and
    # 8 + 2 cpu is past the 9 the pool may have.
    await wait_for(lambda: running(core, namespace, 5), within=60)

    async def told() -> list[client.CoreV1Event] | None:
        pods = (await core.list_namespaced_pod(namespace)).items
        [pending] = [p.metadata.name for p in pods if p.status.phase == "Pending"]
        found = await events(core, namespace, name=pending, reason="NotTriggerScaleUp")
        return found or None

    [warning] = await wait_for(told, within=30)
    assert "its limits (limits.cpu=9) leave no room for a node that holds it" in (
        warning.message
    ), warning.message
    await asyncio.sleep(3)  # three more scans: no late request
    requests = (await custom.list_cluster_custom_object(*REQUESTS))["items"]
    asked = [
        (o["instanceType"], o["count"])
        for r in requests
        if r["spec"]["nodePoolName"] == pool_name
        for o in r["spec"]["newNodeOfferings"]
    ]
    assert asked == [("c8", 1)], [r["spec"] for r in requests]
    nodes = await core.list_node(label_selector=wellknown.pool_selector(pool_name))
    assert [n.metadata.labels[wellknown.INSTANCE_TYPE_LABEL] for n in nodes.items] == ["c8"]
    shown: dict[str, Any] = await custom.get_cluster_custom_object(*POOLS, pool_name)
    degraded = [
        c for c in (shown.get("status") or {}).get("conditions", []) if c["type"] == "Degraded"
    ]
    assert all(c.get("reason") != "LimitReached" for c in degraded), degraded
    assert operator.errors_logged() == []
