"""Wiring of the NodePool controller: its informers (shared through the manager) and watches."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable

from nodepool_operator.api import nominations, wellknown
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.cloud.provider import CloudProvider
from nodepool_operator.controllers import cached, offerings
from nodepool_operator.controllers.nodepool import lifecycle, plan
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.controllers.nodepool.controller import NAME, NodePoolReconciler
from nodepool_operator.controllers.nodepool.local_data import LocalData
from nodepool_operator.controllers.resources import (
    NODEPOOLS,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    SCALEREQUESTS,
    add_shared_indexes,
)
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import kinds
from nodepool_operator.runtime import nodes as k8s_nodes
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.controller import (
    Controller,
    Funcs,
    GenerationChanged,
    Request,
    StateChanged,
    any_of,
)
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import Informer, keep_write_times
from nodepool_operator.runtime.manager import Manager

__all__ = ["setup"]


class DeletionStarted(Funcs):
    """Updates pass when the pool's deletion starts (or is undone)."""

    def update(self, old: Object, new: Object) -> bool:
        return bool(new["metadata"].get("deletionTimestamp")) != bool(
            old["metadata"].get("deletionTimestamp")
        )


class NominationWritten(Funcs):
    """A Node that waits with the unregistered taint has been marked nominated."""

    def create(self, obj: Object) -> bool:
        return False

    def delete(self, obj: Object) -> bool:
        return False

    def update(self, old: Object, new: Object) -> bool:
        return (
            wellknown.is_unregistered(new)
            and nominations.is_nominated(new)
            and not nominations.is_nominated(old)
        )


def _pool_of_request(obj: Object) -> list[Request]:
    return [Request(name=scalerequest_api.spec_of(obj).node_pool_name)]


def _pool_of_node(obj: Object) -> list[Request]:
    pool = wellknown.pool_of(obj)
    return [Request(name=pool)] if pool else []


def node_state(node: Object) -> Hashable:
    """What of a Node the pool acts on: readiness, labels, taints, cordon, annotations
    (drain marks, do-not-disrupt), owner, provider ID, deletion, the allocatable its
    kubelet reports (``allocatable``); heartbeats are not."""
    meta, spec = node.get("metadata") or {}, node.get("spec") or {}
    return (
        k8s_nodes.is_ready(node),
        tuple(sorted(((node.get("status") or {}).get("allocatable") or {}).items())),
        tuple(sorted((meta.get("labels") or {}).items())),
        tuple(sorted((meta.get("annotations") or {}).items())),
        repr(spec.get("taints")),
        bool(spec.get("unschedulable")),
        spec.get("providerID"),
        tuple(str(ref.get("uid")) for ref in meta.get("ownerReferences") or ()),
        bool(meta.get("deletionTimestamp")),
    )


class PodLeftOrChanged(Funcs):
    """What can move a drain on: a pod gone, or its deletion or annotations changed (a
    do-not-disrupt annotation dropped). New pods on a cordoned Node move nothing."""

    def create(self, obj: Object) -> bool:
        return False

    def update(self, old: Object, new: Object) -> bool:
        before, after = old.get("metadata", {}), new.get("metadata", {})
        return any(before.get(k) != after.get(k) for k in ("deletionTimestamp", "annotations"))


def pool_draining_pod(nodes: Informer) -> Callable[[Object], list[Request]]:
    """A pod's event as a request for the pool whose Node it is on, if that Node drains:
    a drain moves on as soon as a pod leaves, not at the next look."""

    def mapper(pod: Object) -> list[Request]:
        node_name = (pod.get("spec") or {}).get("nodeName")
        node = nodes.get(node_name) if node_name else None
        if node is None or not plan.is_draining(node):
            return []
        return _pool_of_node(node)

    return mapper


@dataclasses.dataclass(frozen=True)
class _Informers:
    pools: Informer
    nodes: Informer
    pods: Informer
    scale_requests: Informer
    claims: Informer
    volumes: Informer


def _informers(manager: Manager) -> _Informers:
    """The controller's informers, shared with the other controllers through the manager."""
    cache = manager.cache
    # Every Node, pool or not: the simulation counts all of them (pods on a system node
    # take part in affinity and spread); the NodePool controller reads its pools' Nodes
    # through the NODES_BY_POOL index.
    found = _Informers(
        # With who wrote each pool's status when: the status reporter times its held
        # progress writes from it (``StatusWriter.written_at``), across restarts too.
        pools=cache.informer(NODEPOOLS, transform=keep_write_times),
        nodes=cache.informer(kinds.NODES, transform=cached.node_fields),
        pods=cache.informer(kinds.PODS, transform=cached.pod_fields),
        scale_requests=cache.informer(SCALEREQUESTS),
        # Which pods keep their data on their Node's disk (``local_data``): the same
        # caches the Autoscaler's volume filters read.
        claims=cache.informer(PERSISTENT_VOLUME_CLAIMS, transform=cached.claim_fields),
        volumes=cache.informer(PERSISTENT_VOLUMES, transform=cached.volume_fields),
    )
    add_shared_indexes(nodes=found.nodes, pods_=found.pods, requests=found.scale_requests)
    return found


def _watch(controller: Controller, informers: _Informers, config: NodePoolConfig) -> None:
    # Our own status writes and others' label edits do not move the generation: no wake-up.
    controller.watch(informers.pools, predicates=[any_of(GenerationChanged(), DeletionStarted())])
    controller.watch(
        informers.nodes,
        mapper=_pool_of_node,
        predicates=[StateChanged(node_state)],
        delay=config.node_event_window,
    )
    # The Autoscaler's nominations written: the Nodes waiting for them are released at
    # once, not after the window (every pod nominated there waits on it).
    controller.watch(informers.nodes, mapper=_pool_of_node, predicates=[NominationWritten()])
    controller.watch(
        informers.scale_requests, mapper=_pool_of_request, predicates=[GenerationChanged()]
    )
    controller.watch(
        informers.pods, mapper=pool_draining_pod(informers.nodes), predicates=[PodLeftOrChanged()]
    )


def setup(
    manager: Manager,
    *,
    cloud: CloudProvider,
    config: NodePoolConfig,
    offerings_catalog: offerings.OfferingsCatalog | None = None,
) -> Controller:
    """Create the controller, its informers (shared through the manager) and its watches.
    ``offerings_catalog``: the cloud's catalog, shared with the Autoscaler (None: one of
    the controller's own, ``OfferingsCatalog.of_cloud``)."""
    if offerings_catalog is None:
        offerings_catalog = offerings.OfferingsCatalog.of_cloud(cloud, clock=manager.clock)
    client = manager.client.for_manager(f"{NAME}-controller")
    informers = _informers(manager)
    recorder = EventRecorder(client, component=f"{NAME}-controller", clock=manager.clock)
    manager.on_drained.append(recorder.flush)
    wall_clock = clock_module.RealWallClock()
    reconciler = NodePoolReconciler(
        client=client,
        pools=informers.pools,
        scale_requests=informers.scale_requests,
        lifecycle=lifecycle.PoolLifecycle(
            client=client,
            nodes=informers.nodes,
            pods=informers.pods,
            cloud=cloud,
            recorder=recorder,
            config=config,
            clock=manager.clock,
            wall_clock=wall_clock,
            scale_requests=informers.scale_requests,
            offerings_catalog=offerings_catalog,
            local_data=LocalData(claims=informers.claims, volumes=informers.volumes),
        ),
        recorder=recorder,
        config=config,
        clock=manager.clock,
        wall_clock=wall_clock,
    )
    controller = Controller(
        name=NAME,
        reconciler=reconciler,
        max_concurrent_reconciles=config.max_concurrent_reconciles,
        clock=manager.clock,
    )
    _watch(controller, informers, config)
    manager.add(controller)
    return controller
