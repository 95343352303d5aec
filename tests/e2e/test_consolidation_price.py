"""Consolidation by price end to end: underused large nodes whose pods cannot simply move
to each other are replaced by one cheaper node, launched first; the pods move through
the Eviction API (their PodDisruptionBudget respected) and none is lost; and a busy node
(over the utilisation threshold) is replaced by a cheaper type once the pool allows it.
Real control plane, scheduler, kwok, simcloud selling a catalog, and the operator."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

import catalogs
import workloads
from e2e.autoscaling import create_autoscaler, running
from e2e.consolidating import autoscaler_events, pool_nodes
from e2e.scenes import World
from harness import MERGE, POOLS, REQUESTS, Operator, SimCloud, wait_for
from nodepool_operator.api import wellknown
from nodepool_operator.cloud import catalog

ZONE = "sim-1a"
#: (name, cores, GiB, price per hour)
TYPES = (("c2", 2, 4, 0.10), ("c8", 8, 16, 0.36))
PRICE = {name: price for name, _, _, price in TYPES}
UNNEEDED = 5


@pytest.fixture
async def cloud(world: World, tmp_path: Path) -> SimCloud:
    """simcloud selling c2 and c8 in one zone. A c8 holds 3 pods at most: two c8 nodes
    with two small pods each cannot take each other's (removing one is impossible),
    while one c2 (58 pods) holds all four."""
    types = catalogs.instance_types(TYPES)
    types["c8"] = dataclasses.replace(types["c8"], pods=3)
    sold = catalog.Catalog.of(types, catalogs.catalog_of(TYPES, (ZONE,)).offerings)
    path = tmp_path / "instance_types.json"
    path.write_text(json.dumps(sold.to_json()))
    return await world.cloud("--catalog", str(path), latency=0.2)


def _deployment(name: str, *, pool: str, replicas: int, cpu: str) -> dict[str, Any]:
    return workloads.deployment(
        name, selector={wellknown.POOL_LABEL: pool}, replicas=replicas, cpu=cpu, memory="64Mi"
    )


async def _types(core: client.CoreV1Api, pool: str) -> list[str]:
    return sorted(
        n.metadata.labels.get(wellknown.INSTANCE_TYPE_LABEL, "")
        for n in await pool_nodes(core, pool)
    )


async def _cost(custom: client.CustomObjectsApi, pool: str) -> float | None:
    found: dict[str, Any] = await custom.get_cluster_custom_object(*POOLS, pool)
    cost = (found.get("status") or {}).get("costPerHour")
    return float(cost) if cost is not None else None


async def _web_running(core: client.CoreV1Api, namespace: str) -> list[Any]:
    found = await core.list_namespaced_pod(namespace, label_selector="app=web")
    return [
        p
        for p in found.items
        if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
    ]


async def test_a_scale_down_replaces_two_underused_large_nodes_with_one_cheaper_node(
    world: World, cloud: SimCloud
) -> None:
    operator: Operator = world.start_operator(cloud)
    api_client, custom, core = world.api_client, world.custom, world.core
    pool_name, autoscaler_name, namespace = world.pool, world.autoscaler, world.namespace
    apps, policy = world.apps, client.PolicyV1Api(api_client)
    pool = catalogs.many_types_pool(pool_name, TYPES, (ZONE,))
    # Both c8 nodes may be disrupted at once (the default, 10% of the nodes, allows one:
    # each would then be replaced or removed alone).
    pool["spec"]["disruption"] = {"budgets": [{"nodes": "2"}]}
    await custom.create_cluster_custom_object(*POOLS, pool)
    await create_autoscaler(
        custom, autoscaler_name, pool=pool_name, namespace=namespace, unneeded_seconds=UNNEEDED
    )
    # Two pods of 6 cpu: only a c8 holds one, so two c8 nodes.
    big = _deployment("big", pool=pool_name, replicas=2, cpu="6")
    await apps.create_namespaced_deployment(namespace, big)
    await wait_for(lambda: running(core, namespace, 2), within=90)
    assert await _types(core, pool_name) == ["c8", "c8"]
    # Four small pods, two beside each big one (a c8 holds three pods), and a budget that
    # lets two of them be disrupted at a time.
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
    }
    await policy.create_namespaced_pod_disruption_budget(namespace, budget)
    await apps.create_namespaced_deployment(
        namespace, _deployment("web", pool=pool_name, replicas=4, cpu="250m")
    )
    await wait_for(lambda: running(core, namespace, 6), within=60)
    before = await wait_for(lambda: _cost(custom, pool_name), within=30)
    c8_nodes = sorted(n.metadata.name for n in await pool_nodes(core, pool_name))
    assert abs(before - 2 * PRICE["c8"]) < 1e-6

    # The shrink: the big pods go, each c8 is left with two small pods (6% used).
    fewest: list[int] = []

    async def watch_web() -> None:
        while True:
            fewest.append(len(await _web_running(core, namespace)))
            await asyncio.sleep(0.2)

    watcher = asyncio.create_task(watch_web())
    try:
        await apps.delete_namespaced_deployment("big", namespace)

        async def one_small_node_holds_them_all() -> bool:
            if await _types(core, pool_name) != ["c2"]:
                return False
            web = await _web_running(core, namespace)
            [node] = await pool_nodes(core, pool_name)
            return len(web) == 4 and all(p.spec.node_name == node.metadata.name for p in web)

        await wait_for(one_small_node_holds_them_all, within=UNNEEDED + 120)
    finally:
        watcher.cancel()
    # No pod lost: the budget's two were always running while the others moved.
    assert min(fewest) >= 2, fewest

    # One replacement: both c8 nodes ($0.72/h together) by one c2 ($0.10/h), launched
    # first (one request for it), then both named in one request.
    [replacing] = await autoscaler_events(core, autoscaler_name, "ConsolidationReplacing")
    assert f"replace {c8_nodes[0]}, {c8_nodes[1]} ($0.7200/h)" in replacing
    assert "with one c2 in sim-1a (on-demand, $0.1000/h)" in replacing
    requests = sorted(
        (
            r
            for r in (await custom.list_cluster_custom_object(*REQUESTS))["items"]
            if r["spec"]["nodePoolName"] == pool_name
        ),
        key=lambda r: r["metadata"]["creationTimestamp"],
    )
    launched = [r["spec"].get("newNodeOfferings") for r in requests[1:]]
    named = [sorted(r["spec"].get("removeNodes") or ()) for r in requests[1:]]
    assert launched[0] == [
        {"instanceType": "c2", "zone": ZONE, "capacityType": "on-demand", "count": 1}
    ], launched
    assert named[1:] == [c8_nodes], named

    async def cheaper() -> float | None:
        cost = await _cost(custom, pool_name)
        return cost if cost is not None and abs(cost - PRICE["c2"]) < 1e-6 else None

    after = await wait_for(cheaper, within=30)
    assert after < before
    assert operator.errors_logged() == []


#: c4 has no more memory than c2: a pod of 2 GiB uses over half of either, so on a c4 it is
#: no scale-down candidate (utilizationThreshold 0.5), yet a c2 holds it for half the price.
BUSY_TYPES = (("c2", 2, 4, 0.10), ("c4", 4, 4, 0.20))


async def test_a_busy_node_a_cheaper_type_holds_is_replaced_once_the_pool_allows_that_type(
    world: World, tmp_path: Path
) -> None:
    types = catalogs.catalog_file(tmp_path / "types.json", BUSY_TYPES, (ZONE,))
    cloud = await world.cloud("--catalog", str(types), latency=0.2)

    operator: Operator = world.start_operator(cloud)
    custom, core, apps = world.custom, world.core, world.apps
    pool_name, namespace = world.pool, world.namespace
    # The pool allows only c4 at first: the pod gets a c4 node.
    pool = catalogs.many_types_pool(pool_name, BUSY_TYPES[1:], (ZONE,))
    await custom.create_cluster_custom_object(*POOLS, pool)
    await create_autoscaler(
        custom, world.autoscaler, pool=pool_name, namespace=namespace, unneeded_seconds=UNNEEDED
    )
    web = workloads.deployment(
        "web", selector={wellknown.POOL_LABEL: pool_name}, replicas=1, cpu="250m", memory="2Gi"
    )
    await apps.create_namespaced_deployment(namespace, web)
    await wait_for(lambda: running(core, namespace, 1), within=90)
    [c4_node] = [n.metadata.name for n in await pool_nodes(core, pool_name)]
    assert await _types(core, pool_name) == ["c4"]

    # The user widens the pool to c2 as well: the c4 node still meets the requirements (no
    # drift), is used over the threshold (no removal), and its pod fits on no other node.
    # Only a replace by price gives it up: before, such a node was never weighed.
    allowed = catalogs.requirements(BUSY_TYPES, (ZONE,))
    await custom.patch_cluster_custom_object(
        *POOLS, pool_name, {"spec": {"requirements": allowed}}, _content_type=MERGE
    )

    async def on_one_c2() -> bool:
        if await _types(core, pool_name) != ["c2"]:
            return False
        pods = await _web_running(core, namespace)
        [node] = await pool_nodes(core, pool_name)
        return len(pods) == 1 and pods[0].spec.node_name == node.metadata.name

    await wait_for(on_one_c2, within=UNNEEDED + 120)
    [replacing] = await autoscaler_events(core, world.autoscaler, "ConsolidationReplacing")
    assert f"replace {c4_node} ($0.2000/h) with one c2 in sim-1a (on-demand, $0.1000/h)" in (
        replacing
    ), replacing
    assert operator.errors_logged() == []
