"""Metrics: controller-runtime's names and labels, served from the default registry."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY, generate_latest

from nodepool_operator.runtime import metrics

EXPECTED = [
    ("controller_runtime_reconcile_total", "counter", ("controller", "result")),
    ("controller_runtime_reconcile_errors_total", "counter", ("controller",)),
    ("controller_runtime_reconcile_time_seconds", "histogram", ("controller",)),
    ("controller_runtime_active_workers", "gauge", ("controller",)),
    ("controller_runtime_max_concurrent_reconciles", "gauge", ("controller",)),
    ("workqueue_depth", "gauge", ("name",)),
    ("workqueue_adds_total", "counter", ("name",)),
    ("workqueue_retries_total", "counter", ("name",)),
    ("workqueue_queue_duration_seconds", "histogram", ("name",)),
    ("workqueue_work_duration_seconds", "histogram", ("name",)),
    ("workqueue_unfinished_work_seconds", "gauge", ("name",)),
    ("workqueue_longest_running_processor_seconds", "gauge", ("name",)),
    ("leader_election_master_status", "gauge", ("name",)),
    ("rest_client_requests_total", "counter", ("verb", "resource", "code")),
    ("rest_client_request_duration_seconds", "histogram", ("verb", "resource")),
    ("nodepool_conflicts_total", "counter", ("controller", "resource")),
    ("nodepool_status_writes_total", "counter", ("controller", "resource")),
    ("nodepool_events_total", "counter", ("component", "type", "reason")),
    ("nodepool_operator_informer_objects", "gauge", ("resource", "selector")),
]


@pytest.mark.parametrize(("name", "kind", "labels"), EXPECTED)
def test_metric_is_exported_under_its_controller_runtime_name(
    name: str, kind: str, labels: tuple[str, ...]
) -> None:
    metric = getattr(metrics, name)
    assert name in metrics.__all__
    # labels() accepts exactly the metric's label names, no more and no fewer.
    metric.labels(**dict.fromkeys(labels, "metrics-test"))
    assert f"# TYPE {name} {kind}".encode() in generate_latest(REGISTRY)


def test_reconcile_result_labels_use_controller_runtime_values() -> None:
    results = (
        metrics.RESULT_SUCCESS,
        metrics.RESULT_ERROR,
        metrics.RESULT_REQUEUE,
        metrics.RESULT_REQUEUE_AFTER,
    )
    assert results == ("success", "error", "requeue", "requeue_after")
    for result in results:
        metrics.controller_runtime_reconcile_total.labels(
            controller="result-test", result=result
        ).inc()
        assert (
            REGISTRY.get_sample_value(
                "controller_runtime_reconcile_total",
                {"controller": "result-test", "result": result},
            )
            == 1.0
        )


def test_reconcile_time_uses_controller_runtime_buckets() -> None:
    metrics.controller_runtime_reconcile_time_seconds.labels(controller="bucket-test").observe(0.3)
    assert (
        REGISTRY.get_sample_value(
            "controller_runtime_reconcile_time_seconds_bucket",
            {"controller": "bucket-test", "le": "0.3"},
        )
        == 1.0
    )
    assert (
        REGISTRY.get_sample_value(
            "controller_runtime_reconcile_time_seconds_bucket",
            {"controller": "bucket-test", "le": "0.25"},
        )
        == 0.0
    )


def test_a_new_controller_exports_every_reconcile_result_at_zero() -> None:
    name = "zero-start-test"
    before = generate_latest(REGISTRY).decode()
    assert f'controller="{name}"' not in before
    metrics.start_reconcile_series(name)
    for result in metrics.RESULTS:
        labels = {"controller": name, "result": result}
        assert REGISTRY.get_sample_value("controller_runtime_reconcile_total", labels) == 0.0
    errors_labels = {"controller": name}
    assert (
        REGISTRY.get_sample_value("controller_runtime_reconcile_errors_total", errors_labels) == 0
    )


def test_no_created_series_are_exported() -> None:
    metrics.controller_runtime_reconcile_total.labels(
        controller="created-test", result="success"
    ).inc()
    metrics.controller_runtime_reconcile_time_seconds.labels(controller="created-test").observe(0.1)
    exposition = generate_latest(REGISTRY).decode()
    assert "controller_runtime_reconcile_total{" in exposition
    assert "_created" not in exposition
