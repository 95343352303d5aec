"""bench/peers.py --cost --cost-repeat: the burst run several times per system, and the
runs taken together (kube-scheduler's races make one run differ from the next, so a
claim about the burst rests on many)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from unit import bench_scripts

peers = bench_scripts.load("peers")


def row(label: str, *, nodes: int, dollars: float, p99: float, writes: int) -> Any:
    """One burst's row: ``nodes`` Nodes of one type at ``dollars`` per hour in all, pods
    Running after 1 s to ``p99`` s, ``writes`` controller writes."""
    result = peers.Result(
        workload="mixed-sizes",
        system="operator",
        pods=3,
        nodes=nodes,
        latencies=[1.0, p99, p99],
        makespan=p99,
        writes=Counter({("operator", "patch", "pods/status", 200): writes}),
        cpu=0.0,
        rss=0.0,
        timeline={},
    )
    priced = peers.Priced(dollars, Counter({"c-1x-amd64-linux on-demand": nodes}), 0)
    return peers.CostRow("on-demand", label, result, priced, 2.915)


def test_the_runs_of_a_system_are_taken_together() -> None:
    rows = [
        row("ours", nodes=5, dollars=3.032, p99=2.0, writes=81),
        row("ours", nodes=6, dollars=3.267, p99=2.6, writes=88),
        row("ours", nodes=5, dollars=3.032, p99=1.9, writes=82),
        row("karpenter", nodes=1, dollars=3.75, p99=2.5, writes=33),
    ]
    lines = peers.repeat_summary(rows)
    assert lines[1] == "The runs taken together:"
    # Only the system run more than once has a line; the one run once has its row above.
    assert lines[-1] == (
        "| on-demand | ours | 3 | 5 in 2, 6 in 1 | 3.032 in 2, 3.267 in 1 | 1.90 to 2.60 s "
        "| 81 to 88 |"
    )
    assert not [line for line in lines if "karpenter" in line]
    report = peers.cost_report(rows, [])
    assert report.endswith(lines[-1])


def test_one_run_each_adds_nothing() -> None:
    rows = [row("ours", nodes=5, dollars=3.032, p99=2.0, writes=81)]
    assert peers.repeat_summary(rows) == []
    assert "taken together" not in peers.cost_report(rows, [])


def test_the_repeat_is_one_by_default_and_never_less() -> None:
    parser = peers._parser()
    assert parser.parse_args(["--cost"]).cost_repeat == 1
    assert parser.parse_args(["--cost", "--cost-repeat", "10"]).cost_repeat == 10
    with pytest.raises(SystemExit):
        parser.parse_args(["--cost", "--cost-repeat", "0"])
