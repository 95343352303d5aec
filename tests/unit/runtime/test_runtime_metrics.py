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
]


@pytest.mark.parametrize(("name", "kind", "labels"), EXPECTED)
def test_metric_is_exported_under_its_controller_runtime_name(
    name: str, kind: str, labels: tuple[str, ...]
) -> None:
    metric = getattr(metrics, name)
    assert name in metrics.__all__
    assert metric._labelnames == labels
    # Counters are named without `_total` inside prometheus_client, with it on the wire.
    family = name.removesuffix("_total") if kind == "counter" else name
    assert f"# TYPE {family} {kind}".encode() in generate_latest(REGISTRY)


def test_reconcile_result_labels_use_controller_runtime_values() -> None:
    for result in (
        metrics.RESULT_SUCCESS,
        metrics.RESULT_ERROR,
        metrics.RESULT_REQUEUE,
        metrics.RESULT_REQUEUE_AFTER,
    ):
        metrics.controller_runtime_reconcile_total.labels(
            controller="metrics-test", result=result
        ).inc()
    samples = {
        labels["result"]: value
        for labels, value in (
            (sample.labels, sample.value)
            for family in REGISTRY.collect()
            if family.name == "controller_runtime_reconcile"
            for sample in family.samples
            if sample.name == "controller_runtime_reconcile_total"
            and sample.labels.get("controller") == "metrics-test"
        )
    }
    assert samples == {"success": 1.0, "error": 1.0, "requeue": 1.0, "requeue_after": 1.0}


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
