"""Time as a dependency, so that backoff, batching and leases are testable without sleeps.

`RealClock` is what production code gets. `FakeClock` is for tests: its time moves only
when a test calls `advance()`, which wakes sleepers in deadline order and lets the tasks
it woke run before it returns, so a test never sleeps for real.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol

__all__ = ["Clock", "FakeClock", "RealClock", "RealWallClock", "WallClock"]

# How many times advance() yields to the event loop after waking sleepers. A woken sleeper
# typically needs a handful of loop iterations to propagate (future -> task -> the task
# it signals -> ...); twenty covers the chains in the runtime with a wide margin while
# staying far cheaper than any real sleep.
_SETTLE_ROUNDS = 20

# wait_for_sleepers() gives up after this many yields, so that a test waiting for a
# sleeper that never comes fails instead of hanging until the pytest timeout.
_MAX_WAIT_ROUNDS = 10_000


class Clock(Protocol):
    """Monotonic time and sleeping; the only source of time the runtime uses."""

    def now(self) -> float:
        """Seconds on a monotonic scale (not wall time)."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    """The event loop's notion of time: `time.monotonic()` and `asyncio.sleep()`."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class FakeClock:
    """A clock that moves only when a test advances it.

    `sleep(d)` registers a deadline `now() + d` and returns once `advance()` has moved
    time to or past it. Cancelled sleeps are dropped, so they never count as sleepers.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        # (deadline, sequence, future): the sequence keeps equal deadlines in FIFO order
        # and means futures are never compared.
        self._heap: list[tuple[float, int, asyncio.Future[None]]] = []
        self._sequence = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            # Like asyncio.sleep(0): a yield to the loop, never a wait on the clock.
            await asyncio.sleep(0)
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (self._now + seconds, next(self._sequence), waiter))
        # Cancelling the sleeping task cancels `waiter`; the heap drops it lazily.
        await waiter

    @property
    def sleepers(self) -> int:
        """How many sleeps are waiting for time to move."""
        return sum(1 for _, _, waiter in self._heap if not waiter.done())

    def next_deadline(self) -> float | None:
        """The earliest deadline a sleeper waits for, or None if nobody sleeps."""
        self._drop_finished_head()
        return self._heap[0][0] if self._heap else None

    async def advance(self, seconds: float) -> None:
        """Move time forward by `seconds`, waking sleepers in deadline order.

        Time stops at each deadline on the way so that a woken task sees `now()` equal to
        its deadline, and may sleep again within the same advance (a retry loop runs all
        the steps that fit). Returns after the woken tasks have had the chance to run.
        """
        if seconds < 0:
            raise ValueError(f"a monotonic clock cannot go back ({seconds} s)")
        target = self._now + seconds
        # Tasks created just before the call get to reach their sleep first.
        await _settle()
        while True:
            self._drop_finished_head()
            if not self._heap or self._heap[0][0] > target:
                break
            self._now = max(self._now, self._heap[0][0])
            while self._heap and self._heap[0][0] <= self._now:
                _, _, waiter = heapq.heappop(self._heap)
                if not waiter.done():
                    waiter.set_result(None)
            await _settle()
        self._now = target
        await _settle()

    async def wait_for_sleepers(self, count: int = 1) -> None:
        """Yield to the loop until at least `count` sleepers wait on this clock."""
        for _ in range(_MAX_WAIT_ROUNDS):
            if self.sleepers >= count:
                return
            await asyncio.sleep(0)
        raise RuntimeError(f"expected {count} sleepers on the fake clock, found {self.sleepers}")

    def _drop_finished_head(self) -> None:
        while self._heap and self._heap[0][2].done():
            heapq.heappop(self._heap)


async def _settle() -> None:
    for _ in range(_SETTLE_ROUNDS):
        await asyncio.sleep(0)


class WallClock(Protocol):
    """Seconds since the epoch, for timestamps written to the API (never for intervals)."""

    def time(self) -> float: ...


class RealWallClock:
    def time(self) -> float:
        return time.time()
