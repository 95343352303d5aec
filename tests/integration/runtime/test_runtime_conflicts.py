"""Conflict-aware writes on the real API server: 409 is retried after a re-read, 422 never.

Another writer changes the object's labels every 20 ms while our status change goes in as
a read-modify-write PUT carrying the resourceVersion it read, through
``retry.retry_on_conflict`` with client-go's DefaultRetry.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest

from harness import wait_for
from integration.runtime.support import GADGETS, eventually, gadget, running
from nodepool_devtools.cluster.pytest_plugin import Cluster
from nodepool_operator.runtime import errors, retry
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.informer import Informer

LABEL_PERIOD_SECONDS = 0.02


class LabelWriter:
    """Sets ``metadata.labels.tick`` to 1, 2, 3, ... every 20 ms, without a precondition."""

    def __init__(self, client: Client, name: str, namespace: str) -> None:
        self.client = client.for_manager("label-writer")
        self.name = name
        self.namespace = namespace
        self.written: list[int] = []

    async def run(self) -> None:
        tick = 0
        while True:
            tick += 1
            patch = {"metadata": {"labels": {"tick": str(tick)}}}
            await self.client.patch(GADGETS, self.name, patch, namespace=self.namespace)
            self.written.append(tick)
            await asyncio.sleep(LABEL_PERIOD_SECONDS)


class TickRecorder:
    """Every label value the watch shows, in order: an overwritten change would show a step back."""

    def __init__(self) -> None:
        self.ticks: list[int] = []

    def on_add(self, obj: Object) -> None:
        self.on_update(obj, obj)

    def on_update(self, old: Object, new: Object) -> None:
        tick = (new["metadata"].get("labels") or {}).get("tick")
        if tick is not None:
            self.ticks.append(int(tick))

    def on_delete(self, obj: Object) -> None:
        pass


@contextlib.asynccontextmanager
async def writing(writer: LabelWriter) -> AsyncIterator[None]:
    task = asyncio.create_task(writer.run(), name="label-writer")
    try:
        await eventually(lambda: len(writer.written) >= 3)
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert task.cancelled(), "the label writer itself never failed"


async def test_a_status_change_lands_through_conflicts_and_loses_no_label_change(
    client: Client, namespace: str
) -> None:
    name = f"g-{uuid.uuid4().hex[:6]}"
    await client.create(GADGETS, gadget(name, namespace))
    labels = LabelWriter(client, name, namespace)
    informer = Informer(client, GADGETS, namespace=namespace)
    recorder = TickRecorder()
    informer.add_handler(recorder)
    attempts: list[str] = []

    async def set_status() -> Object:
        obj = await client.get(GADGETS, name, namespace=namespace)
        obj["status"] = {"phase": "Tuned", "count": 7}
        if not attempts:
            # Make the first attempt stale for certain: let the label writer move the
            # object on between our read and our write.
            seen = len(labels.written)
            await eventually(lambda: len(labels.written) > seen, every=0.005)
        try:
            updated = await client.replace(GADGETS, obj, subresource="status")
        except errors.Conflict:
            attempts.append("409")
            raise
        attempts.append("ok")
        return updated

    async with running(informer), writing(labels):
        updated = await retry.retry_on_conflict(set_status)
        # Keep the other writer going a little after our write, then stop it.
        after = len(labels.written)
        await eventually(lambda: len(labels.written) >= after + 3)

    final = await client.get(GADGETS, name, namespace=namespace)
    print(f"\nattempts: {attempts}; label writes: {len(labels.written)}")
    assert attempts[0] == "409", "the stale first attempt was refused"
    assert attempts[-1] == "ok", "a later attempt, from a fresh read, landed"
    assert set(attempts[1:-1]) <= {"409"}
    assert updated["status"] == {"phase": "Tuned", "count": 7}
    assert final["status"] == {"phase": "Tuned", "count": 7}
    assert final["metadata"]["labels"] == {"tick": str(labels.written[-1])}
    # The watch saw every label value, in order, and never a step back: our status
    # write overwrote none of the other writer's changes.
    await eventually(lambda: recorder.ticks[-1:] == [labels.written[-1]])
    assert recorder.ticks == sorted(recorder.ticks)
    assert set(labels.written) <= set(recorder.ticks)


async def test_an_invalid_status_is_raised_at_once_and_not_retried(
    cluster: Cluster, client: Client, namespace: str
) -> None:
    log = cluster.audit_log()
    name = f"g-{uuid.uuid4().hex[:6]}"
    await client.create(GADGETS, gadget(name, namespace))
    log.mark()
    calls = 0

    async def set_invalid_status() -> Object:
        nonlocal calls
        calls += 1
        obj = await client.get(GADGETS, name, namespace=namespace)
        obj["status"] = {"count": -1}  # the schema says minimum 0
        return await client.replace(GADGETS, obj, subresource="status")

    with pytest.raises(errors.Invalid) as raised:
        await retry.retry_on_conflict(set_invalid_status)
    assert calls == 1
    assert raised.value.status == 422
    assert "count" in raised.value.message

    async def status_updates() -> list[tuple[str, int]]:
        return [
            (e.verb, e.code)
            for e in log.events_since_mark()
            if e.resource == GADGETS.plural and e.name == name and e.subresource == "status"
        ]

    assert await wait_for(status_updates, within=10) == [("update", 422)]
    await client.delete(GADGETS, name, namespace=namespace)
    assert await status_updates() == [("update", 422)]
