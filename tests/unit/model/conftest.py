"""Prints what the model-based tests tried, so a long run's figures can be recorded."""

from __future__ import annotations

import os

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from unit.model import cluster_model

    tried = cluster_model.TRIED
    if tried["sequences"]:
        examples = os.environ.get("NODEPOOL_MODEL_EXAMPLES", "60")
        steps = os.environ.get("NODEPOOL_MODEL_STEPS", "40")
        terminalreporter.write_line(
            "NodePool model: "
            + ", ".join(f"{count} {what}" for what, count in tried.items())
            + f" (NODEPOOL_MODEL_EXAMPLES={examples}, NODEPOOL_MODEL_STEPS={steps})"
        )
    rolled = cluster_model.ROLL_TRIED
    if rolled["sequences"]:
        examples = os.environ.get("NODEPOOL_ROLL_EXAMPLES", "60")
        steps = os.environ.get("NODEPOOL_ROLL_STEPS", "40")
        terminalreporter.write_line(
            "NodePool roll model: "
            + ", ".join(f"{count} {what}" for what, count in rolled.items())
            + f" (NODEPOOL_ROLL_EXAMPLES={examples}, NODEPOOL_ROLL_STEPS={steps})"
        )
