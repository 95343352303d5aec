"""Pausing VM creation after a permanent refusal: the rule over the pause the pool's
status records (``status.cloudPause``)."""

from __future__ import annotations

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.controllers.capacity import pause_ends_in
from nodepool_operator.controllers.nodepool.backoff import CloudPauses
from nodepool_operator.runtime import conditions

START = 1_800_000_000.0


def refuse(
    pauses: CloudPauses,
    previous: nodepool_api.CloudPause | None,
    *,
    generation: int = 1,
    now: float = START,
) -> nodepool_api.CloudPause:
    return pauses.refused(
        previous, reason="QuotaExceeded", message="no", generation=generation, now=now
    )


def test_repeated_refusals_double_the_pause_up_to_the_maximum() -> None:
    pauses = CloudPauses(initial=10, maximum=35)
    pause = None
    waits = []
    for _ in range(4):
        pause = refuse(pauses, pause)
        waits.append(pause_ends_in(pause, now=START))
    assert waits == [10, 20, 35, 35]
    assert pause is not None
    assert pause.failures == 4


def test_a_pause_ends_with_time_or_a_new_generation() -> None:
    pauses = CloudPauses(initial=10, maximum=300)
    pause = refuse(pauses, None)
    assert (pause.reason, pause.message, pause.generation) == ("QuotaExceeded", "no", 1)
    assert pauses.in_force(pause, generation=1, now=START + 9) == pause
    assert pauses.in_force(pause, generation=1, now=START + 10) is None
    assert pauses.in_force(pause, generation=2, now=START + 5) is None
    assert pauses.in_force(None, generation=1, now=START) is None


def test_a_new_generation_starts_the_doubling_again() -> None:
    pauses = CloudPauses(initial=10, maximum=300)
    pause = refuse(pauses, refuse(pauses, None))
    assert pause.failures == 2
    again = refuse(pauses, pause, generation=2, now=START + 30)
    assert (again.failures, pause_ends_in(again, now=START + 30)) == (1, 10)


def test_a_pause_never_ends_before_its_time_though_the_status_keeps_whole_seconds() -> None:
    pauses = CloudPauses(initial=10, maximum=300)
    pause = refuse(pauses, None, now=START + 0.4)
    assert pause.until == conditions.rfc3339(START + 11)
    assert pauses.in_force(pause, generation=1, now=START + 10.4) == pause


def test_a_pause_reads_back_from_the_status_as_it_was_written() -> None:
    pause = refuse(CloudPauses(initial=10, maximum=300), None)
    status = nodepool_api.NodePoolStatus(cloud_pause=pause).to_dict()
    assert nodepool_api.status_of({"status": status}).cloud_pause == pause
    assert nodepool_api.status_of({"status": {}}).cloud_pause is None


def test_a_long_refusal_is_cut_to_what_the_status_may_hold() -> None:
    pause = CloudPauses(initial=10, maximum=300).refused(
        None, reason="R" * 300, message="m" * 5000, generation=1, now=START
    )
    assert len(pause.message) == nodepool_api.MAX_PAUSE_MESSAGE
    assert len(pause.reason) == 253
