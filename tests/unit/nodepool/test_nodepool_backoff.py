"""Pausing VM creation after a permanent cloud error."""

from __future__ import annotations

from nodepool_operator.cloud.provider import QuotaExceeded
from nodepool_operator.controllers.nodepool.backoff import CloudBackoff


def test_repeated_refusals_double_the_pause_up_to_the_maximum() -> None:
    backoff = CloudBackoff(initial=10, maximum=35)
    error = QuotaExceeded("quota of 2 VMs reached", code="QuotaExceeded")
    pauses = [backoff.failed("p", error, generation=1, now=0).until for _ in range(4)]
    assert pauses == [10, 20, 35, 35]


def test_a_pause_ends_with_time_or_a_new_generation() -> None:
    backoff = CloudBackoff(initial=10, maximum=300)
    pause = backoff.failed("p", QuotaExceeded("no", code="QuotaExceeded"), generation=1, now=0)
    assert (pause.reason, pause.message) == ("QuotaExceeded", "no")
    assert backoff.active("p", generation=1, now=9) == pause
    assert backoff.active("p", generation=1, now=10) is None
    assert backoff.active("p", generation=2, now=5) is None
    assert backoff.active("other", generation=1, now=5) is None


def test_a_new_generation_starts_the_doubling_again() -> None:
    backoff = CloudBackoff(initial=10, maximum=300)
    error = QuotaExceeded("no", code="QuotaExceeded")
    backoff.failed("p", error, generation=1, now=0)
    backoff.failed("p", error, generation=1, now=10)
    assert backoff.failed("p", error, generation=2, now=30).until == 40


def test_success_clears_the_pause() -> None:
    backoff = CloudBackoff(initial=10, maximum=300)
    backoff.failed("p", QuotaExceeded("no", code="QuotaExceeded"), generation=1, now=0)
    backoff.succeeded("p")
    assert backoff.active("p", generation=1, now=1) is None
