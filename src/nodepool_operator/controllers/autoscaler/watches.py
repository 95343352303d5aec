"""Which events wake which Autoscaler, and after how long.

An Autoscaler is looked at again when something its decision depends on changes: a pod
of its namespaces becomes (or stops being) unschedulable, is bound or goes away; a node
of its pool turns Ready or leaves; its pool's spec changes; a request for its pool is
answered; any DaemonSet's pod template changes (it runs on every new node). Each of these
waits for the Autoscaler's own ``spec.batchWindowSeconds``: the
first event of a burst opens the window and one reconcile runs at its end, so a thousand
pods marked unschedulable within the window make one decision, and the first of them is
never postponed by the ones after it.

That is ``Controller.watch(delay=...)`` with the window looked up per key.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Final

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.controllers.autoscaler import fit
from nodepool_operator.controllers.autoscaler.volumes import VolumeReads
from nodepool_operator.runtime import nodes as k8s_nodes
from nodepool_operator.runtime import pods
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.controller import Controller, Request, StateChanged
from nodepool_operator.runtime.informer import Informer

__all__ = [
    "PodChanged",
    "StateChanged",
    "Triggers",
    "node_state",
    "pod_state",
    "request_state",
    "watch_dependencies",
]

NAMESPACE_INDEX: Final = "autoscaler-namespace"
POOL_INDEX: Final = "autoscaler-pool"
#: Autoscalers with no namespaces listed (all namespaces) are filed under this value.
EVERY_NAMESPACE: Final = ""

State = Callable[[Object], Hashable]


def pod_state(pod: Object) -> Hashable:
    """What of a pod the Autoscaler reacts to; kubelet and kwok status churn is not."""
    return (
        fit.is_unschedulable(pod),
        fit.is_pending_unbound(pod),
        (pod.get("spec") or {}).get("nodeName"),
        pods.is_terminal(pod),
        bool(pod["metadata"].get("deletionTimestamp")),
    )


class PodChanged(StateChanged):
    """``StateChanged`` on ``pod_state``, except that a pod that arrives already bound to
    a node wakes nobody: the initial list of a large cluster delivers every running pod as
    an add, and each woke every Autoscaler of its namespace (50,000 pods times 300
    Autoscalers kept a restarting operator from syncing its caches in time). Its node's
    room is read at the next pass; every Autoscaler has one on start and every scan."""

    def __init__(self) -> None:
        super().__init__(pod_state)

    def create(self, obj: Object) -> bool:
        return not (obj.get("spec") or {}).get("nodeName")


def node_state(node: Object) -> Hashable:
    """Readiness, cordon, taints, capacity and pool of a node; heartbeats are not."""
    status = node.get("status") or {}
    spec = node.get("spec") or {}
    return (
        k8s_nodes.is_ready(node),
        bool(spec.get("unschedulable")),
        repr(spec.get("taints")),
        tuple(sorted((status.get("allocatable") or {}).items())),
        nodepool_api.pool_of(node),
        bool(node["metadata"].get("deletionTimestamp")),
    )


def request_state(request: Object) -> Hashable:
    """The NodePool controller's answer to a request."""
    status = scalerequest_api.status_of(request)
    return (status.phase, status.applied_target_nodes)


def _namespace_index(autoscaler: Object) -> list[str]:
    namespaces = (autoscaler.get("spec") or {}).get("namespaces") or []
    return [str(n) for n in namespaces] or [EVERY_NAMESPACE]


def _pool_index(autoscaler: Object) -> list[str]:
    pool = (autoscaler.get("spec") or {}).get("nodePoolName")
    return [str(pool)] if pool else []


def _keys(autoscalers: list[Object]) -> list[Request]:
    return sorted({Request(name=str(a["metadata"]["name"])) for a in autoscalers})


class Triggers:
    """Maps objects to the Autoscalers that depend on them, through indexes on Autoscalers."""

    def __init__(self, *, autoscalers: Informer, nodes: Informer) -> None:
        self.autoscalers = autoscalers
        self.nodes = nodes
        autoscalers.add_index(NAMESPACE_INDEX, _namespace_index)
        autoscalers.add_index(POOL_INDEX, _pool_index)

    def for_pool(self, pool: str) -> list[Request]:
        return _keys(self.autoscalers.by_index(POOL_INDEX, pool))

    def of_pod(self, pod: Object) -> list[Request]:
        namespace = str(pod["metadata"].get("namespace", ""))
        found = [
            *self.autoscalers.by_index(NAMESPACE_INDEX, namespace),
            *self.autoscalers.by_index(NAMESPACE_INDEX, EVERY_NAMESPACE),
        ]
        # A pod on a pool's node matters to that pool's Autoscalers (a node emptying out)
        # whatever namespace they watch.
        node_name = (pod.get("spec") or {}).get("nodeName")
        node = self.nodes.get(str(node_name)) if node_name else None
        pool = nodepool_api.pool_of(node) if node is not None else None
        if pool is not None:
            found.extend(self.autoscalers.by_index(POOL_INDEX, pool))
        return _keys(found)

    def of_node(self, node: Object) -> list[Request]:
        """A pool's node wakes its Autoscalers; a node of no pool (room and neighbours for
        every pool's pods) wakes all of them."""
        pool = nodepool_api.pool_of(node)
        return self.for_pool(pool) if pool else self.every(node)

    def of_pool(self, pool: Object) -> list[Request]:
        return self.for_pool(str(pool["metadata"]["name"]))

    def of_request(self, request: Object) -> list[Request]:
        pool = (request.get("spec") or {}).get("nodePoolName")
        return self.for_pool(str(pool)) if pool else []

    def every(self, _: Object) -> list[Request]:
        """All Autoscalers: a DaemonSet runs on every pool's new nodes."""
        return _keys(self.autoscalers.items())

    def window(self, key: Request) -> float:
        """The batch window of an Autoscaler (the default while it is not in the cache)."""
        autoscaler = self.autoscalers.get(key.name)
        if autoscaler is None:
            return autoscaler_api.DEFAULT_BATCH_WINDOW_SECONDS
        return autoscaler_api.spec_of(autoscaler).batch_window_seconds


def _content(obj: Object) -> Hashable:
    """What the cache keeps of an object, but its resourceVersion."""
    meta = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
    return repr({**obj, "metadata": meta})


def _generation(obj: Object) -> Hashable:
    return int(obj["metadata"].get("generation", 0))


def watch_dependencies(
    controller: Controller,
    *,
    triggers: Triggers,
    pods: Informer,
    nodes: Informer,
    pools: Informer,
    requests: Informer,
    daemon_sets: Informer,
    volumes: VolumeReads | None = None,
) -> None:
    """Wake Autoscalers, after their batch window, on what their decisions depend on.

    A claim bound, a volume or a class made or changed may let a pending pod fit (or
    not): every Autoscaler looks again."""
    for informer, mapper, predicate in (
        (pods, triggers.of_pod, PodChanged()),
        (nodes, triggers.of_node, StateChanged(node_state)),
        # spec only: its status is not ours to read
        (pools, triggers.of_pool, StateChanged(_generation)),
        (requests, triggers.of_request, StateChanged(request_state)),
        # its pod template, not its status
        (daemon_sets, triggers.every, StateChanged(_generation)),
    ):
        controller.watch(informer, mapper=mapper, predicates=[predicate], delay=triggers.window)
    if volumes is not None:
        for informer in (volumes.claims, volumes.volumes, volumes.classes):
            controller.watch(
                informer,
                mapper=triggers.every,
                predicates=[StateChanged(_content)],
                delay=triggers.window,
            )
