"""What `cluster up` prints: KUBECONFIG, and a PATH that puts the project's kubectl (the
API server's version) and helm first, so `eval "$(nodepool-operator cluster up)"` leaves a
shell whose `kubectl` is the one the docs' commands are tested with."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nodepool_devtools.cluster import binaries, controlplane
from nodepool_operator import cli


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('#!/bin/sh\necho "$0"\n')
    path.chmod(0o755)
    return path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache with space"
    monkeypatch.setenv(binaries.CACHE_ENV, str(root))
    monkeypatch.delenv(binaries.ASSETS_ENV, raising=False)
    return root


def _pinned(module: binaries.ToolModule) -> str:
    return module.version(binaries.tools_directory())


def test_up_prints_kubeconfig_and_a_path_with_the_projects_kubectl_and_helm(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubectl = _executable(cache / f"kubernetes-{_pinned(binaries.KUBERNETES)}" / "kubectl")
    helm = _executable(cache / f"helm-{_pinned(binaries.HELM)}" / "helm")
    monkeypatch.setattr(controlplane.ControlPlane, "up", lambda self, timeout: None)

    result = CliRunner().invoke(cli.app, ["cluster", "up", "--dir", str(tmp_path / "plane")])

    assert result.exit_code == 0, result.output
    assert f"# kubectl {_pinned(binaries.KUBERNETES)}: {kubectl}" in result.output
    assert f"# helm {_pinned(binaries.HELM)}: {helm}" in result.output
    # The lines are for eval: a shell that runs them finds our kubectl and helm first.
    shell = subprocess.run(
        ["bash", "-c", f'{result.output}\necho "$KUBECONFIG"; command -v kubectl helm'],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PATH": "/usr/bin:/bin"},
    )
    assert shell.stdout.splitlines() == [
        str((tmp_path / "plane").resolve() / "kubeconfig"),
        str(kubectl),
        str(helm),
    ]


def test_a_helm_not_built_yet_is_named_with_the_command_that_builds_it(
    cache: Path, tmp_path: Path
) -> None:
    _executable(cache / f"kubernetes-{_pinned(binaries.KUBERNETES)}" / "kubectl")

    lines = controlplane.ControlPlane(tmp_path).shell_setup()

    assert lines[-1] == (
        f"# helm {_pinned(binaries.HELM)}: not built; 'nodepool-operator cluster build'"
    )
    assert str(cache / "helm") not in "\n".join(lines)
