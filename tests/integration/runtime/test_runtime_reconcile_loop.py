"""The reconcile loop on the real API server: bursts collapse, status writes do not loop.

A Controller over an Informer of the throwaway Gadget kind, as an operator runs it; the
writes that drive it go through the real kube-apiserver, and the status writes are counted
by the server's audit log, not by the writer itself.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from typing import Any

from harness import wait_for
from integration.runtime.support import (
    GADGETS,
    cached_version,
    eventually,
    gadget,
    running,
    started,
)
from nodepool_devtools.cluster import audit
from nodepool_devtools.cluster.pytest_plugin import Cluster
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.controller import Controller, GenerationChanged, Request, Result
from nodepool_operator.runtime.informer import Informer
from nodepool_operator.runtime.status import StatusWriter

UPDATES = 1000
WRITERS = 8  # concurrent writers: the burst is as dense as one client can make it
RECONCILE_WORK_SECONDS = 0.05  # what a real reconcile spends on reads and decisions


class TrackingReconciler:
    """Counts reconciles per key and how many of each key (and in all) run at once."""

    def __init__(self, informer: Informer) -> None:
        self.informer = informer
        self.reconciles: Counter[str] = Counter()
        self.in_flight: Counter[str] = Counter()
        self.max_in_flight_per_key = 0
        self.max_in_flight = 0
        self.last_seen_size: dict[str, int] = {}

    async def reconcile(self, request: Request) -> Result:
        key = str(request)
        self.reconciles[key] += 1
        self.in_flight[key] += 1
        self.max_in_flight_per_key = max(self.max_in_flight_per_key, self.in_flight[key])
        self.max_in_flight = max(self.max_in_flight, sum(self.in_flight.values()))
        try:
            await asyncio.sleep(RECONCILE_WORK_SECONDS)
            obj = self.informer.get(request.name, request.namespace)
            if obj is not None:
                self.last_seen_size[key] = obj["spec"]["size"]
        finally:
            self.in_flight[key] -= 1
        return Result()

    @property
    def idle(self) -> bool:
        return not +self.in_flight


class UpdateCounter:
    """A second handler on the informer: every change the watch delivered, per object."""

    def __init__(self) -> None:
        self.updates: Counter[str] = Counter()

    def on_add(self, obj: Object) -> None:
        pass

    def on_update(self, old: Object, new: Object) -> None:
        self.updates[new["metadata"]["name"]] += 1

    def on_delete(self, obj: Object) -> None:
        pass


async def _resize(client: Client, name: str, namespace: str, sizes: list[int]) -> None:
    for size in sizes:
        await client.patch(GADGETS, name, {"spec": {"size": size}}, namespace=namespace)


async def test_a_burst_of_updates_makes_far_fewer_reconciles_never_two_of_one_key_at_once(
    client: Client, namespace: str
) -> None:
    hot, other = f"hot-{uuid.uuid4().hex[:6]}", f"other-{uuid.uuid4().hex[:6]}"
    for name in (hot, other):
        await client.create(GADGETS, gadget(name, namespace))
    informer = Informer(client, GADGETS, namespace=namespace)
    reconciler = TrackingReconciler(informer)
    # Several workers: only the workqueue's one-key-at-a-time rule keeps them off one key.
    controller = Controller(
        name=f"burst-{namespace}", reconciler=reconciler, max_concurrent_reconciles=4
    )
    controller.watch(informer)
    counter = UpdateCounter()
    informer.add_handler(counter)
    hot_key = f"{namespace}/{hot}"
    async with running(informer), started(controller):
        await eventually(lambda: reconciler.reconciles[hot_key] == 1 and reconciler.idle)
        before = reconciler.reconciles[hot_key]

        # 1000 distinct sizes in interleaved slices, one slice per writer; the other object
        # changes alongside so that the workers have two keys to run in parallel.
        sizes = list(range(1, UPDATES + 1))
        writers = [_resize(client, hot, namespace, sizes[i::WRITERS]) for i in range(WRITERS)]
        burst_started = asyncio.get_running_loop().time()
        await asyncio.gather(*writers, _resize(client, other, namespace, list(range(1, 51))))
        burst_seconds = asyncio.get_running_loop().time() - burst_started

        final = await client.get(GADGETS, hot, namespace=namespace)
        final_version = int(final["metadata"]["resourceVersion"])
        await eventually(lambda: cached_version(informer, hot, namespace) >= final_version)
        await eventually(
            lambda: (
                reconciler.last_seen_size.get(hot_key) == final["spec"]["size"]
                and reconciler.idle
                and len(controller.queue) == 0
            )
        )

    reconciles = reconciler.reconciles[hot_key] - before
    print(
        f"\n{UPDATES} updates -> {counter.updates[hot]} watch events -> {reconciles} reconciles;"
        f" max in flight: {reconciler.max_in_flight_per_key} per key,"
        f" {reconciler.max_in_flight} in all"
    )
    assert counter.updates[hot] == UPDATES, "the informer saw every update"
    # Updates that arrive while a reconcile of their key runs are folded into the next one:
    # at most one reconcile per reconcile's duration of the burst (plus the one running when
    # it started and the one after it), however fast the server took the writes.
    most = int(burst_seconds / RECONCILE_WORK_SECONDS) + 2
    assert 1 <= reconciles <= min(most, UPDATES // 2), "far fewer reconciles than updates"
    assert reconciler.max_in_flight_per_key == 1, "never two reconciles of one key at once"
    assert reconciler.max_in_flight >= 2, "the workers did run in parallel (on the two keys)"
    assert reconciler.last_seen_size[hot_key] == final["spec"]["size"], "the last update counted"


class StatusTwiceReconciler:
    """Writes the same status twice per reconcile, from the (not yet updated) cached copy."""

    def __init__(self, informer: Informer, writer: StatusWriter) -> None:
        self.informer = informer
        self.writer = writer
        self.reconciles = 0
        self.results: list[Object | None] = []

    async def reconcile(self, request: Request) -> Result:
        self.reconciles += 1
        obj = self.informer.get(request.name, request.namespace)
        if obj is None:
            return Result()
        status: dict[str, Any] = {
            "phase": "Ready",
            "observedGeneration": obj["metadata"]["generation"],
        }
        for _ in range(2):
            self.results.append(await self.writer.update(obj, status))
        return Result()


def _status_writes(log: audit.AuditLog, name: str) -> list[audit.AuditEvent]:
    return [
        e
        for e in log.events_since_mark()
        if e.resource == GADGETS.plural and e.subresource == "status" and e.name == name
    ]


async def test_a_status_set_twice_is_written_once_and_does_not_wake_its_own_controller(
    cluster: Cluster, client: Client, namespace: str
) -> None:
    log = cluster.audit_log()
    log.mark()
    name = f"g-{uuid.uuid4().hex[:6]}"
    informer = Informer(client, GADGETS, namespace=namespace)
    writer = StatusWriter(client, GADGETS, controller="status-test")
    reconciler = StatusTwiceReconciler(informer, writer)
    queue_name = f"status-{namespace}"
    controller = Controller(name=queue_name, reconciler=reconciler)
    controller.watch(informer, predicates=[GenerationChanged()])
    async with running(informer), started(controller):
        await client.create(GADGETS, gadget(name, namespace))
        await eventually(lambda: len(reconciler.results) == 2)
        written, repeated = reconciler.results
        assert written is not None, "the first update writes"
        assert repeated is None, "the second update finds the status already written"

        # Once the cache holds our write, its watch event has gone through the predicate:
        # had it let the event through, the key would now be queued or reconciling.
        written_version = int(written["metadata"]["resourceVersion"])
        await eventually(lambda: cached_version(informer, name, namespace) >= written_version)
        assert len(controller.queue) == 0
        assert reconciler.reconciles == 1

        async def one_write_at_the_server() -> list[audit.AuditEvent]:
            return _status_writes(log, name)

        writes = await wait_for(one_write_at_the_server, within=10)
        assert [(e.verb, e.code, e.user) for e in writes] == [("patch", 200, "nodepool-admin")]

        # A spec change does pass the predicate, and its reconcile writes the new
        # observedGeneration once more: one write per change, not one per reconcile pass.
        await client.patch(GADGETS, name, {"spec": {"size": 3}}, namespace=namespace)
        await eventually(lambda: reconciler.reconciles == 2 and len(reconciler.results) == 4)
        second = reconciler.results[2]
        assert second is not None
        assert second["status"]["observedGeneration"] == 2
        assert reconciler.results[3] is None
        second_version = int(second["metadata"]["resourceVersion"])
        await eventually(lambda: cached_version(informer, name, namespace) >= second_version)
        assert len(controller.queue) == 0
        assert reconciler.reconciles == 2

    await client.delete(GADGETS, name, namespace=namespace)
    writes = _status_writes(log, name)
    assert [(e.verb, e.code) for e in writes] == [("patch", 200), ("patch", 200)]
    assert (writer.writes, writer.skipped) == (2, 2)
