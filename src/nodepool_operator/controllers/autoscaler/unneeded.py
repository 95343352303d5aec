"""Since when each node has been unneeded: the timers behind scale-down.

A node is unneeded while it is Ready and runs only DaemonSet or mirror pods. Its timer
starts the first scan that sees it so and is dropped the first scan that does not; and
every timer is dropped while scale-down is blocked (nodes in flight, a Pending request,
pods waiting for the scheduler). So a node is given up only after ``unneededSeconds`` of
continuous idleness *after* the last scale-up settled: the hysteresis that stops a pool
from shrinking right after it grew. Time comes from the injected monotonic clock.
"""

from __future__ import annotations

from collections.abc import Iterable

from nodepool_operator.runtime import clock as clock_module

__all__ = ["UnneededTracker"]


class UnneededTracker:
    """The unneeded-since timers of one pool's nodes."""

    def __init__(self, clock: clock_module.Clock) -> None:
        self.clock = clock
        self._since: dict[str, float] = {}

    def observe(self, unneeded: Iterable[str], *, blocked: bool) -> None:
        """Record this scan's unneeded nodes; a blocked scan resets every timer."""
        if blocked:
            self._since.clear()
            return
        now = self.clock.now()
        self._since = {name: self._since.get(name, now) for name in unneeded}

    def expired(self, after: float) -> list[str]:
        """Nodes unneeded for at least ``after`` seconds, by name."""
        now = self.clock.now()
        return sorted(name for name, since in self._since.items() if now - since >= after)

    def next_expiry(self, after: float) -> float | None:
        """Seconds until the next timer reaches ``after``, or None when none is running."""
        now = self.clock.now()
        waiting = [since + after - now for since in self._since.values() if now - since < after]
        return min(waiting) if waiting else None
