"""The Autoscaler end to end: control plane, scheduler, kwok, simcloud and operator processes.

Pods that do not fit become ScaleRequests, ScaleRequests become nodes, nodes get the pods;
nodes nobody needs are given back. Each test records the pool's target and the requests
made over its whole run, so "no extra node" and "no oscillation" are checked on the
history, not only on the end state.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio import client

import workloads
from harness import Operator, SimCloud, wait_for
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown

POOLS = ("nodepool.dev", "v1alpha1", "nodepools")
AUTOSCALERS = ("nodepool.dev", "v1alpha1", "autoscalers")
REQUESTS = ("nodepool.dev", "v1alpha1", "scalerequests")
MERGE = "application/merge-patch+json"


async def create_pool(
    custom: client.CustomObjectsApi, name: str, *, min_nodes: int = 0, max_nodes: int = 10
) -> None:
    spec = nodepool_api.NodePoolSpec(
        target_nodes=min_nodes,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        template=nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=110),
    )
    await custom.create_cluster_custom_object(*POOLS, nodepool_api.manifest(name, spec))


async def create_autoscaler(
    custom: client.CustomObjectsApi,
    name: str,
    *,
    pool: str,
    namespace: str,
    unneeded_seconds: int = 600,
) -> None:
    spec = autoscaler_api.AutoscalerSpec(
        node_pool_name=pool,
        namespaces=(namespace,),
        scan_interval_seconds=1,
        batch_window_seconds=0.5,
        scale_down=autoscaler_api.ScaleDownPolicy(enabled=True, unneeded_seconds=unneeded_seconds),
    )
    await custom.create_cluster_custom_object(*AUTOSCALERS, autoscaler_api.manifest(name, spec))


def pod_spec(pool: str, cpu: str) -> dict[str, Any]:
    """One pause container asking for ``cpu``, on the pool's nodes."""
    return {
        "nodeSelector": {wellknown.POOL_LABEL: pool},
        "terminationGracePeriodSeconds": 0,
        "containers": [workloads.container(cpu)],
    }


def deployment(name: str, *, pool: str, replicas: int, cpu: str = "1") -> dict[str, Any]:
    return workloads.deployment(
        name, selector={wellknown.POOL_LABEL: pool}, replicas=replicas, cpu=cpu
    )


@dataclass
class History:
    """The pool's target and the pool's ScaleRequests, sampled until stopped."""

    custom: client.CustomObjectsApi
    pool: str
    targets: list[tuple[float, int]] = field(default_factory=list)
    requests: dict[str, int] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            pool = await self.custom.get_cluster_custom_object(*POOLS, self.pool)
            target = int(pool["spec"].get("targetNodes", 0))
            if not self.targets or self.targets[-1][1] != target:
                self.targets.append((time.monotonic(), target))
            found = await self.custom.list_cluster_custom_object(
                *REQUESTS, label_selector=wellknown.pool_selector(self.pool)
            )
            for request in found["items"]:
                self.requests[request["metadata"]["name"]] = request["spec"]["targetNodes"]
            await asyncio.sleep(0.1)

    @property
    def values(self) -> list[int]:
        return [target for _, target in self.targets]


async def phases(core: client.CoreV1Api, namespace: str) -> dict[str, int]:
    pods = await core.list_namespaced_pod(namespace)
    counts: dict[str, int] = {}
    for pod in pods.items:
        if pod.metadata.deletion_timestamp is None:
            counts[pod.status.phase] = counts.get(pod.status.phase, 0) + 1
    return counts


async def running(core: client.CoreV1Api, namespace: str, count: int) -> bool:
    return (await phases(core, namespace)).get("Running", 0) == count


async def pool_settled(custom: client.CustomObjectsApi, name: str, nodes: int) -> bool:
    pool = await custom.get_cluster_custom_object(*POOLS, name)
    status = pool.get("status", {})
    return (
        pool["spec"]["targetNodes"] == nodes
        and status.get("readyNodes") == nodes
        and status.get("currentNodes") == nodes
        and status.get("scaleOperation") == "inactive"
    )


async def events(
    core: client.CoreV1Api, namespace: str, *, name: str, reason: str
) -> list[client.CoreV1Event]:
    found = await core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},reason={reason}"
    )
    return list(found.items)


async def autoscaler_status(custom: client.CustomObjectsApi, name: str) -> dict[str, Any]:
    obj = await custom.get_cluster_custom_object(*AUTOSCALERS, name)
    status: dict[str, Any] = obj.get("status", {})
    return status


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), {})


def directions(values: list[int]) -> list[str]:
    """The runs of a sequence: ``[1, 2, 3, 1, 3]`` -> ``["up", "down", "up"]``."""
    runs: list[str] = []
    for before, after in itertools.pairwise(values):
        step = "up" if after > before else "down"
        if not runs or runs[-1] != step:
            runs.append(step)
    return runs


async def test_ten_pods_get_exactly_three_nodes_and_none_extra_while_they_boot(
    api_client: client.ApiClient,
    start_simcloud: Any,
    start_operator: Any,
    pool_name: str,
    autoscaler_name: str,
    namespace: str,
) -> None:
    cloud: SimCloud = await start_simcloud("--create-latency", "5", "--latency-jitter", "0")
    operator: Operator = start_operator(cloud)
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    apps = client.AppsV1Api(api_client)
    await create_pool(custom, pool_name)
    await create_autoscaler(custom, autoscaler_name, pool=pool_name, namespace=namespace)
    history = History(custom, pool_name)
    history.start()
    try:
        await apps.create_namespaced_deployment(
            namespace, deployment("web", pool=pool_name, replicas=10)
        )
        await wait_for(lambda: running(core, namespace, 10), within=90)
        await asyncio.sleep(3)  # three more scans with everything settled
    finally:
        await history.stop()
    # Up to three and never beyond: no request asked for a fourth node while they booted.
    assert directions(history.values) == ["up"]
    assert history.values[-1] == 3
    assert max(history.requests.values()) == 3
    assert cloud.client is not None
    stats = await cloud.client.stats()
    assert sorted(stats.creations_by_name) == [f"{pool_name}-{i}" for i in range(3)]
    nodes = await core.list_node(label_selector=wellknown.pool_selector(pool_name))
    assert len(nodes.items) == 3
    status = await autoscaler_status(custom, autoscaler_name)
    assert status["lastRequest"]["targetNodes"] == 3
    assert (status["pendingPods"], status["unschedulablePods"]) == (0, 0)
    assert condition(status, "Ready")["status"] == "True"
    assert condition(status, "LimitReached")["status"] == "False"
    pods = (await core.list_namespaced_pod(namespace)).items
    triggered = [
        event
        for pod in pods
        for event in await events(
            core, namespace, name=pod.metadata.name, reason="TriggeredScaleUp"
        )
    ]
    assert all(event.count == 1 for event in triggered)  # each pod told once
    # One request: every pod was on a new node. Two (the burst split by the batch window):
    # the pods of the first request's room were told then, the rest at the second.
    assert len(triggered) == 10 if len(history.requests) == 1 else len(triggered) >= 8
    assert operator.errors_logged() == []


async def test_a_pod_bigger_than_a_node_gets_one_warning_and_no_node(
    api_client: client.ApiClient,
    start_simcloud: Any,
    start_operator: Any,
    pool_name: str,
    autoscaler_name: str,
    namespace: str,
) -> None:
    cloud: SimCloud = await start_simcloud("--create-latency", "1", "--latency-jitter", "0")
    operator: Operator = start_operator(cloud)
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    await create_pool(custom, pool_name)
    await create_autoscaler(custom, autoscaler_name, pool=pool_name, namespace=namespace)
    huge = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "huge"}}
    await core.create_namespaced_pod(namespace, {**huge, "spec": pod_spec(pool_name, "8")})

    async def warned() -> list[client.CoreV1Event]:
        return await events(core, namespace, name="huge", reason="NotTriggerScaleUp")

    [warning] = await wait_for(warned, within=30)
    await asyncio.sleep(5)  # five more scans: still one event, said once
    [warning] = await warned()
    assert warning.type == "Warning"
    assert warning.count == 1
    assert "requests 8000 of cpu, a node offers 4000" in warning.message
    found = await custom.list_cluster_custom_object(
        *REQUESTS, label_selector=wellknown.pool_selector(pool_name)
    )
    assert found["items"] == []
    pool = await custom.get_cluster_custom_object(*POOLS, pool_name)
    assert pool["spec"]["targetNodes"] == 0
    status = await autoscaler_status(custom, autoscaler_name)
    assert (status["pendingPods"], status["unschedulablePods"]) == (1, 1)
    assert operator.errors_logged() == []


async def test_max_nodes_is_respected_and_the_status_says_the_limit_was_hit(
    api_client: client.ApiClient,
    start_simcloud: Any,
    start_operator: Any,
    pool_name: str,
    autoscaler_name: str,
    namespace: str,
) -> None:
    cloud: SimCloud = await start_simcloud("--create-latency", "1", "--latency-jitter", "0")
    operator: Operator = start_operator(cloud)
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    apps = client.AppsV1Api(api_client)
    await create_pool(custom, pool_name, max_nodes=2)
    await create_autoscaler(custom, autoscaler_name, pool=pool_name, namespace=namespace)
    history = History(custom, pool_name)
    history.start()
    try:
        await apps.create_namespaced_deployment(
            namespace, deployment("web", pool=pool_name, replicas=10)
        )
        await wait_for(lambda: running(core, namespace, 8), within=60)
        await asyncio.sleep(3)
    finally:
        await history.stop()
    assert history.values == [0, 2]
    assert max(history.requests.values()) == 2
    assert await phases(core, namespace) == {"Running": 8, "Pending": 2}
    status = await autoscaler_status(custom, autoscaler_name)
    limit = condition(status, "LimitReached")
    assert (limit["status"], limit["reason"]) == ("True", "MaxNodesReached")
    assert "maxNodes=2" in limit["message"]
    assert status["unschedulablePods"] == 2
    [warning] = await events(core, "default", name=autoscaler_name, reason="LimitReached")
    assert warning.count == 1
    assert operator.errors_logged() == []


async def test_idle_nodes_go_back_to_min_after_the_delay_and_return_without_oscillation(
    api_client: client.ApiClient,
    start_simcloud: Any,
    start_operator: Any,
    pool_name: str,
    autoscaler_name: str,
    namespace: str,
) -> None:
    unneeded = 3
    cloud: SimCloud = await start_simcloud("--create-latency", "1", "--latency-jitter", "0")
    operator: Operator = start_operator(cloud)
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    apps = client.AppsV1Api(api_client)
    await create_pool(custom, pool_name, min_nodes=1)
    await wait_for(lambda: pool_settled(custom, pool_name, 1), within=30)
    await create_autoscaler(
        custom, autoscaler_name, pool=pool_name, namespace=namespace, unneeded_seconds=unneeded
    )
    history = History(custom, pool_name)
    history.start()
    web = deployment("web", pool=pool_name, replicas=10)
    try:
        await apps.create_namespaced_deployment(namespace, web)
        await wait_for(lambda: running(core, namespace, 10), within=60)
        await asyncio.sleep(unneeded + 2)  # busy nodes are not unneeded: nothing changes
        assert directions(history.values) == ["up"]
        assert history.values[-1] == 3

        await apps.delete_namespaced_deployment("web", namespace)
        await wait_for(lambda: _no_pods(core, namespace), within=30)
        emptied = time.monotonic()
        await wait_for(lambda: pool_settled(custom, pool_name, 1), within=60)
        shrunk_at = history.targets[-1][0]
        assert directions(history.values) == ["up", "down"]
        assert history.values[-1] == 1
        assert shrunk_at - emptied >= unneeded - 0.5  # not before the configured delay

        await apps.create_namespaced_deployment(namespace, web)
        await wait_for(lambda: running(core, namespace, 10), within=60)
        await asyncio.sleep(unneeded + 2)
    finally:
        await history.stop()
    assert directions(history.values) == ["up", "down", "up"]
    assert history.values[-1] == 3
    assert operator.errors_logged() == []


async def _no_pods(core: client.CoreV1Api, namespace: str) -> bool:
    return not (await core.list_namespaced_pod(namespace)).items
