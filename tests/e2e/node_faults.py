"""Pods a budget guards, a pool's Nodes, and kubelets that stop reporting: what the drain,
repair and restart e2e tests share."""

from __future__ import annotations

import datetime

from kubernetes_asyncio import client

import workloads
from harness import MERGE, wait_for
from nodepool_operator.api import wellknown


async def guarded_pod(
    api_client: client.ApiClient, core: client.CoreV1Api, namespace: str, pool_name: str
) -> str:
    """A running Deployment pod on the pool, under a budget that allows no eviction."""
    # A Deployment's pod: a budget's maxUnavailable counts against its controller's scale.
    apps = client.AppsV1Api(api_client)
    policy = client.PolicyV1Api(api_client)
    web = workloads.deployment(
        "guarded", selector={wellknown.POOL_LABEL: pool_name}, replicas=1, cpu="100m"
    )
    await apps.create_namespaced_deployment(namespace, web)

    async def running() -> str | None:
        found = await core.list_namespaced_pod(namespace, label_selector="app=guarded")
        live = [p for p in found.items if p.status.phase == "Running"]
        return str(live[0].metadata.name) if live else None

    guarded: str = await wait_for(running, within=30)
    budget = {
        "metadata": {"name": "guard"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    await policy.create_namespaced_pod_disruption_budget(namespace, budget)

    async def budget_observed() -> bool:
        found = await policy.read_namespaced_pod_disruption_budget("guard", namespace)
        return bool(found.status and found.status.observed_generation)

    await wait_for(budget_observed, within=30)
    return guarded


async def pool_nodes(core: client.CoreV1Api, pool: str) -> dict[str, str]:
    """The pool's Nodes, name -> uid."""
    found = await core.list_node(label_selector=f"{wellknown.POOL_LABEL}={pool}")
    return {n.metadata.name: n.metadata.uid for n in found.items}


async def stop_reporting(core: client.CoreV1Api, name: str) -> None:
    """Take ``name`` out of kwok's hands and leave it NotReady, as a kubelet cut off from
    the control plane would."""
    await core.patch_node(
        name, {"metadata": {"annotations": {"kwok.x-k8s.io/node": None}}}, _content_type=MERGE
    )
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    await core.patch_node_status(
        name,
        {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "False",
                        "reason": "NodeStatusUnknown",
                        "message": "e2e: the kubelet stopped posting node status",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ]
            }
        },
    )
