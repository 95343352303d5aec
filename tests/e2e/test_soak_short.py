"""The soak bench's short mode (issue 52): five minutes of the living cluster, in CI.

``bench/soak.py --minutes 5`` runs its own control plane, simcloud (5xx at a low rate) and
two operator replicas through one compressed cycle: bursts, a Job, a template edit, a VM
deleted in the cloud, a StatefulSet rolled, a Node's heartbeat stopped, the follower
restarted, the leader killed and the new leader restarted. It exits 1 on any invariant
violation; here it must exit 0, print no violation, and leave its per-minute table and
judgements in the results; and in every settled minute the leader's informers (their
``nodepool_operator_informer_objects``) must hold as many objects as the API server does.
The hour is recorded in bench/results/soak.md and docs/reliability.md.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run_soak(arguments: list[str], *, limit: float) -> tuple[int, str]:
    """The bench's exit code and its stderr. Past ``limit`` seconds it is interrupted
    (SIGINT: it stops its control plane and operators and writes what it saw), then killed
    with every process of its group a minute later."""
    with subprocess.Popen(
        [sys.executable, str(BENCH / "soak.py"), *arguments],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as bench:
        try:
            _, stderr = bench.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            bench.send_signal(signal.SIGINT)
            try:
                _, stderr = bench.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(bench.pid, signal.SIGKILL)
                _, stderr = bench.communicate()
            stderr += f"\n(interrupted after {limit:.0f} s)"
        return bench.returncode, stderr


@pytest.mark.timeout(660)
def test_five_minutes_of_churn_break_no_invariant(tmp_path: Path) -> None:
    results = tmp_path / "results"
    returncode, stderr = run_soak(
        [
            *("--minutes", "5", "--settle", "60", "--seed", "7"),
            *("--results", str(results), "--name", "soak-short"),
            *("--work", str(tmp_path / "work")),
        ],
        limit=540,
    )
    written = results / "soak-short.md"
    # The bench writes its report even when it stops on an error; none means it died first.
    assert written.exists(), f"exit {returncode}, no report:\n{stderr[-8000:]}"
    report = written.read_text()
    assert returncode == 0, stderr[-6000:] + report
    assert "VIOLATION" not in stderr
    assert "**Invariant violations: 0**" in report
    rows = [line for line in report.splitlines() if line.startswith("| ") and "| min |" not in line]
    assert len(rows) >= 5, report  # one row a minute
    # Every kind of churn happened (the table names the bench's actions by minute).
    for action in ("burst", "job", "template", "roll", "vm-delete", "heartbeat", "calm"):
        assert f"{action} soak-" in report, action
    for action in ("restart-follower", "kill-leader", "restart-leader"):
        assert action in report, action
    assert "Judgements (issue 52):" in report
    # The leader's informer counts against the server's, by minute: in a settled minute
    # (nothing Pending, every pool settled) they must be equal (within the bench's re-reads).
    header = next(line for line in report.splitlines() if line.startswith("| min |"))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    cache, settled = columns.index("cache = server"), columns.index("settled")
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in rows]
    compared = [c for c in cells if c[settled] == "yes" and c[cache]]
    assert compared, report
    assert all(c[cache].startswith("yes") for c in compared), report
