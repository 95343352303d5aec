"""The set-up the e2e tests on hollow kubelets share: a simcloud whose VMs boot kubemark's
hollow kubelet, an operator on it, and a pool of 1-CPU nodes grown to its first size, each
Node registered and reported Ready by its own kubelet."""

from __future__ import annotations

from typing import Any, NamedTuple

from kubernetes_asyncio import client

from e2e.scenes import World
from harness import POOLS, Operator, SimCloud, settled, wait_for
from nodepool_operator.api import nodepool as nodepool_api

__all__ = ["BOOT", "ONE_CPU_NODE", "HollowScene", "hollow_cloud", "hollow_pool", "running_pods"]

#: What kubemark's fake cAdvisor reports on every VM, whatever its shape.
ONE_CPU_NODE = nodepool_api.NodeTemplate(cpu="1", memory="3840Mi", pods=110)
#: A VM boots in about this long, so a kubelet registers a few seconds after its create.
BOOT = ("--create-latency", "3", "--latency-jitter", "0.5")


class HollowScene(NamedTuple):
    cloud: SimCloud
    operator: Operator
    custom: client.CustomObjectsApi
    core: client.CoreV1Api


async def hollow_cloud(world: World) -> SimCloud:
    """A simcloud whose VMs boot hollow kubelets (``BOOT``), its client open."""
    cloud = await world.start_hollow_simcloud(*BOOT)
    assert cloud.client is not None
    return cloud


async def hollow_pool(world: World, *, target: int, **spec: Any) -> HollowScene:
    """The world's pool of ``ONE_CPU_NODE`` nodes (``spec``: other NodePoolSpec fields) on
    hollow kubelets, once it has ``target`` Ready Nodes and nothing under way."""
    cloud = await hollow_cloud(world)
    operator = world.start_operator(cloud)
    custom, name = world.custom, world.pool
    body = nodepool_api.NodePoolSpec(target_nodes=target, template=ONE_CPU_NODE, **spec)
    await custom.create_cluster_custom_object(*POOLS, nodepool_api.manifest(name, body))
    await wait_for(lambda: settled(custom, name, target), within=90)
    return HollowScene(cloud, operator, custom, world.core)


async def running_pods(core: client.CoreV1Api, namespace: str, app: str = "web") -> dict[str, str]:
    """Pod name -> its Node, for the pods of ``app`` a kubelet reports Running (not being
    deleted)."""
    found = await core.list_namespaced_pod(namespace, label_selector=f"app={app}")
    return {
        pod.metadata.name: pod.spec.node_name
        for pod in found.items
        if pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None
    }
