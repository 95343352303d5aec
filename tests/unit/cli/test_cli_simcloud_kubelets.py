"""`simcloud --kubelets`: kwok by default; hollow needs a kubeconfig for its kubelets."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from nodepool_devtools.cluster import binaries
from nodepool_operator import cli


def _simcloud(tmp_path: Path, *extra: str) -> list[str]:
    state = tmp_path / "s.sqlite3"
    return ["simcloud", "--state", str(state), "--insecure-no-auth", "--port", "0", *extra]


def test_hollow_kubelets_need_a_kubeconfig(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli.app, _simcloud(tmp_path, "--kubelets", "hollow"))
    assert result.exit_code == 2
    assert "--kubelet-kubeconfig" in result.output


def test_a_kubelet_kubeconfig_without_hollow_kubelets_is_refused(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("{}")
    args = _simcloud(tmp_path, "--kubelet-kubeconfig", str(kubeconfig))
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 2
    assert "only with --kubelets hollow" in result.output


def test_hollow_kubelets_run_the_cached_kubemark_with_the_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("{}")
    kubemark = tmp_path / "kubemark"
    # The development tools find (or build) kubemark; cli imports them only for hollow kubelets.
    monkeypatch.setattr(binaries, "ensure_kubemark", lambda: kubemark)
    started: list[object] = []
    monkeypatch.setattr(cli.simcloud_server, "run", started.append)

    args = _simcloud(tmp_path, "--kubelets", "hollow", "--kubelet-kubeconfig", str(kubeconfig))
    result = CliRunner().invoke(cli.app, args)

    assert result.exit_code == 0, result.output
    [config] = started
    kubelets = config.kubelets  # type: ignore[attr-defined]
    assert kubelets.kubemark == str(kubemark)
    assert kubelets.kubeconfig == str(kubeconfig.resolve())
    assert kubelets.log_directory == str(tmp_path / "s.sqlite3.kubelets")
