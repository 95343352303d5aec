"""Unneeded-node timers on a fake clock: continuous idleness, reset by anything in flight."""

from __future__ import annotations

from nodepool_operator.controllers.autoscaler.unneeded import UnneededTracker
from nodepool_operator.runtime.clock import FakeClock


async def test_a_node_expires_after_continuous_idleness() -> None:
    clock = FakeClock()
    tracker = UnneededTracker(clock)
    tracker.observe(["a", "b"], blocked=False)
    await clock.advance(5)
    tracker.observe(["a", "b"], blocked=False)
    assert tracker.expired(10) == []
    assert tracker.next_expiry(10) == 5
    await clock.advance(5)
    tracker.observe(["a", "b"], blocked=False)
    assert tracker.expired(10) == ["a", "b"]
    assert tracker.next_expiry(10) is None


async def test_a_node_that_gets_busy_starts_over() -> None:
    clock = FakeClock()
    tracker = UnneededTracker(clock)
    tracker.observe(["a"], blocked=False)
    await clock.advance(8)
    tracker.observe([], blocked=False)  # a pod landed on it
    await clock.advance(1)
    tracker.observe(["a"], blocked=False)
    await clock.advance(8)
    assert tracker.expired(10) == []
    assert tracker.next_expiry(10) == 2


async def test_a_blocked_scan_resets_every_timer_the_hysteresis_after_a_scale_up() -> None:
    clock = FakeClock()
    tracker = UnneededTracker(clock)
    tracker.observe(["a"], blocked=False)
    await clock.advance(9)
    tracker.observe(["a"], blocked=True)  # nodes in flight: scale-up not settled yet
    await clock.advance(1)
    tracker.observe(["a"], blocked=False)
    assert tracker.expired(10) == []
    await clock.advance(10)
    assert tracker.expired(10) == ["a"]
