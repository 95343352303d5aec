"""bench/soak.py's pure parts: the seeded schedule, which minutes count as quiet, and the
RSS judgement (the process, the cluster size and the 10 % bound issue 52 names)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from unit import bench_scripts

soak = bench_scripts.load("soak")

POOLS = ("soak-a", "soak-b", "soak-c")
CHURN = {"burst", "job", "template", "vm-delete", "heartbeat", "roll", "calm"}
OPERATOR_EVENTS = ["restart-follower", "kill-leader", "restart-leader"]


def row(minute: int, **fields: object) -> object:
    values: dict[str, object] = {
        "minute": minute,
        "actions": [],
        "leader": 1,
        "rss": 100.0,
        "follower_rss": 90.0,
        "cpu": 0.1,
        "depth": 0.0,
        "adds": 0.0,
        "writes": 0,
        "lease_writes": 30,
        "conflicts": 0,
        "by_target": Counter(),
        "pending": 0,
        "pods": 9,
        "nodes": 3,
        "vms": 3,
        "cloud_calls": 0,
        "settled": True,
    }
    values.update(fields)
    return soak.Row(**values)


def test_the_hour_is_six_cycles_of_every_churn_with_the_operator_events_in_the_first_three() -> (
    None
):
    plan = soak.schedule(minutes=60, pools=POOLS, seed=1)

    for cycle in range(6):
        kinds = {a.kind for a in plan if cycle * 600 <= a.at < (cycle + 1) * 600}
        assert kinds >= CHURN, cycle
    events = [a for a in plan if a.kind in OPERATOR_EVENTS]
    assert [a.kind for a in events] == OPERATOR_EVENTS
    assert [a.at for a in events] == [150, 750, 1350]
    # The quiet stretch: nothing from the calm (about 200 s) to the cycle's end.
    assert all(a.at % 600 < 220 for a in plan)


def test_the_short_mode_compresses_one_cycle_with_everything_in_it() -> None:
    plan = soak.schedule(minutes=5, pools=POOLS, seed=7)

    assert {a.kind for a in plan} == CHURN | set(OPERATOR_EVENTS)
    assert max(a.at for a in plan) < 120  # the rest of the five minutes is for settling


def test_the_schedule_is_the_seeds() -> None:
    assert soak.schedule(minutes=60, pools=POOLS, seed=3) == soak.schedule(
        minutes=60, pools=POOLS, seed=3
    )
    assert soak.schedule(minutes=60, pools=POOLS, seed=3) != soak.schedule(
        minutes=60, pools=POOLS, seed=4
    )


def test_a_minute_is_quiet_only_well_after_an_action_and_between_settled_samples() -> None:
    rows = [
        row(1, actions=["burst soak-a=9"]),
        row(2),
        row(3),
        row(4),  # three minutes after the action, settled on both sides: quiet
        row(5, settled=False),  # not settled at its end
        row(6),  # not settled at its start
        row(7),
    ]

    soak.mark_quiet(rows)

    assert [r.minute for r in rows if r.quiet] == [4, 7]


def test_rss_is_judged_on_the_last_leader_at_the_ends_cluster_size() -> None:
    # Replica 1 leads minutes 1-5 and grows; replica 2 leads from minute 6, serves a burst
    # (minutes 15-16), and at its quiet end has grown 20 % since its first minute at that
    # size ten minutes into its tenure (minute 15 is the tenth; 17 the first at rest).
    rows = [row(m, leader=1, rss=300.0 + m) for m in range(1, 6)]
    rows += [row(m, leader=2, rss=100.0) for m in range(6, 15)]
    rows += [row(m, leader=2, rss=150.0, nodes=9, pods=40) for m in (15, 16)]
    rows += [row(m, leader=2, rss=100.0 + (m - 17) * 5) for m in range(17, 22)]

    line = soak.rss_judgement(rows)

    assert "replica 2, leader from minute 6" in line
    assert "100.0 MiB at minute 17" in line
    assert "120.0 MiB at the end (minute 21" in line
    assert "+20.0 %, NOT within 10 %" in line


def test_rss_is_not_judged_when_the_last_leader_led_under_ten_minutes() -> None:
    rows = [row(m, leader=1 if m < 10 else 2) for m in range(1, 16)]

    assert "not judged" in soak.rss_judgement(rows)


def test_the_slope_is_per_hour() -> None:
    assert soak.slope_per_hour([(m, 100.0 + 0.5 * m) for m in range(10, 40)]) == 30.0


def test_the_caches_are_judged_at_the_first_quiet_minute_after_each_bursts_calm() -> None:
    world = {"nodes": 3, "pods": 9}
    rows = [
        row(1, actions=["burst soak-a=20"], cached={"nodes": 5, "pods": 24}, world=world),
        row(2, cached={"nodes": 5, "pods": 24}, world={"nodes": 5, "pods": 24}),
        row(3, actions=["calm soak-a=2"], cached={"nodes": 5, "pods": 9}, world=world),
        row(4, cached={"nodes": 3, "pods": 9}, world=world),
        row(5, cached={"nodes": 3, "pods": 9}, world=world),
        row(6, cached={"nodes": 3, "pods": 9}, world=world, cache_waited=5.0),
        # Read again 5 s into the next burst: its counts are not the first burst's peak.
        row(7, cached={"nodes": 6, "pods": 30}, world=world, cache_waited=5.0),
        # The second burst: its caches keep two Pods that are gone.
        row(8, actions=["burst soak-a=20"], cached={"nodes": 5, "pods": 24}, world=world),
        row(9, actions=["calm soak-a=2"], cached={"nodes": 5, "pods": 24}, world=world),
        *(
            row(m, cached={"nodes": 3, "pods": 11}, world=world, cache_waited=None)
            for m in (10, 11, 12, 13)
        ),
    ]
    soak.mark_quiet(rows)

    first, second = soak.cache_judgements(rows)[1:]

    assert "burst at minute 1: peak 24 Pods, 5 Nodes cached (minute 1)" in first
    assert "at minute 6, the first quiet minute after the calm (minute 3)" in first
    assert "nodes 3/3, pods 9/9: all equal (after 5 s of re-reads)." in first
    assert "burst at minute 8" in second
    assert "at minute 12" in second
    assert "NOT equal: pods 11 cached, 9 in the server" in second
    assert soak.cache_cell(rows[5]) == "yes, 5 s"
    assert soak.cache_cell(rows[-1]) == "no: pods 11 cached, 9 in the server"


def test_a_burst_without_a_quiet_minute_after_its_calm_is_not_judged() -> None:
    rows = [
        row(1, actions=["burst soak-a=20"], cached={"pods": 24}, world={"pods": 24}),
        row(2, actions=["calm soak-a=2"], cached={"pods": 9}, world={"pods": 9}),
        row(3, cached={"pods": 9}, world={"pods": 9}),
    ]
    soak.mark_quiet(rows)

    assert "not judged" in soak.cache_judgements(rows)[1]


def test_a_run_that_stopped_on_an_error_still_leaves_a_report_naming_it(tmp_path: Path) -> None:
    # A Soak whose control plane never came up: nothing to tabulate, so the report is the
    # error (before, no report was written and the CI test could say nothing of why).
    class Stopped:
        arguments = soak._parser().parse_args(["--name", "stopped"])

    text = soak.write_or_say(
        Stopped(),  # type: ignore[arg-type]
        tmp_path,
        started="0.1",
        stopped_on="Traceback...\nTimeoutError: the API server did not answer\n",
    )
    written = (tmp_path / "stopped.md").read_text()
    assert written == text + "\n"
    assert written.startswith("**The run stopped on an error** (exit 1):")
    assert "TimeoutError: the API server did not answer" in written
    assert "writing the report failed too" in written
