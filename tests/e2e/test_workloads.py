"""Ordinary workloads on the operator's Nodes: real control plane, simcloud and operator.

The Nodes a NodePool registers are where kube-controller-manager's workload controllers
put their Pods and kwok runs them, as kubelet would: a DaemonSet follows the pool as it
grows, and a Node removed by a scale-down takes its DaemonSet Pod with it.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from e2e.scenes import World
from harness import MERGE, POOLS, Operator, SimCloud, pool_body, settled, wait_for
from nodepool_operator.api import wellknown

DAEMON = "node-agent"


def daemonset(pool: str) -> dict[str, Any]:
    """A DaemonSet for the Nodes of one pool (Nodes of other tests' pools are left alone)."""
    labels = {"app": DAEMON}
    return {
        "metadata": {"name": DAEMON},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {wellknown.POOL_LABEL: pool},
                    "containers": [
                        {
                            "name": "agent",
                            "image": "example.invalid/agent",
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                        }
                    ],
                },
            },
        },
    }


async def daemon_pods_match_pool(
    core: client.CoreV1Api, apps: client.AppsV1Api, namespace: str, pool: str
) -> bool:
    """One Running, Ready DaemonSet Pod on each Node of the pool, and no Pod anywhere else."""
    nodes = await core.list_node(label_selector=f"{wellknown.POOL_LABEL}={pool}")
    pods = await core.list_namespaced_pod(namespace, label_selector=f"app={DAEMON}")
    running = [
        p.spec.node_name
        for p in pods.items
        if p.status.phase == "Running"
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    ]
    daemon = await apps.read_namespaced_daemon_set_status(DAEMON, namespace)
    return (
        len(pods.items) == len(nodes.items)
        and sorted(running) == sorted(n.metadata.name for n in nodes.items)
        and daemon.status.number_ready == len(nodes.items)
    )


async def test_daemonset_pods_run_on_every_node_of_the_pool_as_it_scales(world: World) -> None:
    cloud: SimCloud = await world.start_simcloud(
        "--create-latency", "0.5", "--latency-jitter", "0", "--delete-latency", "0.5"
    )
    operator: Operator = world.start_operator(cloud)
    await world.apps.create_namespaced_daemon_set(world.namespace, daemonset(world.pool))
    await world.custom.create_cluster_custom_object(*POOLS, pool_body(world.pool, target=2))
    await wait_for(lambda: settled(world.custom, world.pool, 2), within=60)
    await wait_for(
        lambda: daemon_pods_match_pool(world.core, world.apps, world.namespace, world.pool),
        within=60,
    )

    await world.custom.patch_cluster_custom_object(
        *POOLS, world.pool, {"spec": {"targetNodes": 3}}, _content_type=MERGE
    )
    await wait_for(lambda: settled(world.custom, world.pool, 3), within=60)
    await wait_for(
        lambda: daemon_pods_match_pool(world.core, world.apps, world.namespace, world.pool),
        within=60,
    )

    # The drain leaves DaemonSet Pods in place; once their Node is gone the DaemonSet
    # controller deletes them and the pod garbage collector (40 s quarantine, then a pass
    # every 20 s) removes them for good.
    await world.custom.patch_cluster_custom_object(
        *POOLS, world.pool, {"spec": {"targetNodes": 2}}, _content_type=MERGE
    )
    await wait_for(lambda: settled(world.custom, world.pool, 2), within=60)
    await wait_for(
        lambda: daemon_pods_match_pool(world.core, world.apps, world.namespace, world.pool),
        within=120,
        every=1,
    )
    assert operator.errors_logged() == []
