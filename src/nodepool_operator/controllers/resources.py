"""Where the operator's own kinds live in the API, and the indexes both controllers read
on the informers they share."""

from __future__ import annotations

from typing import Any, Final, Protocol

from nodepool_operator.api import autoscaler, nodepool, scalerequest, wellknown
from nodepool_operator.runtime import informer, pods
from nodepool_operator.runtime.client import Object, Resource

__all__ = [
    "AUTOSCALERS",
    "NODEPOOLS",
    "NODES_BY_POOL",
    "PERSISTENT_VOLUMES",
    "PERSISTENT_VOLUME_CLAIMS",
    "PODS_BY_NODE",
    "REQUESTS_BY_POOL",
    "SCALEREQUESTS",
    "STORAGE_CLASSES",
    "add_shared_indexes",
]

NODEPOOLS = Resource(nodepool.GROUP, nodepool.VERSION, nodepool.PLURAL, nodepool.KIND, False)
SCALEREQUESTS = Resource(
    scalerequest.GROUP, scalerequest.VERSION, scalerequest.PLURAL, scalerequest.KIND, False
)
AUTOSCALERS = Resource(
    autoscaler.GROUP, autoscaler.VERSION, autoscaler.PLURAL, autoscaler.KIND, False
)
#: What the Autoscaler's volume filters read (get, list, watch only).
PERSISTENT_VOLUME_CLAIMS = Resource(
    "", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True
)
PERSISTENT_VOLUMES = Resource("", "v1", "persistentvolumes", "PersistentVolume", False)
STORAGE_CLASSES = Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", False)

#: Index names on the shared informers: Nodes by their pool label, Pods by the Node they
#: are bound to, ScaleRequests by the pool they name. One name and one function each, so
#: both controllers declaring them build each index once (an informer refuses another
#: definition under a name it has).
NODES_BY_POOL: Final = "pool"
PODS_BY_NODE: Final = "node"
REQUESTS_BY_POOL: Final = "pool"


def _pool_named(request: Object) -> list[str]:
    pool = (request.get("spec") or {}).get("nodePoolName")
    return [str(pool)] if pool else []


class _Indexable(Protocol):
    def add_index(self, name: str, func: Any) -> None: ...


def add_shared_indexes(*, nodes: _Indexable, pods_: _Indexable, requests: _Indexable) -> None:
    """Declare the shared indexes (again: the same definition twice is one index)."""
    nodes.add_index(NODES_BY_POOL, informer.label_index(wellknown.POOL_LABEL))
    pods_.add_index(PODS_BY_NODE, pods.node_name_index)
    requests.add_index(REQUESTS_BY_POOL, _pool_named)
