"""Informer: paginated LIST, WATCH resumed from the last version, re-LIST with diff on 410."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY

from nodepool_operator.runtime import clock as clock_
from nodepool_operator.runtime import errors, informer
from nodepool_operator.runtime.client import Object, Resource, WatchEvent

WIDGETS = Resource("example.dev", "v1", "widgets", "Widget", namespaced=True)
End = None  # pushed into a watch stream: the server ends the watch normally


class WidgetServer:
    """A server of one resource for `Informer`: LIST pages and WATCH streams the test feeds."""

    def __init__(self) -> None:
        self.objects: dict[str, Object] = {}
        self.version = 10
        self.list_calls: list[dict[str, Any]] = []
        self.watch_calls: list[dict[str, Any]] = []
        self.streams: list[asyncio.Queue[WatchEvent | BaseException | None]] = []
        # Raised by the next WATCH requests before any event, e.g. Gone for a version
        # that fell out of the server's window.
        self.watch_errors: list[BaseException] = []

    # -- server-side changes ----------------------------------------------------------

    def put(self, name: str, *, color: str = "red", namespace: str = "ns") -> Object:
        self.version += 1
        obj: Object = {
            "apiVersion": "example.dev/v1",
            "kind": "Widget",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "resourceVersion": str(self.version),
                "managedFields": [{"manager": "someone", "operation": "Update"}],
            },
            "spec": {"color": color},
        }
        self.objects[name] = obj
        return copy.deepcopy(obj)

    def remove(self, name: str) -> Object:
        self.version += 1
        obj = self.objects.pop(name)
        obj["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(obj)

    def emit(self, item: WatchEvent | BaseException | None) -> None:
        """Deliver an event (or an error, or the end) on the newest watch."""
        self.streams[-1].put_nowait(item)

    def emit_put(self, name: str, **fields: Any) -> Object:
        kind = "MODIFIED" if name in self.objects else "ADDED"
        obj = self.put(name, **fields)
        self.emit(WatchEvent(kind, obj))
        return obj

    def emit_remove(self, name: str) -> Object:
        obj = self.remove(name)
        self.emit(WatchEvent("DELETED", obj))
        return obj

    # -- the Client methods the informer calls ----------------------------------------

    async def list_page(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> Object:
        self.list_calls.append(
            {
                "namespace": namespace,
                "label_selector": label_selector,
                "field_selector": field_selector,
                "limit": limit,
                "continue": continue_token,
            }
        )
        names = sorted(self.objects)
        start = int(continue_token or 0)
        end = start + (limit or len(names))
        items = []
        for name in names[start:end]:
            item = copy.deepcopy(self.objects[name])
            del item["apiVersion"], item["kind"]  # as a real LIST sends them
            items.append(item)
        meta: dict[str, Any] = {"resourceVersion": str(self.version)}
        if end < len(names):
            meta["continue"] = str(end)
        return {"metadata": meta, "items": items}

    async def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[WatchEvent]:
        self.watch_calls.append(
            {
                "resource_version": resource_version,
                "namespace": namespace,
                "label_selector": label_selector,
                "field_selector": field_selector,
            }
        )
        if self.watch_errors:
            raise self.watch_errors.pop(0)
        stream: asyncio.Queue[WatchEvent | BaseException | None] = asyncio.Queue()
        self.streams.append(stream)
        while True:
            item = await stream.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item


class Recorder:
    """An event handler that writes down what it is told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.updates: list[tuple[Object, Object]] = []
        self.deleted: list[Object] = []

    def on_add(self, obj: Object) -> None:
        self.events.append(("add", obj["metadata"]["name"]))

    def on_update(self, old: Object, new: Object) -> None:
        self.events.append(("update", new["metadata"]["name"]))
        self.updates.append((old, new))

    def on_delete(self, obj: Object) -> None:
        self.events.append(("delete", obj["metadata"]["name"]))
        self.deleted.append(obj)


async def _until(check: Callable[[], bool], rounds: int = 200) -> None:
    """Yield to the loop until `check()` holds; fail fast instead of hanging."""
    for _ in range(rounds):
        if check():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


@pytest.fixture
def api() -> WidgetServer:
    return WidgetServer()


@pytest.fixture
def clock() -> clock_.FakeClock:
    return clock_.FakeClock()


def _informer(api: WidgetServer, clock: clock_.FakeClock, **options: Any) -> informer.Informer:
    return informer.Informer(api, WIDGETS, clock=clock, **options)  # type: ignore[arg-type]


def _recorded(api: WidgetServer, clock: clock_.FakeClock) -> tuple[informer.Informer, Recorder]:
    """An informer and the handler that records what it delivers."""
    subject = _informer(api, clock)
    recorder = Recorder()
    subject.add_handler(recorder)
    return subject, recorder


@contextlib.asynccontextmanager
async def _running(
    subject: informer.Informer, api: WidgetServer
) -> AsyncIterator[asyncio.Task[None]]:
    """Run the informer until it watches, for the block; then cancel it."""
    watches = len(api.streams)
    task = asyncio.create_task(subject.run())
    try:
        await _until(lambda: len(api.streams) > watches or task.done())
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_the_initial_list_is_paginated_and_fills_the_cache_before_sync(
    api: WidgetServer, clock: clock_.FakeClock
) -> None:
    for i in range(informer.PAGE_SIZE * 2 + 3):
        api.put(f"w{i:04}")
    subject, recorder = _recorded(api, clock)
    assert not subject.has_synced()
    async with _running(subject, api):
        assert subject.has_synced()
        assert len(subject) == informer.PAGE_SIZE * 2 + 3
        assert [c["continue"] for c in api.list_calls] == [None, "500", "1000"]
        assert {c["limit"] for c in api.list_calls} == {informer.PAGE_SIZE}
        assert len(recorder.events) == len(subject)
        assert {kind for kind, _ in recorder.events} == {"add"}
        # The watch starts from the list's version.
        assert api.watch_calls[0]["resource_version"] == str(api.version)
        cached = subject.get("w0000", "ns")
        assert cached is not None
        assert (cached["apiVersion"], cached["kind"]) == ("example.dev/v1", "Widget")
        assert "managedFields" not in cached["metadata"]
    assert subject.lists == 1


async def test_watch_events_update_the_cache_and_reach_every_handler(
    api: WidgetServer, clock: clock_.FakeClock
) -> None:
    api.put("a")
    subject = _informer(api, clock)
    first, second = Recorder(), Recorder()
    subject.add_handler(first)
    subject.add_handler(second)
    async with _running(subject, api):
        api.emit_put("b")
        api.emit_put("a", color="blue")
        api.emit_remove("b")
        await _until(lambda: len(first.events) == 4)
    assert (
        first.events
        == second.events
        == [
            ("add", "a"),
            ("add", "b"),
            ("update", "a"),
            ("delete", "b"),
        ]
    )
    old, new = first.updates[0]
    assert (old["spec"]["color"], new["spec"]["color"]) == ("red", "blue")
    assert "managedFields" not in new["metadata"]
    assert subject.get("b", "ns") is None
    assert subject.get("a", "ns")["spec"]["color"] == "blue"  # type: ignore[index]
    assert subject.resource_version == str(api.version)


async def test_a_delete_of_an_object_never_seen_is_not_delivered(
    api: WidgetServer, clock: clock_.FakeClock
) -> None:
    subject, recorder = _recorded(api, clock)
    async with _running(subject, api):
        api.emit(WatchEvent("DELETED", api.put("stranger")))
        api.emit_put("known")
        await _until(lambda: len(recorder.events) == 1)
    assert recorder.events == [("add", "known")]


async def test_a_bookmark_moves_the_resource_version_without_an_event(
    api: WidgetServer, clock: clock_.FakeClock
) -> None:
    subject, recorder = _recorded(api, clock)
    async with _running(subject, api):
        bookmark = {"kind": "Widget", "metadata": {"resourceVersion": "555"}}
        api.emit(WatchEvent("BOOKMARK", bookmark))
        await _until(lambda: subject.resource_version == "555")
        api.emit(End)
        await _until(lambda: len(api.watch_calls) == 2)
    assert recorder.events == []
    assert api.watch_calls[1]["resource_version"] == "555"


async def test_a_watch_the_server_ends_is_resumed_at_once_from_the_last_version(
    api: WidgetServer, clock: clock_.FakeClock
) -> None:
    subject = _informer(api, clock)
    async with _running(subject, api):
        api.emit_put("a")
        api.emit(End)
        await _until(lambda: len(api.watch_calls) == 2)
    assert api.watch_calls[1]["resource_version"] == api.objects["a"]["metadata"]["resourceVersion"]
    assert subject.lists == 1
    assert clock.sleepers == 0, "a normal end is not a failure: no backoff"


async def test_a_dropped_connection_resumes_from_the_last_version_after_a_backoff(
    api: WidgetServer, clock: clock_.FakeClock
) -> None:
    subject, recorder = _recorded(api, clock)
    async with _running(subject, api):
        api.emit_put("a")
        api.emit(errors.ConnectionFailed("connection reset"))
        await clock.wait_for_sleepers()
        assert clock.next_deadline() == pytest.approx(informer.BACKOFF_INITIAL)
        await clock.advance(informer.BACKOFF_INITIAL)
        await _until(lambda: len(api.watch_calls) == 2)
        api.emit_put("b")
        await _until(lambda: len(recorder.events) == 2)
    assert api.watch_calls[1]["resource_version"] == api.objects["a"]["metadata"]["resourceVersion"]
    assert subject.lists == 1, "nothing was lost, so nothing is listed again"
    assert recorder.events == [("add", "a"), ("add", "b")]


async def test_gone_relists_and_delivers_the_difference_deletes_included(
    api: WidgetServer, clock: clock_.FakeClock
) -> None:
    for name in ("kept", "changed", "doomed"):
        api.put(name)
    subject, recorder = _recorded(api, clock)
    async with _running(subject, api):
        assert len(recorder.events) == 3
        # What happened while the watch was away (the events were compacted):
        api.remove("doomed")
        api.put("changed", color="green")
        api.put("born")
        api.emit(errors.Gone("too old resource version"))
        await _until(lambda: subject.lists == 2 and len(api.watch_calls) == 2)
    assert recorder.events[3] == ("delete", "doomed")
    assert sorted(recorder.events[4:]) == [("add", "born"), ("update", "changed")]
    assert recorder.deleted[0]["metadata"]["name"] == "doomed"
    assert sorted(o["metadata"]["name"] for o in subject.items()) == ["born", "changed", "kept"]
    assert api.watch_calls[1]["resource_version"] == str(api.version)
    assert clock.sleepers == 0, "a 410 is answered by a re-list at once, not by a backoff"


async def test_run_again_after_a_cancel_resumes_and_relists_only_on_gone(
    api: WidgetServer, clock: clock_.FakeClock
) -> None:
    api.put("a")
    api.put("b")
    subject, recorder = _recorded(api, clock)
    async with _running(subject, api):
        pass
    last_seen = subject.resource_version

    # Resumed: the watch continues from the version it had; no new LIST.
    async with _running(subject, api):
        api.emit_put("c")
        await _until(lambda: ("add", "c") in recorder.events)
    assert api.watch_calls[-1]["resource_version"] == last_seen
    assert subject.lists == 1

    # Away for too long: b was deleted meanwhile and the server has forgotten that version.
    api.remove("b")
    api.watch_errors.append(errors.Gone("too old resource version"))
    async with _running(subject, api):
        await _until(lambda: ("delete", "b") in recorder.events)
    assert subject.lists == 2
    assert subject.get("b", "ns") is None


async def test_other_failures_back_off_exponentially_and_relist(
    api: WidgetServer, clock: clock_.FakeClock
) -> None:
    subject = _informer(api, clock)
    api.watch_errors.extend([errors.Forbidden("no"), errors.InternalError("oops")])
    task = asyncio.create_task(subject.run())
    try:
        await clock.wait_for_sleepers()
        assert clock.next_deadline() == pytest.approx(informer.BACKOFF_INITIAL)
        await clock.advance(informer.BACKOFF_INITIAL)
        await clock.wait_for_sleepers()
        assert clock.next_deadline() == pytest.approx(3 * informer.BACKOFF_INITIAL)
        await clock.advance(2 * informer.BACKOFF_INITIAL)
        await _until(lambda: len(api.streams) == 1)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert subject.lists == 3, "each failure not understood is followed by a fresh LIST"


async def test_the_backoff_is_capped(api: WidgetServer, clock: clock_.FakeClock) -> None:
    subject = _informer(api, clock)
    api.watch_errors.extend(errors.ConnectionFailed("refused") for _ in range(12))
    task = asyncio.create_task(subject.run())
    sleeps = []
    try:
        for _ in range(12):
            await clock.wait_for_sleepers()
            deadline = clock.next_deadline()
            assert deadline is not None
            sleeps.append(deadline - clock.now())
            await clock.advance(sleeps[-1])
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert sleeps[:3] == pytest.approx([0.2, 0.4, 0.8])
    assert max(sleeps) == informer.BACKOFF_MAX
    assert subject.lists == 1, "a refused connection loses nothing: no re-list"


async def test_selectors_and_namespace_reach_list_and_watch(
    api: WidgetServer, clock: clock_.FakeClock
) -> None:
    subject = _informer(
        api, clock, namespace="ns", label_selector="app=x", field_selector="metadata.name=a"
    )
    async with _running(subject, api):
        pass
    for call in (api.list_calls[0], api.watch_calls[0]):
        assert call["namespace"] == "ns"
        assert call["label_selector"] == "app=x"
        assert call["field_selector"] == "metadata.name=a"


def _exported_size(resource: str, selector: str) -> float | None:
    return REGISTRY.get_sample_value(
        "nodepool_operator_informer_objects", {"resource": resource, "selector": selector}
    )


async def test_the_object_count_on_metrics_follows_the_list_the_watch_and_a_relist(
    api: WidgetServer, clock: clock_.FakeClock
) -> None:
    counted = Resource("example.dev", "v1", "countedwidgets", "Widget", namespaced=True)
    for name in ("a", "b", "c"):
        api.put(name)
    subject = informer.Informer(api, counted, clock=clock)  # type: ignore[arg-type]
    async with _running(subject, api):
        assert _exported_size("countedwidgets", "") == 3
        api.emit_put("d")
        await _until(lambda: len(subject) == 4)
        assert _exported_size("countedwidgets", "") == 4
        api.emit_remove("a")
        api.emit_remove("b")
        await _until(lambda: len(subject) == 2)
        assert _exported_size("countedwidgets", "") == 2
        # Gone while away: the re-list's deletes bring the count back to the server's.
        api.remove("c")
        api.emit(errors.Gone("too old resource version"))
        await _until(lambda: subject.lists == 2 and len(api.watch_calls) == 2)
        assert _exported_size("countedwidgets", "") == len(api.objects) == 1


async def test_the_object_count_is_labelled_by_what_narrows_the_informer(
    api: WidgetServer, clock: clock_.FakeClock
) -> None:
    api.put("a")
    narrowed = Resource("example.dev", "v1", "narrowedwidgets", "Widget", namespaced=True)
    subject = informer.Informer(
        api,  # type: ignore[arg-type]
        narrowed,
        clock=clock,
        namespace="ns",
        label_selector="app=x",
        field_selector="metadata.name=a",
    )
    async with _running(subject, api):
        pass
    selector = "namespace=ns;labels=app=x;fields=metadata.name=a"
    assert subject.selector() == selector
    assert _exported_size("narrowedwidgets", selector) == 1
    assert _exported_size("narrowedwidgets", "") is None


def test_a_replayed_recording_exports_no_object_count() -> None:
    replayed = Resource("example.dev", "v1", "replayedwidgets", "Widget", namespaced=True)
    informer.Informer.holding(replayed, [WidgetServer().put("a")])
    assert _exported_size("replayedwidgets", "") is None


async def test_the_transform_applies_to_listed_and_watched_objects(
    api: WidgetServer, clock: clock_.FakeClock
) -> None:
    def only_metadata(obj: Object) -> Object:
        return {"metadata": {"name": obj["metadata"]["name"], "namespace": "ns"}}

    api.put("listed")
    subject = _informer(api, clock, transform=only_metadata)
    async with _running(subject, api):
        api.emit_put("watched")
        await _until(lambda: len(subject) == 2)
    assert subject.get("listed", "ns") == {"metadata": {"name": "listed", "namespace": "ns"}}
    assert subject.get("watched", "ns") == {"metadata": {"name": "watched", "namespace": "ns"}}


async def test_indexes_follow_adds_updates_and_deletes(
    api: WidgetServer, clock: clock_.FakeClock
) -> None:
    api.put("a", color="red")
    api.put("b", color="red")
    subject = _informer(api, clock)

    def names(color: str) -> list[str]:
        return sorted(o["metadata"]["name"] for o in subject.by_index("color", color))

    async with _running(subject, api):
        # Added after the cache filled: it indexes what is there already.
        subject.add_index("color", lambda obj: [obj["spec"]["color"]])
        assert names("red") == ["a", "b"]
        api.emit_put("a", color="blue")
        api.emit_remove("b")
        api.emit_put("c", color="blue")
        await _until(lambda: subject.get("c", "ns") is not None)
    assert names("red") == []
    assert names("blue") == ["a", "c"]
    assert "red" not in subject._indexes["color"].entries, "empty buckets are dropped"


async def test_an_index_stamp_changes_exactly_when_its_bucket_does(
    api: WidgetServer, clock: clock_.FakeClock
) -> None:
    api.put("a", color="red")
    subject = _informer(api, clock)
    async with _running(subject, api):
        subject.add_index("color", lambda obj: [obj["spec"]["color"]])
        red = subject.index_stamp("color", "red")
        assert red != 0
        assert subject.index_stamp("color", "blue") == 0, "no object is filed under blue"

        api.emit_put("b", color="blue")
        await _until(lambda: subject.get("b", "ns") is not None)
        assert subject.index_stamp("color", "red") == red, "another bucket changed"
        blue = subject.index_stamp("color", "blue")
        assert blue not in (0, red)

        api.emit_put("a", color="red")  # changed, still red
        await _until(lambda: subject.index_stamp("color", "red") != red)
        updated = subject.index_stamp("color", "red")

        api.emit_put("a", color="blue")  # moved: red empties, blue changes
        await _until(lambda: subject.index_stamp("color", "red") == 0)
        assert subject.index_stamp("color", "blue") not in (blue, 0)

        api.emit_put("c", color="red")  # red filled again: never a stamp it had before
        await _until(lambda: subject.get("c", "ns") is not None)
    assert subject.index_stamp("color", "red") not in (0, red, updated)


async def test_a_handler_added_after_sync_is_told_of_every_cached_object(
    api: WidgetServer, clock: clock_.FakeClock
) -> None:
    api.put("a")
    api.put("b")
    subject = _informer(api, clock)
    async with _running(subject, api):
        late = Recorder()
        subject.add_handler(late)
        assert sorted(late.events) == [("add", "a"), ("add", "b")]


async def test_a_failing_handler_stops_neither_the_others_nor_the_informer(
    api: WidgetServer, clock: clock_.FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(Recorder):
        def on_add(self, obj: Object) -> None:
            raise RuntimeError("bug in a handler")

    subject = _informer(api, clock)
    subject.add_handler(Broken())
    healthy = Recorder()
    subject.add_handler(healthy)
    async with _running(subject, api) as task:
        api.emit_put("a")
        api.emit_put("b")
        await _until(lambda: len(healthy.events) == 2)
        assert not task.done()
    assert "event handler" in caplog.text
    assert subject.lists == 1


def test_object_key_is_namespace_and_name_or_just_name() -> None:
    assert informer.object_key({"metadata": {"name": "a", "namespace": "ns"}}) == "ns/a"
    assert informer.object_key({"metadata": {"name": "node-1"}}) == "node-1"


async def test_the_cache_hands_out_one_shared_informer_per_resource_and_selector(
    api: WidgetServer, clock: clock_.FakeClock
) -> None:
    cache = informer.InformerCache(api, clock=clock)  # type: ignore[arg-type]
    first = cache.informer(WIDGETS)
    assert cache.informer(WIDGETS) is first
    narrowed = cache.informer(WIDGETS, label_selector="app=x")
    assert narrowed is not first
    api.put("a")
    cache.start()
    await cache.wait_for_sync(within=1)
    assert first.has_synced()
    assert narrowed.has_synced()
    # One made after start() is started at once.
    late = cache.informer(WIDGETS, namespace="ns")
    await asyncio.wait_for(late.wait_for_sync(), 1)
    assert len(api.list_calls) == 3
    await cache.stop()
    assert cache.informers() == [first, narrowed, late]


def _color(obj: Object) -> list[str]:
    return [obj["spec"]["color"]]


def test_an_index_defined_again_is_shared_and_a_clashing_one_refused(
    api: WidgetServer, clock: clock_.FakeClock
) -> None:
    subject = _informer(api, clock)
    subject.add_index("color", _color)
    subject.add_index("color", _color)  # a second controller declaring what it reads
    with pytest.raises(ValueError, match="another function"):
        subject.add_index("color", lambda obj: [obj["spec"]["color"]])
    with pytest.raises(ValueError, match="as 'color'"):
        subject.add_index("colour", _color)
    assert list(subject._indexes) == ["color"]


def test_label_index_is_one_function_per_label() -> None:
    pool = informer.label_index("example.com/pool")
    assert informer.label_index("example.com/pool") is pool
    assert informer.label_index("example.com/zone") is not pool
    assert pool({"metadata": {"labels": {"example.com/pool": "a"}}}) == ["a"]
    assert pool({"metadata": {"labels": {"example.com/pool": ""}}}) == []
    assert pool({"metadata": {}}) == []


def test_keep_write_times_keeps_who_wrote_which_part_when_not_the_field_sets() -> None:
    spec_entry = {
        "manager": "kubectl-client-side-apply",
        "operation": "Update",
        "apiVersion": "example.dev/v1",
        "time": "2026-11-29T10:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {"f:size": {}}},
    }
    status_entry = {
        "manager": "widget-controller",
        "operation": "Update",
        "subresource": "status",
        "apiVersion": "example.dev/v1",
        "time": "2026-11-29T10:05:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:status": {"f:phase": {}}},
    }
    obj = {"metadata": {"name": "w", "managedFields": [spec_entry, status_entry]}}

    cached = informer.keep_write_times(copy.deepcopy(obj))

    assert cached["metadata"]["managedFields"] == [
        {"manager": "kubectl-client-side-apply", "operation": "Update", "time": spec_entry["time"]},
        {
            "manager": "widget-controller",
            "operation": "Update",
            "subresource": "status",
            "time": "2026-11-29T10:05:00Z",
        },
    ]
    assert informer.keep_write_times({"metadata": {"name": "w"}}) == {"metadata": {"name": "w"}}
