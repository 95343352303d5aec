"""The differential test: the Autoscaler's simulation against the real kube-scheduler.

Twenty seeded random workloads (``tests/differential.py``) are provisioned by the
operator on the real control plane, four at a time, each with a system node of no pool,
startup taints an agent removes, an arm64 pool, and sometimes pods on a zonal static
PersistentVolume. No pod may be *misplaced*: pending
without a NotTriggerScaleUp event once its seed settles, i.e. counted by the simulation
on room the real scheduler did not or could not use. The figures are printed (run with
``-s``); ``bench/scheduler_differential.py`` runs more seeds.
"""

from __future__ import annotations

import pytest

import differential
from e2e.scenes import World

SEEDS = list(range(20))


@pytest.mark.slow
# Up to 60 pools' nodes boot, settle and are removed; on a loaded machine this outlasts
# the suite's 300 s default.
@pytest.mark.timeout(900)
async def test_no_pod_is_counted_on_room_the_real_scheduler_does_not_use(world: World) -> None:
    _, operator = await world.operated(latency=1, jitter=0.5)
    results = await differential.run_seeds(world.api_client, SEEDS)
    print("\n" + differential.table(results))
    for result in results:
        assert result.misplaced == [], (result.seed, result.kinds, result.misplaced)
        assert result.nodes >= result.lower_bound, result
    assert sum(r.pods for r in results) >= 100  # the workloads are not trivially small
    assert operator.errors_logged() == []
