"""The development tools (nodepool_devtools) are imported by the commands that need them,
when they run: the operator's command line imports without them, and says in one line what
to do where they are not installed (a wheel install)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nodepool_operator import cli

NEEDS_A_CHECKOUT = (
    "error: '{}' is a development tool, not in the installed package: run it from a source "
    "checkout ('source scripts/setup-env.sh', docs/development.md)"
)


def test_importing_the_cli_imports_no_development_tool() -> None:
    # The tools' package, and the places they had inside the product before it.
    tools = ("nodepool_devtools", "nodepool_operator.cluster", "nodepool_operator.demo")
    code = (
        "import sys, nodepool_operator.cli; "
        f"print(sorted(m for m in sys.modules if m.startswith({tools!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("args", "command"),
    [
        (["cluster", "up"], "cluster"),
        (["cluster", "down"], "cluster"),
        (["cluster", "status"], "cluster"),
        (["cluster", "build"], "cluster"),
        (["demo"], "demo"),
    ],
)
def test_without_the_development_tools_a_dev_command_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch, args: list[str], command: str
) -> None:
    monkeypatch.setattr(cli, "DEVTOOLS_PACKAGE", "nodepool_devtools_not_installed")
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [NEEDS_A_CHECKOUT.format(command)]


def test_without_the_development_tools_hollow_kubelets_say_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(cli, "DEVTOOLS_PACKAGE", "nodepool_devtools_not_installed")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("{}")
    args = ["simcloud", "--state", str(tmp_path / "s.sqlite3"), "--insecure-no-auth"]
    args += ["--kubelets", "hollow", "--kubelet-kubeconfig", str(kubeconfig)]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [NEEDS_A_CHECKOUT.format("simcloud --kubelets hollow")]


def test_without_the_development_tools_their_help_and_the_operator_still_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cli, "DEVTOOLS_PACKAGE", "nodepool_devtools_not_installed")
    for args in (["cluster", "--help"], ["demo", "--help"], ["crds"]):
        result = CliRunner().invoke(cli.app, args)
        assert result.exit_code == 0, (args, result.output)
