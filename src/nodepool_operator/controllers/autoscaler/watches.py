"""Which events start a planner batch, and which Autoscalers are woken for their status.

Every change the plan depends on is part of the open batch (``planner.Batch``), and only
a pending pod holds it open (``pod_mapper``): a pod
becomes (or stops being) unschedulable, is bound or goes away; a node turns Ready,
changes taints or room, or leaves; a pool's spec changes; a request is answered; a
DaemonSet's pod template changes (it runs on every new node); a claim, volume or class
changes; an Autoscaler is made, changed or deleted. Status churn (kubelet and kwok
heartbeats, our own status writes) is not.

That is ``Controller.watch`` of the planner's one key, with the idle window as its delay.
The Autoscaler controller watches its Autoscalers' generations, and the planner wakes the
rest (``setup``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler.constraints import pending_pods
from nodepool_operator.controllers.autoscaler.snapshot.volumes import VolumeReads
from nodepool_operator.runtime import nodes as k8s_nodes
from nodepool_operator.runtime import pods
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.controller import (
    Controller,
    GenerationChanged,
    Predicate,
    Request,
    StateChanged,
)
from nodepool_operator.runtime.informer import Informer

__all__ = [
    "PodChanged",
    "StateChanged",
    "node_state",
    "pod_state",
    "pool_state",
    "request_state",
    "watch_dependencies",
]

State = Callable[[Object], Hashable]


def pod_state(pod: Object) -> Hashable:
    """What of a pod the planner reacts to; kubelet and kwok status churn is not."""
    return (
        pending_pods.is_unschedulable(pod),
        pending_pods.is_pending_unbound(pod),
        (pod.get("spec") or {}).get("nodeName"),
        pods.is_terminal(pod),
        bool(pod["metadata"].get("deletionTimestamp")),
    )


class PodChanged(StateChanged):
    """``StateChanged`` on ``pod_state``, except that a pod that arrives already bound to
    a node starts no batch: the initial list of a large cluster delivers every running
    pod as an add. Its node's room is read at the next plan: there is one on start and
    one every scan."""

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
        wellknown.pool_of(node),
        bool(node["metadata"].get("deletionTimestamp")),
    )


def request_state(request: Object) -> Hashable:
    """The NodePool controller's answer to a request."""
    status = scalerequest_api.status_of(request)
    return (status.phase, status.applied_target_nodes)


def _content(obj: Object) -> Hashable:
    """What the cache keeps of an object, but its resourceVersion."""
    meta = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
    return repr({**obj, "metadata": meta})


def _generation(obj: Object) -> Hashable:
    return int(obj["metadata"].get("generation", 0))


def pool_state(pool: Object) -> Hashable:
    """A pool's spec, and the records of its status the plan reads (where it cannot grow,
    what its kubelets report); its progress counts are not."""
    status = pool.get("status") or {}
    return (
        _generation(pool),
        repr(status.get("zoneBackoffs")),
        repr(status.get("cloudPause")),
        repr(status.get("reportedAllocatable")),
    )


def watch_dependencies(
    controller: Controller,
    *,
    mapper: Callable[[Object], Iterable[Request]],
    pod_mapper: Callable[[Object], Iterable[Request]],
    window: Callable[[Request], float],
    autoscalers: Informer,
    pods: Informer,
    nodes: Informer,
    pools: Informer,
    requests: Informer,
    daemon_sets: Informer,
    volumes: VolumeReads | None = None,
) -> None:
    """Map every change a plan depends on to the planner's key, after the idle window:
    pods with ``pod_mapper``, everything else with ``mapper``."""
    watched: list[tuple[Informer, Predicate]] = [
        (autoscalers, GenerationChanged()),
        (pods, PodChanged()),
        (nodes, StateChanged(node_state)),
        (pools, StateChanged(pool_state)),
        (requests, StateChanged(request_state)),
        # its pod template, not its status
        (daemon_sets, StateChanged(_generation)),
    ]
    if volumes is not None:
        for informer in (volumes.claims, volumes.volumes, volumes.classes):
            watched.append((informer, StateChanged(_content)))
    for informer, predicate in watched:
        mapped = pod_mapper if informer is pods else mapper
        controller.watch(informer, mapper=mapped, predicates=[predicate], delay=window)
