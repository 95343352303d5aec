"""Setting a condition moves its transition time only when its status changes."""

from __future__ import annotations

from nodepool_operator.api import meta

EARLIER = "2025-01-31T12:00:00Z"
LATER = "2025-01-31T12:05:00Z"


def _condition(
    type_: str, status: meta.ConditionStatus, *, at: str, reason: str = "R"
) -> meta.Condition:
    return meta.Condition(
        type=type_, status=status, reason=reason, message="", last_transition_time=at
    )


def test_a_new_condition_type_is_added_last() -> None:
    ready = _condition("Ready", "True", at=EARLIER)
    scaling = _condition("Scaling", "False", at=LATER)
    assert meta.set_condition((ready,), scaling) == (ready, scaling)


def test_same_status_keeps_the_transition_time_but_takes_the_new_reason() -> None:
    before = (_condition("Ready", "True", at=EARLIER), _condition("Scaling", "False", at=EARLIER))
    after = meta.set_condition(before, _condition("Ready", "True", at=LATER, reason="AllReady"))
    assert after == (_condition("Ready", "True", at=EARLIER, reason="AllReady"), before[1])


def test_setting_an_identical_condition_changes_nothing_so_no_write_follows() -> None:
    before = (_condition("Ready", "True", at=EARLIER),)
    assert meta.set_condition(before, _condition("Ready", "True", at=LATER)) == before


def test_a_status_change_takes_the_new_transition_time_in_place() -> None:
    before = (_condition("Ready", "True", at=EARLIER), _condition("Scaling", "False", at=EARLIER))
    after = meta.set_condition(before, _condition("Ready", "False", at=LATER))
    assert after == (_condition("Ready", "False", at=LATER), before[1])


def test_find_condition_returns_the_condition_of_that_type_or_none() -> None:
    ready = _condition("Ready", "True", at=EARLIER)
    assert meta.find_condition((ready,), "Ready") is ready
    assert meta.find_condition((ready,), "Degraded") is None
