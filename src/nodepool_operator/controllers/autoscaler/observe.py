"""What one Autoscaler sees, read from the shared caches: no API call and no LIST per scan.

Indexes added to the shared informers keep each scan proportional to what it looks at
(the pending pods of the watched namespaces, the pool's nodes and their pods), not to the
size of the cluster. Parsed pod requests are cached by uid and resourceVersion, so a pod
that does not change is parsed once, however many scans see it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from nodepool_operator.api import autoscaler as nas
from nodepool_operator.api import nodepool as np
from nodepool_operator.api import quantity
from nodepool_operator.api import scalerequest as sr
from nodepool_operator.controllers.autoscaler import fit, plan
from nodepool_operator.controllers.autoscaler.fit import NodeShape, PodRequests, Resources
from nodepool_operator.controllers.autoscaler.handoff import RequestLedger
from nodepool_operator.runtime import nodes as k8s_nodes
from nodepool_operator.runtime import pods
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.informer import Informer

__all__ = [
    "ALL_NAMESPACES",
    "NODE_INDEX",
    "PENDING_INDEX",
    "POOL_INDEX",
    "Observation",
    "Observer",
    "RequestCache",
]

# Index names are our own, so that another controller's index of the same informer
# (which may compute something else under a common name) is never mistaken for ours.
PENDING_INDEX: Final = "autoscaler-pending"
NODE_INDEX: Final = "autoscaler-node"
POOL_INDEX: Final = "autoscaler-pool"
#: Every pending pod is also filed under this value; no namespace has an empty name.
ALL_NAMESPACES: Final = ""

DEFAULT_CACHE_SIZE: Final = 100_000


def _pending_index(pod: Object) -> list[str]:
    if not fit.is_pending_unbound(pod):
        return []
    return [str(pod["metadata"].get("namespace", "")), ALL_NAMESPACES]


def _node_index(pod: Object) -> list[str]:
    node = (pod.get("spec") or {}).get("nodeName")
    return [str(node)] if node else []


def _pool_of_node_index(node: Object) -> list[str]:
    pool = np.pool_of(node)
    return [pool] if pool else []


def _pool_of_request_index(request: Object) -> list[str]:
    pool = (request.get("spec") or {}).get("nodePoolName")
    return [str(pool)] if pool else []


class RequestCache:
    """Parsed requests by (uid, resourceVersion); least recently used out first."""

    def __init__(self, size: int = DEFAULT_CACHE_SIZE) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[str, str], PodRequests | str] = OrderedDict()

    def get(self, pod: Mapping[str, Any]) -> PodRequests | str:
        """The pod's requests, or why they cannot be read (a malformed quantity)."""
        meta = pod.get("metadata") or {}
        key = (str(meta.get("uid", "")), str(meta.get("resourceVersion", "")))
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
            return found
        try:
            value: PodRequests | str = fit.pod_requests(pod)
        except ValueError as error:
            value = f"has a request that cannot be read: {error}"
        self._entries[key] = value
        if len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return value


@dataclass(frozen=True)
class Observation:
    """One scan's view of a pool and of the pods waiting for it."""

    pool: plan.PoolFacts
    pool_uid: str
    fitting: tuple[Object, ...]  # unschedulable pods that fit a template node
    requests: tuple[Resources, ...]  # their requests, in the same order
    unfit: tuple[tuple[Object, str], ...]  # unschedulable pods that never fit, and why
    pending: int  # pending pods not bound to a node, in the watched namespaces
    pending_fitting: int  # of those, the ones a pool node could hold
    unneeded: tuple[str, ...]  # Ready nodes running only DaemonSet or mirror pods

    @property
    def unschedulable(self) -> int:
        return len(self.fitting) + len(self.unfit)


@dataclass(frozen=True)
class _Nodes:
    free: tuple[Resources, ...]
    unneeded: tuple[str, ...]
    ready: int
    cordoned: int


def _allocatable(node: Mapping[str, Any], shape: NodeShape) -> Resources:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    try:
        return Resources(
            cpu=quantity.parse_cpu_millicores(str(allocatable["cpu"])),
            memory=quantity.parse_memory_bytes(str(allocatable["memory"])),
            pods=int(quantity.parse_quantity(str(allocatable["pods"]))),
        )
    except (KeyError, ValueError):
        # Not reported yet: the NodePool controller registers Nodes with the template's.
        return shape.capacity


def _oldest_first(pods: Iterable[Object]) -> list[Object]:
    # Packing keeps this order among equal pods, so the pods that have waited longest (and
    # that earlier requests were made for) take the room already requested, and the new
    # nodes, with their TriggeredScaleUp events, go to the pods that are new.
    def key(pod: Object) -> tuple[str, str, str]:
        meta = pod["metadata"]
        return (str(meta.get("creationTimestamp", "")), meta.get("namespace", ""), meta["name"])

    return sorted(pods, key=key)


class Observer:
    """Reads pools, nodes, pods and ScaleRequests from the shared informers."""

    def __init__(
        self,
        *,
        pools: Informer,
        nodes: Informer,
        pods: Informer,
        requests: Informer,
        ledger: RequestLedger,
        cache: RequestCache | None = None,
    ) -> None:
        self.pools = pools
        self.nodes = nodes
        self.pods = pods
        self.requests = requests
        self.ledger = ledger
        self.cache = cache or RequestCache()
        pods.add_index(PENDING_INDEX, _pending_index)
        pods.add_index(NODE_INDEX, _node_index)
        nodes.add_index(POOL_INDEX, _pool_of_node_index)
        requests.add_index(POOL_INDEX, _pool_of_request_index)

    def observe(self, spec: nas.AutoscalerSpec) -> Observation | None:
        """The pool and pods of an Autoscaler; None when its pool does not exist."""
        pool = self.pools.get(spec.node_pool_name)
        if pool is None or pool["metadata"].get("deletionTimestamp"):
            return None
        name = spec.node_pool_name
        pool_spec = np.spec_of(pool)
        shape = NodeShape.of_pool(name, pool_spec.template)
        nodes = self._nodes(name, shape)
        views = self._requests(name)
        target = plan.effective_target(
            target=pool_spec.target_nodes,
            min_nodes=pool_spec.min_nodes,
            max_nodes=pool_spec.max_nodes,
            pool_version=str(pool["metadata"].get("resourceVersion", "")),
            requests=views,
        )
        facts = plan.PoolFacts(
            name=name,
            min_nodes=pool_spec.min_nodes,
            max_nodes=pool_spec.max_nodes,
            target=target,
            ready=nodes.ready,
            cordoned=nodes.cordoned,
            free=nodes.free,
            shape=shape,
            open_request=any(v.phase == "Pending" for v in views),
        )
        uid = str(pool["metadata"].get("uid", ""))
        return self._pods(spec.namespaces, facts=facts, uid=uid, nodes=nodes)

    def _requests(self, pool: str) -> list[plan.RequestView]:
        cached = [
            r
            for r in self.requests.by_index(POOL_INDEX, pool)
            if not r["metadata"].get("deletionTimestamp")
        ]
        visible = self.ledger.visible(pool, cached, cache_version=self.requests.resource_version)
        views = []
        for request in visible:
            meta, status = request["metadata"], sr.status_of(request)
            views.append(
                plan.RequestView(
                    name=str(meta["name"]),
                    created=str(meta.get("creationTimestamp", "")),
                    target=sr.spec_of(request).target_nodes,
                    phase=status.phase,
                    applied=status.applied_target_nodes,
                    version=str(meta.get("resourceVersion", "")),
                )
            )
        return views

    def _nodes(self, pool: str, shape: NodeShape) -> _Nodes:
        free: list[Resources] = []
        unneeded: list[str] = []
        ready = cordoned = 0
        for node in sorted(
            self.nodes.by_index(POOL_INDEX, pool), key=lambda n: n["metadata"]["name"]
        ):
            if not k8s_nodes.is_ready(node) or node["metadata"].get("deletionTimestamp"):
                continue  # booting: counted in flight; being deleted: gone already
            ready += 1
            if (node.get("spec") or {}).get("unschedulable"):
                cordoned += 1  # a node, but no room for pods
                continue
            used, busy = self._usage(node["metadata"]["name"])
            room = _allocatable(node, shape).minus(used)
            free.append(
                Resources(cpu=max(0, room.cpu), memory=max(0, room.memory), pods=max(0, room.pods))
            )
            if not busy:
                unneeded.append(node["metadata"]["name"])
        return _Nodes(free=tuple(free), unneeded=tuple(unneeded), ready=ready, cordoned=cordoned)

    def _usage(self, node: str) -> tuple[Resources, bool]:
        """What the pods bound to ``node`` use, and whether any of them needs the node."""
        cpu = memory = count = 0
        busy = False
        for pod in self.pods.by_index(NODE_INDEX, node):
            if pods.is_terminal(pod):
                continue
            requests = self.cache.get(pod)
            if isinstance(requests, PodRequests):
                cpu += requests.resources.cpu
                memory += requests.resources.memory
            count += 1
            # A pod on its way out still holds its room (the scheduler counts it until it
            # is gone) but no longer keeps the node needed.
            leaving = bool(pod["metadata"].get("deletionTimestamp"))
            busy = busy or not (leaving or pods.is_daemon_or_mirror(pod))
        return Resources(cpu=cpu, memory=memory, pods=count), busy

    def _pending_pods(self, namespaces: Sequence[str]) -> list[Object]:
        if not namespaces:
            return self.pods.by_index(PENDING_INDEX, ALL_NAMESPACES)
        found: list[Object] = []
        for namespace in namespaces:
            found.extend(self.pods.by_index(PENDING_INDEX, namespace))
        return found

    def _pods(
        self, namespaces: Sequence[str], *, facts: plan.PoolFacts, uid: str, nodes: _Nodes
    ) -> Observation:
        fitting: list[Object] = []
        requests: list[Resources] = []
        unfit: list[tuple[Object, str]] = []
        pending = pending_fitting = 0
        for pod in _oldest_first(self._pending_pods(namespaces)):
            pending += 1
            parsed = self.cache.get(pod)
            problem = (
                parsed
                if isinstance(parsed, str)
                else fit.why_not_fit(pod, parsed, shape=facts.shape)
            )
            pending_fitting += problem is None
            if not fit.is_unschedulable(pod):
                continue
            if problem is not None:
                unfit.append((pod, problem))
            elif isinstance(parsed, PodRequests):
                fitting.append(pod)
                requests.append(parsed.resources)
        return Observation(
            pool=facts,
            pool_uid=uid,
            fitting=tuple(fitting),
            requests=tuple(requests),
            unfit=tuple(unfit),
            pending=pending,
            pending_fitting=pending_fitting,
            unneeded=nodes.unneeded,
        )
