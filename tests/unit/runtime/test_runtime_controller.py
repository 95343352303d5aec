"""Controller: what follows each reconcile outcome, concurrency limits, watches and predicates.

Everything runs on a fake clock: backoffs of 5 ms or 1000 s cost the same, no sleep is real.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY

from nodepool_operator.runtime import clock as clock_
from nodepool_operator.runtime import errors
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.controller import (
    PERMANENT_ERROR_RECHECK_SECONDS,
    Controller,
    GenerationChanged,
    Request,
    Result,
    StateChanged,
    any_of,
    map_to_self,
)
from nodepool_operator.runtime.informer import EventHandler

_names = itertools.count()
A = Request("a", "ns")


async def _settle(rounds: int = 30) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


class Script:
    """A reconciler that plays back one outcome per call (a Result, or an error to raise)."""

    def __init__(self, clock: clock_.FakeClock, *outcomes: Result | Exception) -> None:
        self.clock = clock
        self.outcomes = list(outcomes)
        self.calls: list[tuple[Request, float]] = []

    async def reconcile(self, request: Request) -> Result:
        self.calls.append((request, self.clock.now()))
        outcome = self.outcomes.pop(0) if self.outcomes else Result()
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    @property
    def times(self) -> list[float]:
        return [at for _, at in self.calls]


class Gate:
    """A reconciler that holds every reconcile until released, tracking concurrency."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.in_flight: Counter[Request] = Counter()
        self.max_in_flight = 0
        self.max_per_key = 0
        self.done: list[Request] = []

    async def reconcile(self, request: Request) -> Result:
        self.in_flight[request] += 1
        self.max_per_key = max(self.max_per_key, self.in_flight[request])
        self.max_in_flight = max(self.max_in_flight, sum(self.in_flight.values()))
        try:
            await self.release.wait()
        finally:
            self.in_flight[request] -= 1
        self.done.append(request)
        return Result()

    @property
    def running(self) -> int:
        return sum(self.in_flight.values())


class StubInformer:
    """Only what `Controller.watch` uses of an informer: it registers a handler."""

    def __init__(self) -> None:
        self.handlers: list[EventHandler] = []

    def add_handler(self, handler: EventHandler) -> None:
        self.handlers.append(handler)


@pytest.fixture
def clock() -> clock_.FakeClock:
    return clock_.FakeClock()


@pytest.fixture
async def make(clock: clock_.FakeClock) -> AsyncIterator[Callable[..., Controller]]:
    """Builds controllers on the fake clock, each with a metrics name of its own."""
    controllers: list[Controller] = []

    def make(reconciler: Any, **options: Any) -> Controller:
        controller = Controller(
            name=f"test-controller-{next(_names)}", reconciler=reconciler, clock=clock, **options
        )
        controllers.append(controller)
        return controller

    yield make
    for controller in controllers:
        controller.queue.shut_down()
        for worker in controller._workers:
            worker.cancel()
        await asyncio.gather(*controller._workers, return_exceptions=True)


def _metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


# -- outcomes ------------------------------------------------------------------------------


async def test_success_forgets_the_key_and_does_not_requeue(
    clock: clock_.FakeClock, make: Any
) -> None:
    script = Script(clock, Result())
    controller = make(script)
    controller.queue.add(A)
    controller.start()
    await _settle()
    await clock.advance(10_000)
    assert script.times == [0.0]
    assert controller.queue.num_requeues(A) == 0
    total = "controller_runtime_reconcile_total"
    assert _metric(total, controller=controller.name, result="success") == 1


async def test_requeue_after_brings_the_key_back_after_that_delay_and_not_before(
    clock: clock_.FakeClock, make: Any
) -> None:
    script = Script(clock, Result(requeue_after=30), Result())
    controller = make(script)
    controller.queue.add(A)
    controller.start()
    await _settle()
    await clock.advance(29.9)
    assert len(script.calls) == 1
    await clock.advance(0.1)
    assert script.times == [0.0, 30.0]
    assert controller.queue.num_requeues(A) == 0, "a planned requeue is not a failure"
    total = "controller_runtime_reconcile_total"
    assert _metric(total, controller=controller.name, result="requeue_after") == 1


async def test_a_conflict_is_requeued_with_backoff_and_logged_at_debug_only(
    clock: clock_.FakeClock, make: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="nodepool_operator.runtime.controller")
    stale = errors.Conflict("the object has been modified")
    script = Script(clock, stale, stale, Result())
    controller = make(script)
    controller.queue.add(A)
    controller.start()
    await _settle()
    await clock.advance(1)
    # Re-read and retried after 5 ms, then 10 ms (per-key exponential backoff).
    assert script.times == pytest.approx([0.0, 0.005, 0.015])
    assert controller.queue.num_requeues(A) == 0, "forgotten after the success"
    conflict_lines = [r for r in caplog.records if "event=conflict" in r.getMessage()]
    assert len(conflict_lines) == 2
    assert {r.levelno for r in conflict_lines} == {logging.DEBUG}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    name = controller.name
    assert _metric("controller_runtime_reconcile_total", controller=name, result="requeue") == 2
    assert _metric("controller_runtime_reconcile_errors_total", controller=name) == 0


@pytest.mark.parametrize(
    "error",
    [
        errors.Invalid("spec.size: must be at least 0"),
        errors.Forbidden("cannot patch widgets"),
        errors.NotFound("gone"),
        errors.DependencyRefused("the template names a zone that does not exist"),
        errors.Terminal("the spec can never be met"),
    ],
    ids=["422", "403", "404", "refused-by-another-service", "terminal"],
)
async def test_a_permanent_error_is_not_retried_only_looked_at_again_much_later(
    clock: clock_.FakeClock, make: Any, caplog: pytest.LogCaptureFixture, error: Exception
) -> None:
    script = Script(clock, error, error, Result())
    controller = make(script)
    controller.queue.add(A)
    controller.start()
    await _settle()
    await clock.advance(PERMANENT_ERROR_RECHECK_SECONDS - 1)
    await _settle()
    assert len(script.calls) == 1  # no retry, no backoff schedule
    errors_logged = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors_logged) == 1
    assert "event=terminal-error action=recheck-in=300s" in errors_logged[0].getMessage()
    assert controller.queue.num_requeues(A) == 0
    assert _metric("controller_runtime_reconcile_errors_total", controller=controller.name) == 1
    # A key that keeps failing is looked at once per recheck period, never sooner.
    for calls in (2, 3):
        await clock.advance(1)
        await _settle()
        assert len(script.calls) == calls
        await clock.advance(PERMANENT_ERROR_RECHECK_SECONDS - 1)
        await _settle()
        assert len(script.calls) == calls


async def test_an_unexpected_error_is_retried_with_exponential_backoff_and_its_traceback(
    clock: clock_.FakeClock, make: Any, caplog: pytest.LogCaptureFixture
) -> None:
    script = Script(clock, *(RuntimeError(f"bug {i}") for i in range(4)))
    controller = make(script)
    controller.queue.add(A)
    controller.start()
    await _settle()
    await clock.advance(1)
    assert script.times == pytest.approx([0.0, 0.005, 0.015, 0.035, 0.075])
    logged = [r for r in caplog.records if "action=requeue-with-backoff" in r.getMessage()]
    assert len(logged) == 4
    assert all(r.levelno == logging.ERROR and r.exc_info for r in logged)


async def test_a_transient_api_error_is_retried_without_a_traceback(
    clock: clock_.FakeClock, make: Any, caplog: pytest.LogCaptureFixture
) -> None:
    script = Script(clock, errors.ServerTimeout("etcd is slow"), errors.ConnectionFailed("reset"))
    controller = make(script)
    controller.queue.add(A)
    controller.start()
    await _settle()
    await clock.advance(1)
    assert script.times == pytest.approx([0.0, 0.005, 0.015])
    logged = [r for r in caplog.records if "action=requeue-with-backoff" in r.getMessage()]
    assert [r.exc_info for r in logged] == [None, None]


@pytest.mark.parametrize(
    "error",
    [
        errors.TooManyRequests("slow down", retry_after=7),
        errors.DependencyUnavailable("cloud throttled", retry_after=7),
    ],
    ids=["api-429", "cloud-throttled"],
)
async def test_an_error_that_names_a_wait_gets_it(
    clock: clock_.FakeClock, make: Any, error: errors.OperatorError
) -> None:
    script = Script(clock, error)
    controller = make(script)
    controller.queue.add(A)
    controller.start()
    await _settle()
    await clock.advance(6.9)
    assert len(script.calls) == 1
    await clock.advance(0.1)
    assert script.times == [0.0, 7.0]


async def test_a_reconcile_past_its_timeout_is_cancelled_and_requeued_with_backoff(
    clock: clock_.FakeClock, make: Any, caplog: pytest.LogCaptureFixture
) -> None:
    gate = Gate()  # never released: a call that hangs
    controller = make(gate, reconcile_timeout=30.0)
    controller.queue.add(A)
    controller.start()
    await _settle()
    assert gate.running == 1
    await clock.advance(30.0)
    await _settle()
    assert gate.running == 0  # cancelled, the worker is free
    assert controller.queue.num_requeues(A) == 1
    [line] = [r for r in caplog.records if "ReconcileTimeout" in r.getMessage()]
    assert line.levelno == logging.WARNING
    assert "ran past 30s" in line.getMessage()


# -- concurrency ---------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 3])
async def test_at_most_max_concurrent_reconciles_run_at_once(make: Any, workers: int) -> None:
    gate = Gate()
    options = {"max_concurrent_reconciles": workers} if workers != 1 else {}
    controller = make(gate, **options)
    for name in "abcde":
        controller.queue.add(Request(name))
    controller.start()
    await _settle()
    assert gate.running == workers
    gate.release.set()
    await _settle()
    assert sorted(r.name for r in gate.done) == list("abcde")
    assert gate.max_in_flight == workers


async def test_a_key_added_during_its_reconcile_runs_again_after_it_never_alongside(
    make: Any,
) -> None:
    gate = Gate()
    controller = make(gate, max_concurrent_reconciles=4)
    controller.queue.add(A)
    controller.start()
    await _settle()
    assert gate.running == 1
    for _ in range(10):
        controller.queue.add(A)  # events keep coming while it runs
    await _settle()
    assert gate.running == 1, "the idle workers did not pick up the same key"
    gate.release.set()
    await _settle()
    assert gate.done == [A, A], "one more reconcile for all the events that came meanwhile"
    assert gate.max_per_key == 1


async def test_stop_lets_the_reconcile_in_flight_finish(make: Any) -> None:
    gate = Gate()
    controller = make(gate)
    controller.queue.add(A)
    controller.start()
    await _settle()
    stopping = asyncio.create_task(controller.stop())
    await _settle()
    assert not stopping.done(), "stop waits for the reconcile in flight"
    controller.queue.add(Request("late"))
    gate.release.set()
    await asyncio.wait_for(stopping, 1)
    assert gate.done == [A], "finished, not cancelled; nothing new accepted after stop"


class Lingering(Gate):
    """A reconciler with work that outlives its reconciles (as the planner's events)."""

    def __init__(self) -> None:
        super().__init__()
        self.stopped: list[bool] = []

    async def stop(self, *, drain: bool) -> None:
        self.stopped.append(drain)


@pytest.mark.parametrize("drain", [True, False])
async def test_stop_stops_the_reconcilers_own_work_after_the_workers(
    make: Any, drain: bool
) -> None:
    lingering = Lingering()
    lingering.release.set()
    controller = make(lingering)
    controller.start()
    await controller.stop(drain=drain)
    assert lingering.stopped == [drain]
    assert not controller._workers


# -- watches -------------------------------------------------------------------------------


def _obj(
    name: str = "a",
    *,
    generation: int = 1,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owners: list[tuple[str, str]] | None = None,
    status: str = "",
) -> Object:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "generation": generation}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    if owners is not None:
        meta["ownerReferences"] = [{"kind": kind, "name": owner} for kind, owner in owners]
    return {"metadata": meta, "status": {"phase": status}}


def _watching(controller: Controller, **options: Any) -> EventHandler:
    informer = StubInformer()
    controller.watch(informer, **options)  # type: ignore[arg-type]
    assert controller.informers == [informer]
    (handler,) = informer.handlers
    return handler


def _queued(controller: Controller) -> list[Request]:
    return list(controller.queue._queue)


async def test_events_become_the_objects_own_keys(clock: clock_.FakeClock, make: Any) -> None:
    controller = make(Script(clock))
    handler = _watching(controller)
    handler.on_add(_obj("a"))
    handler.on_update(_obj("a"), _obj("a", status="Ready"))
    handler.on_delete(_obj("b"))
    assert _queued(controller) == [Request("a", "ns"), Request("b", "ns")]


async def test_generation_changed_ignores_status_and_metadata_only_updates(
    clock: clock_.FakeClock, make: Any
) -> None:
    controller = make(Script(clock))
    handler = _watching(controller, predicates=[GenerationChanged()])
    old = _obj(generation=4)
    handler.on_update(old, _obj(generation=4, status="Ready", labels={"x": "y"}))
    assert _queued(controller) == [], "our own status write does not wake us"
    handler.on_update(old, _obj(generation=5))
    assert _queued(controller) == [A]
    handler.on_add(_obj("new"))
    handler.on_delete(_obj("old"))
    assert _queued(controller) == [A, Request("new", "ns"), Request("old", "ns")]


def _labels(obj: Object) -> str:
    return repr(sorted((obj["metadata"].get("labels") or {}).items()))


def test_any_of_predicates_passes_what_one_of_them_passes() -> None:
    before = _obj(labels={"pool": "a"}, annotations={"note": "1"})
    relabelled = _obj(labels={"pool": "b"}, annotations={"note": "1"})
    annotated = _obj(labels={"pool": "a"}, annotations={"note": "2"})
    respecced = _obj(generation=2, labels={"pool": "a"}, annotations={"note": "1"})
    either = any_of(GenerationChanged(), StateChanged(_labels))
    assert either.update(before, relabelled)
    assert either.update(before, respecced)
    assert not either.update(before, annotated)
    assert either.create(before)
    assert either.delete(before)


def _pool_owners(obj: Object) -> list[Request]:
    refs = obj["metadata"].get("ownerReferences") or []
    return [Request(name=ref["name"]) for ref in refs if ref.get("kind") == "Pool"]


async def test_owned_objects_map_to_their_owners_old_and_new(
    clock: clock_.FakeClock, make: Any
) -> None:
    controller = make(Script(clock))
    handler = _watching(controller, mapper=_pool_owners)
    handler.on_add(_obj("node-1", owners=[("Pool", "p1"), ("Other", "x")]))
    assert _queued(controller) == [Request("p1")]
    # Moved to another pool: both the pool it left and the one it joined look.
    left, joined = _obj("node-1", owners=[("Pool", "p1")]), _obj("node-1", owners=[("Pool", "p2")])
    handler.on_update(left, joined)
    assert _queued(controller) == [Request("p1"), Request("p2")]
    handler.on_delete(_obj("node-2"))  # no owner: nothing to do
    assert len(_queued(controller)) == 2


def test_map_to_self_keeps_the_namespace() -> None:
    assert list(map_to_self({"metadata": {"name": "n"}})) == [Request("n")]
    assert list(map_to_self({"metadata": {"name": "n", "namespace": "ns"}})) == [Request("n", "ns")]


async def test_a_watch_with_a_delay_batches_a_burst_into_one_reconcile(
    clock: clock_.FakeClock, make: Any
) -> None:
    script = Script(clock)
    controller = make(script)
    handler = _watching(controller, delay=1.0)
    controller.start()
    handler.on_add(_obj("a"))
    await clock.advance(0.5)
    for generation in range(2, 20):
        handler.on_update(_obj(generation=generation - 1), _obj(generation=generation))
    await clock.advance(0.4)
    assert script.calls == []
    await clock.advance(0.1)
    assert script.times == [1.0], "one reconcile, at the end of the window the first event opened"
    await clock.advance(10)
    assert len(script.calls) == 1


def test_a_controller_exports_its_reconcile_counters_before_the_first_reconcile(
    clock: clock_.FakeClock, make: Any
) -> None:
    controller = make(Script(clock))
    name = controller.name
    # get_sample_value gives None for a series that is not exported; 0.0 means it is, at 0.
    for result in ("success", "error", "requeue", "requeue_after"):
        labels = {"controller": name, "result": result}
        assert REGISTRY.get_sample_value("controller_runtime_reconcile_total", labels) == 0.0
    errors_total = REGISTRY.get_sample_value(
        "controller_runtime_reconcile_errors_total", {"controller": name}
    )
    assert errors_total == 0.0
