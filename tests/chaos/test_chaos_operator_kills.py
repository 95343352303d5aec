"""SIGKILL of the operator at seeded random moments of scale-ups, scale-downs and pool
deletions, restarted at once each time; the user keeps editing the pools meanwhile."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from chaos.fleet import Bound, Fleet, RateSampler, settle_and_check, summary
from chaos.settings import SETTINGS

# Two pools scaling at once and a restart every few seconds (see ``Bound``).
BOUND = Bound(api=40, cloud=20)


async def user_action(fleet: Fleet, rng: random.Random, step: int) -> str:
    """The next edit, in turn a scale-up, a scale-down and a deletion (with a new pool)."""
    name = rng.choice(fleet.live_pools())
    current = fleet.pools[name].target
    kind = ("scale-up", "scale-down", "delete")[step % 3]
    if kind == "scale-up":
        await fleet.set_target(name, rng.randint(min(current + 1, 8), 8))
    elif kind == "scale-down":
        await fleet.set_target(name, rng.randint(0, max(current - 1, 0)))
    else:
        await fleet.delete_pool(name)
        await fleet.create_pool(rng.randint(1, 5))
    return kind


async def test_operator_killed_at_random_moments_loses_nothing(
    fleet: Fleet, record_figures: Any
) -> None:
    rng = random.Random(SETTINGS.seed)
    await fleet.start_cloud()
    operator = fleet.start_operator()
    for _ in range(2):
        await fleet.create_pool(rng.randint(2, 5))
    await fleet.started(operator)
    kinds: list[str] = []
    async with RateSampler(fleet) as sampler:
        for step in range(SETTINGS.operator_kills):
            kinds.append(await user_action(fleet, rng, step))
            # A random moment of the work the edit started, after the replacement came up.
            await asyncio.sleep(rng.uniform(0.0, 3.0))
            fleet.crash(operator)
            operator = fleet.start_operator()
            await fleet.started(operator)
    broken = await settle_and_check(fleet)
    broken += BOUND.check(sampler.rates)
    figures = summary(fleet, sampler.rates, broken)
    figures["edits"] = {kind: kinds.count(kind) for kind in sorted(set(kinds))}
    record_figures(figures)
    print(figures)
    assert broken == [], "\n".join(broken)
    assert fleet.crashes == SETTINGS.operator_kills
