"""The one exponential backoff formula of the runtime."""

from __future__ import annotations

import math

from nodepool_operator.runtime import backoff


def test_the_first_wait_is_the_initial_one_and_each_failure_multiplies_it() -> None:
    waits = [backoff.exponential(initial=0.2, failures=n, maximum=30.0) for n in range(10)]
    assert waits[:4] == [0.2, 0.4, 0.8, 1.6]
    assert waits[-1] == 30.0, "capped at the maximum"


def test_another_factor_and_no_cap() -> None:
    assert backoff.exponential(initial=0.01, failures=2, factor=5.0) == 0.01 * 25
    assert backoff.exponential(initial=1.0, failures=3, factor=1.0) == 1.0


def test_a_streak_past_float_range_waits_the_maximum() -> None:
    assert backoff.exponential(initial=0.005, failures=5000, maximum=1000.0) == 1000.0
    assert backoff.exponential(initial=0.005, failures=5000) == math.inf
