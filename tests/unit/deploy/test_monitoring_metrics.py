"""The monitoring assets use only what the operator exports.

Every expression of the alert rules (deploy/monitoring/prometheusrule.yaml) and of the
Grafana dashboard (deploy/monitoring/dashboards/nodepool-operator.json) is parsed as PromQL
(promql-parser, Prometheus's grammar), and each metric it selects and each label it
matches, groups or joins on must be one the operator's Prometheus registry exports: a
renamed metric or label fails here, not silently in someone's Prometheus. Event reasons the
rules match on must be reasons the code records.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import prometheus_client
import promql_parser
import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

import nodepool_operator
from nodepool_operator import operator

REPO = Path(__file__).resolve().parents[3]
MONITORING = REPO / "deploy" / "monitoring"
SOURCE = REPO / "src" / "nodepool_operator"
# Labels Prometheus itself puts on every scraped series (the ServiceMonitor's target
# labels): not the operator's to export, always there to select on.
TARGET_LABELS = frozenset(
    {"job", "instance", "namespace", "pod", "service", "endpoint", "container"}
)
# What Grafana substitutes before a query reaches Prometheus.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m"}
SAMPLE_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum"),
    "summary": ("", "_count", "_sum"),
}


@dataclass
class Usage:
    """The metrics, labels and label values one expression uses."""

    metrics: set[str] = field(default_factory=set)
    labels: dict[str, set[str]] = field(default_factory=dict)  # metric -> labels
    loose_labels: set[str] = field(default_factory=set)  # by/on/ignoring: of any metric
    values: dict[str, set[str]] = field(default_factory=dict)  # label -> values matched


def exported_series() -> dict[str, frozenset[str]]:
    """Sample name -> label names, for every series the operator's registry can serve."""
    for module in pkgutil.walk_packages(nodepool_operator.__path__, "nodepool_operator."):
        if module.name.endswith(".metrics"):
            importlib.import_module(module.name)
    series: dict[str, frozenset[str]] = {}
    # Labelled metrics have no samples until a label set is used, so they are read from
    # the metric objects (prometheus_client keeps name, type and label names on them).
    for module_name, module in list(sys.modules.items()):
        if not module_name.startswith("nodepool_operator.") or module is None:
            continue
        for value in vars(module).values():
            if isinstance(value, MetricWrapperBase):
                labels = frozenset(value._labelnames)
                for suffix in SAMPLE_SUFFIXES[value._type]:
                    extra = {"le"} if suffix == "_bucket" else set()
                    series[value._name + suffix] = labels | extra
    # The process and platform collectors of the default registry, which /metrics serves too.
    for family in prometheus_client.REGISTRY.collect():
        for sample in family.samples:
            series.setdefault(sample.name, frozenset(sample.labels))
    return series


def usage_of(expression: str) -> Usage:
    for variable, value in GRAFANA_VARIABLES.items():
        expression = expression.replace(variable, value)
    found = Usage()
    _walk(promql_parser.parse(expression), found)
    return found


def _walk(node: Any, found: Usage) -> None:
    if isinstance(node, promql_parser.VectorSelector):
        matchers = node.matchers.matchers
        names = {m.name for m in matchers if m.name != "__name__"}
        if node.name:
            found.metrics.add(node.name)
            found.labels.setdefault(node.name, set()).update(names)
        for matcher in matchers:
            found.values.setdefault(matcher.name, set()).add(matcher.value)
        return
    if isinstance(node, promql_parser.MatrixSelector):
        _walk(node.vector_selector, found)
    elif isinstance(node, promql_parser.AggregateExpr):
        if node.modifier is not None:
            found.loose_labels.update(node.modifier.labels)
        _walk(node.expr, found)
        if node.param is not None:
            _walk(node.param, found)
    elif isinstance(node, promql_parser.BinaryExpr):
        modifier = node.modifier
        if modifier is not None:
            if modifier.matching is not None:
                found.loose_labels.update(modifier.matching.labels)
            found.loose_labels.update(modifier.group_labels or [])
        _walk(node.lhs, found)
        _walk(node.rhs, found)
    elif isinstance(node, promql_parser.Call):
        for argument in node.args:
            _walk(argument, found)
    elif isinstance(
        node, promql_parser.ParenExpr | promql_parser.UnaryExpr | promql_parser.SubqueryExpr
    ):
        _walk(node.expr, found)


def problems(expression: str, series: dict[str, frozenset[str]]) -> list[str]:
    """What ``expression`` uses that the operator does not export (empty when all is)."""
    found = usage_of(expression)
    errors = [f"metric {m} is not exported" for m in sorted(found.metrics - series.keys())]
    known_labels = set(TARGET_LABELS)
    for metric in found.metrics & series.keys():
        known_labels |= series[metric]
        for label in sorted(found.labels[metric] - series[metric] - TARGET_LABELS):
            errors.append(f"{metric} has no label {label}")
    for label in sorted(found.loose_labels - known_labels):
        errors.append(f"no metric of the expression has the label {label} it groups or joins on")
    return errors


def alert_rules() -> list[dict[str, Any]]:
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        (MONITORING / "dashboards" / "nodepool-operator.json").read_text()
    )
    return loaded


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def dashboard_expressions() -> list[tuple[str, str]]:
    return [
        (panel["title"], target["expr"])
        for panel in _panels(dashboard()["panels"])
        for target in panel.get("targets", [])
    ]


# --- the checker itself ----------------------------------------------------------------


def test_the_check_reports_an_unknown_metric_an_unknown_label_and_a_bad_grouping() -> None:
    series = exported_series()
    known = "sum by (controller) (rate(controller_runtime_reconcile_total[5m]))"
    assert problems(known, series) == []
    assert problems("rate(nodepool_made_up_total[5m])", series) == [
        "metric nodepool_made_up_total is not exported"
    ]
    assert problems('workqueue_depth{controller="nodepool"}', series) == [
        "workqueue_depth has no label controller"
    ]
    assert problems("sum by (pool) (workqueue_depth)", series) == [
        "no metric of the expression has the label pool it groups or joins on"
    ]


def test_the_exported_series_include_the_documented_metrics_with_their_labels() -> None:
    series = exported_series()
    assert series["controller_runtime_reconcile_total"] == {"controller", "result"}
    assert series["workqueue_queue_duration_seconds_bucket"] == {"name", "le"}
    assert series["nodepool_events_total"] == {"component", "type", "reason"}
    assert series["nodepool_scale_operation_seconds_count"] == {"direction"}
    assert "nodepool_autoscaler_unschedulable_pods" in series


# --- the assets --------------------------------------------------------------------------


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda rule: rule["alert"])
def test_every_alert_uses_only_exported_metrics_and_labels(rule: dict[str, Any]) -> None:
    assert problems(rule["expr"], exported_series()) == []
    assert rule["labels"]["severity"] in {"critical", "warning", "info"}
    assert rule["annotations"]["summary"]
    assert rule["annotations"]["description"]


@pytest.mark.parametrize(("title", "expression"), dashboard_expressions())
def test_every_dashboard_panel_uses_only_exported_metrics_and_labels(
    title: str, expression: str
) -> None:
    assert problems(expression, exported_series()) == [], title


def test_every_dashboard_variable_reads_an_exported_metric_and_label() -> None:
    series = exported_series()
    queries = [v for v in dashboard()["templating"]["list"] if v["type"] == "query"]
    assert queries
    for variable in queries:
        match = re.fullmatch(r"label_values\((\w+), *(\w+)\)", variable["query"]["query"])
        assert match, variable["query"]
        metric, label = match.groups()
        assert metric in series, metric
        assert label in series[metric] | TARGET_LABELS, (metric, label)


def test_the_alerts_cover_the_troubleshooting_failure_modes() -> None:
    metrics_by_alert = {rule["alert"]: usage_of(rule["expr"]) for rule in alert_rules()}
    reasons = set().union(*(u.values.get("reason", set()) for u in metrics_by_alert.values()))
    matched = {word for pattern in reasons for word in pattern.split("|")}
    # Degraded pool, blocked drain: the Warning events that come with those conditions.
    assert {"CloudError", "CloudListFailed", "CloudListEmpty", "DrainBlocked"} <= matched
    used = set().union(*(u.metrics for u in metrics_by_alert.values()))
    assert {
        "leader_election_master_status",  # no leader
        "controller_runtime_reconcile_errors_total",  # reconcile errors
        "workqueue_queue_duration_seconds_bucket",  # queue backlog
        "nodepool_scale_operation_seconds_count",  # slow (stuck) scale operations
    } <= used


def test_the_event_reasons_and_lease_name_the_alerts_match_are_the_codes_own() -> None:
    code = "\n".join(p.read_text() for p in SOURCE.rglob("*.py"))
    for rule in alert_rules():
        found = usage_of(rule["expr"])
        for pattern in found.values.get("reason", set()):
            for reason in pattern.split("|"):
                assert re.search(rf"[\"']{reason}[\"']", code), (rule["alert"], reason)
        for name in found.values.get("name", set()):
            assert name == operator.OperatorOptions.leader_election_id, rule["alert"]
