"""How long to wait before asking again: the one exponential backoff, the one token
bucket and the one ``Retry-After`` reader of the project.

The runtime (workqueue rate limiters, watch restarts, event spam filter, API errors), the
cloud layer (simcloud's rate limit and its client) and the NodePool controller (pauses
after a permanent cloud error) all pace themselves with these. The module sits in the
bottom layer because the runtime and the cloud layer may not import each other; it knows
nothing of either, and reads time only through the callable it is given.
"""

from __future__ import annotations

import email.utils
import math
from collections.abc import Callable

__all__ = ["TokenBucket", "exponential", "parse_retry_after"]


def exponential(
    *, initial: float, failures: int, maximum: float = math.inf, factor: float = 2.0
) -> float:
    """``initial * factor**failures``, at most ``maximum``.

    ``failures`` counts the failures before the current one, so the first wait is
    ``initial``.
    """
    try:
        delay = initial * factor**failures
    except OverflowError:
        # A streak of ~1000 failures: far past any cap.
        return maximum
    return min(delay, maximum)


class TokenBucket:
    """``burst`` tokens, refilled at ``rate`` per second (golang.org/x/time/rate's Limiter).

    The bucket starts full. ``allow()`` takes a token only if one is there;
    ``reserve()`` always takes one, borrowing from the future when none is left, and says
    how long until that token exists, so later callers queue up behind earlier ones.
    ``now`` is any clock in seconds; one that steps backwards refills nothing until it
    passes its latest reading again.
    """

    def __init__(self, *, now: Callable[[], float], rate: float, burst: int) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("the rate must be positive and the burst at least 1")
        self._now = now
        self._rate = rate
        self._burst = burst
        self._tokens = float(burst)
        self._last = now()

    def allow(self) -> bool:
        """Take a token if one is available now (``Limiter.Allow``)."""
        self._refill()
        if self._tokens < 1:
            return False
        self._tokens -= 1.0
        return True

    def reserve(self) -> float:
        """Take a token, and return the seconds until it exists (``Reserve().Delay()``)."""
        self._refill()
        # May go negative: the debt is the queue of reservations ahead of later callers.
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self._rate

    def wait(self) -> float:
        """Seconds until ``allow()`` would take a token (0 if one is there now)."""
        self._refill()
        return 0.0 if self._tokens >= 1 else (1.0 - self._tokens) / self._rate

    def _refill(self) -> None:
        now = self._now()
        if now > self._last:
            self._tokens = min(float(self._burst), self._tokens + (now - self._last) * self._rate)
            self._last = now


def parse_retry_after(
    value: str | None, *, http_date: bool, now: Callable[[], float] | None = None
) -> float | None:
    """Seconds to wait from a ``Retry-After`` header; None when absent or unreadable.

    RFC 9110 allows delay-seconds or an HTTP-date. Kubernetes sends only seconds, and
    client-go ignores a date, so the API client reads it with ``http_date=False``; a
    cloud may send either. A date is measured against ``now`` (seconds since the epoch).
    """
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        if not http_date or now is None:
            return None
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        # A date already past means "now".
        seconds = max(0.0, when.timestamp() - now())
    # Negative seconds are no delay-seconds at all: unreadable, not "now".
    return seconds if math.isfinite(seconds) and seconds >= 0 else None
