"""Disruption budgets: the most restrictive budget in force caps the Nodes being
disrupted at once, counted across every reason; schedules open windows; expiry counts
from a Node's creation."""

from __future__ import annotations

import calendar
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodepool_operator.api import disruption, fields


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
    return float(calendar.timegm((year, month, day, hour, minute, second)))


# A Sunday (2026-12-06 is one), 10:00 UTC.
SUNDAY_10 = utc(2026, 12, 6, 10)
MONDAY_10 = utc(2026, 12, 7, 10)


def test_a_pool_without_budgets_has_one_of_ten_percent() -> None:
    assert disruption.Disruption.from_dict({}).budgets == (disruption.Budget(nodes="10%"),)


def test_a_rebalance_recommendation_is_ignored_unless_the_pool_asks_for_replace() -> None:
    assert disruption.Disruption.from_dict({}).rebalance_recommendation == "Ignore"
    replace = disruption.Disruption.from_dict({"rebalanceRecommendation": "Replace"})
    assert replace.rebalance_recommendation == "Replace"
    assert replace.budgets == (disruption.Budget(nodes="10%"),)
    assert disruption.Disruption.from_dict(replace.to_dict()) == replace
    with pytest.raises(fields.FieldError, match="rebalanceRecommendation"):
        disruption.Disruption.from_dict({"rebalanceRecommendation": "Drain"})


def test_an_empty_budget_list_means_no_budget_not_the_default() -> None:
    spec = disruption.Disruption.from_dict({"budgets": []})
    assert spec.budgets == ()
    assert disruption.Disruption.from_dict(spec.to_dict()) == spec
    allowed = disruption.allowance(
        spec.budgets, reason="Drifted", total=6, disrupting=2, now=SUNDAY_10
    )
    assert (allowed.allowed, allowed.holding) == (4, None)


def test_a_percentage_is_rounded_up_as_karpenter_does() -> None:
    ten_percent = disruption.Budget(nodes="10%")
    assert [ten_percent.cap(n) for n in (0, 1, 6, 10, 11)] == [0, 1, 1, 1, 2]


def test_a_count_caps_whatever_the_pool_size() -> None:
    assert [disruption.Budget(nodes="2").cap(n) for n in (0, 1, 100)] == [2, 2, 2]


def test_nodes_zero_blocks_every_disruption() -> None:
    allowed = disruption.allowance(
        (disruption.Budget(nodes="0"),), reason="Drifted", total=6, disrupting=0, now=SUNDAY_10
    )
    assert allowed.allowed == 0
    assert "nodes=0" in allowed.describe()


def test_the_most_restrictive_budget_in_force_holds() -> None:
    budgets = (
        disruption.Budget(nodes="50%"),
        disruption.Budget(nodes="1", reasons=("Drifted",)),
        disruption.Budget(nodes="0", reasons=("Underutilized",)),
    )
    drifted = disruption.allowance(budgets, reason="Drifted", total=6, disrupting=0, now=0)
    assert (drifted.allowed, drifted.holding) == (1, budgets[1])
    expired = disruption.allowance(budgets, reason="Expired", total=6, disrupting=0, now=0)
    assert (expired.allowed, expired.holding) == (3, budgets[0])
    assert (
        disruption.allowance(budgets, reason="Underutilized", total=6, disrupting=0, now=0).allowed
        == 0
    )


def test_nodes_disrupted_for_any_reason_use_the_room() -> None:
    """Two Nodes consolidating leave a drift budget of 2 no room."""
    budgets = (disruption.Budget(nodes="2", reasons=("Drifted",)),)
    allowed = disruption.allowance(budgets, reason="Drifted", total=6, disrupting=2, now=0)
    assert allowed.allowed == 0
    assert allowed.describe() == "budget nodes=2, reasons Drifted: 2 of 2 in use"


def test_a_scheduled_budget_holds_only_within_its_window() -> None:
    weekdays = disruption.Budget(nodes="0", schedule="0 9 * * 1-5", duration="8h")
    assert not weekdays.in_force(SUNDAY_10)
    assert weekdays.in_force(MONDAY_10)
    assert weekdays.in_force(utc(2026, 12, 7, 9))  # the minute it fires
    assert not weekdays.in_force(utc(2026, 12, 7, 17))  # 8 h later: over
    assert not weekdays.in_force(utc(2026, 12, 7, 8, 59, 59))
    sunday = disruption.allowance(
        (weekdays,), reason="Drifted", total=6, disrupting=0, now=SUNDAY_10
    )
    monday = disruption.allowance(
        (weekdays,), reason="Drifted", total=6, disrupting=0, now=MONDAY_10
    )
    assert (sunday.allowed, sunday.holding) == (6, None)
    assert (monday.allowed, monday.holding) == (0, weekdays)


def test_a_scheduled_budget_says_when_it_changes() -> None:
    weekdays = disruption.Budget(nodes="0", schedule="0 9 * * 1-5", duration="8h")
    assert weekdays.changes_in(SUNDAY_10) == utc(2026, 12, 7, 9) - SUNDAY_10
    assert weekdays.changes_in(MONDAY_10) == 7 * 3600
    assert disruption.Budget(nodes="1").changes_in(SUNDAY_10) is None
    assert (
        disruption.next_change_in((disruption.Budget(nodes="1"), weekdays), now=MONDAY_10)
        == 7 * 3600
    )


def test_overlapping_windows_stay_in_force_until_the_last_ends() -> None:
    hourly_for_two = disruption.Budget(nodes="0", schedule="0 * * * *", duration="2h")
    assert hourly_for_two.in_force(SUNDAY_10 + 59 * 60)
    # Each hour's fire opens a window longer than the gap to the next: never out of force
    # within the followed horizon, so the change is far away (at least a day).
    change = hourly_for_two.changes_in(SUNDAY_10)
    assert change is not None
    assert change > 24 * 3600


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("60s", 60), ("90m", 5400), ("1h30m", 5400), ("720h", 2_592_000), ("1h0m5s", 3605)],
)
def test_durations_read_as_go_writes_them(text: str, seconds: int) -> None:
    assert disruption.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "1d", "1m1h", "-5s", "1.5h", "h"])
def test_what_is_not_a_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        disruption.parse_duration(text)


def test_expiry_counts_from_the_node_creation() -> None:
    assert disruption.parse_expire_after("Never") is None
    assert disruption.parse_expire_after("60s") == 60
    assert disruption.expires_in(created_at=100, expire_after=60, now=130) == 30
    assert disruption.expires_in(created_at=100, expire_after=60, now=170) == -10
    assert disruption.expires_in(created_at=100, expire_after=None, now=10**9) is None


@pytest.mark.parametrize(
    ("budget", "path"),
    [
        ({"nodes": "10"}, None),
        ({"nodes": 3}, None),
        ({"nodes": "0%"}, None),
        ({"nodes": "100%"}, None),
        ({"nodes": "101%"}, "nodes"),
        ({"nodes": "-1"}, "nodes"),
        ({"nodes": "ten"}, "nodes"),
        ({"nodes": True}, "nodes"),
        ({"nodes": "1", "reasons": ["Drifted", "Empty"]}, None),
        ({"nodes": "1", "reasons": ["Bored"]}, "reasons"),
        ({"nodes": "1", "schedule": "@daily", "duration": "1h"}, None),
        ({"nodes": "1", "schedule": "0 9 * * 1-5"}, "schedule"),
        ({"nodes": "1", "duration": "1h"}, "schedule"),
        ({"nodes": "1", "schedule": "0 9 * * 1-5 2026", "duration": "1h"}, "schedule"),
        ({"nodes": "1", "schedule": "61 9 * * *", "duration": "1h"}, "schedule"),
        ({"nodes": "1", "schedule": "0 9 * * *", "duration": "1 day"}, "duration"),
    ],
)
def test_budgets_are_parsed_or_refused_with_the_field_named(
    budget: dict[str, object], path: str | None
) -> None:
    if path is None:
        parsed = disruption.Budget.from_dict(budget)
        assert disruption.Budget.from_dict(parsed.to_dict()) == parsed
        return
    with pytest.raises(fields.FieldError) as refused:
        disruption.Disruption.from_dict({"budgets": [budget]})
    assert refused.value.path == f"budgets[0].{path}"


# The budget arithmetic, over every mix of budgets, reasons and counts.

budgets_strategy = st.lists(
    st.builds(
        disruption.Budget,
        nodes=st.one_of(st.integers(0, 20).map(str), st.integers(0, 100).map(lambda p: f"{p}%")),
        reasons=st.lists(st.sampled_from(disruption.DISRUPTION_REASONS), unique=True).map(tuple),
    ),
    max_size=5,
)


@given(
    budgets=budgets_strategy,
    reason=st.sampled_from(disruption.DISRUPTION_REASONS),
    total=st.integers(0, 1000),
    disrupting=st.integers(0, 1000),
)
def test_allowance_is_the_tightest_applicable_cap_less_what_is_in_use(
    budgets: list[disruption.Budget],
    reason: disruption.DisruptionReason,
    total: int,
    disrupting: int,
) -> None:
    allowed = disruption.allowance(
        budgets, reason=reason, total=total, disrupting=disrupting, now=0
    )
    caps = [b.cap(total) for b in budgets if not b.reasons or reason in b.reasons]
    assert allowed.allowed >= 0
    if not caps:
        assert allowed.holding is None
        assert allowed.allowed == max(total - disrupting, 0)
        return
    assert allowed.cap == min(caps)
    assert allowed.holding is not None
    assert allowed.holding.cap(total) == min(caps)
    assert allowed.allowed == max(min(caps) - disrupting, 0)
    # Starting what is allowed never takes the count past any budget that applies.
    assert all(disrupting + allowed.allowed <= max(cap, disrupting) for cap in caps)


@given(percent=st.integers(0, 100), total=st.integers(0, 10_000))
def test_a_percentage_cap_is_the_share_rounded_up(percent: int, total: int) -> None:
    cap = disruption.Budget(nodes=f"{percent}%").cap(total)
    assert cap == math.ceil(percent * total / 100)
    assert 0 <= cap <= total
    assert (cap == 0) == (percent == 0 or total == 0)
