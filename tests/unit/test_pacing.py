"""The one exponential backoff, token bucket and Retry-After reader (``pacing``)."""

from __future__ import annotations

import email.utils
import math

import pytest

from nodepool_operator import pacing


def test_the_first_wait_is_the_initial_one_and_each_failure_multiplies_it() -> None:
    waits = [pacing.exponential(initial=0.2, failures=n, maximum=30.0) for n in range(10)]
    assert waits[:4] == [0.2, 0.4, 0.8, 1.6]
    assert waits[-1] == 30.0, "capped at the maximum"


def test_another_factor_and_no_cap() -> None:
    assert pacing.exponential(initial=0.01, failures=2, factor=5.0) == 0.01 * 25
    assert pacing.exponential(initial=1.0, failures=3, factor=1.0) == 1.0


def test_a_streak_past_float_range_waits_the_maximum() -> None:
    assert pacing.exponential(initial=0.005, failures=5000, maximum=1000.0) == 1000.0
    assert pacing.exponential(initial=0.005, failures=5000) == math.inf


class SteppedClock:
    """A wall clock the test sets by hand (it may step backwards)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_token_bucket_allows_its_burst_then_one_per_refill() -> None:
    clock = SteppedClock(100.0)
    bucket = pacing.TokenBucket(now=clock, rate=0.5, burst=2)
    assert [bucket.allow() for _ in range(3)] == [True, True, False]
    assert bucket.wait() == pytest.approx(2.0)
    clock.now += 1.9
    assert not bucket.allow(), "a refused allow() takes no token and borrows nothing"
    assert bucket.wait() == pytest.approx(0.1)
    clock.now += 0.1
    assert bucket.wait() == 0.0
    assert bucket.allow()
    assert bucket.reserve() == pytest.approx(2.0), "reserve() borrows: the next token in 2 s"


def test_a_clock_stepping_backwards_neither_drains_nor_refills_the_bucket() -> None:
    clock = SteppedClock(100.0)
    bucket = pacing.TokenBucket(now=clock, rate=1.0, burst=1)
    assert bucket.allow()
    clock.now = 50.0
    assert not bucket.allow()
    clock.now = 100.5
    assert not bucket.allow(), "refilled from the latest reading, not from the step back"
    clock.now = 101.0
    assert bucket.allow()


def test_retry_after_reads_seconds_and_for_a_cloud_http_dates() -> None:
    now = 1_750_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    past = email.utils.formatdate(now - 30, usegmt=True)

    assert pacing.parse_retry_after(" 3 ", http_date=False) == 3.0
    assert pacing.parse_retry_after(date, http_date=True, now=lambda: now) == 30.0
    assert pacing.parse_retry_after(past, http_date=True, now=lambda: now) == 0.0
    # Kubernetes sends seconds only; client-go ignores a date, and so do we.
    assert pacing.parse_retry_after(date, http_date=False, now=lambda: now) is None
    assert pacing.parse_retry_after("soon", http_date=True, now=lambda: now) is None
    assert pacing.parse_retry_after("-5", http_date=True, now=lambda: now) is None
    assert pacing.parse_retry_after("nan", http_date=False) is None
    assert pacing.parse_retry_after(None, http_date=True, now=lambda: now) is None
