"""Conditions: lastTransitionTime moves only with status; order and input are preserved."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodepool_operator import timestamps
from nodepool_operator.runtime import conditions

T0 = "2024-05-01T10:00:00Z"
T1 = "2024-05-01T10:05:00Z"


def _ready(status: conditions.ConditionStatus = "True", **changes: Any) -> dict[str, Any]:
    condition: dict[str, Any] = {
        "type": "Ready",
        "status": status,
        "reason": "NodesReady",
        "message": "3 of 3 nodes ready",
        "lastTransitionTime": T0,
        "observedGeneration": 4,
    }
    condition.update(changes)
    return condition


def _set(
    existing: list[dict[str, Any]] | None,
    *,
    type: str = "Ready",
    status: conditions.ConditionStatus = "True",
    reason: str = "NodesReady",
    message: str = "",
    generation: int = 4,
    now: str = T1,
) -> list[dict[str, Any]]:
    """``set_condition`` with the fields these tests do not vary filled in."""
    return conditions.set_condition(
        existing,
        type=type,
        status=status,
        reason=reason,
        message=message,
        observed_generation=generation,
        now=now,
    )


def test_new_condition_is_appended_with_now_as_its_transition_time() -> None:
    result = _set(None, message="3 of 3 nodes ready", now=T0)
    assert result == [_ready()]


def test_unchanged_status_keeps_last_transition_time() -> None:
    result = _set([_ready()], reason="StillReady", message="4 of 4 nodes ready", generation=5)
    assert result == [
        _ready(reason="StillReady", message="4 of 4 nodes ready", observedGeneration=5)
    ]


def test_changed_status_moves_last_transition_time_to_now() -> None:
    result = _set([_ready()], status="False", reason="NodesNotReady", message="1 of 3 nodes ready")
    assert result == [
        _ready(
            "False",
            reason="NodesNotReady",
            message="1 of 3 nodes ready",
            lastTransitionTime=T1,
        )
    ]


def test_setting_what_is_already_there_gives_an_equal_list() -> None:
    existing = [_ready(), _ready("False", type="Scaling", reason="Idle", message="")]
    result = _set(existing, message="3 of 3 nodes ready")
    assert result == existing


def test_input_list_and_its_conditions_are_not_modified() -> None:
    existing = [_ready()]
    snapshot = copy.deepcopy(existing)
    result = _set(existing, status="False", reason="NodesNotReady", generation=5)
    assert existing == snapshot
    assert result is not existing
    assert result[0] is not existing[0]


def test_existing_order_is_kept_and_new_types_go_last() -> None:
    existing = [
        _ready("False", type="Scaling", reason="Idle"),
        _ready(type="Ready"),
    ]
    result = _set(existing, type="Degraded", status="False", reason="AsExpected")
    result = _set(result, type="Scaling", reason="ScalingUp")
    assert [condition["type"] for condition in result] == ["Scaling", "Ready", "Degraded"]


def test_fields_we_do_not_manage_are_kept() -> None:
    result = _set([_ready(extra="kept")])
    assert result[0]["extra"] == "kept"


def test_missing_transition_time_is_filled_in() -> None:
    broken = _ready()
    del broken["lastTransitionTime"]
    result = _set([broken])
    assert result[0]["lastTransitionTime"] == T1


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("status", "true", "True, False or Unknown"),
        ("reason", "", "CamelCase"),
        ("reason", "has spaces", "CamelCase"),
        ("reason", "Ends_with,", "CamelCase"),
        ("type", "", "type"),
        ("message", "x" * 32769, "longer"),
        ("observed_generation", -1, "negative"),
    ],
)
def test_conditions_the_api_server_would_reject_fail_early(
    field: str, value: Any, match: str
) -> None:
    arguments: dict[str, Any] = {
        "type": "Ready",
        "status": "True",
        "reason": "NodesReady",
        "message": "",
        "observed_generation": 1,
        "now": T0,
    }
    arguments[field] = value
    with pytest.raises(ValueError, match=match):
        conditions.set_condition([], **arguments)


def test_find_and_status_checks() -> None:
    existing = [_ready(), _ready("False", type="Degraded"), _ready("Unknown", type="Scaling")]
    assert conditions.find_condition(existing, "Degraded") == existing[1]
    assert conditions.find_condition(existing, "Missing") is None
    assert conditions.find_condition(None, "Ready") is None
    assert conditions.is_true(existing, "Ready")
    assert not conditions.is_true(existing, "Degraded")
    assert not conditions.is_true(existing, "Scaling")
    assert not conditions.is_true(None, "Ready")
    assert conditions.is_false(existing, "Degraded")
    assert not conditions.is_false(existing, "Scaling")
    assert not conditions.is_false(existing, "Missing")


def test_rfc3339_writes_utc_to_the_second_and_parses_back() -> None:
    assert conditions.rfc3339(1_767_225_600.7) == "2026-01-01T00:00:00Z"
    assert timestamps.parse_rfc3339("2026-01-01T00:00:00Z") == 1_767_225_600
    assert timestamps.parse_rfc3339("not a time") is None


def test_condition_list_keeps_transition_times_and_builds_equal_lists_twice() -> None:
    from nodepool_operator.runtime.conditions import ConditionList

    first = ConditionList(None, observed_generation=3, now="2026-01-01T00:00:00Z")
    first.set("Ready", True, reason="NodesReady", message="2/2")
    first.set("Degraded", False, reason="AsExpected", message="ok")
    again = ConditionList(first.items, observed_generation=3, now="2026-01-01T00:05:00Z")
    again.set("Ready", True, reason="NodesReady", message="2/2")
    again.set("Degraded", False, reason="AsExpected", message="ok")
    assert again.items == first.items
    flipped = ConditionList(first.items, observed_generation=4, now="2026-01-01T00:09:00Z")
    flipped.set("Ready", False, reason="NodesNotReady", message="1/2")
    assert flipped.items[0]["lastTransitionTime"] == "2026-01-01T00:09:00Z"
    assert flipped.items[1]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert flipped.items[0]["observedGeneration"] == 4
