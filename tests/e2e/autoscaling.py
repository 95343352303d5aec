"""What the Autoscaler e2e tests share: the resources' group/version/plural, pools and
Autoscalers to create, workloads, and reading the Autoscaler's status and events."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio import client

import workloads
from harness import AUTOSCALERS, POOLS, REQUESTS, Sampler, wait_for
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers import cached
from nodepool_operator.controllers.nodepool.nodes import KWOK_ANNOTATION


async def create_pool(
    custom: client.CustomObjectsApi, name: str, *, min_nodes: int = 0, max_nodes: int = 10
) -> None:
    """A pool of 4 CPU / 16Gi nodes, at ``min_nodes`` (``make_pool``)."""
    await make_pool(custom, name, min_nodes=min_nodes, max_nodes=max_nodes)


async def create_autoscaler(
    custom: client.CustomObjectsApi,
    name: str,
    *,
    pool: str,
    namespace: str,
    unneeded_seconds: int = 600,
    scale_down: bool = True,
) -> None:
    """An Autoscaler of ``pool`` for the pods of ``namespace``, scanning every second."""
    policy = autoscaler_api.ScaleDownPolicy(enabled=scale_down, unneeded_seconds=unneeded_seconds)
    spec = autoscaler_api.AutoscalerSpec(
        node_pool_name=pool,
        namespaces=(namespace,),
        scan_interval_seconds=1,
        batch_window_seconds=0.5,
        scale_down=policy,
    )
    await custom.create_cluster_custom_object(*AUTOSCALERS, autoscaler_api.manifest(name, spec))


def deployment(name: str, *, pool: str, replicas: int, cpu: str = "1") -> dict[str, Any]:
    return workloads.deployment(
        name, selector={wellknown.POOL_LABEL: pool}, replicas=replicas, cpu=cpu
    )


@dataclass
class History(Sampler):
    """The pool's target and the pool's ScaleRequests, sampled until stopped."""

    custom: client.CustomObjectsApi
    pool: str
    targets: list[tuple[float, int]] = field(default_factory=list)
    requests: dict[str, int] = field(default_factory=dict)

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


async def events(
    core: client.CoreV1Api, namespace: str, *, name: str, reason: str
) -> list[client.CoreV1Event]:
    found = await core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},reason={reason}"
    )
    return list(found.items)


async def events_of(
    core: client.CoreV1Api, pods: list[client.V1Pod], *, reason: str
) -> list[client.CoreV1Event]:
    """The events of ``reason`` about each of ``pods``, pod after pod (``events``)."""
    return [
        event
        for pod in pods
        for event in await events(
            core, pod.metadata.namespace, name=pod.metadata.name, reason=reason
        )
    ]


async def autoscaler_status(custom: client.CustomObjectsApi, name: str) -> dict[str, Any]:
    obj = await custom.get_cluster_custom_object(*AUTOSCALERS, name)
    status: dict[str, Any] = obj.get("status", {})
    return status


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), {})


async def make_pool(
    custom: client.CustomObjectsApi,
    name: str,
    *,
    min_nodes: int = 0,
    max_nodes: int = 10,
    weight: int = 0,
    **template: Any,
) -> None:
    """A pool of 4 CPU / 16Gi nodes (110 pods), at ``min_nodes`` (``template``: the other
    fields of its NodeTemplate: zones, reserved, labels)."""
    node = nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=110, **template)
    spec = nodepool_api.NodePoolSpec(
        target_nodes=min_nodes,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        weight=weight,
        template=node,
    )
    await custom.create_cluster_custom_object(*POOLS, nodepool_api.manifest(name, spec))


async def make_autoscaler(
    custom: client.CustomObjectsApi, name: str, *, pool: str, namespace: str
) -> None:
    """``create_autoscaler`` that never scales down."""
    await create_autoscaler(custom, name, pool=pool, namespace=namespace, scale_down=False)


def kwok_node(
    name: str,
    *,
    labels: dict[str, str],
    room: dict[str, str],
    annotations: dict[str, str] | None = None,
    owners: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A Node kwok keeps Ready (it carries kwok's annotation, with ``annotations``), whose
    capacity and allocatable are ``room``; ``owners``, its ownerReferences."""
    metadata: dict[str, Any] = {
        "name": name,
        "labels": labels,
        "annotations": {KWOK_ANNOTATION: "fake", **(annotations or {})},
    }
    if owners is not None:
        metadata["ownerReferences"] = owners
    status = {"capacity": room, "allocatable": room}
    return {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "spec": {}, "status": status}


def bound_pair(
    namespace: str,
    claim: str,
    *,
    volume: str,
    storage_class: str,
    key: str,
    value: str,
    labels: dict[str, str] | None = None,
    **source: Any,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A 1Gi PersistentVolume ``volume`` only nodes labelled ``key=value`` reach (``source``:
    the other fields of its spec), and the claim ``claim`` of ``namespace``, bound to each
    other as the PV controller would leave them."""
    expression = {"key": key, "operator": "In", "values": [value]}
    persistent_volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume, **({"labels": labels} if labels else {})},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "claimRef": {"namespace": namespace, "name": claim},
            "nodeAffinity": {
                "required": {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}
            },
            **source,
        },
    }
    bound_claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": claim,
            "annotations": {cached.BIND_COMPLETED_ANNOTATION: "yes"},
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "volumeName": volume,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    return persistent_volume, bound_claim


def pod(name: str, spec: dict[str, Any], *, labels: dict[str, str] | None = None) -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [workloads.container("500m")],
            **spec,
        },
    }


async def scale_up(
    api_client: client.ApiClient,
    *,
    pool: str,
    namespace: str,
    running_pods: int,
    pods: Sequence[dict[str, Any]] = (),
    deployments: Sequence[dict[str, Any]] = (),
    within: float = 90,
) -> History:
    """Create the pods and the deployments, wait (up to ``within`` seconds) for
    ``running_pods`` Running; the pool's history."""
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    apps = client.AppsV1Api(api_client)
    history = History(custom, pool)
    history.start()
    try:
        for manifest in pods:
            await core.create_namespaced_pod(namespace, manifest)
        for manifest in deployments:
            await apps.create_namespaced_deployment(namespace, manifest)
        await wait_for(lambda: running(core, namespace, running_pods), within=within)
        await asyncio.sleep(3)  # three more scans with everything settled: no late request
    finally:
        await history.stop()
    return history
