"""Reading audit records: who wrote what, and when the server received it."""

from __future__ import annotations

from datetime import UTC, datetime

from nodepool_devtools.cluster import audit


def _record(**extra: object) -> dict[str, object]:
    return {
        "user": {"username": "system:kube-scheduler"},
        "userAgent": "kube-scheduler/v1.36.3",
        "verb": "patch",
        "objectRef": {"resource": "pods", "subresource": "status", "name": "burst-00001"},
        "responseStatus": {"code": 200},
        "auditID": "a1",
        **extra,
    }


def test_the_time_the_server_received_a_request_is_read_to_the_microsecond() -> None:
    event = audit.AuditEvent.from_json(
        _record(requestReceivedTimestamp="2026-12-03T17:15:06.251702Z")
    )
    expected = datetime(2026, 12, 3, 17, 15, 6, 251702, tzinfo=UTC).timestamp()
    assert event.received == expected
    assert (event.user, event.target, event.name) == (
        "system:kube-scheduler",
        "pods/status",
        "burst-00001",
    )


def test_a_record_without_a_time_reads_as_zero_not_as_an_error() -> None:
    assert audit.AuditEvent.from_json(_record()).received == 0.0
