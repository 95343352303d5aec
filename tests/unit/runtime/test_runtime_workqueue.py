"""WorkQueue: client-go semantics for dedup, in-flight keys, delays, rate limits, shutdown."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import pytest
from prometheus_client import REGISTRY

from nodepool_operator.runtime import clock as clock_
from nodepool_operator.runtime import ratelimit, workqueue

_names = itertools.count()


def _unique_name() -> str:
    # Metrics are process-wide; a fresh `name` label per queue keeps tests independent.
    return f"test-queue-{next(_names)}"


async def _yield_to_loop(rounds: int = 10) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


async def _take(queue: workqueue.WorkQueue[str]) -> str:
    """get() for a key that must already be queued: fails at once rather than hanging."""
    assert len(queue) > 0, "expected a queued key"
    return await queue.get()


async def _result(task: asyncio.Task[str]) -> str:
    """The result of a worker that must have finished after a few loop iterations."""
    await _yield_to_loop()
    assert task.done(), "expected the worker to have been handed a key"
    return task.result()


async def _expect_shut_down(queue: workqueue.WorkQueue[str]) -> None:
    worker = asyncio.create_task(queue.get())
    await _yield_to_loop()
    assert worker.done(), "expected get() to raise ShutDown, not to wait"
    assert isinstance(worker.exception(), workqueue.ShutDown)


@pytest.fixture
def clock() -> clock_.FakeClock:
    return clock_.FakeClock()


@pytest.fixture
async def queue(clock: clock_.FakeClock) -> AsyncIterator[workqueue.WorkQueue[str]]:
    q: workqueue.WorkQueue[str] = workqueue.WorkQueue(name=_unique_name(), clock=clock)
    yield q
    q.shut_down()
    await _yield_to_loop()


async def test_adding_a_waiting_key_again_queues_it_once(
    queue: workqueue.WorkQueue[str],
) -> None:
    queue.add("a")
    queue.add("b")
    queue.add("a")
    assert len(queue) == 2
    assert len(queue) == 2
    assert await _take(queue) == "a"
    assert await _take(queue) == "b"
    assert len(queue) == 0


async def test_get_waits_until_a_key_is_added(queue: workqueue.WorkQueue[str]) -> None:
    getter = asyncio.create_task(queue.get())
    await _yield_to_loop()
    assert not getter.done()
    queue.add("a")
    assert await _result(getter) == "a"


async def test_key_in_flight_is_not_handed_out_again_until_done(
    queue: workqueue.WorkQueue[str],
) -> None:
    queue.add("a")
    key = await _take(queue)
    queue.add("a")
    assert len(queue) == 0
    second_worker = asyncio.create_task(queue.get())
    await _yield_to_loop()
    assert not second_worker.done()
    queue.done(key)
    assert await _result(second_worker) == "a"


async def test_key_added_while_processing_is_requeued_on_done(
    queue: workqueue.WorkQueue[str],
) -> None:
    queue.add("a")
    key = await _take(queue)
    queue.add("a")
    queue.add("a")
    queue.done(key)
    assert len(queue) == 1
    assert await _take(queue) == "a"


async def test_key_not_added_again_is_not_requeued_on_done(
    queue: workqueue.WorkQueue[str],
) -> None:
    queue.add("a")
    queue.done(await _take(queue))
    assert len(queue) == 0


async def test_stray_done_for_a_key_not_in_flight_changes_nothing(
    queue: workqueue.WorkQueue[str],
) -> None:
    queue.add("a")
    queue.done("a")
    queue.done("never-added")
    assert len(queue) == 1
    assert await _take(queue) == "a"
    assert len(queue) == 0


async def test_each_add_wakes_one_waiting_worker(queue: workqueue.WorkQueue[str]) -> None:
    workers = [asyncio.create_task(queue.get()) for _ in range(3)]
    await _yield_to_loop()
    queue.add("a")
    queue.add("b")
    await _yield_to_loop()
    finished = [worker for worker in workers if worker.done()]
    assert sorted(worker.result() for worker in finished) == ["a", "b"]
    queue.add("c")
    assert sorted([await _result(worker) for worker in workers]) == ["a", "b", "c"]


async def test_cancelled_worker_passes_its_wakeup_on_so_no_key_is_stranded(
    queue: workqueue.WorkQueue[str],
) -> None:
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await _yield_to_loop()
    queue.add("a")  # wakes `first`...
    first.cancel()  # ...which is cancelled before it runs
    assert await _result(second) == "a"
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_add_after_hands_out_the_key_once_the_delay_has_passed(
    queue: workqueue.WorkQueue[str], clock: clock_.FakeClock
) -> None:
    queue.add_after("a", 1.0)
    assert len(queue) == 0
    await clock.advance(0.5)
    assert len(queue) == 0
    await clock.advance(0.5)
    assert len(queue) == 1
    assert await _take(queue) == "a"


async def test_add_after_releases_keys_in_order_of_ready_time(
    queue: workqueue.WorkQueue[str], clock: clock_.FakeClock
) -> None:
    queue.add_after("c", 3.0)
    queue.add_after("a", 1.0)
    queue.add_after("b", 2.0)
    await clock.advance(1.0)
    assert len(queue) == 1
    await clock.advance(5.0)
    assert [await _take(queue) for _ in range(3)] == ["a", "b", "c"]


async def test_new_earliest_delay_cuts_the_current_wait_short(
    queue: workqueue.WorkQueue[str], clock: clock_.FakeClock
) -> None:
    queue.add_after("later", 10.0)
    await clock.wait_for_sleepers(1)
    queue.add_after("sooner", 1.0)
    await clock.advance(1.0)
    assert await _take(queue) == "sooner"
    assert len(queue) == 0
    await clock.advance(9.0)
    assert await _take(queue) == "later"


class _CoarseClock:
    """A clock whose sleeps end a hair before the deadline, like a coarse real timer."""

    def __init__(self) -> None:
        self._now = 0.0

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        self._now += max(0.0, seconds - 1e-9)
        await asyncio.sleep(0)


async def test_delay_ends_when_its_sleep_returns_even_if_the_clock_reads_early() -> None:
    queue: workqueue.WorkQueue[str] = workqueue.WorkQueue(name=_unique_name(), clock=_CoarseClock())
    try:
        queue.add_after("a", 1.0)
        await _yield_to_loop()
        assert await _take(queue) == "a"
    finally:
        queue.shut_down()


async def test_earlier_add_after_for_the_same_key_wins(
    queue: workqueue.WorkQueue[str], clock: clock_.FakeClock
) -> None:
    queue.add_after("late-then-early", 10.0)
    queue.add_after("late-then-early", 1.0)
    queue.add_after("early-then-late", 2.0)
    queue.add_after("early-then-late", 10.0)
    await clock.advance(2.0)
    assert [await _take(queue) for _ in range(2)] == ["late-then-early", "early-then-late"]
    queue.done("late-then-early")
    queue.done("early-then-late")
    await clock.advance(20.0)
    assert len(queue) == 0


async def test_add_after_without_delay_adds_at_once(queue: workqueue.WorkQueue[str]) -> None:
    queue.add_after("a", 0)
    queue.add_after("b", -1.0)
    assert len(queue) == 2


async def test_delayed_key_that_is_already_queued_is_not_queued_twice(
    queue: workqueue.WorkQueue[str], clock: clock_.FakeClock
) -> None:
    queue.add("a")
    queue.add_after("a", 1.0)
    await clock.advance(1.0)
    assert len(queue) == 1


async def test_add_rate_limited_delays_by_the_rate_limiter_and_counts_requeues(
    clock: clock_.FakeClock,
) -> None:
    limiter: ratelimit.ItemExponentialFailureRateLimiter[str] = (
        ratelimit.ItemExponentialFailureRateLimiter(base_delay=1.0, max_delay=60.0)
    )
    queue: workqueue.WorkQueue[str] = workqueue.WorkQueue(
        name=_unique_name(), clock=clock, rate_limiter=limiter
    )
    for expected_delay in (1.0, 2.0, 4.0):
        queue.add_rate_limited("a")
        await clock.wait_for_sleepers(1)
        assert clock.next_deadline() == pytest.approx(clock.now() + expected_delay)
        await clock.advance(expected_delay)
        queue.done(await _take(queue))
    assert queue.num_requeues("a") == 3
    queue.forget("a")
    assert queue.num_requeues("a") == 0
    queue.add_rate_limited("a")
    await clock.wait_for_sleepers(1)
    assert clock.next_deadline() == pytest.approx(clock.now() + 1.0)
    queue.shut_down()


async def test_default_rate_limiter_starts_at_5ms(
    queue: workqueue.WorkQueue[str], clock: clock_.FakeClock
) -> None:
    queue.add_rate_limited("a")
    await clock.wait_for_sleepers(1)
    assert clock.next_deadline() == pytest.approx(0.005)
    assert queue.num_requeues("a") == 1


async def test_after_shut_down_get_hands_out_what_is_queued_then_raises(
    queue: workqueue.WorkQueue[str],
) -> None:
    queue.add("a")
    queue.shut_down()
    assert queue.shutting_down
    assert await _take(queue) == "a"
    await _expect_shut_down(queue)


async def test_shut_down_wakes_waiting_workers_with_shut_down(
    queue: workqueue.WorkQueue[str],
) -> None:
    workers = [asyncio.create_task(queue.get()) for _ in range(2)]
    await _yield_to_loop()
    queue.shut_down()
    await _yield_to_loop()
    assert all(isinstance(worker.exception(), workqueue.ShutDown) for worker in workers)


async def test_adds_after_shut_down_are_ignored(
    queue: workqueue.WorkQueue[str], clock: clock_.FakeClock
) -> None:
    queue.shut_down()
    queue.add("a")
    queue.add_after("b", 1.0)
    queue.add_rate_limited("c")
    await clock.advance(10.0)
    assert len(queue) == 0
    await _expect_shut_down(queue)


async def test_shut_down_drops_delayed_keys_and_stops_waiting_on_the_clock(
    queue: workqueue.WorkQueue[str], clock: clock_.FakeClock
) -> None:
    queue.add_after("a", 1.0)
    await clock.wait_for_sleepers(1)
    queue.shut_down()
    await clock.advance(0)
    assert clock.sleepers == 0
    await clock.advance(2.0)
    assert len(queue) == 0


async def test_shut_down_with_drain_waits_for_keys_in_flight(
    queue: workqueue.WorkQueue[str],
) -> None:
    queue.add("a")
    queue.add("b")
    first = await _take(queue)
    second = await _take(queue)
    drain = asyncio.create_task(queue.shut_down_with_drain())
    await _yield_to_loop()
    assert not drain.done()
    queue.add("c")
    assert len(queue) == 0
    queue.done(first)
    await _yield_to_loop()
    assert not drain.done()
    queue.done(second)
    await _yield_to_loop()
    assert drain.done()
    await _expect_shut_down(queue)


async def test_shut_down_with_drain_returns_at_once_when_nothing_is_in_flight(
    queue: workqueue.WorkQueue[str],
) -> None:
    await queue.shut_down_with_drain()
    assert queue.shutting_down


async def test_shut_down_releases_a_pending_drain(queue: workqueue.WorkQueue[str]) -> None:
    queue.add("a")
    await _take(queue)
    drain = asyncio.create_task(queue.shut_down_with_drain())
    await _yield_to_loop()
    assert not drain.done()
    queue.shut_down()
    await _yield_to_loop()
    assert drain.done()


def _sample(metric: str, name: str) -> float:
    value = REGISTRY.get_sample_value(metric, {"name": name})
    return 0.0 if value is None else value


async def test_queue_records_controller_runtime_workqueue_metrics(
    queue: workqueue.WorkQueue[str], clock: clock_.FakeClock
) -> None:
    name = queue.name
    queue.add("a")
    queue.add("a")
    queue.add("b")
    assert _sample("workqueue_adds_total", name) == 2
    assert _sample("workqueue_depth", name) == 2

    await clock.advance(2.0)
    key = await _take(queue)
    assert _sample("workqueue_depth", name) == 1
    assert _sample("workqueue_queue_duration_seconds_sum", name) == pytest.approx(2.0)

    await clock.advance(3.0)
    assert _sample("workqueue_unfinished_work_seconds", name) == pytest.approx(3.0)
    assert _sample("workqueue_longest_running_processor_seconds", name) == pytest.approx(3.0)
    queue.done(key)
    assert _sample("workqueue_work_duration_seconds_sum", name) == pytest.approx(3.0)
    assert _sample("workqueue_work_duration_seconds_count", name) == 1
    assert _sample("workqueue_unfinished_work_seconds", name) == 0

    queue.add_after("c", 1.0)
    queue.add_rate_limited("d")
    assert _sample("workqueue_retries_total", name) == 2
