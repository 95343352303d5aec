"""Recordings of the planner's caches built in memory (pools, Nodes, pods), for the plan,
explain and scale-down tests.
"""

from __future__ import annotations

from typing import Any

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.resources import (
    AUTOSCALERS,
    NODEPOOLS,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    SCALEREQUESTS,
    STORAGE_CLASSES,
)
from nodepool_operator.inspection import snapshot
from nodepool_operator.runtime import kinds

NAMESPACE = "web"

CAPPED = "capped"

CREATED = "2026-12-01T00:00:00Z"

TEMPLATE = nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=110)


def pod(
    name: str, cpu: str, *, node: str | None = None, pool: str | None = CAPPED
) -> dict[str, Any]:
    pending = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-{name}",
            "creationTimestamp": CREATED,
        },
        "spec": {
            "nodeSelector": {wellknown.POOL_LABEL: pool} if pool else {},
            "containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}],
            **({"nodeName": node} if node else {}),
        },
        "status": {"phase": "Running"} if node else {"phase": "Pending", "conditions": [pending]},
    }


def node(name: str, pool: str) -> dict[str, Any]:
    room = {"cpu": "4", "memory": "16Gi", "pods": "110"}
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "creationTimestamp": CREATED,
            "labels": {
                **nodepool_api.node_labels(pool, TEMPLATE),
                wellknown.HOSTNAME_LABEL: name,
            },
            "ownerReferences": [{"kind": "NodePool", "name": pool, "uid": f"uid-{pool}"}],
        },
        "spec": {},
        "status": {
            "allocatable": room,
            "capacity": room,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": CREATED}],
        },
    }


def autoscaler(pool: str) -> dict[str, Any]:
    spec = autoscaler_api.AutoscalerSpec(node_pool_name=pool, namespaces=(NAMESPACE,))
    found = autoscaler_api.manifest(f"nas-{pool}", spec)
    found["metadata"].update(uid=f"uid-nas-{pool}", creationTimestamp=CREATED)
    return found


def recording(*, pools: list[Any], nodes: list[Any], pods: list[Any]) -> snapshot.CacheRecording:
    """What the planner's informers hold: the pools, an Autoscaler for each, the nodes and
    pods, and nothing else."""
    key = snapshot.cache_key
    return snapshot.CacheRecording(
        caches={
            key(AUTOSCALERS, None, None, None): [autoscaler(p["metadata"]["name"]) for p in pools],
            key(NODEPOOLS, None, None, None): pools,
            key(kinds.NODES, None, None, None): nodes,
            key(kinds.PODS, None, None, None): pods,
            key(SCALEREQUESTS, None, None, None): [],
            key(kinds.DAEMONSETS, None, None, None): [],
            key(PERSISTENT_VOLUME_CLAIMS, None, None, None): [],
            key(PERSISTENT_VOLUMES, None, None, None): [],
            key(STORAGE_CLASSES, None, None, None): [],
        },
        captured_at="2026-12-01T00:10:00+00:00",
    )
