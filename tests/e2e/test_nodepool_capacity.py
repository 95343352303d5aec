"""Capacity that runs out, on the real control plane with simcloud's capacity faults: a
zone without room is backed off in the pool's status and the pool grows in its other
zone, a restarted operator keeps the backoff, and the zone is used again after it; a
pool whose shape has no room anywhere cannot grow, and the Autoscaler sends its pods to
the next pool."""

from __future__ import annotations

import contextlib
import json
import uuid
from typing import Any

import pytest
from kubernetes_asyncio import client

from e2e.autoscaling import create_autoscaler, events, running
from e2e.scenes import World
from harness import AUTOSCALERS, MERGE, POOLS, SimCloud, remove_pool, settled, wait_for
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud.simcloud import wire
from workloads import deployment

ZONES = ("sim-1a", "sim-1b")


def zoned_pool(name: str, *, target: int, cpu: str = "4", weight: int = 0) -> dict[str, Any]:
    spec = nodepool_api.NodePoolSpec(
        target_nodes=target,
        max_nodes=10,
        weight=weight,
        template=nodepool_api.NodeTemplate(cpu=cpu, memory="16Gi", pods=110, zones=ZONES),
    )
    return nodepool_api.manifest(name, spec)


async def pool_status(custom: client.CustomObjectsApi, name: str) -> dict[str, Any]:
    found: dict[str, Any] = await custom.get_cluster_custom_object(*POOLS, name)
    return dict(found.get("status") or {})


def degraded(status: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == "Degraded"), {})


async def zones_of(core: client.CoreV1Api, pool: str) -> dict[str, str]:
    found = await core.list_node(label_selector=f"{wellknown.POOL_LABEL}={pool}")
    return {n.metadata.name: n.metadata.labels.get(wellknown.ZONE_LABEL) for n in found.items}


@pytest.mark.slow
async def test_a_zone_out_of_capacity_is_skipped_across_a_restart_and_used_after_its_backoff(
    world: World,
) -> None:
    faults = {"capacity": [{"zone": "sim-1a", "maxVms": 0}]}
    cloud: SimCloud = await world.start_simcloud(
        "--create-latency", "0.2", "--latency-jitter", "0", "--faults", json.dumps(faults)
    )
    operator = world.start_operator(cloud)
    await world.custom.create_cluster_custom_object(*POOLS, zoned_pool(world.pool, target=3))

    await wait_for(lambda: settled(world.custom, world.pool, 3), within=60)
    assert set((await zones_of(world.core, world.pool)).values()) == {"sim-1b"}
    status = await pool_status(world.custom, world.pool)
    [backoff] = status["zoneBackoffs"]
    assert (backoff["zone"], backoff["reason"], backoff["failures"]) == (
        "sim-1a",
        "InsufficientCapacity",
        1,
    )
    assert degraded(status)["reason"] == "ZonesBackedOff"
    [event] = await events(world.core, "default", name=world.pool, reason="InsufficientCapacity")
    assert "zone sim-1a" in event.message

    # A new operator, mid-backoff: it reads the backoff from the status and never asks
    # the zone again before its end (a second refusal would count 2).
    operator.stop()
    operator = world.start_operator(cloud)
    await world.custom.patch_cluster_custom_object(
        *POOLS, world.pool, {"spec": {"targetNodes": 4}}, _content_type=MERGE
    )
    await wait_for(lambda: settled(world.custom, world.pool, 4), within=60)
    assert set((await zones_of(world.core, world.pool)).values()) == {"sim-1b"}
    [kept] = (await pool_status(world.custom, world.pool))["zoneBackoffs"]
    assert kept == backoff
    assert "event=zone-backoff" not in operator.output()

    # Room again; once the backoff is over the zone takes the next VM.
    assert cloud.client is not None
    await cloud.client.set_faults(wire.Faults())

    async def over() -> bool:
        return degraded(await pool_status(world.custom, world.pool)).get("status") == "False"

    await wait_for(over, within=90)  # the backoff's minute, counted from the refusal
    await world.custom.patch_cluster_custom_object(
        *POOLS, world.pool, {"spec": {"targetNodes": 5}}, _content_type=MERGE
    )
    await wait_for(lambda: settled(world.custom, world.pool, 5), within=60)
    assert "sim-1a" in (await zones_of(world.core, world.pool)).values()
    assert "zoneBackoffs" not in await pool_status(world.custom, world.pool)
    assert operator.errors_logged() == []


async def test_a_shape_without_capacity_sends_the_pods_to_the_next_pool(world: World) -> None:
    faults = {"capacity": [{"cpu": "8", "memory": "16Gi", "maxVms": 0}]}
    cloud: SimCloud = await world.start_simcloud(
        "--create-latency", "0.2", "--latency-jitter", "0", "--faults", json.dumps(faults)
    )
    operator = world.start_operator(cloud)
    # The preferred pool (weight 10) is of the shape the cloud has no room for.
    preferred, fallback = world.pool, f"pool-{uuid.uuid4().hex[:6]}"
    fallback_scaler = f"nas-{uuid.uuid4().hex[:6]}"
    await world.custom.create_cluster_custom_object(
        *POOLS, zoned_pool(preferred, target=0, cpu="8", weight=10)
    )
    await world.custom.create_cluster_custom_object(*POOLS, zoned_pool(fallback, target=0))
    try:
        await create_autoscaler(
            world.custom, world.autoscaler, pool=preferred, namespace=world.namespace
        )
        await create_autoscaler(
            world.custom, fallback_scaler, pool=fallback, namespace=world.namespace
        )
        await world.apps.create_namespaced_deployment(
            world.namespace, deployment("web", selector={}, replicas=4, cpu="1")
        )

        await wait_for(lambda: running(world.core, world.namespace, 4), within=120)
        pods = (await world.core.list_namespaced_pod(world.namespace)).items
        hosts = {p.spec.node_name for p in pods}
        assert all(host.startswith(fallback) for host in hosts)
        status = await pool_status(world.custom, preferred)
        assert degraded(status)["reason"] == "InsufficientCapacity"
        assert {b["zone"] for b in status["zoneBackoffs"]} == set(ZONES)
        assert (await pool_status(world.custom, preferred)).get("currentNodes", 0) == 0
        told = await events(world.core, "default", name=preferred, reason="InsufficientCapacity")
        assert told
        assert operator.errors_logged() == []
    finally:
        with contextlib.suppress(client.exceptions.ApiException):
            await world.custom.delete_cluster_custom_object(*AUTOSCALERS, fallback_scaler)
        await remove_pool(world.custom, fallback)
