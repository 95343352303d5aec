"""Manager: controllers only on synced caches, probes and metrics, draining stop, election."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import itertools
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from nodepool_operator.runtime import clock as clock_
from nodepool_operator.runtime import errors
from nodepool_operator.runtime.client import Object, Resource, WatchEvent
from nodepool_operator.runtime.controller import Controller, Request, Result
from nodepool_operator.runtime.leader import LeaderElectionConfig
from nodepool_operator.runtime.manager import Manager

WIDGETS = Resource("example.dev", "v1", "widgets", "Widget", namespaced=False)
_names = itertools.count()


class WidgetsAndLease:
    """Widgets to list and watch, and a Lease to elect on: what a Manager's parts call."""

    def __init__(self, *names: str) -> None:
        self.items = [{"metadata": {"name": n, "resourceVersion": "5"}} for n in names]
        self.listing = asyncio.Event()  # cleared: a LIST hangs, as on a slow API server
        self.listing.set()
        self.watching = 0
        self.lease: Object | None = None
        self.version = 0

    async def list_page(self, resource: Resource, **options: Any) -> Object:
        await self.listing.wait()
        return {"metadata": {"resourceVersion": "5"}, "items": copy.deepcopy(self.items)}

    async def watch(self, resource: Resource, **options: Any) -> AsyncIterator[WatchEvent]:
        self.watching += 1
        try:
            await asyncio.get_running_loop().create_future()  # a quiet watch, until cancelled
        finally:
            self.watching -= 1
        yield WatchEvent("BOOKMARK", {})  # pragma: no cover - makes this a generator

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Object:
        if self.lease is None:
            raise errors.NotFound("no lease")
        return copy.deepcopy(self.lease)

    async def create(
        self, resource: Resource, body: Object, *, namespace: str | None = None
    ) -> Object:
        return self._store(body)

    async def replace(
        self, resource: Resource, body: Object, *, subresource: str | None = None
    ) -> Object:
        assert self.lease is not None
        if body["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
            raise errors.Conflict("stale")
        return self._store(body)

    def _store(self, body: Object) -> Object:
        self.version += 1
        self.lease = copy.deepcopy(body)
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(self.lease)

    def hold_lease(self, holder: str) -> None:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec = {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": now}
        self._store({"metadata": {"name": "lease", "namespace": "ns"}, "spec": spec})

    @property
    def holder(self) -> str | None:
        return None if self.lease is None else self.lease["spec"].get("holderIdentity")


class Held:
    """A reconciler whose reconciles wait until released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started: list[Request] = []
        self.finished: list[Request] = []

    async def reconcile(self, request: Request) -> Result:
        self.started.append(request)
        await self.release.wait()
        self.finished.append(request)
        return Result()


async def _settle(rounds: int = 50) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


@pytest.fixture
def clock() -> clock_.FakeClock:
    return clock_.FakeClock()


def _manager(
    api: WidgetsAndLease,
    clock: clock_.FakeClock,
    reconciler: Held,
    *,
    election: LeaderElectionConfig | None = None,
    metrics_port: int | None = None,
) -> tuple[Manager, Controller]:
    manager = Manager(
        api,  # type: ignore[arg-type]
        leader_election=election,
        metrics_port=metrics_port,
        clock=clock,
    )
    controller = Controller(name=f"test-manager-{next(_names)}", reconciler=reconciler, clock=clock)
    controller.watch(manager.cache.informer(WIDGETS))
    manager.add(controller)
    return manager, controller


@contextlib.asynccontextmanager
async def _running(manager: Manager) -> AsyncIterator[tuple[asyncio.Event, asyncio.Task[None]]]:
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    try:
        await _settle()
        yield stop, task
    finally:
        stop.set()
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _get(port: int | None, path: str) -> tuple[int, str]:
    assert port is not None
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{path}") as response,
    ):
        return response.status, await response.text()


async def test_controllers_start_only_once_every_informer_has_synced(
    clock: clock_.FakeClock,
) -> None:
    api = WidgetsAndLease("a", "b")
    api.listing.clear()
    held = Held()
    held.release.set()
    manager, _ = _manager(api, clock, held, metrics_port=0)
    async with _running(manager):
        assert await _get(manager.bound_port, "/healthz") == (200, "ok")
        status, _ = await _get(manager.bound_port, "/readyz")
        assert status == 503
        assert not manager.started.is_set()
        assert held.started == []
        api.listing.set()
        await asyncio.wait_for(manager.started.wait(), 1)
        await _settle()
        assert sorted(r.name for r in held.finished) == ["a", "b"]
        assert await _get(manager.bound_port, "/readyz") == (200, "ok")


async def test_metrics_are_served_under_controller_runtime_names(clock: clock_.FakeClock) -> None:
    api = WidgetsAndLease("a")
    held = Held()
    held.release.set()
    manager, controller = _manager(api, clock, held, metrics_port=0)
    async with _running(manager):
        await asyncio.wait_for(manager.started.wait(), 1)
        await _settle()
        status, text = await _get(manager.bound_port, "/metrics")
    assert status == 200
    for series in (
        f'controller_runtime_reconcile_total{{controller="{controller.name}",result="success"}}',
        "controller_runtime_reconcile_time_seconds_bucket",
        f'workqueue_adds_total{{name="{controller.name}"}}',
        f'workqueue_depth{{name="{controller.name}"}}',
        "workqueue_queue_duration_seconds_bucket",
        "workqueue_work_duration_seconds_bucket",
        "workqueue_retries_total",
        "leader_election_master_status",
    ):
        assert series in text, series


async def test_stop_drains_the_reconciles_in_flight_then_stops_the_informers(
    clock: clock_.FakeClock,
) -> None:
    api = WidgetsAndLease("a")
    held = Held()
    manager, _ = _manager(api, clock, held)
    async with _running(manager) as (stop, task):
        await asyncio.wait_for(manager.started.wait(), 1)
        await _settle()
        assert held.started == [Request("a")]
        assert api.watching == 1
        stop.set()
        await _settle()
        assert not task.done(), "waits for the reconcile in flight"
        held.release.set()
        await asyncio.wait_for(task, 1)
        assert held.finished == [Request("a")], "finished, not cancelled"
        assert api.watching == 0
        assert not manager.started.is_set()


async def test_with_leader_election_a_leader_runs_the_controllers_and_releases_on_stop(
    clock: clock_.FakeClock,
) -> None:
    api = WidgetsAndLease("a")
    held = Held()
    held.release.set()
    election = LeaderElectionConfig(name="lease", namespace="ns", identity="me")
    manager, _ = _manager(api, clock, held, election=election)
    async with _running(manager) as (stop, task):
        await asyncio.wait_for(manager.started.wait(), 1)
        assert api.holder == "me"
        stop.set()
        await asyncio.wait_for(task, 1)
    assert not api.holder, "released on the way out"


async def test_a_standby_runs_nothing_and_stops_at_once_when_asked(
    clock: clock_.FakeClock,
) -> None:
    api = WidgetsAndLease("a")
    api.hold_lease("someone-else")
    held = Held()
    election = LeaderElectionConfig(name="lease", namespace="ns", identity="me")
    manager, _ = _manager(api, clock, held, election=election, metrics_port=0)
    async with _running(manager) as (stop, task):
        await clock.advance(10)  # less than a lease duration: the holder is still valid
        assert not manager.started.is_set()
        assert api.watching == 0, "a standby does not even start its informers"
        assert manager.ready(), "a standby is ready to take over"
        assert await _get(manager.bound_port, "/readyz") == (200, "ok")
        stop.set()
        # No waiting to be elected first: it was only a candidate.
        await asyncio.wait_for(task, 1)
        assert task.exception() is None
    assert held.started == []
    assert api.holder == "someone-else"


async def test_a_clean_stop_runs_the_drained_hooks_after_the_reconciles_finish(
    clock: clock_.FakeClock,
) -> None:
    api = WidgetsAndLease("a")
    held = Held()
    manager, _ = _manager(api, clock, held)
    order: list[str] = []

    async def flush() -> None:
        order.append(f"flushed after {len(held.finished)} reconciles")

    manager.on_drained.append(flush)
    async with _running(manager) as (stop, task):
        await asyncio.wait_for(manager.started.wait(), 1)
        await _settle()
        assert [r.name for r in held.started] == ["a"]
        stop.set()
        await _settle()
        assert order == []  # the reconcile in flight is drained first
        held.release.set()
        await asyncio.wait_for(task, 1)
    assert order == ["flushed after 1 reconciles"]
