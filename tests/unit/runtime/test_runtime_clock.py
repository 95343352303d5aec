"""FakeClock: time moves only when a test advances it, and sleepers wake in deadline order."""

from __future__ import annotations

import asyncio

import pytest

from nodepool_operator.runtime import clock as clock_


async def test_sleep_returns_only_once_time_reaches_the_deadline() -> None:
    clock = clock_.FakeClock(start=100.0)
    sleeper = asyncio.create_task(clock.sleep(2.0))
    await clock.advance(1.5)
    assert not sleeper.done()
    await clock.advance(0.5)
    assert sleeper.done()
    assert clock.now() == 102.0


async def test_advance_wakes_sleepers_in_deadline_order_each_at_its_deadline() -> None:
    clock = clock_.FakeClock()
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append((name, clock.now()))

    tasks = [
        asyncio.create_task(sleeper("late", 3.0)),
        asyncio.create_task(sleeper("early", 1.0)),
        asyncio.create_task(sleeper("middle", 2.0)),
    ]
    await clock.advance(10.0)
    assert woke == [("early", 1.0), ("middle", 2.0), ("late", 3.0)]
    assert clock.now() == 10.0
    await asyncio.gather(*tasks)


async def test_a_task_that_sleeps_again_is_woken_again_within_one_advance() -> None:
    clock = clock_.FakeClock()
    ticks: list[float] = []

    async def ticker() -> None:
        for _ in range(3):
            await clock.sleep(1.0)
            ticks.append(clock.now())

    task = asyncio.create_task(ticker())
    await clock.advance(2.5)
    assert ticks == [1.0, 2.0]
    await clock.advance(0.5)
    assert ticks == [1.0, 2.0, 3.0]
    await task


async def test_sleepers_counts_waiting_sleeps_and_not_cancelled_ones() -> None:
    clock = clock_.FakeClock()
    first = asyncio.create_task(clock.sleep(1.0))
    second = asyncio.create_task(clock.sleep(5.0))
    await clock.wait_for_sleepers(2)
    assert clock.sleepers == 2
    assert clock.next_deadline() == 1.0
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    assert clock.sleepers == 1
    assert clock.next_deadline() == 5.0
    await clock.advance(5.0)
    assert second.done()
    assert clock.sleepers == 0
    assert clock.next_deadline() is None


async def test_sleep_of_zero_yields_without_waiting_for_the_clock() -> None:
    clock = clock_.FakeClock()
    await clock.sleep(0)
    await clock.sleep(-1.0)
    assert clock.sleepers == 0
    assert clock.now() == 0.0


async def test_time_cannot_go_back() -> None:
    clock = clock_.FakeClock()
    with pytest.raises(ValueError, match="cannot go back"):
        await clock.advance(-1.0)


async def test_waiting_for_a_sleeper_that_never_comes_fails_instead_of_hanging() -> None:
    clock = clock_.FakeClock()
    with pytest.raises(RuntimeError, match="expected 1 sleepers"):
        await clock.wait_for_sleepers(1)


async def test_real_clock_is_monotonic_and_sleeps_through_asyncio() -> None:
    real = clock_.RealClock()
    before = real.now()
    await real.sleep(0)
    assert real.now() >= before
