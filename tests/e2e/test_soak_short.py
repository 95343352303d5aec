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

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.timeout(480)
def test_five_minutes_of_churn_break_no_invariant(tmp_path: Path) -> None:
    results = tmp_path / "results"
    finished = subprocess.run(
        [
            sys.executable,
            str(BENCH / "soak.py"),
            *("--minutes", "5", "--settle", "60", "--seed", "7"),
            *("--results", str(results), "--name", "soak-short"),
            *("--work", str(tmp_path / "work")),
        ],
        capture_output=True,
        text=True,
        timeout=470,
        check=False,
    )
    report = (results / "soak-short.md").read_text()
    assert finished.returncode == 0, finished.stderr[-6000:] + report
    assert "VIOLATION" not in finished.stderr
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
