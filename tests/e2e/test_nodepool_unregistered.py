"""A new Node takes no pod until its kubelet has reported, on the real control plane.

Every Node the operator creates carries ``nodepool.dev/unregistered``; the operator
removes it once the kubelet (kwok here, or the test playing one) has reported Ready and
its own capacity. The order of what happened is read from resourceVersions: the local
control plane has one etcd, whose revision orders every write to every resource.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client

from e2e.histories import TAINT, ready, tainted, watching
from e2e.scenes import World
from harness import MERGE, POOLS, pool_body, wait_for
from nodepool_operator.api import wellknown


def _pod(name: str, pool: str, *, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {wellknown.POOL_LABEL: pool},
            "containers": [
                {"name": "app", "image": "app", "resources": {"requests": {"cpu": cpu}}}
            ],
        },
    }


async def _bound(core: client.CoreV1Api, namespace: str, name: str) -> str | None:
    pod = await core.read_namespaced_pod(name, namespace)
    return pod.spec.node_name if pod.spec.node_name else None


async def test_a_waiting_pod_is_bound_only_after_the_new_node_loses_its_taint(world: World) -> None:
    _, operator = await world.operated(latency=0.5)
    await world.custom.create_cluster_custom_object(*POOLS, pool_body(world.pool, target=0))
    async with watching(world.core, world.pool, world.namespace) as history:
        await world.core.create_namespaced_pod(
            world.namespace, _pod("waiting", world.pool, cpu="1")
        )
        await world.custom.patch_cluster_custom_object(
            *POOLS, world.pool, {"spec": {"targetNodes": 1}}, _content_type=MERGE
        )
        node = await wait_for(lambda: _bound(world.core, world.namespace, "waiting"), within=60)

        async def seen_bound() -> dict[str, Any] | None:
            return history.bound_at("waiting")

        await wait_for(seen_bound, within=10)

    assert node == f"{world.pool}-0"
    created = next(n for n in history.nodes if n["metadata"]["name"] == node)
    assert tainted(created), "the Node was visible without the unregistered taint"
    untainted = history.untainted_at(node)
    assert untainted is not None
    # Removed only once kwok, as the kubelet, reported Ready with a heartbeat.
    assert ready(untainted)
    bound = history.bound_at("waiting")
    assert bound is not None
    assert int(untainted["metadata"]["resourceVersion"]) < int(bound["metadata"]["resourceVersion"])
    assert operator.errors_logged() == []


async def test_the_kubelets_smaller_allocatable_decides_where_the_pod_goes(world: World) -> None:
    """No kwok: the test plays the kubelet, and reports less cpu than the template."""
    _, operator = await world.operated("--no-simulated-nodes", latency=0.5)
    await world.custom.create_cluster_custom_object(*POOLS, pool_body(world.pool, target=1))
    node = f"{world.pool}-0"

    async def created() -> Any:
        found = await world.core.list_node(label_selector=wellknown.pool_selector(world.pool))
        return [n for n in found.items if n.metadata.name == node]

    await wait_for(created, within=60)
    # Sized for the template (4 cpu): it would be bound at once to an untainted Node.
    await world.core.create_namespaced_pod(world.namespace, _pod("big", world.pool, cpu="3"))

    async def unschedulable() -> bool:
        pod = await world.core.read_namespaced_pod("big", world.namespace)
        return any(
            c.type == "PodScheduled" and c.reason == "Unschedulable"
            for c in pod.status.conditions or ()
        )

    await wait_for(unschedulable, within=30)
    assert not await _bound(world.core, world.namespace, "big")
    found = await world.core.read_node(node)
    assert any(t.key == TAINT for t in found.spec.taints or ())

    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    reported = {"cpu": "2", "memory": "16Gi", "pods": "110"}
    status = {
        "status": {
            "capacity": reported,
            "allocatable": reported,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "the test plays the kubelet",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        }
    }
    await world.core.patch_node_status(
        node, status, _content_type="application/strategic-merge-patch+json"
    )

    async def untainted() -> bool:
        found = await world.core.read_node(node)
        return not any(t.key == TAINT for t in found.spec.taints or ())

    await wait_for(untainted, within=30)
    # The Node the scheduler now sees has the kubelet's 2 cpu: the 3-cpu pod is not put
    # there (a kubelet would reject it, OutOfcpu), and a 1-cpu pod is.
    await world.core.create_namespaced_pod(world.namespace, _pod("small", world.pool, cpu="1"))
    assert await wait_for(lambda: _bound(world.core, world.namespace, "small"), within=30) == node
    assert not await _bound(world.core, world.namespace, "big")
    # No kubelet finishes a graceful deletion here: the pods go at once, so that the
    # pool's removal afterwards has nothing to wait for.
    for pod in ("small", "big"):
        await world.core.delete_namespaced_pod(pod, world.namespace, grace_period_seconds=0)
    assert operator.errors_logged() == []
