"""Prometheus series of the NodePool controller, next to the runtime's controller-runtime ones."""

from __future__ import annotations

import contextlib

from prometheus_client import Counter, Gauge, Histogram

__all__ = [
    "nodepool_cost_per_hour",
    "nodepool_disruptions_total",
    "nodepool_node_initialization_seconds",
    "nodepool_scale_operation_seconds",
    "set_cost",
]

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

nodepool_cost_per_hour = Gauge(
    "nodepool_cost_per_hour",
    "What a pool's nodes cost per hour by the catalog prices of their offerings (pools with "
    "requirements, on a cloud with a catalog), by pool.",
    ["pool"],
)


nodepool_disruptions_total = Counter(
    "nodepool_disruptions_total",
    "Nodes the NodePool controller chose to replace of its own accord (tainted "
    "nodepool.dev/disrupted), by pool and reason (Drifted, Expired).",
    ["pool", "reason"],
)


def set_cost(pool: str, cost: float | None) -> None:
    """The pool's cost series: set, or removed when its cost is not known (or it is gone)."""
    if cost is None:
        with contextlib.suppress(KeyError):  # never set: nothing to remove
            nodepool_cost_per_hour.remove(pool)
        return
    nodepool_cost_per_hour.labels(pool=pool).set(cost)
