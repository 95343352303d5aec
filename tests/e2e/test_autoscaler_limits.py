"""Pods past a pool's maxNodes are told so, on the real control plane: each pending pod
gets an answer naming the limit."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from e2e.autoscaling import create_autoscaler, create_pool, deployment, events, running
from harness import Operator, SimCloud, wait_for


async def test_pods_beyond_max_nodes_each_carry_not_trigger_scale_up_naming_the_limit(
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
    # Ten pods of one cpu, four to a node: two nodes take eight.
    await apps.create_namespaced_deployment(
        namespace, deployment("web", pool=pool_name, replicas=10)
    )
    await wait_for(lambda: running(core, namespace, 8), within=60)

    async def pending_told() -> list[tuple[str, list[client.CoreV1Event]]] | None:
        pods = (await core.list_namespaced_pod(namespace)).items
        pending = [p.metadata.name for p in pods if p.status.phase == "Pending"]
        told = [
            (name, await events(core, namespace, name=name, reason="NotTriggerScaleUp"))
            for name in pending
        ]
        return told if len(told) == 2 and all(found for _, found in told) else None

    told = await wait_for(pending_told, within=30)
    for _, found in told:
        [warning] = found  # once per pod and reason
        assert warning.type == "Warning"
        assert warning.count == 1
        assert f"NodePool {pool_name} is at maxNodes 2" in warning.message
        assert warning.message.endswith("these pods need 1 more node")
    pods = (await core.list_namespaced_pod(namespace)).items
    placed = [p.metadata.name for p in pods if p.status.phase == "Running"]
    assert len(placed) == 8
    # Which eight pods the scheduler binds is its choice: a pod the plan had put beyond the
    # limit may be among them, having been told so. But the pods on the Ready nodes, still
    # marked unschedulable a moment after the nodes came up, are never told as a whole.
    told_placed = [
        name
        for name in placed
        if await events(core, namespace, name=name, reason="NotTriggerScaleUp")
    ]
    assert len(told_placed) < len(placed)
    triggered = [
        name
        for name in placed
        if await events(core, namespace, name=name, reason="TriggeredScaleUp")
    ]
    assert triggered  # the pods the request was for keep their TriggeredScaleUp
    assert operator.errors_logged() == []
