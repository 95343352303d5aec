"""`nodepool-operator cluster up|status|down` as a user runs them, in a directory of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from nodepool_devtools.cluster import binaries, controlplane

CLI = [sys.executable, "-m", "nodepool_operator.cli"]


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, check=check, timeout=180)


def _pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_up_serves_the_pinned_version_and_down_leaves_no_process(tmp_path: Path) -> None:
    directory = tmp_path / "plane"
    try:
        up = _run("cluster", "up", "--dir", str(directory))
        assert f"export KUBECONFIG={directory.resolve() / 'kubeconfig'}" in up.stdout
        recorded = controlplane.ControlPlane(directory).status()
        assert [p.name for p in recorded] == list(controlplane.START_ORDER)
        assert all(p.running for p in recorded)
        assert _run("cluster", "status", "--dir", str(directory)).returncode == 0

        kubectl = binaries.ensure_binaries()["kubectl"]
        pinned = binaries.pinned_version(
            binaries.tools_directory() / "kubernetes" / "go.mod", "k8s.io/kubernetes"
        )
        version = subprocess.run(
            [str(kubectl), "--kubeconfig", str(directory / "kubeconfig"), "version"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert f"Server Version: {pinned}" in version.stdout
        assert (directory / "logs" / "audit.log").exists()
    finally:
        down = _run("cluster", "down", "--dir", str(directory), check=False)
    assert down.returncode == 0, down.stderr
    assert not any(_pid_alive(p.pid) for p in recorded)
    assert _run("cluster", "status", "--dir", str(directory), check=False).returncode == 1


def test_second_up_in_a_running_directory_is_refused_clearly(tmp_path: Path) -> None:
    directory = tmp_path / "plane"
    try:
        _run("cluster", "up", "--dir", str(directory))
        again = _run("cluster", "up", "--dir", str(directory), check=False)
        assert again.returncode == 1
        assert "already running" in again.stderr
    finally:
        _run("cluster", "down", "--dir", str(directory), check=False)
