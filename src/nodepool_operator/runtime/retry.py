"""Retrying a read-modify-write on 409 Conflict, and nothing else (client-go `util/retry`).

A Conflict means someone else wrote the object between our read and our write. The fix is
to read again and re-apply *only our own change* to the fresh copy, so `fn` must do the
whole read-modify-write, never reuse an object read before the call::

    async def set_replicas() -> Object:
        obj = await client.get(resource, name)       # fresh read, fresh resourceVersion
        obj["spec"]["replicas"] = wanted              # our change, and only ours
        return await client.replace(resource, obj)   # 409 if someone wrote in between

    updated = await retry.retry_on_conflict(set_replicas)

Every other error is raised at once: a 422 will be just as invalid on the next try, and
transient failures (5xx, 429, connection loss) are the workqueue's to retry, with its
per-key backoff, rather than a tight loop's here.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nodepool_operator import pacing
from nodepool_operator.runtime import clock as clock_
from nodepool_operator.runtime import errors

__all__ = [
    "DEFAULT_RETRY",
    "Backoff",
    "retry_on_conflict",
    "retry_on_error",
]

T = TypeVar("T")

_REAL_CLOCK = clock_.RealClock()


@dataclasses.dataclass(frozen=True)
class Backoff:
    """client-go `wait.Backoff`: how many attempts, and the sleeps between them.

    `steps` attempts are made. The sleep after an attempt starts at `duration` and is
    multiplied by `factor` each time, up to `cap` (0: no cap; reaching it ends the
    retries, as in client-go). Each sleep is stretched by a random fraction up to `jitter`,
    so that writers who collided do not collide again in lockstep.
    """

    duration: float
    factor: float = 1.0
    jitter: float = 0.0
    steps: int = 1
    cap: float = 0.0

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError("a backoff needs at least one step (one attempt)")
        if self.duration < 0 or self.factor < 0 or self.jitter < 0 or self.cap < 0:
            raise ValueError("backoff parameters must not be negative")


# client-go retry.DefaultRetry: for conflicts, which resolve as soon as we re-read.
DEFAULT_RETRY = Backoff(duration=0.010, factor=1.0, jitter=0.1, steps=5)


async def retry_on_conflict(
    fn: Callable[[], Awaitable[T]],
    *,
    backoff: Backoff = DEFAULT_RETRY,
    clock: clock_.Clock = _REAL_CLOCK,
) -> T:
    """Call `fn` until it returns, retrying only on `errors.Conflict`; return its result.

    After the last attempt the last Conflict is raised. Any other exception is raised at
    once. Raw kubernetes_asyncio errors from `fn` are translated first (see
    `errors.translated`), so a 409 is recognised however `fn` made its call.
    """
    return await retry_on_error(
        fn,
        retriable=lambda error: isinstance(error, errors.Conflict),
        backoff=backoff,
        clock=clock,
    )


async def retry_on_error(
    fn: Callable[[], Awaitable[T]],
    *,
    retriable: Callable[[Exception], bool],
    backoff: Backoff,
    clock: clock_.Clock = _REAL_CLOCK,
) -> T:
    """client-go `retry.OnError`: retry `fn` while `retriable(error)`, per `backoff`."""
    stepper = _Stepper(backoff)
    last_error: Exception | None = None
    while stepper.steps > 0:
        try:
            async with errors.translated():
                return await fn()
        except Exception as error:
            if not retriable(error):
                raise
            last_error = error
        if stepper.steps == 1:
            break
        await clock.sleep(stepper.step())
    # Unreachable without an error: the loop runs at least once (steps >= 1) and
    # returns on success.
    assert last_error is not None
    raise last_error


class _Stepper:
    """The mutable half of client-go's `Backoff.Step()`."""

    def __init__(self, backoff: Backoff) -> None:
        self._backoff = backoff
        self.steps = backoff.steps
        self._taken = 0
        # client-go: a factor of 0 leaves the duration as it is.
        self._factor = backoff.factor or 1.0

    def step(self) -> float:
        backoff = self._backoff
        self.steps -= 1
        duration = self._duration(self._taken)
        self._taken += 1
        if backoff.cap > 0 and self._duration(self._taken) > backoff.cap:
            # As client-go: the step that would pass the cap is the last one.
            self.steps = 0
        if backoff.jitter > 0:
            duration += random.random() * backoff.jitter * duration
        return duration

    def _duration(self, taken: int) -> float:
        return pacing.exponential(
            initial=self._backoff.duration, failures=taken, factor=self._factor, maximum=math.inf
        )
