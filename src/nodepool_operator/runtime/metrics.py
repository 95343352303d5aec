"""Prometheus metrics under controller-runtime's names, registered in the default registry.

Dashboards and alerts written for controller-runtime operators work unchanged: the
reconcile, workqueue and leader-election series keep their names, labels and buckets
(workqueue series carry only the `name` label). The API client's series are labelled
by resource rather than host: `rest_client_requests_total{verb,resource,code}` and
`rest_client_request_duration_seconds{verb,resource}`. Series of ours:
`nodepool_conflicts_total{controller,resource}` counts the 409s our writers met, the
number the conflict-handling design exists to keep low.
`nodepool_operator_informer_objects{resource,selector}` is the number of objects each
running informer holds: a cache that keeps what is gone grows apart from the cluster
(`selector` is empty for an informer of a whole resource).

Each Python name is the metric's name. The objects are module-level singletons in
`prometheus_client.REGISTRY`, so any `/metrics` endpoint built on prometheus_client serves
them; the module is imported once per process, so they are registered once.
"""

from __future__ import annotations

from typing import Final

import prometheus_client
from prometheus_client import Counter, Gauge, Histogram

__all__ = [
    "RESULTS",
    "RESULT_ERROR",
    "RESULT_REQUEUE",
    "RESULT_REQUEUE_AFTER",
    "RESULT_SUCCESS",
    "controller_runtime_active_workers",
    "controller_runtime_max_concurrent_reconciles",
    "controller_runtime_reconcile_errors_total",
    "controller_runtime_reconcile_time_seconds",
    "controller_runtime_reconcile_total",
    "leader_election_master_status",
    "nodepool_conflicts_total",
    "nodepool_events_total",
    "nodepool_operator_informer_objects",
    "nodepool_status_writes_total",
    "rest_client_request_duration_seconds",
    "rest_client_requests_total",
    "start_reconcile_series",
    "workqueue_adds_total",
    "workqueue_depth",
    "workqueue_longest_running_processor_seconds",
    "workqueue_queue_duration_seconds",
    "workqueue_retries_total",
    "workqueue_unfinished_work_seconds",
    "workqueue_work_duration_seconds",
]

# controller-runtime exports no `*_created` series: without them a counter is one series,
# as dashboards written for controller-runtime expect. The switch is process-wide and is
# read at exposition, so it covers every metric whenever it was registered.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # unannotated upstream

# Values of the `result` label of controller_runtime_reconcile_total, as controller-runtime
# spells them.
RESULT_SUCCESS: Final = "success"
RESULT_ERROR: Final = "error"
RESULT_REQUEUE: Final = "requeue"
RESULT_REQUEUE_AFTER: Final = "requeue_after"
RESULTS: Final = (RESULT_SUCCESS, RESULT_ERROR, RESULT_REQUEUE, RESULT_REQUEUE_AFTER)

# controller-runtime's reconcile_time_seconds buckets: fine below a second, where most
# reconciles land, coarse up to a minute.
_RECONCILE_BUCKETS: Final = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5),
    *(0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5),
    *(5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0),
)

# prometheus.ExponentialBuckets(10e-9, 10, 12): 10 ns to 1000 s, written out so that
# the bounds are exact decimals rather than accumulated float products.
_WORKQUEUE_BUCKETS: Final = (
    *(1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3),
    *(1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0),
)

# client-go's rest_client_request_duration_seconds buckets.
_REQUEST_BUCKETS: Final = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

controller_runtime_reconcile_total: Final = Counter(
    "controller_runtime_reconcile_total",
    "Total number of reconciliations per controller",
    ["controller", "result"],
)
controller_runtime_reconcile_errors_total: Final = Counter(
    "controller_runtime_reconcile_errors_total",
    "Total number of reconciliation errors per controller",
    ["controller"],
)
controller_runtime_reconcile_time_seconds: Final = Histogram(
    "controller_runtime_reconcile_time_seconds",
    "Length of time per reconciliation per controller",
    ["controller"],
    buckets=_RECONCILE_BUCKETS,
)
controller_runtime_active_workers: Final = Gauge(
    "controller_runtime_active_workers",
    "Number of currently used workers per controller",
    ["controller"],
)
controller_runtime_max_concurrent_reconciles: Final = Gauge(
    "controller_runtime_max_concurrent_reconciles",
    "Maximum number of concurrent reconciles per controller",
    ["controller"],
)

workqueue_depth: Final = Gauge(
    "workqueue_depth",
    "Current depth of workqueue",
    ["name"],
)
workqueue_adds_total: Final = Counter(
    "workqueue_adds_total",
    "Total number of adds handled by workqueue",
    ["name"],
)
workqueue_retries_total: Final = Counter(
    "workqueue_retries_total",
    "Total number of retries handled by workqueue",
    ["name"],
)
workqueue_queue_duration_seconds: Final = Histogram(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested",
    ["name"],
    buckets=_WORKQUEUE_BUCKETS,
)
workqueue_work_duration_seconds: Final = Histogram(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes",
    ["name"],
    buckets=_WORKQUEUE_BUCKETS,
)
workqueue_unfinished_work_seconds: Final = Gauge(
    "workqueue_unfinished_work_seconds",
    "How many seconds of work has been done that is in progress and hasn't been observed "
    "by work_duration. Large values indicate stuck workers.",
    ["name"],
)
workqueue_longest_running_processor_seconds: Final = Gauge(
    "workqueue_longest_running_processor_seconds",
    "How many seconds has the longest running processor for workqueue been running",
    ["name"],
)

leader_election_master_status: Final = Gauge(
    "leader_election_master_status",
    "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
    "1 indicates master. 'name' is the string used to identify the lease.",
    ["name"],
)

rest_client_requests_total: Final = Counter(
    "rest_client_requests_total",
    "Number of Kubernetes API requests, partitioned by verb, resource and status code",
    ["verb", "resource", "code"],
)
rest_client_request_duration_seconds: Final = Histogram(
    "rest_client_request_duration_seconds",
    "Kubernetes API request latency in seconds, partitioned by verb and resource",
    ["verb", "resource"],
    buckets=_REQUEST_BUCKETS,
)
nodepool_conflicts_total: Final = Counter(
    "nodepool_conflicts_total",
    "Number of 409 Conflict responses met by the operator's writers",
    ["controller", "resource"],
)
nodepool_status_writes_total: Final = Counter(
    "nodepool_status_writes_total",
    "Number of /status writes sent (writes skipped because nothing changed are not counted)",
    ["controller", "resource"],
)
nodepool_events_total: Final = Counter(
    "nodepool_events_total",
    "Number of Kubernetes Events recorded (new or folded into a repeat)",
    ["component", "type", "reason"],
)
nodepool_operator_informer_objects: Final = Gauge(
    "nodepool_operator_informer_objects",
    "Number of objects held in the cache of a running informer",
    ["resource", "selector"],
)


def start_reconcile_series(controller: str) -> None:
    """Export a controller's reconcile counters at 0 before its first reconcile.

    As controller-runtime's ``initMetrics``: a series that appears only at its first
    increment makes ``rate()`` and ``increase()`` miss that increment, and an alert on
    errors cannot tell "none yet" from "not exported".
    """
    for result in RESULTS:
        controller_runtime_reconcile_total.labels(controller=controller, result=result)
    controller_runtime_reconcile_errors_total.labels(controller=controller)
