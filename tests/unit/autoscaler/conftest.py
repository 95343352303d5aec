"""Fixtures the Autoscaler's unit tests share."""

from __future__ import annotations

import pytest

from unit.autoscaler.reconcile_world import World


@pytest.fixture
def world() -> World:
    """One Autoscaler (a 5 s scan) for one pool, on the shared fakes."""
    w = World()
    w.autoscaler(scan_interval_seconds=5)
    w.pool()
    return w
