"""The Autoscaler reconciler end to end on fakes: caches, API, fake clock. No control plane."""

from __future__ import annotations

import asyncio
import collections
import copy
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler.controller import (
    PROGRESS_HOLD_SCANS,
)
from nodepool_operator.controllers.autoscaler.decide import status_report
from nodepool_operator.controllers.autoscaler.planner import (
    LONGEST_BATCH_SECONDS,
    PLAN,
    Batch,
    Planner,
)
from nodepool_operator.runtime import errors
from nodepool_operator.runtime.client import Object, Resource
from nodepool_operator.runtime.clock import FakeClock
from nodepool_operator.runtime.controller import Request, Result
from nodepool_operator.runtime.informer import object_key
from unit.autoscaler.reconcile_world import (
    HAND_OVER_PARALLELISM,
    KEY,
    NAS,
    POOL,
    TOLD_PER_REQUEST,
    World,
    half_and_quarter,
    stamp,
    taints,
)


async def test_ten_pending_pods_make_one_request_for_three_nodes(world: World) -> None:
    for i in range(10):
        world.pod(f"p{i}")
    result = await world.reconcile()
    [request] = world.api.made("scalerequests")
    assert request["spec"] == {
        "nodePoolName": POOL,
        "targetNodes": 3,
        "reason": request["spec"]["reason"],
        "requester": f"autoscaler/{NAS}",
        "basedOnTargetNodes": 0,
    }
    assert "10 pending pods need 3 more nodes" in request["spec"]["reason"]
    assert request["metadata"]["ownerReferences"][0]["uid"] == "uid-pool"
    assert request["metadata"]["labels"] == {wellknown.POOL_LABEL: POOL}
    assert result.requeue_after == 5
    assert len(world.api.events("TriggeredScaleUp")) == 10
    assert len(world.api.events("ScaleUpRequested")) == 1
    status = world.status()
    assert status["lastRequest"]["targetNodes"] == 3
    assert (status["pendingPods"], status["unschedulablePods"]) == (10, 10)


async def test_no_second_request_while_the_first_is_open_even_before_the_cache_sees_it(
    world: World,
) -> None:
    for i in range(10):
        world.pod(f"p{i}")
    await world.reconcile()
    await world.reconcile()  # the informer has not delivered our create yet
    world.show_requests()
    await world.reconcile()  # now it shows it, Pending
    world.show_requests(phase="Applied", applied=3)
    await world.reconcile()  # answered; the pool write not in the cache yet
    world.pool(target=3)
    world.node("n1", ready=False)
    await world.reconcile()  # booting nodes count as in flight
    assert len(world.api.made("scalerequests")) == 1
    assert len(world.api.events("TriggeredScaleUp")) == 10


async def test_the_need_growing_asks_again_for_the_difference_only(world: World) -> None:
    for i in range(10):
        world.pod(f"p{i}")
    await world.reconcile()
    world.show_requests()
    for i in range(10, 13):
        world.pod(f"p{i}")
    await world.reconcile()
    targets = [r["spec"]["targetNodes"] for r in world.api.made("scalerequests")]
    assert targets == [3, 4]
    # p10 and p11 fit in the room already requested (3 nodes hold 12); p12 needs the 4th.
    told = [e["involvedObject"]["name"] for e in world.api.events("TriggeredScaleUp")]
    assert sorted(told[10:]) == ["p12"]
    assert len(set(told)) == len(told)  # each pod told once


async def test_status_is_written_only_when_a_decision_changes(world: World) -> None:
    world.pool(target=1)
    world.node("n1")
    world.pod("running", node="n1")
    for _ in range(3):
        await world.reconcile()
        world.show_status()
    assert len(world.api.status_writes()) == 1
    world.pod("huge", cpu="8")  # no pool can host it: no request, but the counts move
    await world.reconcile()
    assert len(world.api.status_writes()) == 1  # only counts: not within a scan interval
    await world.clock.advance(5)  # the scan interval
    await world.reconcile()
    assert len(world.api.status_writes()) == 2
    assert world.status()["pendingPods"] == 1
    assert world.api.made("scalerequests") == []


async def test_a_pod_planned_onto_room_the_pool_has_is_counted_once_it_stays_unbound(
    world: World,
) -> None:
    world.pool(target=1)
    world.node("n1")
    written = await world.scan()
    world.pod("waiting")  # fits on n1's free room: the scheduler should bind it soon
    hold = PROGRESS_HOLD_SCANS * 5
    for _ in range(hold // 5 - 1):
        await world.clock.advance(5)
        assert await world.scan() == written
    await world.clock.advance(5)  # it never was: its count is written at the hold's end
    assert await world.scan() == written + 1
    assert world.status()["pendingPods"] == 1
    assert world.api.made("scalerequests") == []


async def test_pods_that_land_with_the_nodes_asked_for_cost_no_write(world: World) -> None:
    world.pool(target=2)  # two nodes asked for, one Ready: one in flight
    world.node("n1")

    written = await world.scan()
    for name in ("a", "b"):  # fit in the room of n1 and the node to come: no request
        world.pod(name)
        await world.clock.advance(5)
        assert await world.scan() == written
    world.node("n2")  # the node lands; its pods are not bound yet
    await world.clock.advance(5)
    assert await world.scan() == written
    world.pod("a", node="n1")
    world.pod("b", node="n2")
    for _ in range(3):
        await world.clock.advance(5)
        assert await world.scan() == written
    assert world.status()["pendingPods"] == 0
    assert world.api.made("scalerequests") == []


async def test_pods_the_scheduler_has_not_judged_yet_cost_no_write(world: World) -> None:
    world.pool(target=1)
    world.node("n1")
    written = await world.scan()
    world.pod("fresh", judged=False)
    await world.clock.advance(5)
    assert await world.scan() == written
    world.pod("fresh")  # the scheduler marks it though it fits n1: held while unbound
    await world.clock.advance(5)
    assert await world.scan() == written
    world.pod("fresh", node="n1")  # bound: the counts are as stored
    for _ in range(3):
        await world.clock.advance(5)
        assert await world.scan() == written
    assert (world.status()["pendingPods"], world.status()["unschedulablePods"]) == (0, 0)


async def test_count_writes_of_all_autoscalers_share_one_budget() -> None:
    # A budget of one counts-only write every 20 s (a burst of one): the counts that move
    # after a scan interval wait until the budget has a write for them.
    world = World(count_writes_per_second=0.05)
    world.autoscaler(scan_interval_seconds=5)
    world.pool(target=1)
    world.node("n1")

    assert await world.scan() == 1  # the first status: conditions, not counts only
    world.pod("first", cpu="8")  # no pool can host it: only the counts move
    assert await world.scan() == 1  # not within a scan interval of the last write
    await world.clock.advance(5)
    assert await world.scan() == 2  # the budget's one write
    world.pod("second", cpu="8")
    await world.clock.advance(5)
    assert await world.scan() == 2  # a scan interval later, but the budget is spent
    await world.clock.advance(5)
    assert await world.scan() == 2  # 10 s after the write: half of one in the budget
    await world.clock.advance(10)
    assert await world.scan() == 3  # 20 s after it: the budget has one write again
    assert world.status()["pendingPods"] == 2
    assert world.api.made("scalerequests") == []


async def test_a_decision_is_written_at_once_even_right_after_a_count_change(
    world: World,
) -> None:
    world.pool(target=1)
    world.node("n1")
    await world.reconcile()
    written = len(world.api.status_writes())
    for i in range(10):  # no room left: a request, LimitReached unchanged, counts move
        world.pod(f"p{i}", cpu="3")
    await world.reconcile()
    assert len(world.api.status_writes()) == written + 1
    assert world.status()["lastRequest"] is not None


def scale_up_in_steps(world: World, steps: int) -> Callable[[], Any]:
    """Pods arriving two seconds apart, each needing a node of its own, with the informer
    showing each request (Pending) before the next pod: one request per pod."""

    async def run() -> None:
        for i in range(steps):
            world.pod(f"p{i}", cpu="3")
            await world.clock.advance(2)
            await world.scan()
            world.show_requests()

    return run


def land_nodes(world: World, nodes: int) -> None:
    """The pool's nodes are Ready; the pods wait for the scheduler to retry them."""
    world.show_requests(phase="Applied", applied=nodes)
    world.pool(target=nodes)
    for i in range(nodes):
        world.node(f"n{i}")


def bind_pods(world: World, nodes: int) -> None:
    for i in range(nodes):
        world.pod(f"p{i}", cpu="3", node=f"n{i}")


def land(world: World, nodes: int) -> None:
    """The pool's nodes are Ready and the scheduler has bound the pods to them."""
    land_nodes(world, nodes)
    bind_pods(world, nodes)


async def test_a_scale_up_in_a_burst_writes_when_it_starts_and_when_its_nodes_land(
    world: World,
) -> None:
    before = await world.scan()  # the first status: conditions
    await scale_up_in_steps(world, 5)()
    targets = [r["spec"]["targetNodes"] for r in world.api.made("scalerequests")]
    assert targets == [1, 2, 3, 4, 5]
    # The first request at once; the four that follow while its nodes boot are held,
    # though more than a scan interval passed.
    assert len(world.api.status_writes()) == before + 1
    assert world.status()["lastRequest"]["targetNodes"] == 1
    land(world, 5)
    await world.clock.advance(5)
    assert await world.scan() == before + 2
    status = world.status()
    assert status["lastRequest"]["targetNodes"] == 5
    assert (status["pendingPods"], status["unschedulablePods"]) == (0, 0)
    for _ in range(3):  # settled: nothing more to write
        await world.clock.advance(5)
        assert await world.scan() == before + 2


async def test_nodes_landing_before_their_pods_are_bound_cost_one_write(world: World) -> None:
    before = await world.scan()
    await scale_up_in_steps(world, 5)()
    await world.clock.advance(5)
    land_nodes(world, 5)
    assert await world.scan() == before + 1  # the pods are not bound yet: held
    await world.clock.advance(2)
    bind_pods(world, 5)
    assert await world.scan() == before + 2
    status = world.status()
    assert status["lastRequest"]["targetNodes"] == 5
    assert (status["pendingPods"], status["unschedulablePods"]) == (0, 0)


async def test_a_held_request_that_lands_within_a_scan_interval_waits_for_it(
    world: World,
) -> None:
    before = await world.scan()
    await scale_up_in_steps(world, 2)()
    assert len(world.api.status_writes()) == before + 1
    land(world, 2)  # 2 s after the first request's write
    assert await world.scan() == before + 1
    await world.clock.advance(3)  # a scan interval after that write
    assert await world.scan() == before + 2
    assert world.status()["lastRequest"]["targetNodes"] == 2


async def test_a_scale_up_soon_after_the_last_is_written_once_the_pool_settles(
    world: World,
) -> None:
    before = await world.scan()
    await scale_up_in_steps(world, 2)()
    land(world, 2)
    await world.clock.advance(5)
    assert await world.scan() == before + 2
    await world.clock.advance(5)
    world.pod("later", cpu="3")  # the stored request asked for more nodes too: progress
    assert await world.scan() == before + 2
    world.show_requests()
    land_nodes(world, 3)
    bind_pods(world, 2)
    world.pod("later", cpu="3", node="n2")
    assert await world.scan() == before + 3
    assert world.status()["lastRequest"]["targetNodes"] == 3


async def test_a_scale_up_long_after_the_last_write_is_written_at_once(world: World) -> None:
    before = await world.scan()
    await scale_up_in_steps(world, 2)()
    land(world, 2)
    await world.clock.advance(5)
    assert await world.scan() == before + 2
    await world.clock.advance(PROGRESS_HOLD_SCANS * 5)
    world.pod("later", cpu="3")  # the stored request asked for more nodes too
    assert await world.scan() == before + 3
    assert world.status()["lastRequest"]["targetNodes"] == 3


async def test_a_restart_while_requests_are_held_asks_nothing_twice_and_catches_up(
    world: World,
) -> None:
    before = await world.scan()
    await scale_up_in_steps(world, 3)()
    world.reconciler = world.start()  # the process dies with two requests unwritten
    assert await world.scan() == before + 1
    assert [r["spec"]["targetNodes"] for r in world.api.made("scalerequests")] == [1, 2, 3]
    world.pod("p3", cpu="3")  # the new process asks for the next node, held as well
    await world.scan()
    assert [r["spec"]["targetNodes"] for r in world.api.made("scalerequests")] == [1, 2, 3, 4]
    assert len(world.api.status_writes()) == before + 1
    land(world, 4)
    await world.clock.advance(5)
    assert await world.scan() == before + 2
    assert world.status()["lastRequest"]["targetNodes"] == 4


async def test_a_pool_asking_again_after_its_first_nodes_landed_writes_twice_and_ends_right() -> (
    None
):
    # As in a burst the scheduler judges over tens of seconds: the pool's first pods are
    # marked unschedulable, its nodes land in a second, and the rest of its pods are judged
    # (and asked for) 15 s later, twice. Counting the unjudged pods and writing once the
    # nodes had landed gave it a write per request.
    world = World()
    world.autoscaler(scan_interval_seconds=10)
    world.pool()
    before = await world.batch()  # the first status: conditions
    for i in range(6):
        world.pod(f"p{i}", cpu="3", judged=i < 2)
    for judged, wanted in ((range(0, 2), 2), (range(2, 4), 4), (range(4, 6), 6)):
        for i in judged:
            world.pod(f"p{i}", cpu="3")
        await world.batch()
        assert world.api.made("scalerequests")[-1]["spec"]["targetNodes"] == wanted
        world.show_requests()
        await world.clock.advance(1)
        await world.batch()
        land(world, wanted)
        for _ in range(3):  # 15 s until the scheduler judges the next pods
            await world.clock.advance(5)
            await world.batch()
    for _ in range(3):
        await world.clock.advance(10)
        await world.batch()
    assert len(world.api.status_writes()) == before + 2
    status = world.status()
    assert status["lastRequest"]["targetNodes"] == 6
    assert (status["pendingPods"], status["unschedulablePods"]) == (0, 0)


async def test_an_autoscaler_whose_namespace_gets_pods_for_another_pool_writes_nothing() -> None:
    world = World()
    world.autoscaler(scan_interval_seconds=5)
    world.pool()
    world.autoscaler("idle", pool="other", scan_interval_seconds=5)
    world.pool(name="other")
    await world.batch()
    idle_writes = len(world.writes_to("idle"))
    assert idle_writes == 1  # its first status: conditions
    for i in range(4):
        world.pod(f"p{i}", cpu="3", pool=POOL, judged=i < 2)
    await world.batch()
    for i in range(4):
        world.pod(f"p{i}", cpu="3", pool=POOL)
        await world.clock.advance(5)
        await world.batch()
        world.show_requests()
    land(world, 4)
    for _ in range(3):
        await world.clock.advance(5)
        await world.batch()
    assert world.api.made("scalerequests")[-1]["spec"]["targetNodes"] == 4
    assert world.status()["lastRequest"]["targetNodes"] == 4
    assert len(world.writes_to("idle")) == idle_writes
    assert (world.status("idle")["pendingPods"], world.status("idle")["unschedulablePods"]) == (
        0,
        0,
    )


async def two_nodes_landed_and_a_third_pod_unjudged(world: World) -> int:
    """Three pods wait, the scheduler has judged two; the pool asks for their two nodes,
    which land and take them. The status writes before the first request."""
    before = await world.scan()
    for i in range(3):
        world.pod(f"p{i}", cpu="3", judged=i < 2)
    assert await world.scan() == before + 1  # the first request
    world.show_requests()
    land(world, 2)
    return before


@pytest.mark.parametrize("restart", [False, True])
async def test_a_restart_while_progress_is_held_holds_it_as_an_uninterrupted_run_would(
    world: World, restart: bool
) -> None:
    before = await two_nodes_landed_and_a_third_pod_unjudged(world)
    await world.clock.advance(5)
    assert await world.scan() == before + 1  # p2 is not judged yet: held
    if restart:
        # Nothing in memory: the hold counts from the write's time the API server recorded.
        world.reconciler = world.start()
    await world.clock.advance(5)
    assert await world.scan() == before + 1  # still held
    world.pod("p2", cpu="3")
    await world.scan()
    world.show_requests()
    land_nodes(world, 3)
    bind_pods(world, 3)
    await world.clock.advance(5)
    assert await world.scan() == before + 2
    assert world.status()["lastRequest"]["targetNodes"] == 3
    assert world.status()["pendingPods"] == 0


async def test_after_a_restart_the_hold_ends_its_bound_after_the_recorded_write(
    world: World,
) -> None:
    before = await two_nodes_landed_and_a_third_pod_unjudged(world)
    await world.clock.advance((PROGRESS_HOLD_SCANS - 1) * 5)
    world.reconciler = world.start()
    assert await world.scan() == before + 1  # p2 is not judged yet: held
    await world.clock.advance(5)  # the bound, counted from the write, not the restart
    assert await world.scan() == before + 2
    assert (world.status()["pendingPods"], world.status()["unschedulablePods"]) == (0, 0)


async def test_a_restart_within_a_scan_interval_of_a_write_waits_for_the_interval(
    world: World,
) -> None:
    before = await world.scan()
    await scale_up_in_steps(world, 2)()
    assert len(world.api.status_writes()) == before + 1  # 2 s ago: the first request
    world.reconciler = world.start()
    land(world, 2)
    assert await world.scan() == before + 1
    await world.clock.advance(3)  # a scan interval after that write
    assert await world.scan() == before + 2
    assert (world.status()["pendingPods"], world.status()["unschedulablePods"]) == (0, 0)


async def test_a_pass_reads_the_autoscalers_spec_and_stored_status_once(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.pod("p0", cpu="3")
    await world.plan()
    reads: collections.Counter[str] = collections.Counter()
    spec_of, current = autoscaler_api.spec_of, world.reconciler.status.current

    def counted_spec_of(obj: Object) -> autoscaler_api.AutoscalerSpec:
        reads["spec"] += 1
        return spec_of(obj)

    def counted_current(obj: Object) -> dict[str, Any]:
        reads["status"] += 1
        return current(obj)

    monkeypatch.setattr(autoscaler_api, "spec_of", counted_spec_of)
    monkeypatch.setattr(world.reconciler.status, "current", counted_current)
    await world.reconciler.reconcile(KEY)
    assert len(world.api.status_writes()) == 1
    assert reads == {"spec": 1, "status": 1}
    reads.clear()
    autoscaler = world.autoscalers.get(NAS)
    assert autoscaler is not None
    assert not world.reconciler.needs_write(autoscaler)  # what it wrote is what it would
    assert reads == {"spec": 1, "status": 1}


def _up(target: int) -> dict[str, Any]:
    return {"name": f"nas-{target}-up", "targetNodes": target, "reason": "pods"}


def _stored(last: dict[str, Any] | None, *, pending: int = 0) -> dict[str, Any]:
    status: dict[str, Any] = {"observedGeneration": 1, "conditions": []}
    status.update(lastRequest=last, wouldRequest=None)
    status.update(pendingPods=pending, unschedulablePods=pending)
    return status


def test_only_a_request_following_one_the_same_way_is_progress() -> None:
    down = {"name": "nas-9-down", "targetNodes": 1, "reason": "unneeded"}
    counts = frozenset(status_report.COUNTS)
    assert status_report.progress_fields(_stored(_up(2)), _stored(_up(4))) == counts | {
        "lastRequest"
    }
    assert status_report.progress_fields(_stored(None), _stored(_up(4))) == counts  # the first
    assert status_report.progress_fields(_stored(_up(2)), _stored(down)) == counts  # turned
    assert status_report.progress_fields(_stored(down), _stored(_up(4))) == counts


def test_a_request_is_held_with_the_counts_but_news_is_not() -> None:
    stored, fresh = _stored(_up(2), pending=3), _stored(_up(4), pending=7)
    assert status_report.with_progress_held(stored, fresh) == stored
    turned = _stored({"name": "nas-9-down", "targetNodes": 1, "reason": "x"}, pending=7)
    assert status_report.with_progress_held(stored, turned) == turned
    limited = copy.deepcopy(fresh)
    limited["conditions"] = [{"type": "LimitReached", "status": "True"}]
    assert status_report.with_progress_held(stored, limited) == limited
    first = _stored(_up(4), pending=7)
    assert status_report.with_progress_held(_stored(None, pending=3), first) == first


async def test_a_pod_too_big_for_any_node_gets_one_warning_and_no_request(world: World) -> None:
    world.pod("huge", cpu="8")
    for _ in range(3):
        await world.reconcile()
    assert world.api.made("scalerequests") == []
    [warning] = world.api.events("NotTriggerScaleUp")
    assert warning["type"] == "Warning"
    assert warning["involvedObject"]["name"] == "huge"
    assert "requests 8000 of cpu, a node offers 4000" in warning["message"]
    assert world.status()["unschedulablePods"] == 1


async def test_max_nodes_is_respected_and_the_status_says_the_limit_was_hit(world: World) -> None:
    world.pool(max_nodes=2)
    for i in range(10):
        world.pod(f"p{i}")
    await world.reconcile()
    world.show_requests()
    await world.reconcile()
    [request] = world.api.made("scalerequests")
    assert request["spec"]["targetNodes"] == 2
    limit = next(c for c in world.status()["conditions"] if c["type"] == "LimitReached")
    assert (limit["status"], limit["reason"]) == ("True", "MaxNodesReached")
    assert len(world.api.events("LimitReached")) == 1
    assert len(world.api.events("TriggeredScaleUp")) == 8


async def test_a_dry_run_says_the_pool_would_be_at_max_nodes_not_that_it_is(
    world: World,
) -> None:
    world.autoscaler(dry_run=True)
    world.pool(max_nodes=2)
    for i in range(10):
        world.pod(f"p{i}")
    await world.reconcile()
    assert world.api.made("scalerequests") == []
    limit = next(c for c in world.status()["conditions"] if c["type"] == "LimitReached")
    assert (limit["status"], limit["reason"]) == ("True", "MaxNodesReached")
    assert limit["message"] == "NodePool small would be at maxNodes=2; the pods need 3"


async def test_pods_left_beyond_max_nodes_do_not_hold_the_counts(world: World) -> None:
    world.pool(max_nodes=2)
    before = await world.scan()
    for i in range(10):  # 4 to a node: 8 on the two nodes maxNodes allows, 2 left over
        world.pod(f"p{i}")
    assert await world.scan() == before + 1  # the first request, LimitReached turning
    world.show_requests()
    await world.scan()
    world.show_requests(phase="Applied", applied=2)
    world.pool(target=2, max_nodes=2)
    for i in range(8):
        world.pod(f"p{i}", node=f"n{i // 4}")
    world.node("n0")
    world.node("n1")
    await world.clock.advance(5)
    assert await world.scan() == before + 2  # settled: the pods left wait for nothing
    assert (world.status()["pendingPods"], world.status()["unschedulablePods"]) == (2, 2)
    for _ in range(3):
        await world.clock.advance(5)
        assert await world.scan() == before + 2


async def test_unneeded_nodes_are_given_up_after_the_delay_and_not_before(world: World) -> None:
    world.autoscaler(
        scan_interval_seconds=30, scale_down=autoscaler_api.ScaleDownPolicy(unneeded_seconds=60)
    )
    world.pool(target=3, min_nodes=1, budgets=())  # no disruption budget: both go at once
    for name in ("n1", "n2", "n3"):
        world.node(name)
    daemon = world.pod("ds", node="n1", ownerReferences=[{"kind": "DaemonSet", "name": "d"}])
    assert daemon["spec"]["nodeName"] == "n1"
    first = await world.reconcile()
    assert first.requeue_after == 30
    await world.clock.advance(30)
    second = await world.reconcile()
    assert second.requeue_after == 30
    assert world.api.made("scalerequests") == []
    await world.clock.advance(30)
    await world.reconcile()  # expired: tainted first, named once the taint is visible
    assert world.api.made("scalerequests") == []
    await world.reconcile()
    [request] = world.api.made("scalerequests")
    assert request["spec"]["targetNodes"] == 1  # down to minNodes, DaemonSet pods ignored
    assert request["spec"]["removeNodes"] == ["n2", "n3"]  # the emptiest: n1 runs the DaemonSet
    assert request["metadata"]["name"].endswith("-down")
    assert len(world.api.events("ScaleDownRequested")) == 1


async def test_no_scale_down_right_after_a_scale_up(world: World) -> None:
    world.autoscaler(scale_down=autoscaler_api.ScaleDownPolicy(unneeded_seconds=60))
    world.pool(target=2, budgets=())  # no disruption budget: both go at once
    world.node("n1")
    world.node("n2", ready=False, registered=False)  # still booting: capacity in flight
    await world.reconcile()
    await world.clock.advance(100)
    await world.reconcile()
    world.node("n2")  # the scale-up settles now; only now may the timers start
    await world.reconcile()
    await world.clock.advance(59)
    await world.reconcile()
    assert world.api.made("scalerequests") == []
    await world.clock.advance(1)
    await world.reconcile()
    await world.reconcile()
    assert [r["spec"]["targetNodes"] for r in world.api.made("scalerequests")] == [0]


async def test_a_missing_pool_is_reported_not_guessed(world: World) -> None:
    world.pools.remove(object_key(world.pools.items()[0]))
    world.pod("p")
    result = await world.reconcile()
    ready = next(c for c in world.status()["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NodePoolNotFound")
    assert world.api.made("scalerequests") == []
    assert result.requeue_after == 5
    assert len(world.api.events("NodePoolNotFound")) == 1


async def test_a_deleted_autoscaler_is_forgotten(world: World) -> None:
    world.autoscalers.remove(object_key(world.autoscalers.items()[0]))
    assert await world.reconcile() == Result()
    assert world.api.created == []


async def test_the_request_states_the_target_it_was_based_on(world: World) -> None:
    world.pool(target=1)
    world.node("n1")
    for i in range(6):
        world.pod(f"p{i}")
    await world.reconcile()
    [request] = world.api.made("scalerequests")
    assert (request["spec"]["basedOnTargetNodes"], request["spec"]["targetNodes"]) == (1, 2)


async def test_a_second_autoscaler_of_the_pool_is_a_conflict_and_decides_nothing(
    world: World,
) -> None:
    younger = autoscaler_api.manifest("nas-2", autoscaler_api.AutoscalerSpec(node_pool_name=POOL))
    younger["metadata"].update(
        uid="uid-nas-2", generation=1, creationTimestamp="2026-11-29T11:00:00Z"
    )
    world.autoscalers.put(younger)
    world.pod("p")
    await world.reconcile(Request(name="nas-2"))
    [made] = world.api.made("scalerequests")  # the owner's, from the one batch
    assert made["spec"]["requester"] == f"autoscaler/{NAS}"
    assert set(world.woken) == {NAS, "nas-2"}
    [write] = [p for kind, name, p, sub in world.api.patches if name == "nas-2"]
    ready = next(c for c in write["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ConflictingAutoscaler")


async def test_one_batch_decides_for_every_pool_and_wakes_only_autoscalers_with_news(
    world: World,
) -> None:
    other = autoscaler_api.manifest(
        "nas-other",
        autoscaler_api.AutoscalerSpec(
            node_pool_name="other", namespaces=("elsewhere",), scan_interval_seconds=7
        ),
    )
    other["metadata"].update(uid="uid-nas-other", generation=1)
    world.autoscalers.put(other)
    other_pool = nodepool_api.manifest("other", nodepool_api.NodePoolSpec(max_nodes=10))
    other_pool["metadata"].update(uid="uid-other", resourceVersion="1")
    world.pools.put(other_pool)

    first = await world.plan()
    assert sorted(world.woken) == [NAS, "nas-other"]  # neither has a status yet
    assert first.requeue_after == 5  # the smallest scan interval
    for name in sorted(world.woken):
        await world.reconciler.reconcile(Request(name=name))
    world.woken.clear()
    assert await world.plan() == first
    assert world.woken == []  # nothing new: no reconcile, no write

    world.pod("p")  # in nas's namespace only
    await world.plan()
    assert world.woken == [NAS]
    assert len(world.api.made("scalerequests")) == 1


async def test_a_batch_closes_after_an_idle_window_or_at_its_longest() -> None:
    clock = FakeClock()
    batch = Batch(clock)
    assert batch.wait(idle=1.0, longest=10.0) == 0.0  # no batch open: plan now
    batch.event()
    await clock.advance(0.6)
    assert batch.wait(idle=1.0, longest=10.0) == pytest.approx(0.4)
    for _ in range(18):  # an event every half second keeps it open...
        await clock.advance(0.5)
        batch.event()
    assert batch.wait(idle=1.0, longest=10.0) == pytest.approx(0.4)
    await clock.advance(0.4)
    assert batch.wait(idle=1.0, longest=10.0) == 0.0  # ...for ten seconds at most
    batch.close()
    assert batch.wait(idle=1.0, longest=10.0) == 0.0


async def test_pod_events_are_told_once_whichever_autoscaler_passes(world: World) -> None:
    other = autoscaler_api.manifest(
        "nas-all", autoscaler_api.AutoscalerSpec(node_pool_name="elsewhere")
    )
    other["metadata"].update(uid="uid-nas-all", generation=1)
    world.autoscalers.put(other)
    elsewhere = nodepool_api.manifest(
        "elsewhere", nodepool_api.NodePoolSpec(template=nodepool_api.NodeTemplate(cpu="2"))
    )
    elsewhere["metadata"].update(uid="uid-elsewhere", resourceVersion="1")
    world.pools.put(elsewhere)
    world.pod("huge", cpu="8")
    await world.reconcile()
    await world.reconciler.reconcile(Request(name="nas-all"))
    await world.reconcile()
    [warning] = world.api.events("NotTriggerScaleUp")
    assert "elsewhere: requests 8000 of cpu" in warning["message"]  # both pools named
    assert "small: requests 8000 of cpu" in warning["message"]


async def test_a_burst_is_told_through_a_few_pods_and_the_request_not_one_event_per_pod(
    world: World,
) -> None:
    world.pool(max_nodes=20)
    for i in range(40):
        world.pod(f"p{i:02d}")
    await world.reconcile()
    [request] = world.api.made("scalerequests")
    assert request["spec"]["targetNodes"] == 10
    told = world.api.events("TriggeredScaleUp")
    assert len(told) == TOLD_PER_REQUEST < 40
    assert len({e["involvedObject"]["name"] for e in told}) == TOLD_PER_REQUEST
    [requested] = world.api.events("ScaleUpRequested")
    assert "40 pending pods need 10 more nodes" in requested["message"]
    for _ in range(3):  # later scans tell nobody again for the same request
        await world.reconcile()
    assert len(world.api.events("TriggeredScaleUp")) == TOLD_PER_REQUEST


async def test_pods_beyond_max_nodes_are_told_the_limit_once_and_the_others_are_not(
    world: World,
) -> None:
    world.pool(max_nodes=2)
    for i in range(10):
        world.pod(f"p{i}")
    await world.reconcile()
    world.show_requests()
    for _ in range(2):
        await world.reconcile()
    told = world.api.events("NotTriggerScaleUp")
    assert sorted(e["involvedObject"]["name"] for e in told) == ["p8", "p9"]
    assert all("NodePool small is at maxNodes 2" in e["message"] for e in told)
    assert all(e["message"].endswith("these pods need 1 more node") for e in told)
    triggered = {e["involvedObject"]["name"] for e in world.api.events("TriggeredScaleUp")}
    assert triggered == {f"p{i}" for i in range(8)}
    # The two nodes come up while the scheduler still calls every pod unschedulable: the
    # eight it is about to bind are on Ready nodes, not beyond the limit, and told nothing.
    world.show_requests(phase="Applied", applied=2)
    world.pool(target=2, max_nodes=2)
    world.node("small-a")
    world.node("small-b")
    await world.reconcile()
    told = world.api.events("NotTriggerScaleUp")
    assert sorted(e["involvedObject"]["name"] for e in told) == ["p8", "p9"]


async def test_pods_within_max_nodes_get_no_limit_warning(world: World) -> None:
    world.pool(max_nodes=3)
    for i in range(10):
        world.pod(f"p{i}")
    await world.reconcile()
    assert world.api.made("scalerequests")[0]["spec"]["targetNodes"] == 3
    assert world.api.events("NotTriggerScaleUp") == []


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


async def test_a_dry_run_decides_and_tells_but_requests_nothing_until_turned_off(
    world: World,
) -> None:
    world.autoscaler(scan_interval_seconds=5, dry_run=True)
    for i in range(10):
        world.pod(f"p{i}")
    for _ in range(3):
        await world.reconcile()
    assert world.api.made("scalerequests") == []
    status = world.status()
    assert status["wouldRequest"]["targetNodes"] == 3
    assert "10 pending pods need 3 more nodes" in status["wouldRequest"]["reason"]
    assert status.get("lastRequest") is None
    assert _condition(status, "DryRun")["status"] == "True"
    [would] = world.api.events("WouldScaleUp")
    assert "would ask for NodePool small: 0 -> 3 nodes" in would["message"]
    assert len(world.api.events("WouldTriggerScaleUp")) == TOLD_PER_REQUEST
    assert world.api.events("TriggeredScaleUp") == []
    writes = len(world.api.status_writes())
    await world.reconcile()  # the same decision again: no write, no event
    assert len(world.api.status_writes()) == writes
    assert len(world.api.events("WouldScaleUp")) == 1
    world.autoscaler(scan_interval_seconds=5)  # dry run turned off
    world.autoscalers.store[NAS]["metadata"]["generation"] = 2
    await world.reconcile()
    [request] = world.api.made("scalerequests")
    assert request["spec"]["targetNodes"] == 3
    status = world.status()
    assert status["wouldRequest"] is None
    assert status["lastRequest"]["targetNodes"] == 3
    assert _condition(status, "DryRun")["status"] == "False"
    assert len(world.api.events("TriggeredScaleUp")) == TOLD_PER_REQUEST


async def test_an_autoscaler_never_in_dry_run_shows_no_dry_run_condition(world: World) -> None:
    world.pod("p0")
    await world.reconcile()
    status = world.status()
    assert all(c["type"] != "DryRun" for c in status["conditions"])
    assert status.get("wouldRequest") is None


async def test_an_underused_node_is_stamped_tainted_then_named_in_the_request(
    world: World,
) -> None:
    half_and_quarter(world)
    await world.reconcile()
    assert stamp(world, "n2") == "2027-01-15T08:00:00Z"  # the fake wall clock's now
    assert stamp(world, "n1") is None  # half used is not underused (threshold 0.5)
    await world.clock.advance(59)
    await world.reconcile()
    assert taints(world, "n2") == []
    await world.clock.advance(1)
    tainting = await world.reconcile()
    assert taints(world, "n2") == [wellknown.CONSOLIDATING_TAINT_KEY]
    assert world.api.made("scalerequests") == []  # not before the taint is visible
    assert tainting.requeue_after == 1.0  # looks again soon: our taint wakes no watch
    await world.reconcile()
    [request] = world.api.made("scalerequests")
    assert (request["spec"]["targetNodes"], request["spec"]["removeNodes"]) == (1, ["n2"])
    [removing] = world.api.events("ConsolidationRemoving")
    assert removing["involvedObject"] == {
        **removing["involvedObject"],
        "kind": "Node",
        "name": "n2",
    }
    assert "its 1 pods fit on other nodes" in removing["message"]
    assert len(world.api.node_patches()) == 2  # the stamp and the taint: nothing else


async def test_a_pod_that_cannot_move_arriving_before_the_recheck_untaints_the_node(
    world: World,
) -> None:
    half_and_quarter(world)
    await world.reconcile()
    await world.clock.advance(60)
    await world.reconcile()
    assert taints(world, "n2") == [wellknown.CONSOLIDATING_TAINT_KEY]
    world.pod("lonely", cpu="100m", node="n2")  # bound before the taint showed; no owner
    await world.reconcile()
    assert world.api.made("scalerequests") == []
    assert (taints(world, "n2"), stamp(world, "n2")) == ([], None)
    told = [e["message"] for e in world.api.events("ConsolidationKept")]
    assert len(told) == 2  # on the Node and on the Autoscaler
    assert all("pod apps/lonely" in m and "(not-replicated)" in m for m in told)
    await world.reconcile()
    assert len(world.api.events("ConsolidationKept")) == 2  # told once, not every scan


async def test_a_budget_that_allows_nothing_keeps_the_node_untainted_and_restarts_its_timer(
    world: World,
) -> None:
    half_and_quarter(world)
    world.budgets.put(
        {
            "metadata": {"name": "web", "namespace": "apps", "resourceVersion": "1"},
            "spec": {"selector": {}},
            "status": {"disruptionsAllowed": 0},
        }
    )
    await world.reconcile()
    await world.clock.advance(60)
    await world.reconcile()
    assert taints(world, "n2") == []  # judged before the taint: never tainted in vain
    assert stamp(world, "n2") == "2027-01-15T08:01:00Z"  # starts over from now
    [told, _] = [e["message"] for e in world.api.events("ConsolidationKept")]
    assert "PodDisruptionBudget apps/web allows 0 disruptions now" in told
    assert world.api.made("scalerequests") == []


async def test_budgets_not_listed_yet_keep_the_node_untainted_and_unnamed(world: World) -> None:
    half_and_quarter(world)
    world.budgets.synced = False  # the PodDisruptionBudget cache has not listed yet
    await world.reconcile()
    await world.clock.advance(60)
    await world.reconcile()
    assert taints(world, "n2") == []
    assert world.api.made("scalerequests") == []
    world.budgets.synced = True  # listed, and no budget refuses: the node goes its way
    await world.reconcile()
    assert taints(world, "n2") == [wellknown.CONSOLIDATING_TAINT_KEY]


async def test_a_restarted_autoscaler_names_the_node_its_predecessor_tainted(
    world: World,
) -> None:
    half_and_quarter(world)
    await world.reconcile()
    await world.clock.advance(60)
    await world.reconcile()  # tainted; then the process dies
    world.reconciler = world.start()
    await world.reconcile()
    [request] = world.api.made("scalerequests")
    assert request["spec"]["removeNodes"] == ["n2"]


async def test_a_scale_up_settling_clears_the_stamps_and_taints(world: World) -> None:
    half_and_quarter(world)
    await world.reconcile()
    await world.clock.advance(60)
    await world.reconcile()
    world.pool(target=3)  # someone asked for a node: capacity in flight
    await world.reconcile()
    assert (taints(world, "n2"), stamp(world, "n2")) == ([], None)
    assert world.api.made("scalerequests") == []


async def test_a_verdict_from_an_older_generation_is_not_reported(world: World) -> None:
    world.pod("p")
    await world.plan()
    changed = copy.deepcopy(world.autoscalers.get(NAS))
    assert changed is not None
    changed["metadata"]["generation"] = 2
    world.autoscalers.put(changed)
    assert await world.reconciler.reconcile(KEY) == Result()
    assert world.api.status_writes() == []  # the next batch has the new spec's verdict
    await world.reconcile()
    assert world.status()["observedGeneration"] == 2


def two_pools(world: World) -> None:
    """The world's pool with one pending pod, and a second pool with an Autoscaler of its
    own and one pending pod only it can host."""
    world.autoscaler(scan_interval_seconds=30)
    other = autoscaler_api.manifest(
        "nas-other",
        autoscaler_api.AutoscalerSpec(
            node_pool_name="other", namespaces=("elsewhere",), scan_interval_seconds=30
        ),
    )
    other["metadata"].update(uid="uid-nas-other", generation=1)
    world.autoscalers.put(other)
    other_pool = nodepool_api.manifest(
        "other",
        nodepool_api.NodePoolSpec(
            max_nodes=10, template=nodepool_api.NodeTemplate(cpu="8", memory="64Gi", pods=110)
        ),
    )
    other_pool["metadata"].update(uid="uid-other", resourceVersion="1")
    world.pools.put(other_pool)
    world.pod("for-small", cpu="2")
    world.pod("for-other", cpu="7", namespace="elsewhere")  # too big for small; fills other


@pytest.mark.parametrize(
    "failure",
    [errors.ServerError("etcd is away"), KeyError("a fault of ours")],
    ids=["api-error", "unexpected-error"],
)
async def test_a_failed_hand_over_leaves_the_other_pools_decided_and_is_retried(
    world: World, monkeypatch: pytest.MonkeyPatch, failure: Exception
) -> None:
    two_pools(world)
    request = world.planner.decider.requester.request

    async def refused(autoscaler: str, **kw: Any) -> Any:
        if autoscaler == NAS:
            raise failure
        return await request(autoscaler, **kw)

    monkeypatch.setattr(world.planner.decider.requester, "request", refused)
    result = await world.plan()
    assert [r["spec"]["nodePoolName"] for r in world.api.made("scalerequests")] == ["other"]
    assert result.requeue_after == LONGEST_BATCH_SECONDS  # not hot, not forgotten
    monkeypatch.setattr(world.planner.decider.requester, "request", request)
    await world.plan()
    made = sorted(r["spec"]["nodePoolName"] for r in world.api.made("scalerequests"))
    assert made == ["other", POOL]


async def test_pools_are_handed_over_many_at_once_up_to_the_limit(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst on many pools: their ScaleRequests are created ``HAND_OVER_PARALLELISM`` at
    a time, not one pool after another, and never more at once than that."""
    pools = HAND_OVER_PARALLELISM + 4
    for index in range(pools):
        world.pool(name=f"p{index}")
        world.autoscaler(f"nas-{index}", pool=f"p{index}")
        world.pod(f"pod-{index}", cpu="2", pool=f"p{index}")
    request = world.planner.decider.requester.request
    in_flight = most = 0

    async def counted(autoscaler: str, **kw: Any) -> Any:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            for _ in range(3):  # the create's round trip: the other pools get their turn
                await asyncio.sleep(0)
            return await request(autoscaler, **kw)
        finally:
            in_flight -= 1

    monkeypatch.setattr(world.planner.decider.requester, "request", counted)
    await world.plan()
    made = sorted(r["spec"]["nodePoolName"] for r in world.api.made("scalerequests"))
    assert made == sorted(f"p{index}" for index in range(pools))
    assert most == HAND_OVER_PARALLELISM


async def test_a_check_due_at_once_still_brings_the_planner_back(world: World) -> None:
    """unneededSeconds 0: the pass that stamps a node has its next check due now. The
    planner comes back soon, never "no requeue" (which would end every pool's scans)."""
    half_and_quarter(world)
    world.autoscaler(scale_down=autoscaler_api.ScaleDownPolicy(unneeded_seconds=0))
    result = await world.plan()
    assert stamp(world, "n2") is not None
    assert result.requeue_after is not None
    assert 0 < result.requeue_after < 1


async def test_an_object_moving_again_does_not_hold_the_batch_open() -> None:
    """Karpenter's rule: a burst's pod is created, then marked unschedulable; the second
    move of the same pod is not a new event for the idle window."""
    clock = FakeClock()
    batch = Batch(clock)
    batch.event("pod-a")
    for _ in range(4):  # the same pod, again and again
        await clock.advance(0.5)
        batch.event("pod-a")
    assert batch.wait(idle=1.0, longest=10.0) == 0.0  # idle since its first move
    batch.close()
    batch.event("pod-a")  # a new batch counts it anew
    await clock.advance(0.5)
    batch.event("pod-b")  # a new object does hold it open
    assert batch.wait(idle=1.0, longest=10.0) == pytest.approx(1.0)


async def test_what_is_not_new_demand_opens_a_batch_but_does_not_hold_it() -> None:
    clock = FakeClock()
    batch = Batch(clock)
    batch.event("node-a", holds=False)  # nothing open: it opens one
    assert batch.wait(idle=1.0, longest=10.0) == pytest.approx(1.0)
    await clock.advance(0.6)
    batch.event("node-b", holds=False)
    assert batch.wait(idle=1.0, longest=10.0) == pytest.approx(0.4)
    batch.event("pod-a")
    assert batch.wait(idle=1.0, longest=10.0) == pytest.approx(1.0)


async def test_every_pool_is_asked_for_before_any_event_of_the_batch_is_written(
    world: World,
) -> None:
    two_pools(world)
    await world.plan()
    order = [kind for kind, _ in world.api.created]
    assert order.count("scalerequests") == 2
    assert "events" in order  # the requests were explained...
    last_request = max(i for i, kind in enumerate(order) if kind == "scalerequests")
    first_event = order.index("events")
    assert last_request < first_event  # ...after both were made


async def test_a_fault_in_one_pools_events_leaves_the_batch_and_the_other_pools_told(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    two_pools(world)
    requested = world.planner.decider.notices.requested

    async def broken(autoscaler: Object, *args: Any, **kw: Any) -> None:
        if autoscaler["metadata"]["name"] == NAS:
            raise KeyError("a fault of ours")
        await requested(autoscaler, *args, **kw)

    monkeypatch.setattr(world.planner.decider.notices, "requested", broken)
    result = await world.plan()
    assert len(world.api.made("scalerequests")) == 2
    told = [e["involvedObject"]["name"] for e in world.api.events("ScaleUpRequested")]
    assert told == ["nas-other"]
    assert result.requeue_after == 30  # the scan, as any batch: not retried hot


async def test_a_request_refused_for_good_is_told_once_and_not_sent_again_unchanged(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    two_pools(world)
    create = world.api.create
    sent: list[str] = []
    refusing = True

    async def invalid(resource: Resource, body: dict[str, Any], **kw: Any) -> Object:
        if resource.plural == "scalerequests" and body["spec"]["nodePoolName"] == POOL:
            sent.append(body["metadata"]["name"])
            if refusing:
                name = body["metadata"]["name"]
                raise errors.Invalid(
                    f'ScaleRequest.nodepool.dev "{name}" is invalid: spec.targetNodes: '
                    "Invalid value: 1: must be odd",
                    details={
                        "name": name,
                        "causes": [{"field": "spec.targetNodes", "message": "must be odd"}],
                    },
                )
        return await create(resource, body, **kw)

    monkeypatch.setattr(world.api, "create", invalid)
    for _ in range(3):
        result = await world.plan()
        assert result.requeue_after == 30  # the scan: asking sooner cannot help
    assert len(sent) == 1  # the same request is not sent again while refused
    [refused] = world.api.events("ScaleRequestRefused")
    assert refused["involvedObject"]["name"] == NAS
    assert "spec.targetNodes: must be odd" in refused["message"]
    assert [r["spec"]["nodePoolName"] for r in world.api.made("scalerequests")] == ["other"]
    refusing = False
    world.pod("second", cpu="3")  # the pool needs more: a different request, sent
    await world.plan()
    assert len(sent) == 2
    made = sorted(r["spec"]["nodePoolName"] for r in world.api.made("scalerequests"))
    assert made == ["other", POOL]
    assert len(world.api.events("ScaleRequestRefused")) == 1


def _events_held(world: World, monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Event creates wait until the returned gate opens (a loaded API server)."""
    gate = asyncio.Event()
    create = world.api.create

    async def held(resource: Resource, body: dict[str, Any], **kw: Any) -> Object:
        if resource.plural == "events":
            await gate.wait()
        return await create(resource, body, **kw)

    monkeypatch.setattr(world.api, "create", held)
    return gate


async def test_a_batch_is_over_when_its_requests_are_made_not_when_its_events_are(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At full size the first batch's events took seconds to write; the next batch must
    not wait for them: the planner returns once every pool's request is made."""
    two_pools(world)
    gate = _events_held(world, monkeypatch)
    await asyncio.wait_for(world.planner.reconcile(PLAN), timeout=5)
    assert len(world.api.made("scalerequests")) == 2
    assert world.api.made("events") == []  # still being written
    gate.set()
    await world.planner.told()
    assert world.api.events("TriggeredScaleUp")


async def test_each_batchs_events_are_written_after_the_batch_befores() -> None:
    clock = FakeClock()
    planner = Planner(
        plan_maker=SimpleNamespace(autoscalers=None),  # type: ignore[arg-type]
        decider=None,  # type: ignore[arg-type]
        verdicts=None,  # type: ignore[arg-type]
        wake=lambda _: None,
        clock=clock,
        parallelism=HAND_OVER_PARALLELISM,
    )
    written: list[str] = []
    first_may_end = asyncio.Event()

    def telling(name: str, *, hold: bool = False) -> Callable[[], Awaitable[None]]:
        async def tell() -> None:
            if hold:
                await first_may_end.wait()
            written.append(name)

        return tell

    planner._tell_after_batch([telling("first", hold=True)])
    planner._tell_after_batch([telling("second")])
    for _ in range(10):
        await asyncio.sleep(0)
    assert written == []  # the second batch's events wait for the first's
    first_may_end.set()
    await planner.told()
    assert written == ["first", "second"]


@pytest.mark.parametrize("drain", [True, False])
async def test_stopping_writes_the_waiting_events_only_when_draining(
    world: World, monkeypatch: pytest.MonkeyPatch, drain: bool
) -> None:
    """A shutdown drains; leadership lost does not: another replica may be deciding."""
    two_pools(world)
    gate = _events_held(world, monkeypatch)
    await world.planner.reconcile(PLAN)
    if drain:
        gate.set()
    await asyncio.wait_for(world.planner.stop(drain=drain), timeout=5)
    gate.set()
    for _ in range(10):
        await asyncio.sleep(0)
    assert bool(world.api.made("events")) is drain


async def test_no_scale_decision_while_most_of_the_cluster_is_unready(world: World) -> None:
    # 4 of 5 Nodes NotReady (more than 3 and more than 45%): a partition, a control plane
    # in trouble, rarely demand. As the NodePool controller holds its repairs, no request is
    # made for the pending pods; one Warning says why, and decisions resume after.
    world.pool(target=5)
    world.node("n0")
    for i in range(1, 5):
        world.node(f"n{i}", ready=False)
    for i in range(30):
        world.pod(f"p{i}")
    await world.reconcile()
    await world.reconcile()
    assert world.api.made("scalerequests") == []
    [held] = world.api.events("ScalingHeld")
    assert held["message"] == (
        "no scale decision: 4 of the cluster's 5 Nodes are unready, more than 3 and more "
        "than 45%; decisions resume once fewer are"
    )
    for i in range(1, 5):
        world.node(f"n{i}")
    await world.reconcile()
    [request] = world.api.made("scalerequests")
    assert request["spec"]["targetNodes"] > 5
    assert len(world.api.events("ScalingHeld")) == 1
