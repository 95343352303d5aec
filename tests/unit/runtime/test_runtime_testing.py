"""The shared test doubles are strict where the API server is: the tests that use them
prove something only if a stale write fails here as it fails there."""

from __future__ import annotations

import copy

import pytest

from nodepool_operator.runtime import errors, testing
from nodepool_operator.runtime.client import Resource

THINGS = Resource(
    group="example.dev", version="v1", plural="things", kind="Thing", namespaced=False
)


def thing(name: str, size: int = 1) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"size": size}}


async def test_a_stale_update_gets_409_and_changes_nothing() -> None:
    api = testing.FakeApiServer()
    stored = await api.create(THINGS, thing("a"))
    api.edit("things", "a", lambda obj: obj["spec"].update(size=2))
    stale = copy.deepcopy(stored)
    stale["spec"]["size"] = 3

    with pytest.raises(errors.Conflict):
        await api.replace(THINGS, stale)

    assert api.objects[("things", "a")]["spec"]["size"] == 2


async def test_an_update_moves_the_version_and_a_spec_change_the_generation() -> None:
    api = testing.FakeApiServer()
    stored = await api.create(THINGS, thing("a"))
    relabelled = copy.deepcopy(stored)
    relabelled["metadata"]["labels"] = {"team": "x"}
    after_label = await api.replace(THINGS, relabelled)
    assert after_label["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"]
    assert after_label["metadata"]["generation"] == 1
    after_label["spec"]["size"] = 5
    assert (await api.replace(THINGS, after_label))["metadata"]["generation"] == 2


async def test_a_patch_with_a_resource_version_is_conditional() -> None:
    api = testing.FakeApiServer()
    stored = await api.create(THINGS, thing("a"))
    api.edit("things", "a", lambda obj: obj["metadata"].update(labels={"x": "y"}))
    patch = {
        "metadata": {"finalizers": ["f"], "resourceVersion": stored["metadata"]["resourceVersion"]}
    }

    with pytest.raises(errors.Conflict):
        await api.patch(THINGS, "a", patch)


async def test_status_is_written_only_through_its_subresource() -> None:
    api = testing.FakeApiServer()
    await api.create(THINGS, thing("a"))
    await api.patch(THINGS, "a", {"status": {"ready": True}, "spec": {"size": 4}})
    assert "ready" not in api.objects[("things", "a")].get("status", {})
    await api.patch(THINGS, "a", {"status": {"ready": True}}, subresource="status")
    assert api.objects[("things", "a")]["status"] == {"ready": True}


async def test_a_second_create_a_missing_object_and_another_uid_are_refused() -> None:
    api = testing.FakeApiServer()
    await api.create(THINGS, thing("a"))
    with pytest.raises(errors.AlreadyExists):
        await api.create(THINGS, thing("a"))
    with pytest.raises(errors.NotFound):
        await api.get(THINGS, "b")
    with pytest.raises(errors.Conflict):
        await api.delete(THINGS, "a", uid="someone-else")
    await api.delete(THINGS, "a")
    assert api.stored("things") == []


async def test_an_object_with_a_finalizer_waits_for_it_before_it_goes() -> None:
    api = testing.FakeApiServer()
    await api.create(THINGS, {**thing("a"), "metadata": {"name": "a", "finalizers": ["f"]}})
    await api.delete(THINGS, "a")
    deleting = await api.get(THINGS, "a")
    assert deleting["metadata"]["deletionTimestamp"]
    await api.patch(THINGS, "a", {"metadata": {"finalizers": None}})
    assert api.stored("things") == []


async def test_an_informer_lags_behind_the_server_until_it_syncs() -> None:
    api = testing.FakeApiServer()
    cache = testing.FakeInformer(
        {"size": lambda o: [str(o["spec"]["size"])]}, server=api, plural="things"
    )
    await api.create(THINGS, thing("a", size=3))
    assert cache.get("a") is None
    cache.sync()
    assert [o["metadata"]["name"] for o in cache.by_index("size", "3")] == ["a"]
    assert cache.resource_version == api.resource_version


async def test_a_status_write_that_adds_or_changes_moves_its_managers_record_others_do_not() -> (
    None
):
    clock = testing.FakeWallClock(1_800_000_000.0)
    api = testing.FakeApiServer(wall_clock=clock, field_manager="thing-controller")
    await api.create(THINGS, thing("a"))

    def recorded() -> list[tuple[str, str, str]]:
        entries = api.objects[("things", "a")]["metadata"].get("managedFields", [])
        return [(e["manager"], e["subresource"], e["time"]) for e in entries]

    await api.patch(THINGS, "a", {"status": {"phase": "Up", "left": 1}}, subresource="status")
    assert recorded() == [("thing-controller", "status", "2027-01-15T08:00:00Z")]

    clock.now += 30
    # The same values again, then a removal only: the server keeps the entry's time.
    await api.patch(THINGS, "a", {"status": {"phase": "Up"}}, subresource="status")
    await api.patch(THINGS, "a", {"status": {"left": None}}, subresource="status")
    # A write of the main resource is not a status write.
    await api.patch(THINGS, "a", {"spec": {"size": 2}})
    assert recorded() == [("thing-controller", "status", "2027-01-15T08:00:00Z")]

    clock.now += 0.6  # recorded to the second, as metav1.Time
    await api.patch(THINGS, "a", {"status": {"phase": "Down"}}, subresource="status")
    assert recorded() == [("thing-controller", "status", "2027-01-15T08:00:30Z")]


def test_adds_or_changes_counts_new_keys_new_values_and_new_list_items_not_removals() -> None:
    before = {"a": 1, "nested": {"b": 2}, "items": [{"type": "X"}, {"type": "Y"}]}
    assert testing.adds_or_changes(before, {**before, "c": 3})
    assert testing.adds_or_changes(before, {**before, "nested": {"b": 3}})
    assert testing.adds_or_changes(before, {**before, "items": [{"type": "X", "new": 1}]})
    assert not testing.adds_or_changes(before, before)
    assert not testing.adds_or_changes(before, {"nested": {}, "items": [{"type": "Y"}]})


def test_a_merge_patch_sets_a_value_unless_it_only_removes() -> None:
    assert testing.sets_a_value({"status": {"phase": "Up", "left": None}})
    assert testing.sets_a_value({"status": {"conditions": []}})  # a list replaced
    assert not testing.sets_a_value({"status": {"left": None, "nested": {"gone": None}}})
