"""A pool whose every zone is backed off (``status.zoneBackoffs``, written by the NodePool
controller) is planned as unable to grow: no ScaleRequest for it, and the pods it would
have got are told why; once the backoff is over it grows again."""

from __future__ import annotations

import copy

from nodepool_operator.runtime import conditions
from unit.autoscaler.test_autoscaler_reconcile import POOL, FixedWallClock, World
from unit.autoscaler.test_autoscaler_reconcile import world as world  # the fixture

NOW = FixedWallClock().time()


def back_off(world: World, *, until: float) -> None:
    world.reconciler.observer.wall_clock = FixedWallClock()  # the backoff's clock too
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
