"""Informers across disconnections and a kube-apiserver restart, on the real control plane.

A restarted kube-apiserver starts its watch cache at the current etcd revision, so a watch
resumed from an older resourceVersion is answered with 410 Gone: the informer must re-LIST
and deliver what it missed, deletes included. Both tests restart the session's
kube-apiserver and leave it running and ready (``start_component`` waits for ``/readyz``,
then the Gadget kind is waited for), so the tests after them see a whole control plane.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import Counter

import pytest

from harness import wait_for
from integration.runtime.support import GADGETS, eventually, gadget, running, started
from nodepool_devtools.cluster import controlplane
from nodepool_devtools.cluster.pytest_plugin import Cluster
from nodepool_operator.runtime import errors
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.controller import Controller, Request, Result
from nodepool_operator.runtime.informer import Informer


class EventLog:
    def __init__(self) -> None:
        self.added: list[str] = []
        self.updated: list[str] = []
        self.deleted: list[str] = []

    def on_add(self, obj: Object) -> None:
        self.added.append(obj["metadata"]["name"])

    def on_update(self, old: Object, new: Object) -> None:
        self.updated.append(new["metadata"]["name"])

    def on_delete(self, obj: Object) -> None:
        self.deleted.append(obj["metadata"]["name"])


def _plane(cluster: Cluster) -> controlplane.ControlPlane:
    if cluster.plane is None:
        pytest.skip("restarting kube-apiserver needs the local control plane")
    return cluster.plane


async def _restart_api_server(plane: controlplane.ControlPlane, client: Client) -> None:
    """Stop and start kube-apiserver off the event loop (informers under test keep running),
    then wait until Gadgets are served and watchable again."""
    try:
        # It stops serving within milliseconds of SIGTERM but lingers well past that; after
        # a few seconds the SIGKILL that stop_component sends then ends it for certain.
        await asyncio.to_thread(plane.stop_component, "kube-apiserver", timeout=3)
    finally:
        await asyncio.to_thread(plane.start_component, "kube-apiserver")

    async def served_and_watchable() -> bool:
        # A LIST can be served from etcd while the watch cache still initialises (watches
        # get 429 meanwhile); a short watch that ends normally shows the cache is ready.
        try:
            page = await client.list_page(GADGETS, limit=1)
            version = page["metadata"]["resourceVersion"]
            async for _ in client.watch(GADGETS, resource_version=version, timeout_seconds=1):
                pass
        except errors.ApiError:
            return False
        return True

    await wait_for(served_and_watchable, within=60, every=0.1)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


async def test_an_expired_watch_relists_and_delivers_the_delete_missed_while_disconnected(
    cluster: Cluster, client: Client, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    plane = _plane(cluster)
    kept, changed, doomed, born = _name("kept"), _name("changed"), _name("doomed"), _name("born")
    for name in (kept, changed, doomed):
        await client.create(GADGETS, gadget(name, namespace))
    informer = Informer(client, GADGETS, namespace=namespace)
    events = EventLog()
    informer.add_handler(events)
    async with running(informer):
        await eventually(lambda: len(informer) == 3)
    # Disconnected: the cache and its resourceVersion stay, as after a dropped connection.
    last_seen = informer.resource_version
    lists = informer.lists
    assert sorted(events.added) == sorted([kept, changed, doomed])

    await client.delete(GADGETS, doomed, namespace=namespace)
    await client.patch(GADGETS, changed, {"spec": {"size": 9}}, namespace=namespace)
    await client.create(GADGETS, gadget(born, namespace))
    await _restart_api_server(plane, client)

    caplog.set_level(logging.INFO, logger="nodepool_operator.runtime.informer")
    task = asyncio.create_task(informer.run(), name="test-informer-resumed")
    try:
        await eventually(lambda: doomed in events.deleted and born in events.added)
        await eventually(lambda: changed in events.updated)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    print(f"\nresumed from {last_seen}; lists {lists} -> {informer.lists}; log: {caplog.text}")
    assert informer.lists == lists + 1, "the expired watch was answered by one re-LIST"
    assert "event=watch-expired action=relist" in caplog.text
    assert events.deleted == [doomed]
    assert events.updated == [changed], "an unchanged object is not delivered again"
    assert sorted(events.added) == sorted([kept, changed, doomed, born])
    assert informer.get(doomed, namespace) is None
    changed_now = informer.get(changed, namespace)
    assert changed_now is not None
    assert changed_now["spec"]["size"] == 9
    assert int(informer.resource_version) > int(last_seen)


class CountingReconciler:
    def __init__(self) -> None:
        self.reconciles: Counter[str] = Counter()

    async def reconcile(self, request: Request) -> Result:
        self.reconciles[request.name] += 1
        return Result()


async def test_a_running_informer_and_controller_survive_an_api_server_restart(
    cluster: Cluster, client: Client, namespace: str
) -> None:
    plane = _plane(cluster)
    before, after = _name("before"), _name("after")
    await client.create(GADGETS, gadget(before, namespace))
    informer = Informer(client, GADGETS, namespace=namespace)
    reconciler = CountingReconciler()
    controller = Controller(name=f"restart-{namespace}", reconciler=reconciler)
    controller.watch(informer)
    async with running(informer) as task, started(controller):
        await eventually(lambda: reconciler.reconciles[before] == 1)
        await _restart_api_server(plane, client)
        assert not task.done(), "the informer kept running while the API server was down"

        # Changes made after the restart reach the same informer and controller.
        await client.create(GADGETS, gadget(after, namespace))
        await client.patch(GADGETS, before, {"spec": {"size": 4}}, namespace=namespace)
        await eventually(lambda: reconciler.reconciles[after] >= 1, within=60)
        await eventually(lambda: reconciler.reconciles[before] >= 2, within=60)
        before_now = informer.get(before, namespace)
        assert before_now is not None
        assert before_now["spec"]["size"] == 4
        assert not task.done()
    print(f"\nlists: {informer.lists}, watches: {informer.watches}")
    assert informer.watches >= 2, "the watch was re-established, in the same process"
