"""Rate limiters that say how long a key waits before its next retry (client-go semantics).

`default_controller_rate_limiter()` is controller-runtime's default: the larger of a per-key
exponential backoff (5 ms doubling to 1000 s) and an overall token bucket (10 qps, burst
100). The first keeps one failing key from spinning; the second keeps many failing keys
together from flooding the API server.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

from nodepool_operator import pacing
from nodepool_operator.runtime import clock as clock_

__all__ = [
    "BucketRateLimiter",
    "ItemExponentialFailureRateLimiter",
    "MaxOfRateLimiter",
    "RateLimiter",
    "default_controller_rate_limiter",
]

K = TypeVar("K", bound=Hashable)
K_contra = TypeVar("K_contra", bound=Hashable, contravariant=True)


class RateLimiter(Protocol[K_contra]):
    """Decides the delay before a key is retried; `forget` ends its failure streak."""

    def when(self, item: K_contra) -> float:
        """Seconds to wait before retrying `item`; counts as one more failure."""
        ...

    def forget(self, item: K_contra) -> None:
        """Stop tracking `item` (it succeeded, or is gone)."""
        ...

    def num_requeues(self, item: K_contra) -> int:
        """Failures recorded for `item` since it was last forgotten."""
        ...


class ItemExponentialFailureRateLimiter(Generic[K]):
    """Per key: `base * 2**failures`, capped at `max_delay`."""

    def __init__(self, *, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        if base_delay < 0 or max_delay < 0:
            raise ValueError("delays must not be negative")
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._failures: dict[K, int] = {}

    def when(self, item: K) -> float:
        failures = self._failures.get(item, 0)
        self._failures[item] = failures + 1
        return pacing.exponential(
            initial=self._base_delay, failures=failures, maximum=self._max_delay
        )

    def forget(self, item: K) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: K) -> int:
        return self._failures.get(item, 0)


class BucketRateLimiter(Generic[K]):
    """One token bucket shared by all keys: each ``when()`` reserves a token."""

    def __init__(self, *, clock: clock_.Clock, qps: float = 10.0, burst: int = 100) -> None:
        self._bucket = pacing.TokenBucket(now=clock.now, rate=qps, burst=burst)

    def when(self, item: K) -> float:
        return self._bucket.reserve()

    def forget(self, item: K) -> None:
        return None

    def num_requeues(self, item: K) -> int:
        return 0


class MaxOfRateLimiter(Generic[K]):
    """The longest delay of several limiters; every limiter sees every call."""

    def __init__(self, *limiters: RateLimiter[K]) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self._limiters = limiters

    def when(self, item: K) -> float:
        return max(limiter.when(item) for limiter in self._limiters)

    def forget(self, item: K) -> None:
        for limiter in self._limiters:
            limiter.forget(item)

    def num_requeues(self, item: K) -> int:
        return max(limiter.num_requeues(item) for limiter in self._limiters)


def default_controller_rate_limiter(clock: clock_.Clock) -> MaxOfRateLimiter[K]:
    """controller-runtime's default: max(per-key 5 ms..1000 s, overall 10 qps burst 100)."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter[K](base_delay=0.005, max_delay=1000.0),
        BucketRateLimiter[K](clock=clock, qps=10.0, burst=100),
    )
