"""How ``plan`` reports a pool held by maxNodes: to people (the table) and to scripts (JSON)."""

from __future__ import annotations

import io
import json

import pytest

from nodepool_operator.inspection import report

HELD = report.ClusterPlan(
    pending=3,
    on_existing=0,
    growth=(
        report.PoolGrowth(
            pool="capped",
            target_nodes=2,
            new_nodes=1,
            pods=("web/a",),
            limited_to=3,
            beyond_max=("web/b", "web/c"),
        ),
    ),
    unfit=(),
    removable=(),
    troubles=(),
)


def test_the_table_counts_and_names_the_pods_held_by_max_nodes_apart_from_new_nodes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps at 80 columns when not on a terminal
    out = io.StringIO()

    report.print_plan(HELD, out=out)

    text = out.getvalue()
    assert "on new nodes: 1 (nodes to add: 1)" in text
    assert "held by maxNodes: 2" in text
    assert "2 -> 3 (maxNodes)" in text
    assert "web/b, web/c" in text


def test_json_names_the_held_pods_in_camel_case() -> None:
    [growth] = json.loads(report.to_json(HELD))["growth"]

    assert growth["beyondMax"] == ["web/b", "web/c"]
    assert growth["pods"] == ["web/a"]
    assert growth["limitedTo"] == 3


def test_an_explanation_says_when_its_autoscaler_looks_next_and_that_it_only_reports() -> None:
    explained = report.PodExplanation(
        namespace="web",
        name="a",
        phase="Pending",
        node=None,
        scheduler_says="",
        planned="needs a new node of pool general: targetNodes 1 -> 2",
        planned_pool="general",
        nodes=(),
        pools=(),
        decision=None,
        watchers=(report.Watcher("nas", "general", scan_interval_seconds=10, dry_run=True),),
    )
    out = io.StringIO()

    report.print_explanation(explained, out=out)

    said = " ".join(out.getvalue().split())  # as one line, however rich wrapped it
    assert "next look: Autoscaler nas (pool general), within 10 s" in said
    assert "dry run: it reports and asks for nothing" in said
