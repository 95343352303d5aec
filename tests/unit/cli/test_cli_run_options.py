"""`nodepool-operator run` hands its tuning flags to the controllers' configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from nodepool_operator import cli, operator


def test_the_cloud_resync_interval_reaches_the_nodepool_controller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[operator.OperatorOptions] = []

    async def capture(options: operator.OperatorOptions, **_: Any) -> None:
        seen.append(options)

    monkeypatch.setattr(operator, "run_operator", capture)
    token = tmp_path / "token"
    token.write_text("t0ken")
    result = CliRunner().invoke(
        cli.app,
        ["run", "--cloud-token-file", str(token), "--cloud-resync-interval", "42"],
    )

    assert result.exit_code == 0, result.output
    [options] = seen
    assert options.nodepool.cloud_resync_interval == 42.0
