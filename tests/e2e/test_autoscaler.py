"""The Autoscaler end to end: control plane, scheduler, kwok, simcloud and operator processes.

Pods that do not fit become ScaleRequests, ScaleRequests become nodes, nodes get the pods;
nodes nobody needs are given back. Each test records the pool's target and the requests
made over its whole run, so "no extra node" and "no oscillation" are checked on the
history, not only on the end state.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from kubernetes_asyncio import client

import workloads
from e2e.autoscaling import (
    History,
    autoscaler_status,
    condition,
    deployment,
    events,
    events_of,
    phases,
    running,
)
from e2e.scenes import World
from harness import POOLS, REQUESTS, wait_for
from nodepool_operator.api import wellknown


def pod_spec(pool: str, cpu: str) -> dict[str, Any]:
    """One pause container asking for ``cpu``, on the pool's nodes."""
    return {
        "nodeSelector": {wellknown.POOL_LABEL: pool},
        "terminationGracePeriodSeconds": 0,
        "containers": [workloads.container(cpu)],
    }


async def pool_settled(custom: client.CustomObjectsApi, name: str, nodes: int) -> bool:
    pool = await custom.get_cluster_custom_object(*POOLS, name)
    status = pool.get("status", {})
    return (
        pool["spec"]["targetNodes"] == nodes
        and status.get("readyNodes") == nodes
        and status.get("currentNodes") == nodes
        and status.get("scaleOperation") == "inactive"
    )


def directions(values: list[int]) -> list[str]:
    """The runs of a sequence: ``[1, 2, 3, 1, 3]`` -> ``["up", "down", "up"]``."""
    runs: list[str] = []
    for before, after in itertools.pairwise(values):
        step = "up" if after > before else "down"
        if not runs or runs[-1] != step:
            runs.append(step)
    return runs


async def test_ten_pods_get_exactly_three_nodes_and_none_extra_while_they_boot(
    world: World,
) -> None:
    cloud, operator = await world.autoscaled(latency=5)
    history = await world.scale_up(
        deployments=[deployment("web", pool=world.pool, replicas=10)], running_pods=10
    )
    # Up to three and never beyond: no request asked for a fourth node while they booted.
    assert directions(history.values) == ["up"]
    assert history.values[-1] == 3
    assert max(history.requests.values()) == 3
    assert cloud.client is not None
    stats = await cloud.client.stats()
    assert sorted(stats.creations_by_name) == [f"{world.pool}-{i}" for i in range(3)]
    nodes = await world.core.list_node(label_selector=wellknown.pool_selector(world.pool))
    assert len(nodes.items) == 3
    status = await autoscaler_status(world.custom, world.autoscaler)
    assert status["lastRequest"]["targetNodes"] == 3
    assert (status["pendingPods"], status["unschedulablePods"]) == (0, 0)
    assert condition(status, "Ready")["status"] == "True"
    assert condition(status, "LimitReached")["status"] == "False"
    pods = (await world.core.list_namespaced_pod(world.namespace)).items
    triggered = await events_of(world.core, pods, reason="TriggeredScaleUp")
    assert all(event.count == 1 for event in triggered)  # each pod told once
    # One request: every pod was on a new node. Two (the burst split by the batch window):
    # the pods of the first request's room were told then, the rest at the second.
    assert len(triggered) == 10 if len(history.requests) == 1 else len(triggered) >= 8
    assert operator.errors_logged() == []


async def test_a_pod_bigger_than_a_node_gets_one_warning_and_no_node(world: World) -> None:
    _, operator = await world.autoscaled(latency=1)
    huge = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "huge"}}
    await world.core.create_namespaced_pod(
        world.namespace, {**huge, "spec": pod_spec(world.pool, "8")}
    )

    async def warned() -> list[client.CoreV1Event]:
        return await events(world.core, world.namespace, name="huge", reason="NotTriggerScaleUp")

    [warning] = await wait_for(warned, within=30)
    await asyncio.sleep(5)  # five more scans: still one event, said once
    [warning] = await warned()
    assert warning.type == "Warning"
    assert warning.count == 1
    assert "requests 8000 of cpu, a node offers 4000" in warning.message
    found = await world.custom.list_cluster_custom_object(
        *REQUESTS, label_selector=wellknown.pool_selector(world.pool)
    )
    assert found["items"] == []
    pool = await world.custom.get_cluster_custom_object(*POOLS, world.pool)
    assert pool["spec"]["targetNodes"] == 0
    status = await autoscaler_status(world.custom, world.autoscaler)
    assert (status["pendingPods"], status["unschedulablePods"]) == (1, 1)
    assert operator.errors_logged() == []


async def test_max_nodes_is_respected_and_the_status_says_the_limit_was_hit(world: World) -> None:
    _, operator = await world.autoscaled(latency=1, max_nodes=2)
    history = await world.scale_up(
        deployments=[deployment("web", pool=world.pool, replicas=10)], running_pods=8, within=60
    )
    assert history.values == [0, 2]
    assert max(history.requests.values()) == 2
    assert await phases(world.core, world.namespace) == {"Running": 8, "Pending": 2}
    status = await autoscaler_status(world.custom, world.autoscaler)
    limit = condition(status, "LimitReached")
    assert (limit["status"], limit["reason"]) == ("True", "MaxNodesReached")
    assert "maxNodes=2" in limit["message"]
    assert status["unschedulablePods"] == 2
    [warning] = await events(world.core, "default", name=world.autoscaler, reason="LimitReached")
    assert warning.count == 1
    assert operator.errors_logged() == []


async def test_idle_nodes_go_back_to_min_after_the_delay_and_return_without_oscillation(
    world: World,
) -> None:
    unneeded = 3
    _, operator = await world.operated(latency=1)
    await world.create_pool(min_nodes=1)
    await wait_for(lambda: pool_settled(world.custom, world.pool, 1), within=30)
    await world.create_autoscaler(unneeded_seconds=unneeded)
    history = History(world.custom, world.pool)
    history.start()
    web = deployment("web", pool=world.pool, replicas=10)
    try:
        await world.apps.create_namespaced_deployment(world.namespace, web)
        await wait_for(lambda: running(world.core, world.namespace, 10), within=60)
        await asyncio.sleep(unneeded + 2)  # busy nodes are not unneeded: nothing changes
        assert directions(history.values) == ["up"]
        assert history.values[-1] == 3

        # The nodes are unneeded from the moment their pods are terminating, which the
        # operator may see before this test sees the pods gone (on a loaded machine, by
        # seconds): the delay is measured from the delete, what both sides see the same.
        deleted = time.monotonic()
        await world.apps.delete_namespaced_deployment("web", world.namespace)
        await wait_for(lambda: _no_pods(world.core, world.namespace), within=30)
        await wait_for(lambda: pool_settled(world.custom, world.pool, 1), within=60)

        async def shrink_sampled() -> bool:
            # The sampler reads the pool every 0.1 s; a loaded machine may show the pool
            # settled before the sampler's next read.
            return history.values[-1] == 1

        await wait_for(shrink_sampled, within=10)
        shrunk_at = history.targets[-1][0]
        assert directions(history.values) == ["up", "down"]
        assert history.values[-1] == 1
        assert shrunk_at - deleted >= unneeded - 0.5  # not before the configured delay

        await world.apps.create_namespaced_deployment(world.namespace, web)
        await wait_for(lambda: running(world.core, world.namespace, 10), within=60)
        await asyncio.sleep(unneeded + 2)
    finally:
        await history.stop()
    assert directions(history.values) == ["up", "down", "up"]
    assert history.values[-1] == 3
    assert operator.errors_logged() == []


async def _no_pods(core: client.CoreV1Api, namespace: str) -> bool:
    return not (await core.list_namespaced_pod(namespace)).items
