"""`nodepool-operator run` hands its tuning flags to the controllers' configuration."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import Result

from nodepool_operator import operator
from unit.cli import run_recorder


def test_the_cloud_resync_interval_reaches_the_nodepool_controller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = tmp_path / "token"
    token.write_text("t0ken")
    flags = ("--cloud-token-file", str(token), "--cloud-resync-interval", "42")
    result, seen = run_recorder.invoke_run(monkeypatch, *flags, kubeconfig=tmp_path / "kubeconfig")

    assert result.exit_code == 0, result.output
    [options] = seen
    assert options.nodepool.cloud_resync_interval == 42.0


def _run_in(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str]
) -> tuple[Result, list[operator.OperatorOptions]]:
    """`run` with no flags, in ``environment`` alone of the variables that say where the
    cluster is; the operator itself replaced by a recorder."""
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    return run_recorder.invoke_run(monkeypatch)


@pytest.mark.parametrize(
    "environment",
    [{}, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, {"KUBERNETES_SERVICE_PORT": "443"}],
    ids=["nothing", "host-only", "port-only"],
)
def test_run_without_a_kubeconfig_or_a_pod_says_what_to_pass_in_one_line(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str]
) -> None:
    result, started = _run_in(monkeypatch, environment)

    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    [line] = result.output.splitlines()
    assert line == (
        "error: no cluster to run against: pass --kubeconfig FILE or set KUBECONFIG "
        "(in a Pod, the in-cluster config is used)"
    )
    assert started == []


@pytest.mark.parametrize(
    "environment",
    [
        {"KUBECONFIG": "/somewhere/kubeconfig"},
        {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"},
    ],
    ids=["KUBECONFIG", "in-a-pod"],
)
def test_run_with_kubeconfig_set_or_in_a_pod_starts(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str]
) -> None:
    result, started = _run_in(monkeypatch, environment)

    assert result.exit_code == 0, result.output
    assert len(started) == 1
