"""A work queue of keys with client-go semantics, for asyncio workers.

What a controller relies on:

- `add()` deduplicates: a key waiting in the queue is queued once however often it is added.
- A key handed out by `get()` is not handed out again until `done()`: two workers never
  reconcile the same object at once. Adding it meanwhile marks it dirty, and `done()`
  queues it again, so the change that arrived mid-reconcile is not lost.
- `add_after()` delays a key on the injected clock (the earliest pending delay for a key
  wins); `add_rate_limited()` delays it by what the rate limiter says, `forget()` ends its
  failure streak.
- After `shut_down()`, adds are ignored and `get()` hands out what is still queued, then
  raises `ShutDown`; `shut_down_with_drain()` also waits for keys in flight to be done.

Three structures hold the state, with the invariant that a key is in `_queue` exactly when
it is in `_dirty` and not in `_processing`, and at most once. Delayed keys sit in a heap
served by one background task that exists only while something is delayed.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import weakref
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

from nodepool_operator.runtime import clock as clock_
from nodepool_operator.runtime import metrics, ratelimit

__all__ = ["ShutDown", "WorkQueue"]

K = TypeVar("K", bound=Hashable)


class ShutDown(Exception):  # noqa: N818 - client-go's name; it is a signal, not a fault
    """The queue is shut down and has nothing left to hand out: the worker should exit."""


class WorkQueue(Generic[K]):
    """Deduplicating, delaying, rate-limited queue of keys; see the module docstring.

    `name` labels the workqueue_* metrics. The clock times delays and metrics; the rate
    limiter defaults to controller-runtime's (`ratelimit.default_controller_rate_limiter`).
    """

    def __init__(
        self,
        *,
        name: str,
        clock: clock_.Clock | None = None,
        rate_limiter: ratelimit.RateLimiter[K] | None = None,
    ) -> None:
        self._name = name
        self._clock: clock_.Clock = clock if clock is not None else clock_.RealClock()
        self._rate_limiter: ratelimit.RateLimiter[K] = (
            rate_limiter
            if rate_limiter is not None
            else ratelimit.default_controller_rate_limiter(self._clock)
        )

        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._getters: deque[asyncio.Future[None]] = deque()
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._shutting_down = False
        self._draining = False

        # Delayed keys: a heap of (ready_at, sequence, key) plus the live entry per key.
        # Moving a key earlier pushes a new entry; the old one no longer matches
        # `_delayed_entry` and is skipped when it surfaces (heapq has no decrease-key).
        self._delayed: list[tuple[float, int, K]] = []
        self._delayed_entry: dict[K, tuple[float, int]] = {}
        self._sequence = itertools.count()
        self._delay_task: asyncio.Task[None] | None = None
        self._delay_timer: asyncio.Future[None] | None = None

        self._added_at: dict[K, float] = {}
        self._started_at: dict[K, float] = {}
        self._depth = metrics.workqueue_depth.labels(name=name)
        self._adds = metrics.workqueue_adds_total.labels(name=name)
        self._retries = metrics.workqueue_retries_total.labels(name=name)
        self._queue_duration = metrics.workqueue_queue_duration_seconds.labels(name=name)
        self._work_duration = metrics.workqueue_work_duration_seconds.labels(name=name)
        self._depth.set(0)
        # Computed at scrape time instead of by a ticking task; the weak reference keeps
        # the process-wide gauge from keeping a discarded queue alive.
        this = weakref.ref(self)
        metrics.workqueue_unfinished_work_seconds.labels(name=name).set_function(
            lambda: queue.unfinished_work_seconds() if (queue := this()) is not None else 0.0
        )
        metrics.workqueue_longest_running_processor_seconds.labels(name=name).set_function(
            lambda: queue.longest_running_seconds() if (queue := this()) is not None else 0.0
        )

    @property
    def name(self) -> str:
        return self._name

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, key: K) -> None:
        """Mark `key` as needing processing; a no-op if it already waits or after shutdown."""
        if self._shutting_down or key in self._dirty:
            return
        self._adds.inc()
        self._added_at.setdefault(key, self._clock.now())
        self._dirty.add(key)
        self._depth.set(len(self._dirty))
        if key in self._processing:
            # done() will queue it; handing it out now would run two reconciles at once.
            return
        self._queue.append(key)
        self._wake_one_getter()

    async def get(self) -> K:
        """The next key to process; call `done(key)` when finished with it.

        Raises `ShutDown` once the queue is shut down and nothing is left in it.
        """
        while not self._queue:
            if self._shutting_down:
                raise ShutDown(self._name)
            getter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._getters.append(getter)
            try:
                await getter
            except asyncio.CancelledError:
                getter.cancel()
                if getter in self._getters:
                    self._getters.remove(getter)
                # Woken and then cancelled before running: pass the wakeup on, or a
                # queued key could sit there while another getter sleeps.
                if self._queue and not getter.cancelled():
                    self._wake_one_getter()
                raise
        key = self._queue.popleft()
        self._dirty.discard(key)
        self._processing.add(key)
        self._depth.set(len(self._dirty))
        now = self._clock.now()
        added_at = self._added_at.pop(key, None)
        if added_at is not None:
            self._queue_duration.observe(max(0.0, now - added_at))
        self._started_at[key] = now
        return key

    def done(self, key: K) -> None:
        """Finish processing `key`; it is queued again if it was added meanwhile.

        A key that is not being processed is ignored, so a stray `done()` can never put a
        key in the queue twice.
        """
        if key not in self._processing:
            return
        self._processing.remove(key)
        started_at = self._started_at.pop(key, None)
        if started_at is not None:
            self._work_duration.observe(max(0.0, self._clock.now() - started_at))
        if key in self._dirty:
            self._queue.append(key)
            self._wake_one_getter()
        if not self._processing:
            self._release_drain_waiters()

    def add_after(self, key: K, delay: float) -> None:
        """Add `key` once `delay` seconds have passed; an earlier pending delay wins."""
        if self._shutting_down:
            return
        self._retries.inc()
        if delay <= 0:
            self.add(key)
            return
        ready_at = self._clock.now() + delay
        current = self._delayed_entry.get(key)
        if current is not None and current[0] <= ready_at:
            return
        sequence = next(self._sequence)
        self._delayed_entry[key] = (ready_at, sequence)
        heapq.heappush(self._delayed, (ready_at, sequence, key))
        if self._delayed[0][1] == sequence:
            self._reschedule()

    def add_rate_limited(self, key: K) -> None:
        """Add `key` after the delay the rate limiter gives it (one more failure)."""
        self.add_after(key, self._rate_limiter.when(key))

    def forget(self, key: K) -> None:
        """End the failure streak of `key` in the rate limiter (call after a success)."""
        self._rate_limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        return self._rate_limiter.num_requeues(key)

    def shut_down(self) -> None:
        """Ignore adds from now on; `get()` drains what is queued, then raises ShutDown.

        Also releases a pending `shut_down_with_drain()` without waiting further.
        """
        self._draining = False
        self._begin_shut_down()
        self._release_drain_waiters()

    async def shut_down_with_drain(self) -> None:
        """Shut down, then wait until every key handed out has been `done()`."""
        self._draining = True
        self._begin_shut_down()
        while self._processing and self._draining:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter

    def unfinished_work_seconds(self) -> float:
        """Seconds spent so far on the keys in flight, summed (workqueue_unfinished_work)."""
        now = self._clock.now()
        # A copy: the gauge may be scraped from the exporter's thread.
        return sum(now - started for started in list(self._started_at.values()))

    def longest_running_seconds(self) -> float:
        """Seconds the oldest key in flight has been processed for, or 0."""
        starts = list(self._started_at.values())
        return self._clock.now() - min(starts) if starts else 0.0

    def _begin_shut_down(self) -> None:
        self._shutting_down = True
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)
        # Delayed keys will never be added now; drop them with their task.
        if self._delay_task is not None:
            self._delay_task.cancel()
            self._delay_task = None
        self._delayed.clear()
        self._delayed_entry.clear()

    def _wake_one_getter(self) -> None:
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)
                return

    def _release_drain_waiters(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _reschedule(self) -> None:
        """A new earliest delay: start the delay task, or cut its current sleep short."""
        if self._delay_task is None or self._delay_task.done():
            self._delay_task = asyncio.get_running_loop().create_task(
                self._run_delays(), name=f"workqueue-{self._name}-delays"
            )
        elif self._delay_timer is not None:
            self._delay_timer.cancel()

    async def _run_delays(self) -> None:
        now = self._clock.now()
        try:
            while True:
                next_ready = self._add_ready_keys(now)
                if next_ready is None:
                    # Nothing delayed: end; the next add_after starts a new task.
                    return
                timer = asyncio.ensure_future(self._clock.sleep(next_ready - self._clock.now()))
                self._delay_timer = timer
                # wait() rather than await: a timer cancelled by _reschedule() must wake
                # this loop, not end it.
                await asyncio.wait((timer,))
                now = self._clock.now()
                if not timer.cancelled():
                    # A sleep that ran its course means the deadline has come, even if the
                    # clock reads a hair earlier (timer resolution, float rounding);
                    # re-sleeping for a nanosecond could otherwise strand the key.
                    now = max(now, next_ready)
        finally:
            if self._delay_timer is not None:
                self._delay_timer.cancel()
                self._delay_timer = None

    def _add_ready_keys(self, now: float) -> float | None:
        """Add every key due by `now`; return when the next one is due, if any."""
        while self._delayed:
            ready_at, sequence, key = self._delayed[0]
            entry = self._delayed_entry.get(key)
            if entry is None or entry[1] != sequence:
                heapq.heappop(self._delayed)
                continue
            if ready_at > now:
                return ready_at
            heapq.heappop(self._delayed)
            del self._delayed_entry[key]
            self.add(key)
        return None
