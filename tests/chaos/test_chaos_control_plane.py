"""kube-apiserver restarted in the middle of a scale, and an etcd compaction at the
current revision that answers every resumed watch with 410 Gone."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from chaos.fleet import Bound, Fleet, RateSampler, settle_and_check, summary
from chaos.settings import SETTINGS
from harness import wait_for

# One pool; each restart makes the operator re-list and re-watch (see ``Bound``).
BOUND = Bound(api=30, cloud=15)


async def test_apiserver_restarts_and_etcd_compaction_lose_nothing(
    fleet: Fleet, record_figures: Any
) -> None:
    rng = random.Random(SETTINGS.seed)
    await fleet.start_cloud()
    operator = fleet.start_operator()
    name = await fleet.create_pool(2)
    await fleet.started(operator)
    async with RateSampler(fleet) as sampler:
        for step in range(SETTINGS.apiserver_restarts):
            await fleet.set_target(name, 8 if step % 2 == 0 else 3)
            await asyncio.sleep(rng.uniform(0.3, 1.5))  # mid-scale
            await fleet.restart_apiserver()
        # The operator frozen while the API server restarts (a stopping server may send
        # its watchers a last bookmark: the newest resourceVersion), then the user edits
        # the pool and etcd is compacted at its current revision: once resumed, the
        # operator's watches resume from a resourceVersion etcd no longer has, so 410
        # Gone, then a re-LIST. (Running, it would reconnect within the restart, be
        # refused while the server's authorizer warms up, and re-LIST for that instead.)
        fleet.pause(operator)
        try:
            await fleet.restart_apiserver()
            await fleet.operator_authorized()
            await fleet.set_target(name, 6)
            await fleet.compact_etcd()
        finally:
            fleet.resume(operator)

        async def relisted() -> bool:
            return "event=watch-expired action=relist" in operator.output()

        await wait_for(relisted, within=120)
        await fleet.set_target(name, 5)
    broken = await settle_and_check(fleet)
    broken += BOUND.check(sampler.rates)
    figures = summary(fleet, sampler.rates, broken)
    figures["watches_expired"] = operator.output().count("event=watch-expired")
    record_figures(figures)
    print(figures)
    assert broken == [], "\n".join(broken)
    assert operator.running
