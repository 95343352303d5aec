"""The status writer: compare first, write only /status, never twice while the cache lags."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodepool_operator import timestamps
from nodepool_operator.runtime import errors, testing
from nodepool_operator.runtime.client import Object, Resource
from nodepool_operator.runtime.informer import keep_write_times
from nodepool_operator.runtime.status import (
    StatusWriter,
    merge_patch,
    prune_none,
    recorded_status_write,
)

WIDGETS = Resource("example.dev", "v1", "widgets", "Widget", namespaced=True)


class FakeServer:
    """Just enough of `Client` for the writer: status merge patches on stored objects."""

    field_manager = "widget-controller"

    def __init__(self, *objects: Object) -> None:
        self.objects = {o["metadata"]["name"]: copy.deepcopy(o) for o in objects}
        self.version = 100
        self.patches: list[dict[str, Any]] = []
        self.fail_with: errors.ApiError | None = None

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        patch_type: str = "merge",
        subresource: str | None = None,
        force: bool = False,
    ) -> Object:
        self.patches.append(
            {
                "resource": resource,
                "name": name,
                "namespace": namespace,
                "patch": copy.deepcopy(patch),
                "patch_type": patch_type,
                "subresource": subresource,
            }
        )
        if self.fail_with is not None:
            raise self.fail_with
        stored = self.objects[name]
        stored["status"] = _apply_merge_patch(stored.get("status") or {}, patch["status"])
        self.version += 1
        stored["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(stored)

    def current(self, name: str) -> Object:
        return copy.deepcopy(self.objects[name])


def _apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, as the API server applies it."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _apply_merge_patch(result.get(key), value)
    return result


def _widget(name: str = "w", *, version: str = "100", status: Any = None) -> Object:
    obj: Object = {
        "apiVersion": "example.dev/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": version, "generation": 3},
        "spec": {"size": 1},
    }
    if status is not None:
        obj["status"] = status
    return obj


def _writer(server: FakeServer) -> StatusWriter:
    return StatusWriter(server, WIDGETS, controller="test")  # type: ignore[arg-type]


# -- merge_patch ---------------------------------------------------------------------------


def test_merge_patch_of_equal_documents_is_empty() -> None:
    doc = {"phase": "Ready", "nested": {"a": 1, "b": [1, 2]}}
    assert merge_patch(doc, copy.deepcopy(doc)) == {}


def test_merge_patch_sends_only_what_changed_and_nulls_what_went_away() -> None:
    old = {"phase": "Pending", "keep": 1, "gone": "x", "nested": {"a": 1, "b": 2}}
    new = {"phase": "Ready", "keep": 1, "nested": {"a": 1, "b": 3}, "added": True}
    assert merge_patch(old, new) == {
        "phase": "Ready",
        "gone": None,
        "nested": {"b": 3},
        "added": True,
    }


def test_merge_patch_replaces_lists_whole() -> None:
    old = {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Scaling"}]}
    new = {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Scaling"}]}
    assert merge_patch(old, new) == {"conditions": new["conditions"]}


def test_merge_patch_between_a_value_and_an_object_replaces_it() -> None:
    assert merge_patch({"a": 1}, {"a": {"b": 1}}) == {"a": {"b": 1}}
    assert merge_patch({"a": {"b": 1}}, {"a": 2}) == {"a": 2}
    assert merge_patch({"a": {"b": 1}}, {"a": {}}) == {"a": {"b": None}}


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({}, {"phase": "Ready"}),
        ({"phase": "Ready", "x": {"y": 1, "z": 2}}, {"x": {"y": 2}}),
        ({"list": [1, 2, 3]}, {"list": []}),
        ({"a": {"b": {"c": 1}}}, {"a": {"b": {"c": 1, "d": 2}}}),
    ],
)
def test_merge_patch_applied_to_old_gives_new(old: dict[str, Any], new: dict[str, Any]) -> None:
    assert _apply_merge_patch(old, merge_patch(old, new)) == new


def test_prune_none_drops_none_values_at_every_depth() -> None:
    value = {"a": None, "b": {"c": None, "d": 1}, "e": [{"f": None, "g": 2}]}
    assert prune_none(value) == {"b": {"d": 1}, "e": [{"g": 2}]}


# -- StatusWriter --------------------------------------------------------------------------


async def test_status_unchanged_makes_no_write() -> None:
    obj = _widget(status={"phase": "Ready", "observedGeneration": 3})
    server = FakeServer(obj)
    writer = _writer(server)
    assert await writer.update(obj, {"phase": "Ready", "observedGeneration": 3}) is None
    assert server.patches == []
    assert (writer.writes, writer.skipped) == (0, 1)


async def test_none_values_count_as_absent_when_comparing() -> None:
    obj = _widget(status={"phase": "Ready"})
    server = FakeServer(obj)
    writer = _writer(server)
    assert await writer.update(obj, {"phase": "Ready", "message": None}) is None
    assert server.patches == []


async def test_a_changed_status_is_one_merge_patch_of_the_difference_to_status() -> None:
    obj = _widget(status={"phase": "Pending", "observedGeneration": 2, "stale": "x"})
    server = FakeServer(obj)
    writer = _writer(server)
    updated = await writer.update(obj, {"phase": "Ready", "observedGeneration": 3})
    assert updated is not None
    assert updated["status"] == {"phase": "Ready", "observedGeneration": 3}
    (sent,) = server.patches
    assert sent["subresource"] == "status"
    assert sent["patch_type"] == "merge"
    assert (sent["name"], sent["namespace"]) == ("w", "ns")
    # Only the status, only what differs, and no resourceVersion precondition.
    assert sent["patch"] == {"status": {"phase": "Ready", "observedGeneration": 3, "stale": None}}
    assert writer.writes == 1


async def test_a_repeat_while_the_cache_lags_makes_no_second_write() -> None:
    cached = _widget(status={"phase": "Pending"})
    server = FakeServer(cached)
    writer = _writer(server)
    desired = {"phase": "Ready", "observedGeneration": 3}
    assert await writer.update(cached, desired) is not None
    # The informer has not delivered our write yet: the next reconcile reads the old copy.
    assert await writer.update(cached, desired) is None
    assert await writer.update(copy.deepcopy(cached), dict(desired)) is None
    assert len(server.patches) == 1
    assert (writer.writes, writer.skipped) == (1, 2)


async def test_a_new_status_while_the_cache_lags_is_patched_against_what_was_written() -> None:
    cached = _widget(status={"phase": "Pending", "count": 1})
    server = FakeServer(cached)
    writer = _writer(server)
    await writer.update(cached, {"phase": "Scaling", "count": 1})
    await writer.update(cached, {"phase": "Ready", "count": 1})
    # The second patch is relative to the first write, not to the stale cached copy.
    assert [p["patch"] for p in server.patches] == [
        {"status": {"phase": "Scaling"}},
        {"status": {"phase": "Ready"}},
    ]
    assert server.current("w")["status"] == {"phase": "Ready", "count": 1}


async def test_once_the_cache_catches_up_it_is_compared_with_again() -> None:
    cached = _widget(status={"phase": "Pending"})
    server = FakeServer(cached)
    writer = _writer(server)
    await writer.update(cached, {"phase": "Ready"})
    fresh = server.current("w")
    assert await writer.update(fresh, {"phase": "Ready"}) is None
    # Someone with the right to (a human fixing things by hand) changed the status later:
    # the cache shows a newer version, and that is what the writer compares with now.
    fresh["status"] = {"phase": "Broken"}
    fresh["metadata"]["resourceVersion"] = str(int(fresh["metadata"]["resourceVersion"]) + 5)
    assert await writer.update(fresh, {"phase": "Ready"}) is not None
    assert server.patches[-1]["patch"] == {"status": {"phase": "Ready"}}


async def test_opaque_resource_versions_count_as_stale_until_equal() -> None:
    cached = _widget(version="abc", status={"phase": "Pending"})
    server = FakeServer(cached)
    writer = _writer(server)
    await writer.update(cached, {"phase": "Ready"})
    written_version = server.current("w")["metadata"]["resourceVersion"]
    server.objects["w"]["metadata"]["resourceVersion"] = "xyz"
    other = _widget(version="not-a-number", status={"phase": "Pending"})
    assert await writer.update(other, {"phase": "Ready"}) is None, "stale: use the memory"
    caught_up = _widget(version=written_version, status={"phase": "Ready"})
    assert await writer.update(caught_up, {"phase": "Ready"}) is None
    assert len(server.patches) == 1


async def test_objects_are_remembered_per_key() -> None:
    a, b = _widget("a", status={}), _widget("b", status={})
    server = FakeServer(a, b)
    writer = _writer(server)
    await writer.update(a, {"phase": "Ready"})
    assert await writer.update(b, {"phase": "Ready"}) is not None
    assert [p["name"] for p in server.patches] == ["a", "b"]


async def test_forget_drops_the_memory_of_a_deleted_object() -> None:
    cached = _widget(status={"phase": "Pending"})
    server = FakeServer(cached)
    writer = _writer(server)
    await writer.update(cached, {"phase": "Ready"})
    writer.forget(cached)
    # Recreated under the same name: the old memory must not suppress its first write.
    reborn = _widget(version="50", status={})
    server.objects["w"] = copy.deepcopy(reborn)
    assert await writer.update(reborn, {"phase": "Ready"}) is not None


async def test_a_failed_write_is_raised_and_not_remembered() -> None:
    cached = _widget(status={"phase": "Pending"})
    server = FakeServer(cached)
    writer = _writer(server)
    server.fail_with = errors.Invalid("status.count: must be at least 0")
    with pytest.raises(errors.Invalid):
        await writer.update(cached, {"phase": "Ready", "count": -1})
    server.fail_with = None
    assert await writer.update(cached, {"phase": "Ready"}) is not None
    assert writer.writes == 1


async def test_current_status_is_what_we_wrote_while_the_cache_lags() -> None:
    stale = _widget(status={"phase": "Pending", "lastRequest": "r1"})
    server = FakeServer(stale)
    writer = _writer(server)
    assert writer.current(stale) == {"phase": "Pending", "lastRequest": "r1"}
    await writer.update(stale, {"phase": "Ready", "lastRequest": "r2"})
    # The cache still holds the old copy: building from it would bring r1 back.
    assert writer.current(stale) == {"phase": "Ready", "lastRequest": "r2"}
    caught_up = server.current("w")
    caught_up["status"]["phase"] = "Ready"
    assert writer.current(caught_up) == caught_up["status"]


# -- when the status was last written: the API server's record and the writer's memory ----

MANAGER = "widget-controller"
START = 1_800_000_000.0  # 2027-01-15T08:00:00Z


class _Cluster:
    """A strict fake API server (it records each status write that adds or changes a
    value under our field manager, to the second) and a cache that shows its writes
    only when told to, cut as ``keep_write_times`` cuts ``managedFields``."""

    def __init__(self) -> None:
        self.clock = testing.FakeWallClock(START)
        self.api = testing.FakeApiServer(wall_clock=self.clock, field_manager=MANAGER)
        self.api.put("widgets", _widget(status={"phase": "Pending"}))
        self.cache = testing.FakeInformer(server=self.api, plural="widgets")
        self.cache.sync()

    def writer(self) -> StatusWriter:
        """A status writer as a new process has it: nothing in memory."""
        return StatusWriter(
            self.api,  # type: ignore[arg-type]
            WIDGETS,
            controller="test",
            wall_clock=self.clock,
        )

    def cached(self) -> Object:
        found = self.cache.get("w", "ns")
        assert found is not None
        return keep_write_times(found)


async def test_after_a_restart_the_written_time_is_the_api_servers_record() -> None:
    cluster = _Cluster()
    await cluster.writer().update(cluster.cached(), {"phase": "Ready"})
    cluster.cache.sync()
    cluster.clock.now += 42

    restarted = cluster.writer()  # its memory is gone; the record is not

    assert restarted.written_at(cluster.cached()) == START


async def test_while_the_cache_lags_the_writers_memory_of_its_last_write_counts() -> None:
    cluster = _Cluster()
    writer = cluster.writer()
    await writer.update(cluster.cached(), {"phase": "Ready"})
    cluster.cache.sync()  # the cache shows the first write and its record
    cluster.clock.now += 30.5
    await writer.update(cluster.cached(), {"phase": "Done"})

    # The cache does not show the second write yet: its record says START.
    assert recorded_status_write(cluster.cached(), manager=MANAGER) == START
    assert writer.written_at(cluster.cached()) == START + 30.5
    # Shown, the record is to the second: the memory still has the half second.
    cluster.cache.sync()
    assert recorded_status_write(cluster.cached(), manager=MANAGER) == START + 30
    assert writer.written_at(cluster.cached()) == START + 30.5


async def test_a_write_that_changes_nothing_moves_nothing() -> None:
    cluster = _Cluster()
    await cluster.writer().update(cluster.cached(), {"phase": "Ready", "left": 1})
    cluster.cache.sync()
    cluster.clock.now += 60
    restarted = cluster.writer()

    assert await restarted.update(cluster.cached(), {"phase": "Ready", "left": 1}) is None
    # A removal is sent, but the server's record does not move for it.
    assert await restarted.update(cluster.cached(), {"phase": "Ready"}) is not None
    cluster.cache.sync()
    assert recorded_status_write(cluster.cached(), manager=MANAGER) == START
    assert cluster.writer().written_at(cluster.cached()) == START


def test_only_our_managers_status_entry_is_our_write() -> None:
    def entry(manager: str, time: str, subresource: str | None = "status") -> dict[str, Any]:
        found = {
            "manager": manager,
            "operation": "Update",
            "apiVersion": "example.dev/v1",
            "time": time,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {"f:phase": {}}},
        }
        if subresource is not None:
            found["subresource"] = subresource
        return found

    obj = _widget(status={"phase": "Ready"})
    obj["metadata"]["managedFields"] = [
        entry(MANAGER, "2027-01-15T08:00:00Z"),
        entry("kubectl-edit", "2027-01-15T09:00:00Z"),  # someone else's status write
        entry(MANAGER, "2027-01-15T10:00:00Z", subresource=None),  # our write of the spec
    ]
    cached = keep_write_times(obj)
    expected = timestamps.parse_rfc3339("2027-01-15T08:00:00Z")

    assert recorded_status_write(cached, manager=MANAGER) == expected
    assert recorded_status_write(cached, manager="other-controller") is None
    assert recorded_status_write(_widget(status={}), manager=MANAGER) is None
    writer = StatusWriter(FakeServer(obj), WIDGETS, controller="test")  # type: ignore[arg-type]
    assert writer.written_at(cached) == expected
