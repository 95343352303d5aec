"""Fixtures shared by the whole suite come from the project's own pytest plugin."""

from __future__ import annotations

import pytest

pytest_plugins = ["nodepool_devtools.cluster.pytest_plugin"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A test marked runs_last judges the whole session (e.g. the least-privilege test reads
    # the audit log of every e2e test): it goes after everything else, in collection order.
    last = [item for item in items if item.get_closest_marker("runs_last")]
    items[:] = [item for item in items if not item.get_closest_marker("runs_last")] + last
