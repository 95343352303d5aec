"""The budget for removals of the NodePool controller's own initiative: a burst at once,
then one token per interval, a reserved token used when due and never asked for twice."""

from __future__ import annotations

from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.controllers.nodepool.removals import RemovalBudget
from nodepool_operator.runtime import clock as clock_module

CONFIG = NodePoolConfig(node_deletions_per_minute=6.0, node_deletion_burst=2)


async def test_a_burst_goes_at_once_then_the_next_removal_waits_for_its_token() -> None:
    clock = clock_module.FakeClock()
    budget = RemovalBudget(config=CONFIG, clock=clock)

    assert [budget.take("p"), budget.take("p")] == [0.0, 0.0]
    assert budget.take("p") == 10.0  # six a minute: the reserved token is due in 10 s
    assert budget.reserved_in("p") == 10.0
    assert budget.take("other") == 0.0  # each pool has its own bucket


async def test_a_reserved_token_is_used_when_due_and_not_reserved_again_meanwhile() -> None:
    clock = clock_module.FakeClock()
    budget = RemovalBudget(config=CONFIG, clock=clock)
    budget.take("p")
    budget.take("p")
    budget.take("p")

    await clock.advance(4)
    assert budget.take("p") == 6.0  # the same reservation, not a second one
    await clock.advance(6)
    assert budget.take("p") == 0.0  # its token, used now
    assert budget.reserved_in("p") is None


async def test_a_pool_that_is_gone_is_forgotten() -> None:
    budget = RemovalBudget(config=CONFIG, clock=clock_module.FakeClock())
    budget.take("p")
    budget.forget_pool("p")
    assert budget.reserved_in("p") is None
    assert budget._buckets == {}
