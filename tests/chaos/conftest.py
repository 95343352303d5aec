"""Chaos fixtures: the fleet of one test, the run's size (short or full) and its figures.

``NODEPOOL_CHAOS=full`` raises the counts (50 operator SIGKILLs, ...); the default is the
short run that the test command (scripts/test.sh) includes. ``NODEPOOL_CHAOS_SEED`` changes the
seed of every random choice (kill moments, targets). ``NODEPOOL_CHAOS_REPORT=FILE``
writes the figures as JSON; they are printed at the end of the run either way.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from chaos.fleet import BROKEN_ENV, Fleet
from chaos.settings import SETTINGS
from nodepool_devtools.cluster import install
from nodepool_devtools.cluster.pytest_plugin import Cluster

FIGURES: dict[str, dict[str, Any]] = {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/chaos/" in str(item.path):
            item.add_marker(pytest.mark.chaos)
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.timeout(SETTINGS.timeout))


@pytest.fixture
async def fleet(
    cluster: Cluster, api_client: client.ApiClient, tmp_path: Path
) -> AsyncIterator[Fleet]:
    """A simcloud and operator replicas of this test; pools removed while they still run."""
    if cluster.plane is None:
        pytest.skip("chaos tests restart parts of the local control plane")
    await install.install_crds(api_client)
    await install.grant_operator_rbac(api_client)
    fleet = Fleet(cluster=cluster, api=api_client, directory=tmp_path)
    try:
        yield fleet
    finally:
        try:
            if fleet.cloud is not None and any(o.running for o in fleet.operators):
                await fleet.remove_pools()
        finally:
            fleet.stop_all()
            if fleet.cloud is not None and fleet.cloud.client is not None:
                await fleet.cloud.client.close()


@pytest.fixture
def record_figures(request: pytest.FixtureRequest) -> Any:
    """Keep a test's figures for the end-of-run table (and the JSON report)."""

    def record(figures: dict[str, Any]) -> None:
        FIGURES[request.node.name] = {"mode": SETTINGS.mode, **figures}

    return record


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not FIGURES:
        return
    broken = os.environ.get(BROKEN_ENV)
    title = f"chaos figures ({SETTINGS.mode} run, seed {SETTINGS.seed}"
    title += f", BROKEN operator: {broken})" if broken else ")"
    terminalreporter.section(title)
    for test, figures in FIGURES.items():
        shown = " ".join(f"{key}={value}" for key, value in figures.items() if key != "mode")
        terminalreporter.write_line(f"{test}: {shown}")
    report = os.environ.get("NODEPOOL_CHAOS_REPORT")
    if report:
        Path(report).write_text(json.dumps(FIGURES, indent=2) + "\n")
