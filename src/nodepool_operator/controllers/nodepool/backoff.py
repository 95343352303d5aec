"""Backing off from a refusal that asking again will not change: the cloud's (quota,
invalid machine type), or the API server's 422 on a Node create (a template label it
refuses that the CRD could not catch). One pause per pool, whichever refused.

A permanent cloud error will not go away by asking again, so after one the pool's VM
creations pause: 10 s, then doubling up to 5 minutes while the error repeats. Other
events (a Node turning Ready, a label) still reconcile the pool and keep its status
current, but they do not reach the cloud's create API before the pause ends, so the
request rate to the cloud stays bounded however busy the cluster is. A new generation
(the user changed the spec) ends the pause at once: that is new information.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodepool_operator import pacing
from nodepool_operator.cloud.provider import PermanentCloudError

__all__ = ["CloudBackoff", "Pause"]


@dataclass(frozen=True)
class Pause:
    until: float
    generation: int
    failures: int
    reason: str
    message: str


class CloudBackoff:
    def __init__(self, *, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = maximum
        self._pauses: dict[str, Pause] = {}

    def active(self, pool: str, *, generation: int, now: float) -> Pause | None:
        """The pause in force for ``pool``, if any (a new generation or time ends it)."""
        pause = self._pauses.get(pool)
        if pause is None:
            return None
        if pause.generation != generation or pause.until <= now:
            return None
        return pause

    def failed(
        self, pool: str, error: PermanentCloudError, *, generation: int, now: float
    ) -> Pause:
        return self.refused(
            pool,
            reason=error.code or type(error).__name__,
            message=str(error),
            generation=generation,
            now=now,
        )

    def refused(
        self, pool: str, *, reason: str, message: str, generation: int, now: float
    ) -> Pause:
        previous = self._pauses.get(pool)
        repeats = previous is not None and previous.generation == generation
        failures = previous.failures + 1 if previous is not None and repeats else 1
        delay = pacing.exponential(
            initial=self.initial, failures=failures - 1, maximum=self.maximum
        )
        pause = Pause(
            until=now + delay,
            generation=generation,
            failures=failures,
            reason=reason,
            message=message,
        )
        self._pauses[pool] = pause
        return pause

    def succeeded(self, pool: str) -> None:
        self._pauses.pop(pool, None)
