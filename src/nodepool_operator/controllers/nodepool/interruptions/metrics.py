"""Prometheus series of the NodePool controller's interruptions reconciler."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

__all__ = [
    "nodepool_interruption_messages_dropped_total",
    "nodepool_interruption_pods_moved_seconds",
    "nodepool_interruptions_total",
]

nodepool_interruptions_total = Counter(
    "nodepool_interruptions_total",
    "Notices the cloud gave for a Node of ours (each Node counted once), by kind "
    "(spot-interruption, rebalance, scheduled-change, state-change), zone and instance type.",
    ["kind", "zone", "instance_type"],
)

nodepool_interruption_messages_dropped_total = Counter(
    "nodepool_interruption_messages_dropped_total",
    "Cloud events deleted without a mark, by why: no-node (no Node of ours for the VM), "
    "node-leaving (its VM deleted by us, or the Node being deleted), unknown-kind, "
    "rebalance-not-acted (a rebalance recommendation for a Node whose pool does not "
    "opt in: spec.disruption.rebalanceRecommendation Ignore).",
    ["reason"],
)

nodepool_interruption_pods_moved_seconds = Histogram(
    "nodepool_interruption_pods_moved_seconds",
    "Time from the cloud's notice (the Node's annotation) until every pod the Node held "
    "then is replaced and Running on another Node, by kind.",
    ["kind"],
    buckets=(5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600),
)
