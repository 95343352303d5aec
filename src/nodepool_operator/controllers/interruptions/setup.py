"""Wiring of the interruptions controller: the shared Node, Pod and NodePool informers, and
its one key, the cloud's event stream, queued at once so the first pass starts with the
controller (and only while this replica leads, as every controller)."""

from __future__ import annotations

from nodepool_operator.cloud import provider
from nodepool_operator.controllers import cached
from nodepool_operator.controllers.interruptions.controller import (
    NAME,
    POLL,
    InterruptionReconciler,
)
from nodepool_operator.controllers.resources import NODEPOOLS, SCALEREQUESTS, add_shared_indexes
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import kinds
from nodepool_operator.runtime.controller import Controller
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import keep_write_times
from nodepool_operator.runtime.manager import Manager

__all__ = ["setup"]


def setup(manager: Manager, *, source: provider.EventSource) -> Controller:
    """Create the controller over ``source`` (the cloud provider, when it tells of
    interruptions) with the informers the other controllers share."""
    cache = manager.cache
    # Requested exactly as the other controllers request them: one informer per kind.
    nodes = cache.informer(kinds.NODES, transform=cached.node_fields)
    pods = cache.informer(kinds.PODS, transform=cached.pod_fields)
    pools = cache.informer(NODEPOOLS, transform=keep_write_times)
    add_shared_indexes(nodes=nodes, pods_=pods, requests=cache.informer(SCALEREQUESTS))
    client = manager.client.for_manager(f"{NAME}-controller")
    recorder = EventRecorder(client, component=f"{NAME}-controller", clock=manager.clock)
    manager.on_drained.append(recorder.flush)
    reconciler = InterruptionReconciler(
        client=client,
        nodes=nodes,
        pools=pools,
        pods=pods,
        source=source,
        recorder=recorder,
        wall_clock=clock_module.RealWallClock(),
    )
    controller = Controller(name=NAME, reconciler=reconciler, clock=manager.clock)
    controller.queue.add(POLL)
    manager.add(controller)
    return controller
