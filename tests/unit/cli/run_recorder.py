"""`nodepool-operator run` with the operator replaced by a recorder: the CLI tests read the
options it would have started the operator with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from nodepool_operator import cli, operator


def invoke_run(
    monkeypatch: pytest.MonkeyPatch, *flags: str, kubeconfig: Path | None = None
) -> tuple[Result, list[operator.OperatorOptions]]:
    """`run` with ``flags`` (and ``--kubeconfig`` when given), and the options of each
    operator it started."""
    started: list[operator.OperatorOptions] = []

    async def capture(options: operator.OperatorOptions, **_: Any) -> None:
        started.append(options)

    monkeypatch.setattr(operator, "run_operator", capture)
    where = ("--kubeconfig", str(kubeconfig)) if kubeconfig is not None else ()
    return CliRunner().invoke(cli.app, ["run", *where, *flags]), started
