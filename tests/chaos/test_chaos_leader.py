"""Two replicas with leader election; the leader SIGKILLed, or paused (SIGSTOP) past its
lease and resumed (SIGCONT) while a successor acts, in the middle of scales."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from chaos.fleet import Bound, Fleet, RateSampler, settle_and_check, summary
from chaos.settings import SETTINGS
from harness import Operator, wait_for

ELECTED = "event=elected"
# One pool, two replicas renewing or polling the lease every 2 s (see ``Bound``).
BOUND = Bound(api=30, cloud=15)
#: Longer than the lease (15 s): a successor takes over while the leader is paused.
PAUSE_SECONDS = 20.0


def replica(fleet: Fleet) -> Operator:
    return fleet.start_operator("--leader-elect")


async def test_leader_killed_or_paused_mid_scale_loses_nothing(
    fleet: Fleet, record_figures: Any
) -> None:
    rng = random.Random(SETTINGS.seed)
    await fleet.start_cloud()
    replica(fleet)
    replica(fleet)
    name = await fleet.create_pool(2)
    targets = iter(rng.sample(range(1, 10), 9) * 2)
    async with RateSampler(fleet) as sampler:
        for _ in range(SETTINGS.leader_kills):
            leader = await fleet.leader()
            await fleet.set_target(name, next(targets))
            await asyncio.sleep(rng.uniform(0.3, 1.5))
            fleet.crash(leader)
            replica(fleet)  # its Deployment would start another Pod
            assert await fleet.leader() is not leader
        for _ in range(SETTINGS.leader_pauses):
            leader = await fleet.leader()
            await fleet.set_target(name, next(targets))
            await asyncio.sleep(rng.uniform(0.3, 1.5))
            fleet.pause(leader)
            await fleet.set_target(name, next(targets))  # while the leader is frozen
            await asyncio.sleep(PAUSE_SECONDS)
            fleet.resume(leader)

            async def stood_down(paused: Operator = leader) -> bool:
                # It finds its lease taken, stops acting and exits, as controller-runtime
                # does; its Deployment would start another Pod.
                return "event=leadership-lost" in paused.output() and not paused.running

            await wait_for(stood_down, within=60)
            replica(fleet)
            assert await fleet.leader() is not leader
    broken = await settle_and_check(fleet)
    broken += BOUND.check(sampler.rates)
    figures = summary(fleet, sampler.rates, broken)
    figures["elections"] = sum(o.output().count(ELECTED) for o in fleet.operators)
    record_figures(figures)
    print(figures)
    assert broken == [], "\n".join(broken)
