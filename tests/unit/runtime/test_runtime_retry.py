"""retry_on_conflict: re-runs the read-modify-write on 409 only, client-go DefaultRetry."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from nodepool_operator.runtime import clock as clock_
from nodepool_operator.runtime import errors, retry


class Writer:
    """A read-modify-write that fails with the given errors first, then succeeds."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return f"written on call {self.calls}"


async def _sleeps_until_done(clock: clock_.FakeClock, task: asyncio.Task[str]) -> list[float]:
    """Run `task` to the end on the fake clock; return the length of each sleep it took."""
    sleeps: list[float] = []
    while True:
        await clock.advance(0)
        if task.done():
            return sleeps
        deadline = clock.next_deadline()
        assert deadline is not None, "the task neither finished nor slept"
        sleeps.append(deadline - clock.now())
        await clock.advance(deadline - clock.now())


def test_default_retry_matches_client_go() -> None:
    # (duration, factor, jitter, steps, cap), as in k8s.io/client-go/util/retry.
    assert dataclasses.astuple(retry.DEFAULT_RETRY) == (0.010, 1.0, 0.1, 5, 0.0)


async def test_conflicts_are_retried_until_the_write_succeeds() -> None:
    clock = clock_.FakeClock()
    writer = Writer(errors.Conflict("modified"), errors.Conflict("modified again"))
    task = asyncio.create_task(retry.retry_on_conflict(writer, clock=clock))
    sleeps = await _sleeps_until_done(clock, task)
    assert task.result() == "written on call 3"
    assert writer.calls == 3
    assert len(sleeps) == 2


async def test_first_success_returns_without_sleeping() -> None:
    clock = clock_.FakeClock()
    writer = Writer()
    assert await retry.retry_on_conflict(writer, clock=clock) == "written on call 1"
    assert clock.now() == 0.0


async def test_gives_up_after_five_attempts_raising_the_last_conflict() -> None:
    clock = clock_.FakeClock()
    writer = Writer(*(errors.Conflict(f"conflict {n}") for n in range(1, 10)))
    task = asyncio.create_task(retry.retry_on_conflict(writer, clock=clock))
    sleeps = await _sleeps_until_done(clock, task)
    with pytest.raises(errors.Conflict, match="conflict 5"):
        task.result()
    assert writer.calls == 5
    assert len(sleeps) == 4


async def test_sleeps_are_10ms_stretched_by_at_most_10_percent_jitter() -> None:
    clock = clock_.FakeClock()
    observed: list[float] = []
    for _ in range(5):
        writer = Writer(*(errors.Conflict() for _ in range(5)))
        task = asyncio.create_task(retry.retry_on_conflict(writer, clock=clock))
        observed += await _sleeps_until_done(clock, task)
        assert isinstance(task.exception(), errors.Conflict)
    assert len(observed) == 20
    assert all(0.010 - 1e-12 <= sleep <= 0.011 + 1e-12 for sleep in observed)
    # Jitter is random: twenty sleeps all exactly 10 ms would mean it is not applied.
    assert len({round(sleep, 9) for sleep in observed}) > 1


async def test_invalid_is_raised_at_once_after_one_call() -> None:
    clock = clock_.FakeClock()
    writer = Writer(errors.Invalid("spec.targetNodes: must be >= 0"), errors.Conflict())
    with pytest.raises(errors.Invalid):
        await retry.retry_on_conflict(writer, clock=clock)
    assert writer.calls == 1
    assert clock.sleepers == 0


@pytest.mark.parametrize(
    "failure",
    [
        errors.AlreadyExists(),
        errors.NotFound(),
        errors.Forbidden(),
        errors.TooManyRequests(retry_after=1.0),
        errors.InternalError(),
        errors.ConnectionFailed(),
        ValueError("a bug"),
    ],
)
async def test_anything_but_a_conflict_is_raised_at_once(failure: Exception) -> None:
    writer = Writer(failure)
    with pytest.raises(type(failure)):
        await retry.retry_on_conflict(writer, clock=clock_.FakeClock())
    assert writer.calls == 1


async def test_conflict_after_other_errors_is_not_reached() -> None:
    writer = Writer(errors.Conflict(), errors.Invalid(), errors.Conflict())
    clock = clock_.FakeClock()
    task = asyncio.create_task(retry.retry_on_conflict(writer, clock=clock))
    await _sleeps_until_done(clock, task)
    assert isinstance(task.exception(), errors.Invalid)
    assert writer.calls == 2


async def test_raw_409_from_kubernetes_asyncio_is_recognised_as_a_conflict() -> None:
    raw = ApiException(status=409, reason="Conflict")
    raw.body = json.dumps({"kind": "Status", "reason": "Conflict", "code": 409})
    writer = Writer(raw)
    clock = clock_.FakeClock()
    task = asyncio.create_task(retry.retry_on_conflict(writer, clock=clock))
    await _sleeps_until_done(clock, task)
    assert task.result() == "written on call 2"


async def test_raw_422_from_kubernetes_asyncio_is_raised_typed() -> None:
    raw = ApiException(status=422, reason="Unprocessable Entity")
    writer = Writer(raw)
    with pytest.raises(errors.Invalid) as caught:
        await retry.retry_on_conflict(writer, clock=clock_.FakeClock())
    assert caught.value.__cause__ is raw
    assert writer.calls == 1


async def test_retry_on_error_grows_sleeps_by_the_factor() -> None:
    clock = clock_.FakeClock()
    writer = Writer(*(errors.ServerTimeout() for _ in range(10)))
    task = asyncio.create_task(
        retry.retry_on_error(
            writer,
            retriable=lambda error: isinstance(error, errors.ServerError),
            # client-go's retry.DefaultBackoff.
            backoff=retry.Backoff(duration=0.010, factor=5.0, jitter=0.1, steps=4),
            clock=clock,
        )
    )
    sleeps = await _sleeps_until_done(clock, task)
    assert isinstance(task.exception(), errors.ServerTimeout)
    assert writer.calls == 4
    for sleep, base in zip(sleeps, (0.010, 0.050, 0.250), strict=True):
        assert base - 1e-12 <= sleep <= base * 1.1 + 1e-12


async def test_reaching_the_cap_ends_the_retries_as_in_client_go() -> None:
    clock = clock_.FakeClock()
    writer = Writer(*(errors.Conflict() for _ in range(10)))
    backoff = retry.Backoff(duration=1.0, factor=2.0, steps=10, cap=3.0)
    task = asyncio.create_task(retry.retry_on_conflict(writer, backoff=backoff, clock=clock))
    sleeps = await _sleeps_until_done(clock, task)
    # Sleep 1 s, then 2 s; the next would be 4 s > cap, which zeroes the steps left.
    assert sleeps == [1.0, 2.0]
    assert writer.calls == 2
    assert isinstance(task.exception(), errors.Conflict)


def test_backoff_needs_at_least_one_step_and_no_negative_values() -> None:
    with pytest.raises(ValueError, match="at least one step"):
        retry.Backoff(duration=0.01, steps=0)
    with pytest.raises(ValueError, match="negative"):
        retry.Backoff(duration=-0.01)
