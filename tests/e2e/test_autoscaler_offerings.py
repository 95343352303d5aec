"""The Autoscaler grows a pool of many instance types with catalog offerings, on the real
control plane with simcloud selling a catalog (``--catalog``): pending pods end up on the
cheapest nodes that hold them, and the ScaleRequest names those offerings
(``newNodeOfferings``). A pool with only a template, beside it in the same cloud, is
planned as it always was (no offerings named, nodes of its template's shape)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

import catalogs
import workloads
from e2e.autoscaling import make_autoscaler, make_pool, pod, running, scale_up
from e2e.scenes import World
from harness import POOLS, REQUESTS, Operator, SimCloud, wait_for
from nodepool_operator.api import wellknown

ZONES = ("sim-1a", "sim-1b")
#: (name, cores, GiB, price per hour in sim-1a; sim-1b costs 0.01 more)
TYPES = (("c2", 2, 4, 0.10), ("c8", 8, 16, 0.36), ("c32", 32, 64, 1.30))
PRICE = {name: price for name, _, _, price in TYPES}


@pytest.fixture
async def cloud(world: World, tmp_path: Path) -> SimCloud:
    """simcloud selling the three types in both zones; VMs boot in 0.2 s."""
    sold = catalogs.catalog_file(tmp_path / "instance_types.json", TYPES, ZONES)
    return await world.cloud("--catalog", str(sold), latency=0.2)


def _pod(name: str, cpu: str, pool: str) -> dict[str, Any]:
    return pod(
        name,
        {
            "nodeSelector": {wellknown.POOL_LABEL: pool},
            "containers": [workloads.container(cpu, memory="64Mi")],
        },
    )


async def _requests_of(custom: client.CustomObjectsApi, pool: str) -> list[dict[str, Any]]:
    found = await custom.list_cluster_custom_object(*REQUESTS)
    return [r for r in found["items"] if r["spec"]["nodePoolName"] == pool]


async def _offerings_of_nodes(core: client.CoreV1Api, pool: str) -> list[tuple[str, str]]:
    found = await core.list_node(label_selector=wellknown.pool_selector(pool))
    return sorted(
        (
            n.metadata.labels.get(wellknown.INSTANCE_TYPE_LABEL, ""),
            n.metadata.labels.get(wellknown.ZONE_LABEL, ""),
        )
        for n in found.items
    )


async def test_pending_pods_get_the_cheapest_offerings_that_hold_them(
    world: World, cloud: SimCloud
) -> None:
    operator: Operator = world.start_operator(cloud)
    api_client, custom, core = world.api_client, world.custom, world.core
    pool_name, autoscaler_name, namespace = world.pool, world.autoscaler, world.namespace
    await custom.create_cluster_custom_object(
        *POOLS, catalogs.many_types_pool(pool_name, TYPES, ZONES)
    )
    await make_autoscaler(custom, autoscaler_name, pool=pool_name, namespace=namespace)

    # The big pod first, then the small ones once it runs: where kube-scheduler puts pods
    # that wait together for several new nodes is its own choice (the small ones may take
    # the c32's room first), and this test is about the plan.
    await scale_up(
        api_client,
        pool=pool_name,
        namespace=namespace,
        pods=[_pod("big", "30", pool_name)],
        running_pods=1,
    )
    # Only c32 holds 30 cpu: one, in sim-1a, the cheaper zone.
    assert await _offerings_of_nodes(core, pool_name) == [("c32", "sim-1a")]
    small = [_pod(f"small-{i}", "250m", pool_name) for i in range(20)]
    await scale_up(api_client, pool=pool_name, namespace=namespace, pods=small, running_pods=21)

    # The c32's 31.9 cpu left after the reserve take 7 small pods beside the big one (the
    # plan counts a Node of the pool at its offering's shape); the other 13 (3.25 cpu)
    # fit two c2 (7 each in 1.9 cpu) for 0.20/h, where a c8 costs 0.36; sim-1a is the
    # cheaper zone. 1.30 + 2 x 0.10 = 1.50/h.
    requests = sorted(
        await _requests_of(custom, pool_name), key=lambda r: r["metadata"]["creationTimestamp"]
    )
    asked = [
        sorted(
            (o["instanceType"], o["zone"], o["capacityType"], o["count"])
            for o in r["spec"]["newNodeOfferings"]
        )
        for r in requests
    ]
    assert asked == [
        [("c32", "sim-1a", "on-demand", 1)],
        [("c2", "sim-1a", "on-demand", 2)],
    ], [r["spec"] for r in requests]
    assert [r["spec"]["targetNodes"] for r in requests] == [1, 3]
    assert await _offerings_of_nodes(core, pool_name) == [
        ("c2", "sim-1a"),
        ("c2", "sim-1a"),
        ("c32", "sim-1a"),
    ]
    placed = await core.read_namespaced_pod("big", namespace)
    host = await core.read_node(placed.spec.node_name)
    assert host.metadata.labels[wellknown.INSTANCE_TYPE_LABEL] == "c32"

    async def costed() -> float | None:
        found: dict[str, Any] = await custom.get_cluster_custom_object(*POOLS, pool_name)
        cost = (found.get("status") or {}).get("costPerHour")
        return cost if cost is not None else None

    cost = await wait_for(costed, within=30)
    assert abs(cost - (PRICE["c32"] + 2 * PRICE["c2"])) < 1e-6
    assert cost < PRICE["c32"] + PRICE["c8"]  # the other way to hold them all
    assert operator.errors_logged() == []


async def test_a_pool_with_only_a_template_is_planned_as_before_beside_a_catalog(
    world: World, cloud: SimCloud
) -> None:
    operator: Operator = world.start_operator(cloud)
    api_client, custom, core = world.api_client, world.custom, world.core
    pool_name, autoscaler_name, namespace = world.pool, world.autoscaler, world.namespace
    await make_pool(custom, pool_name)  # 4 cpu, 16Gi: no requirements
    await make_autoscaler(custom, autoscaler_name, pool=pool_name, namespace=namespace)

    pods = [_pod(f"p{i}", "1500m", pool_name) for i in range(4)]
    history = await scale_up(
        api_client, pool=pool_name, namespace=namespace, pods=pods, running_pods=4
    )

    # Two 1.5-cpu pods per 4-cpu template node: two nodes in one request, as ever.
    assert history.values == [0, 2]
    [request] = await _requests_of(custom, pool_name)
    assert request["spec"].get("newNodeOfferings") in (None, [])
    found = await core.list_node(label_selector=wellknown.pool_selector(pool_name))
    assert sorted(n.status.capacity["cpu"] for n in found.items) == ["4", "4"]
    assert all(wellknown.INSTANCE_TYPE_LABEL not in n.metadata.labels for n in found.items)
    assert await running(core, namespace, 4)
    assert operator.errors_logged() == []
