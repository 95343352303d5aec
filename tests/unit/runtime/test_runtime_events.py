"""EventRecorder: one Event per object and reason, its repeats patched at most once a
window; a spam filter per object."""

from __future__ import annotations

import copy
import datetime
import logging
from typing import Any

import pytest

from nodepool_operator.runtime import clock as clock_
from nodepool_operator.runtime import errors, events
from nodepool_operator.runtime.client import Object, Resource
from nodepool_operator.runtime.testing import FakeWallClock

START = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.UTC).timestamp()


class FakeEventsApi:
    """Events stored by (namespace, name), with the calls the recorder made."""

    def __init__(self) -> None:
        self.events: dict[tuple[str, str], Object] = {}
        self.calls: list[tuple[str, str]] = []
        self.fail_with: errors.ApiError | None = None

    async def create(
        self, resource: Resource, body: Object, *, namespace: str | None = None
    ) -> Object:
        assert resource is events.EVENTS
        name = body["metadata"]["name"]
        self.calls.append(("create", name))
        if self.fail_with is not None:
            raise self.fail_with
        key = (namespace or "", name)
        if key in self.events:
            raise errors.AlreadyExists(f"events {name!r} already exists")
        self.events[key] = copy.deepcopy(body)
        return copy.deepcopy(body)

    async def patch(
        self, resource: Resource, name: str, patch: Any, *, namespace: str | None = None
    ) -> Object:
        self.calls.append(("patch", name))
        key = (namespace or "", name)
        if key not in self.events:
            raise errors.NotFound(f"events {name!r} not found")
        self.events[key].update(patch)
        return copy.deepcopy(self.events[key])

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Object:
        self.calls.append(("get", name))
        return copy.deepcopy(self.events[(namespace or "", name)])

    def only(self) -> Object:
        (event,) = self.events.values()
        return event


def _pod(name: str = "web-1", uid: str = "uid-1") -> Object:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "uid": uid, "resourceVersion": "7"},
    }


def _node(name: str = "node-1") -> Object:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": f"uid-{name}"}}


@pytest.fixture
def api() -> FakeEventsApi:
    return FakeEventsApi()


@pytest.fixture
def clock() -> clock_.FakeClock:
    return clock_.FakeClock()


@pytest.fixture
def wall() -> FakeWallClock:
    return FakeWallClock(START)


@pytest.fixture
def recorder(
    api: FakeEventsApi, clock: clock_.FakeClock, wall: FakeWallClock
) -> events.EventRecorder:
    return events.EventRecorder(
        api,  # type: ignore[arg-type]
        component="test-controller",
        instance="test-controller-abc",
        clock=clock,
        wall_clock=wall,
    )


async def test_the_first_event_is_created_with_count_one_about_its_object(
    api: FakeEventsApi, recorder: events.EventRecorder
) -> None:
    await recorder.event(_pod(), type="Warning", reason="CloudError", message="quota exceeded")
    event = api.only()
    assert event["metadata"]["namespace"] == "shop"
    assert event["metadata"]["name"].startswith("web-1.")
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "web-1",
        "namespace": "shop",
        "uid": "uid-1",
        "resourceVersion": "7",
    }
    assert (event["type"], event["reason"], event["message"]) == (
        "Warning",
        "CloudError",
        "quota exceeded",
    )
    assert event["count"] == 1
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2030-01-02T03:04:05Z"
    assert event["source"] == {"component": "test-controller"}
    assert (event["reportingComponent"], event["reportingInstance"]) == (
        "test-controller",
        "test-controller-abc",
    )


async def test_events_of_cluster_scoped_objects_live_in_the_default_namespace(
    api: FakeEventsApi, recorder: events.EventRecorder
) -> None:
    await recorder.event(_node(), type="Normal", reason="Registered", message="node registered")
    assert api.only()["metadata"]["namespace"] == events.CLUSTER_SCOPED_NAMESPACE


async def test_later_repeats_within_the_window_reach_the_api_as_one_patch_at_its_end(
    api: FakeEventsApi,
    recorder: events.EventRecorder,
    clock: clock_.FakeClock,
    wall: FakeWallClock,
) -> None:
    for second in range(4):
        wall.now = START + second
        await recorder.event(_pod(), type="Warning", reason="CloudError", message="quota exceeded")
        await clock.advance(1)
    # The first occurrence is created and the first repeat patched at once (the Event
    # becomes a series); the two after it wait for the window.
    assert [verb for verb, _ in api.calls] == ["create", "patch"]
    assert api.only()["count"] == 2

    await clock.advance(events.SERIES_FLUSH_SECONDS)

    event = api.only()
    assert [verb for verb, _ in api.calls] == ["create", "patch", "patch"]
    assert event["count"] == 4
    assert event["firstTimestamp"] == "2030-01-02T03:04:05Z"
    assert event["lastTimestamp"] == "2030-01-02T03:04:08Z"
    assert event["message"] == "quota exceeded"


async def test_a_repeat_after_the_window_is_patched_at_once(
    api: FakeEventsApi,
    recorder: events.EventRecorder,
    clock: clock_.FakeClock,
    wall: FakeWallClock,
) -> None:
    for minute in range(3):
        wall.now = START + 60 * minute
        await recorder.event(_pod(), type="Warning", reason="CloudError", message="quota exceeded")
        await clock.advance(events.SERIES_FLUSH_SECONDS)
    event = api.only()
    assert event["count"] == 3
    assert event["lastTimestamp"] == "2030-01-02T03:06:05Z"
    assert [verb for verb, _ in api.calls] == ["create", "patch", "patch"]


async def test_one_event_per_object_type_and_reason_showing_the_latest_message(
    api: FakeEventsApi, recorder: events.EventRecorder, clock: clock_.FakeClock
) -> None:
    await recorder.event(_pod(), type="Normal", reason="ScaleUp", message="creating 2 VMs (0 -> 2)")
    await recorder.event(_pod(), type="Normal", reason="ScaleUp", message="creating 1 VMs (2 -> 3)")
    await clock.advance(events.SERIES_FLUSH_SECONDS)
    event = api.only()
    assert event["count"] == 2
    assert event["message"] == events.COMBINED_PREFIX + "creating 1 VMs (2 -> 3)"


async def test_warnings_with_new_messages_are_new_events_until_the_aggregate_limit(
    api: FakeEventsApi, recorder: events.EventRecorder, clock: clock_.FakeClock
) -> None:
    def blocked(pod: int) -> str:
        return f"pod shop/web-{pod} blocks the drain"

    for pod in range(events.AGGREGATE_MAX):
        await recorder.event(_node(), type="Warning", reason="DrainBlocked", message=blocked(pod))
    assert len(api.events) == events.AGGREGATE_MAX  # each names its pod
    for pod in range(events.AGGREGATE_MAX, events.AGGREGATE_MAX + 3):
        await recorder.event(_node(), type="Warning", reason="DrainBlocked", message=blocked(pod))
    await recorder.flush()
    combined = [e for e in api.events.values() if e["message"].startswith(events.COMBINED_PREFIX)]
    assert len(api.events) == events.AGGREGATE_MAX + 1
    [one] = combined
    assert one["count"] == 3
    assert one["message"] == events.COMBINED_PREFIX + blocked(events.AGGREGATE_MAX + 2)
    # A message already told folds into its own Event, not the combined one.
    await recorder.event(_node(), type="Warning", reason="DrainBlocked", message=blocked(0))
    assert sum(e["count"] for e in api.events.values()) == events.AGGREGATE_MAX + 4
    # Past the window, a new message is an Event of its own again.
    await clock.advance(events.AGGREGATE_SECONDS)
    await recorder.event(_node(), type="Warning", reason="DrainBlocked", message=blocked(99))
    assert len(api.events) == events.AGGREGATE_MAX + 2


async def test_a_different_type_reason_or_object_is_another_event(
    api: FakeEventsApi, recorder: events.EventRecorder
) -> None:
    await recorder.event(_pod(), type="Warning", reason="CloudError", message="quota exceeded")
    await recorder.event(_pod(), type="Warning", reason="Throttled", message="quota exceeded")
    await recorder.event(_pod(), type="Normal", reason="CloudError", message="quota exceeded")
    await recorder.event(
        _pod("web-2", uid="uid-2"), type="Warning", reason="CloudError", message="quota exceeded"
    )
    assert len(api.events) == 4
    assert {e["count"] for e in api.events.values()} == {1}


async def test_the_spam_filter_drops_events_past_the_burst_and_refills_slowly(
    api: FakeEventsApi, recorder: events.EventRecorder, clock: clock_.FakeClock
) -> None:
    for i in range(events.SPAM_BURST + 5):
        await recorder.event(_pod(), type="Warning", reason=f"Failing{i}", message="attempt")
    assert len(api.calls) == events.SPAM_BURST
    assert recorder.dropped == 5
    # Another object has a bucket of its own.
    await recorder.event(_node(), type="Normal", reason="Registered", message="ok")
    assert len(api.calls) == events.SPAM_BURST + 1
    # One token comes back every five minutes; not a moment sooner.
    await clock.advance(events.SPAM_REFILL_SECONDS - 1)
    await recorder.event(_pod(), type="Warning", reason="Again", message="again")
    assert recorder.dropped == 6
    await clock.advance(1)
    await recorder.event(_pod(), type="Warning", reason="Again", message="again")
    await recorder.event(_pod(), type="Warning", reason="Again", message="again")
    assert recorder.dropped == 7
    assert len(api.calls) == events.SPAM_BURST + 2


async def test_folded_repeats_count_against_the_spam_filter_too(
    api: FakeEventsApi, recorder: events.EventRecorder
) -> None:
    for _ in range(events.SPAM_BURST + 10):
        await recorder.event(_pod(), type="Warning", reason="Failing", message="same")
    await recorder.flush()
    assert api.only()["count"] == events.SPAM_BURST
    assert recorder.dropped == 10


async def test_flush_writes_the_waiting_folds_now_and_nothing_else(
    api: FakeEventsApi, recorder: events.EventRecorder, clock: clock_.FakeClock
) -> None:
    await recorder.event(_pod(), type="Warning", reason="CloudError", message="quota")
    await recorder.event(_pod(), type="Warning", reason="CloudError", message="quota")
    await recorder.flush()
    assert [verb for verb, _ in api.calls] == ["create", "patch"]
    await recorder.event(_pod(), type="Warning", reason="CloudError", message="quota")
    assert [verb for verb, _ in api.calls] == ["create", "patch"]
    await recorder.flush()
    assert [verb for verb, _ in api.calls] == ["create", "patch", "patch"]
    assert api.only()["count"] == 3
    assert clock.sleepers == 0  # the cancelled wait is gone


async def test_an_expired_event_is_created_anew(
    api: FakeEventsApi, recorder: events.EventRecorder, clock: clock_.FakeClock
) -> None:
    await recorder.event(_pod(), type="Warning", reason="CloudError", message="quota exceeded")
    api.events.clear()  # the API server's event TTL ran out
    await clock.advance(events.SERIES_FLUSH_SECONDS)
    await recorder.event(_pod(), type="Warning", reason="CloudError", message="quota exceeded")
    assert api.only()["count"] == 1
    assert [verb for verb, _ in api.calls] == ["create", "patch", "create"]


async def test_an_event_left_by_an_earlier_run_is_folded_into(
    api: FakeEventsApi, clock: clock_.FakeClock, wall: FakeWallClock
) -> None:
    def new_recorder() -> events.EventRecorder:
        return events.EventRecorder(
            api,  # type: ignore[arg-type]
            component="test-controller",
            clock=clock,
            wall_clock=wall,
        )

    await new_recorder().event(_pod(), type="Warning", reason="CloudError", message="quota")
    restarted = new_recorder()  # the process restarted: its memory of events is empty
    await restarted.event(_pod(), type="Warning", reason="CloudError", message="quota")
    await restarted.event(_pod(), type="Warning", reason="CloudError", message="quota")
    await clock.advance(events.SERIES_FLUSH_SECONDS)
    assert api.only()["count"] == 3
    assert api.only()["message"] == "quota"
    assert [verb for verb, _ in api.calls] == ["create", "create", "get", "patch", "patch"]


async def test_a_failed_event_write_is_logged_and_never_raised(
    api: FakeEventsApi, recorder: events.EventRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    api.fail_with = errors.Forbidden("cannot create events")
    with caplog.at_level(logging.WARNING, logger="nodepool_operator.runtime.events"):
        await recorder.event(_pod(), type="Warning", reason="CloudError", message="quota")
    assert api.events == {}
    assert "event=not-recorded reason=CloudError" in caplog.text
    # Not remembered as written: once the API accepts it, the event is created.
    api.fail_with = None
    await recorder.event(_pod(), type="Warning", reason="CloudError", message="quota")
    assert api.only()["count"] == 1


async def test_memory_of_objects_and_events_is_bounded() -> None:
    from nodepool_operator.runtime import events as events_module

    recorder = events_module.EventRecorder(_QuietClient(), component="test")  # type: ignore[arg-type]
    for index in range(events_module.CACHE_SIZE + 100):
        obj = {"metadata": {"name": f"pod-{index}", "namespace": "ns", "uid": f"uid-{index}"}}
        await recorder.event(obj, type="Normal", reason="Seen", message="hello")
    assert len(recorder._buckets) == events_module.CACHE_SIZE
    assert len(recorder._seen) == events_module.CACHE_SIZE


class _QuietClient:
    """Accepts every Event write; the test is about the recorder's memory."""

    async def create(self, resource: object, body: object, *, namespace: str) -> dict[str, object]:
        return {}
