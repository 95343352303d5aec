"""Rate limiters: per-key exponential backoff, an overall token bucket, and their max."""

from __future__ import annotations

import pytest

from nodepool_operator.runtime import clock as clock_
from nodepool_operator.runtime import ratelimit


def test_per_key_backoff_doubles_from_5ms_and_caps_at_1000s() -> None:
    limiter: ratelimit.ItemExponentialFailureRateLimiter[str] = (
        ratelimit.ItemExponentialFailureRateLimiter()
    )
    delays = [limiter.when("a") for _ in range(22)]
    expected = [min(0.005 * 2**failures, 1000.0) for failures in range(22)]
    assert delays == pytest.approx(expected)
    assert delays[:3] == pytest.approx([0.005, 0.010, 0.020])
    # 0.005 * 2**18 = 1310.72 s is the first step past the cap.
    assert delays[17] == pytest.approx(655.36)
    assert delays[18:] == [1000.0] * 4
    assert limiter.num_requeues("a") == 22


def test_per_key_backoff_stays_capped_after_thousands_of_failures() -> None:
    limiter: ratelimit.ItemExponentialFailureRateLimiter[str] = (
        ratelimit.ItemExponentialFailureRateLimiter()
    )
    for _ in range(5000):
        delay = limiter.when("hopeless")
    assert delay == 1000.0


def test_forget_resets_the_backoff_and_the_requeue_count() -> None:
    limiter: ratelimit.ItemExponentialFailureRateLimiter[str] = (
        ratelimit.ItemExponentialFailureRateLimiter()
    )
    for _ in range(5):
        limiter.when("a")
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == pytest.approx(0.005)
    limiter.forget("never-seen")


def test_per_key_backoff_is_independent_for_each_key() -> None:
    limiter: ratelimit.ItemExponentialFailureRateLimiter[str] = (
        ratelimit.ItemExponentialFailureRateLimiter(base_delay=1.0, max_delay=100.0)
    )
    assert [limiter.when("a") for _ in range(3)] == [1.0, 2.0, 4.0]
    assert limiter.when("b") == 1.0
    assert (limiter.num_requeues("a"), limiter.num_requeues("b")) == (3, 1)


async def test_token_bucket_lets_a_burst_through_then_spaces_retries_at_qps() -> None:
    clock = clock_.FakeClock()
    bucket: ratelimit.BucketRateLimiter[str] = ratelimit.BucketRateLimiter(clock=clock)
    assert [bucket.when(f"key-{i}") for i in range(100)] == [0.0] * 100
    # Each reservation queues behind the previous one: 0.1 s, 0.2 s, 0.3 s at 10 qps.
    assert [bucket.when("more") for _ in range(3)] == pytest.approx([0.1, 0.2, 0.3])


async def test_token_bucket_refills_with_time_up_to_the_burst() -> None:
    clock = clock_.FakeClock()
    bucket: ratelimit.BucketRateLimiter[str] = ratelimit.BucketRateLimiter(
        clock=clock, qps=10.0, burst=5
    )
    for _ in range(5):
        bucket.when("k")
    await clock.advance(0.5)  # five tokens back
    assert [bucket.when("k") for _ in range(5)] == [0.0] * 5
    assert bucket.when("k") == pytest.approx(0.1)
    await clock.advance(3600.0)  # refills to the burst, not beyond
    assert [bucket.when("k") for _ in range(5)] == [0.0] * 5
    assert bucket.when("k") == pytest.approx(0.1)


def test_token_bucket_ignores_keys_for_forget_and_requeues() -> None:
    bucket: ratelimit.BucketRateLimiter[str] = ratelimit.BucketRateLimiter(
        clock=clock_.FakeClock(), burst=1
    )
    bucket.when("a")
    bucket.forget("a")
    assert bucket.num_requeues("a") == 0
    assert bucket.when("a") == pytest.approx(0.1)


def test_max_of_takes_the_longest_delay_and_tells_every_limiter() -> None:
    slow: ratelimit.ItemExponentialFailureRateLimiter[str] = (
        ratelimit.ItemExponentialFailureRateLimiter(base_delay=1.0, max_delay=100.0)
    )
    fast: ratelimit.ItemExponentialFailureRateLimiter[str] = (
        ratelimit.ItemExponentialFailureRateLimiter(base_delay=0.5, max_delay=100.0)
    )
    limiter = ratelimit.MaxOfRateLimiter(fast, slow)
    assert [limiter.when("a") for _ in range(3)] == [1.0, 2.0, 4.0]
    assert (fast.num_requeues("a"), slow.num_requeues("a")) == (3, 3)
    assert limiter.num_requeues("a") == 3
    limiter.forget("a")
    assert (fast.num_requeues("a"), slow.num_requeues("a")) == (0, 0)


def test_max_of_needs_a_limiter() -> None:
    with pytest.raises(ValueError, match="at least one"):
        ratelimit.MaxOfRateLimiter[str]()


def test_default_controller_limiter_is_per_key_5ms_until_the_bucket_of_100_runs_dry() -> None:
    limiter: ratelimit.RateLimiter[str] = ratelimit.default_controller_rate_limiter(
        clock_.FakeClock()
    )
    first_failures = [limiter.when(f"key-{i}") for i in range(100)]
    assert first_failures == pytest.approx([0.005] * 100)
    # The 101st failure within the same instant waits for the bucket (10 qps).
    assert limiter.when("key-100") == pytest.approx(0.1)
    assert limiter.num_requeues("key-0") == 1
    limiter.forget("key-0")
    assert limiter.num_requeues("key-0") == 0


def test_negative_or_empty_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match="negative"):
        ratelimit.ItemExponentialFailureRateLimiter[str](base_delay=-1.0)
    with pytest.raises(ValueError, match="rate must be positive"):
        ratelimit.BucketRateLimiter[str](clock=clock_.FakeClock(), qps=0)
