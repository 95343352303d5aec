"""The cloud's errors become the runtime's at the NodePool controller's boundary, so the
reconcile loop treats them as it treats the API's: by type, never by attribute lookup."""

from __future__ import annotations

from nodepool_operator.cloud.provider import QuotaExceeded, RateLimited, TransientCloudError
from nodepool_operator.controllers.nodepool.controller import operator_error
from nodepool_operator.runtime import errors


def test_a_cloud_that_did_not_answer_is_unavailable_and_asked_again() -> None:
    mapped = operator_error(TransientCloudError("503 from the cloud"))
    assert isinstance(mapped, errors.DependencyUnavailable)
    assert (mapped.transient, mapped.retry_after) == (True, None)
    assert str(mapped) == "cloud Unavailable: 503 from the cloud"


def test_a_throttling_cloud_is_waited_for_as_long_as_it_asked() -> None:
    mapped = operator_error(RateLimited("slow down", retry_after=12.0))
    assert isinstance(mapped, errors.DependencyUnavailable)
    assert mapped.retry_after == 12.0


def test_a_refusal_is_not_retried() -> None:
    mapped = operator_error(QuotaExceeded("quota of 5 VMs reached"))
    assert isinstance(mapped, errors.DependencyRefused)
    assert mapped.transient is False
