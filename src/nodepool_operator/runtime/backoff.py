"""Exponential backoff: the one formula behind every wait-after-failure of the runtime.

The workqueue's per-key rate limiter, the informer's watch restarts and
``retry_on_conflict``'s sleeps all wait ``initial * factor**failures``, capped; they differ
only in their numbers, and in what they do once the cap is reached.
"""

from __future__ import annotations

import math

__all__ = ["exponential"]


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
