"""The cloud misbehaving: 30 % transient errors (half of them after the call took
effect, so the answer is lost), slow calls, the process SIGKILLed and restarted, and a
quota the pool runs into; the user edits the pool meanwhile."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from chaos.fleet import Bound, Fleet, RateSampler, settle_and_check, summary
from chaos.settings import SETTINGS
from harness import POOLS, wait_for
from nodepool_operator.cloud.simcloud import wire

ERRORS = wire.Faults(transient_error_rate=0.3, slow_call_seconds=0.3)
# One pool; a refused create pauses the pool's creations 10 s, doubling (see ``Bound``).
BOUND = Bound(api=30, cloud=15)


async def quota_refusal_shown(fleet: Fleet, name: str) -> bool:
    pool = await fleet.custom.get_cluster_custom_object(*POOLS, name)
    return any(
        c["type"] == "Degraded" and c["status"] == "True" and c.get("reason") == "QuotaExceeded"
        for c in (pool.get("status") or {}).get("conditions") or []
    )


async def test_cloud_errors_slowness_restarts_and_quota_lose_nothing(
    fleet: Fleet, record_figures: Any
) -> None:
    rng = random.Random(SETTINGS.seed)
    await fleet.start_cloud(
        "--transient-error-rate",
        str(ERRORS.transient_error_rate),
        "--slow-calls",
        str(ERRORS.slow_call_seconds),
        "--seed",
        str(SETTINGS.seed),
    )
    operator = fleet.start_operator()
    name = await fleet.create_pool(1)
    await fleet.started(operator)
    async with RateSampler(fleet) as sampler:
        await fleet.set_target(name, 5)
        await asyncio.sleep(rng.uniform(0.5, 2.0))
        await fleet.set_target(name, 7)  # the user changes their mind mid-scale
        for _ in range(SETTINGS.cloud_restarts):
            await asyncio.sleep(rng.uniform(0.5, 3.0))
            await fleet.restart_cloud()
        # The account's quota: two VMs short of the next target, then lifted again. Alone,
        # so that each refusal is the operator's choice to ask again, not an error's.
        vms = len(await fleet.cloud_client.list_vms(pool=name))
        await fleet.cloud_client.set_faults(wire.Faults(quota_max_vms=vms + 2))
        await fleet.set_target(name, vms + 4)
        await wait_for(lambda: quota_refusal_shown(fleet, name), within=60)
        await fleet.set_target(name, vms + 3)  # a new generation ends the pause: one retry
        await asyncio.sleep(8)
        fleet.faults += 1
        await fleet.cloud_client.set_faults(wire.Faults())  # the checks list VMs too
        await fleet.set_target(name, vms + 4)  # and the user's next edit gets the VMs
    responses = await fleet.cloud_responses()
    broken = await settle_and_check(fleet)
    broken += BOUND.check(sampler.rates)
    figures = summary(fleet, sampler.rates, broken)
    figures["cloud_answers"] = dict(sorted(responses.items()))
    record_figures(figures)
    print(figures)
    assert broken == [], "\n".join(broken)
    # The faults did reach the operator: errors before and after effect, and the quota.
    assert responses[503] > 0
    assert responses[500] > 0
    assert responses[403] > 0
    assert operator.running
