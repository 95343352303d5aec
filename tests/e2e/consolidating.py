"""What the consolidation e2e tests share: pools grown to two nodes, workloads that prefer
or pin to nodes, and waiting on the Autoscaler's consolidation."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

import workloads
from e2e.autoscaling import running
from e2e.scenes import World
from harness import MERGE, POOLS, wait_for
from nodepool_operator.api import wellknown

UNNEEDED = 5


def deployment(name: str, *, pool: str, replicas: int, **spec: Any) -> dict[str, Any]:
    """Pause pods of 1 CPU labelled ``app=<name>``, on the pool's nodes."""
    selector = {wellknown.POOL_LABEL: pool}
    return workloads.deployment(name, selector=selector, replicas=replicas, cpu="1", **spec)


async def pool_settled(custom: client.CustomObjectsApi, name: str, nodes: int) -> bool:
    pool = await custom.get_cluster_custom_object(*POOLS, name)
    status = pool.get("status", {})
    counts = (status.get("readyNodes"), status.get("currentNodes"))
    return (
        pool["spec"]["targetNodes"] == nodes
        and counts == (nodes, nodes)
        and status.get("scaleOperation") == "inactive"
    )


async def pool_nodes(core: client.CoreV1Api, pool: str) -> list[client.V1Node]:
    found = await core.list_node(label_selector=wellknown.pool_selector(pool))
    return list(found.items)


def consolidating(node: client.V1Node) -> bool:
    return any(t.key == wellknown.CONSOLIDATING_TAINT_KEY for t in node.spec.taints or ())


async def autoscaler_events(core: client.CoreV1Api, name: str, reason: str) -> list[str]:
    found = await core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={name},reason={reason}"
    )
    return [e.message for e in found.items]


def pinned(node: str) -> dict[str, Any]:
    return {"nodeSelector": {wellknown.HOSTNAME_LABEL: node}}


def preferring(node: str) -> dict[str, Any]:
    """Scheduled on ``node`` when there is room, free to move anywhere in the pool."""
    term = {
        "matchExpressions": [{"key": wellknown.HOSTNAME_LABEL, "operator": "In", "values": [node]}]
    }
    return {
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "preference": term}
                ]
            }
        }
    }


async def pool_of(world: World, nodes: int) -> None:
    """The world's pool (``World.create_pool``) grown by hand to ``nodes`` nodes."""
    await world.create_pool()
    await world.custom.patch_cluster_custom_object(
        *POOLS, world.pool, {"spec": {"targetNodes": nodes}}, _content_type=MERGE
    )
    await wait_for(lambda: pool_settled(world.custom, world.pool, nodes), within=60)


async def two_nodes(world: World) -> tuple[str, str]:
    """A pool of two nodes: the first half full with two pods that must stay on it."""
    await pool_of(world, 2)
    first, second = sorted(n.metadata.name for n in await pool_nodes(world.core, world.pool))
    anchor = deployment("anchor", pool=world.pool, replicas=2, **pinned(first))
    await world.apps.create_namespaced_deployment(world.namespace, anchor)
    await wait_for(lambda: running(world.core, world.namespace, 2), within=60)
    return first, second
