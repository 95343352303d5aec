"""A pool whose every zone is backed off (``status.zoneBackoffs``, written by the NodePool
controller) is planned as unable to grow: no ScaleRequest for it, and the pods it would
have got are told why; once the backoff is over it grows again. A pool whose VM creations
the cloud paused (``status.cloudPause``, a quota) is planned the same way until the pause ends."""

from __future__ import annotations

import copy

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.runtime import conditions
from nodepool_operator.runtime.testing import FakeWallClock
from unit.autoscaler.reconcile_world import POOL, TOLD_PER_REQUEST, World

NOW = FakeWallClock().time()


def back_off(world: World, *, until: float) -> None:
    world.planner.plan_maker.wall_clock = FakeWallClock()  # the backoff's clock too
    pool = world.pools.get(POOL)
    assert pool is not None
    body = copy.deepcopy(pool)
    body["status"] = {
        "zoneBackoffs": [
            {
                "zone": "",
                "reason": "InsufficientCapacity",
                "failures": 1,
                "until": conditions.rfc3339(until),
            }
        ]
    }
    world.pools.put(world._stamp(body))


async def test_a_pool_that_cannot_grow_gets_no_request_and_its_pods_are_told_why(
    world: World,
) -> None:
    back_off(world, until=NOW + 60)
    for i in range(3):
        world.pod(f"p{i}")

    await world.reconcile()

    assert world.api.made("scalerequests") == []
    told = world.api.events("NotTriggerScaleUp")
    assert sorted(e["involvedObject"]["name"] for e in told) == ["p0", "p1", "p2"]
    assert all(f"NodePool {POOL} cannot grow: InsufficientCapacity" in e["message"] for e in told)


async def test_a_pool_whose_backoff_is_over_grows_again(world: World) -> None:
    back_off(world, until=NOW - 1)
    for i in range(3):
        world.pod(f"p{i}")

    await world.reconcile()

    [request] = world.api.made("scalerequests")
    assert request["spec"]["targetNodes"] == 1
    assert world.api.events("NotTriggerScaleUp") == []


async def test_pods_sent_past_a_preferred_pool_that_cannot_grow_are_told_why(
    world: World,
) -> None:
    # A heavier pool, every zone backed off, that an Autoscaler of its own plans for: the
    # pods go to the lighter pool, and each of them is told why it was not the first.
    spec = nodepool_api.NodePoolSpec(
        weight=10, template=nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=110)
    )
    preferred = nodepool_api.manifest("preferred", spec)
    preferred["metadata"].update(uid="uid-preferred", generation=1)
    preferred["status"] = {
        "zoneBackoffs": [
            {
                "zone": "",
                "reason": "InsufficientCapacity",
                "failures": 1,
                "until": conditions.rfc3339(NOW + 60),
            }
        ]
    }
    world.pools.put(world._stamp(preferred))
    planner = autoscaler_api.manifest(
        "nas-preferred", autoscaler_api.AutoscalerSpec(node_pool_name="preferred")
    )
    planner["metadata"].update(uid="uid-nas-preferred", generation=1)
    world.autoscalers.put(world._stamp(planner))
    world.planner.plan_maker.wall_clock = FakeWallClock()
    for i in range(TOLD_PER_REQUEST + 2):
        world.pod(f"p{i}")

    await world.reconcile()

    [request] = world.api.made("scalerequests")
    assert request["spec"]["nodePoolName"] == POOL
    told = world.api.events("TriggeredScaleUp")
    assert sorted(e["involvedObject"]["name"] for e in told) == sorted(
        f"p{i}" for i in range(TOLD_PER_REQUEST + 2)
    )  # every pod sent elsewhere, past the usual few per request
    assert all(
        "NodePool preferred, ranked first for it, cannot grow: InsufficientCapacity" in e["message"]
        for e in told
    ), [e["message"] for e in told]


async def test_pods_a_heavier_pool_could_not_host_anyway_get_no_note(world: World) -> None:
    world.pod("p0")

    await world.reconcile()

    [told] = world.api.events("TriggeredScaleUp")
    assert "ranked first" not in told["message"]


async def test_a_pool_in_a_cloud_pause_gets_no_request_until_the_pause_ends(world: World) -> None:
    world.planner.plan_maker.wall_clock = FakeWallClock()
    pool = world.pools.get(POOL)
    assert pool is not None
    body = copy.deepcopy(pool)
    generation = int(body["metadata"].get("generation") or 0)
    body["status"] = {
        "cloudPause": {
            "reason": "QuotaExceeded",
            "message": "vCPU limit reached",
            "failures": 2,
            "until": conditions.rfc3339(NOW + 20),
            "generation": generation,
        }
    }
    world.pools.put(world._stamp(body))
    for i in range(2):
        world.pod(f"p{i}")

    await world.reconcile()

    assert world.api.made("scalerequests") == []
    told = world.api.events("NotTriggerScaleUp")
    assert sorted(e["involvedObject"]["name"] for e in told) == ["p0", "p1"]
    assert all("QuotaExceeded" in e["message"] for e in told)
