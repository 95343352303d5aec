"""Prometheus series of the NodePool controller, next to the runtime's controller-runtime ones."""

from __future__ import annotations

from prometheus_client import Histogram

__all__ = ["nodepool_node_initialization_seconds", "nodepool_scale_operation_seconds"]

nodepool_scale_operation_seconds = Histogram(
    "nodepool_scale_operation_seconds",
    "Time from a pool becoming active (scaling) until it is inactive again, by direction.",
    ["direction"],
    buckets=(1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800),
)

nodepool_node_initialization_seconds = Histogram(
    "nodepool_node_initialization_seconds",
    "Time from the cloud creating a VM until its Node is initialised (the kubelet reported "
    "Ready with its own capacity and the unregistered taint is removed), by pool.",
    ["pool"],
    buckets=(1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 900, 1800),
)
