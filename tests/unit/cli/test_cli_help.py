"""Every command documents itself: `--help` works and every option has a description."""

from __future__ import annotations

from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from nodepool_operator import cli

COMMAND = typer.main.get_command(cli.app)


# Typer vendors its own click; walk commands by shape rather than by click's classes.
def _paths(command: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [prefix]
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            found += _paths(sub, (*prefix, name))
    return found


@pytest.mark.parametrize("path", _paths(COMMAND), ids=lambda p: " ".join(p) or "root")
def test_every_command_has_complete_help(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli.app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    command: Any = COMMAND
    for name in path:
        command = command.commands[name]
    assert command.help or command.short_help, f"{path} has no description"
    for parameter in command.params:
        if getattr(parameter, "param_type_name", "") == "option" and parameter.name != "help":
            assert parameter.help, f"option {parameter.opts} of {path} has no help text"


def test_the_documented_commands_exist() -> None:
    assert {
        ("cluster", "up"),
        ("cluster", "down"),
        ("cluster", "status"),
        ("simcloud",),
        ("run",),
        ("crds",),
        ("demo",),
    } <= set(_paths(COMMAND))
