"""Prometheus series of the Autoscaler, next to the runtime's controller-runtime ones.

Everything a decision depends on is measurable: how many pods wait and how many can never
fit, how long planning takes, and how many requests were made in each direction.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

__all__ = [
    "nodepool_autoscaler_consolidation_candidates",
    "nodepool_autoscaler_consolidation_kept_total",
    "nodepool_autoscaler_consolidation_node_writes_total",
    "nodepool_autoscaler_consolidation_removals_total",
    "nodepool_autoscaler_nominations_total",
    "nodepool_autoscaler_planning_seconds",
    "nodepool_autoscaler_scale_requests_total",
    "nodepool_autoscaler_unfit_pods",
    "nodepool_autoscaler_unschedulable_pods",
]

nodepool_autoscaler_scale_requests_total = Counter(
    "nodepool_autoscaler_scale_requests_total",
    "ScaleRequests created by the autoscaler.",
    ["autoscaler", "direction"],
)
nodepool_autoscaler_nominations_total = Counter(
    "nodepool_autoscaler_nominations_total",
    "Nominations of pending pods on the new Nodes planned for them (written: the first "
    "write went through; rewritten: written again, kube-scheduler having cleared it before "
    "the Nodes were released; skipped: the pod was bound, gone or nominated meanwhile).",
    ["result"],
)
nodepool_autoscaler_planning_seconds = Histogram(
    "nodepool_autoscaler_planning_seconds",
    "Time to pack the unschedulable pods and decide, per scan.",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
nodepool_autoscaler_unschedulable_pods = Gauge(
    "nodepool_autoscaler_unschedulable_pods",
    "Pods the scheduler marked Unschedulable in the autoscaler's namespaces.",
    ["autoscaler"],
)
nodepool_autoscaler_unfit_pods = Gauge(
    "nodepool_autoscaler_unfit_pods",
    "Unschedulable pods that can never fit a node of the pool, so are not counted.",
    ["autoscaler"],
)
nodepool_autoscaler_consolidation_candidates = Gauge(
    "nodepool_autoscaler_consolidation_candidates",
    "Underused nodes whose pods can all move and fit on the other nodes.",
    ["autoscaler"],
)
nodepool_autoscaler_consolidation_removals_total = Counter(
    "nodepool_autoscaler_consolidation_removals_total",
    "Nodes named for removal in a ScaleRequest by consolidation.",
)
nodepool_autoscaler_consolidation_kept_total = Counter(
    "nodepool_autoscaler_consolidation_kept_total",
    "Times an underused node was found to stay, by the rule that keeps it.",
    ["rule"],
)
nodepool_autoscaler_consolidation_node_writes_total = Counter(
    "nodepool_autoscaler_consolidation_node_writes_total",
    "Patches of Nodes by consolidation (unneeded-since stamps and consolidating taints).",
)
