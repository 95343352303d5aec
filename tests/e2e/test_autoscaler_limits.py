"""Pods past a pool's maxNodes are told so, on the real control plane: each pending pod
gets an answer naming the limit."""

from __future__ import annotations

from kubernetes_asyncio import client

from e2e.autoscaling import deployment, events, running
from e2e.scenes import World
from harness import wait_for


async def test_pods_beyond_max_nodes_each_carry_not_trigger_scale_up_naming_the_limit(
    world: World,
) -> None:
    _, operator = await world.autoscaled(latency=1, max_nodes=2)
    # Ten pods of one cpu, four to a node: two nodes take eight.
    await world.apps.create_namespaced_deployment(
        world.namespace, deployment("web", pool=world.pool, replicas=10)
    )
    await wait_for(lambda: running(world.core, world.namespace, 8), within=60)

    async def pending_told() -> list[tuple[str, list[client.CoreV1Event]]] | None:
        pods = (await world.core.list_namespaced_pod(world.namespace)).items
        pending = [p.metadata.name for p in pods if p.status.phase == "Pending"]
        told = [
            (name, await events(world.core, world.namespace, name=name, reason="NotTriggerScaleUp"))
            for name in pending
        ]
        return told if len(told) == 2 and all(found for _, found in told) else None

    told = await wait_for(pending_told, within=30)
    for _, found in told:
        [warning] = found  # once per pod and reason
        assert warning.type == "Warning"
        assert warning.count == 1
        assert f"NodePool {world.pool} is at maxNodes 2" in warning.message
        assert warning.message.endswith("these pods need 1 more node")
    pods = (await world.core.list_namespaced_pod(world.namespace)).items
    placed = [p.metadata.name for p in pods if p.status.phase == "Running"]
    assert len(placed) == 8
    # Which eight pods the scheduler binds is its choice: a pod the plan had put beyond the
    # limit may be among them, having been told so. But the pods on the Ready nodes, still
    # marked unschedulable a moment after the nodes came up, are never told as a whole.
    told_placed = [
        name
        for name in placed
        if await events(world.core, world.namespace, name=name, reason="NotTriggerScaleUp")
    ]
    assert len(told_placed) < len(placed)
    triggered = [
        name
        for name in placed
        if await events(world.core, world.namespace, name=name, reason="TriggeredScaleUp")
    ]
    assert triggered  # the pods the request was for keep their TriggeredScaleUp
    assert operator.errors_logged() == []
