"""Wiring of the NodePool controller's interruptions reconciler: the shared Node, Pod and
NodePool informers, and its one key, the cloud's event stream, queued at once so the first
pass starts with the controller (and only while this replica leads, as every controller).

It writes as the NodePool controller: the same field manager and event component
(``nodepool-controller``), since the notice on a Node is the NodePool controller's field
(DESIGN's field-ownership table); its own work queue keeps the cloud's long poll off the
pools' workers."""

from __future__ import annotations

import asyncio

from nodepool_operator.cloud import provider
from nodepool_operator.controllers import cached
from nodepool_operator.controllers.nodepool.controller import NAME as NODEPOOL
from nodepool_operator.controllers.nodepool.interruptions.controller import (
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


def setup(
    manager: Manager, *, source: provider.EventSource, stopping: asyncio.Event | None = None
) -> Controller:
    """Create the controller over ``source`` (the cloud provider, when it tells of
    interruptions) with the informers the other controllers share. ``stopping`` is the
    operator's stop: its long poll is cancelled then rather than waited out."""
    cache = manager.cache
    # Requested exactly as the other controllers request them: one informer per kind.
    nodes = cache.informer(kinds.NODES, transform=cached.node_fields)
    pods = cache.informer(kinds.PODS, transform=cached.pod_fields)
    pools = cache.informer(NODEPOOLS, transform=keep_write_times)
    add_shared_indexes(nodes=nodes, pods_=pods, requests=cache.informer(SCALEREQUESTS))
    # The NodePool controller's identity: the notice is its field on the Node.
    client = manager.client.for_manager(f"{NODEPOOL}-controller")
    recorder = EventRecorder(client, component=f"{NODEPOOL}-controller", clock=manager.clock)
    manager.on_drained.append(recorder.flush)
    reconciler = InterruptionReconciler(
        client=client,
        nodes=nodes,
        pools=pools,
        pods=pods,
        source=source,
        recorder=recorder,
        wall_clock=clock_module.RealWallClock(),
        stopping=stopping,
    )
    controller = Controller(name=NAME, reconciler=reconciler, clock=manager.clock)
    controller.queue.add(POLL)
    manager.add(controller)
    return controller
