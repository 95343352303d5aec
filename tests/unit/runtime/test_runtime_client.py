"""Client: paths, verbs, field managers and content types; typed errors; the watch stream.

kubernetes_asyncio's ApiClient is replaced by a recorder of `call_api` calls, so these tests
check what the Client asks for; the integration tests check what the server makes of it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import REGISTRY

from nodepool_operator.runtime import errors, kinds
from nodepool_operator.runtime.client import Client, Resource, WatchEvent

GADGETS = Resource("example.dev", "v1", "gadgets", "Gadget", namespaced=True)
CLUSTERED = Resource("example.dev", "v1", "clustereds", "Clustered", namespaced=False)


class FakeResponse:
    """An unread aiohttp response, as `call_api(..., _preload_content=False)` returns it."""

    def __init__(self, status: int, lines: list[bytes], body: str = "") -> None:
        self.status = status
        self.lines = lines
        self.body = body
        self.released = False

    @property
    def content(self) -> AsyncIterator[bytes]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[bytes]:
        for line in self.lines:
            if isinstance(line, BaseException):
                raise line
            yield line

    async def text(self) -> str:
        return self.body

    def release(self) -> None:
        self.released = True


class FakeApiClient:
    """Records each call; answers with the next queued reply (an object, error or response)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.replies: list[Any] = []

    async def call_api(self, path: str, method: str, **options: Any) -> Any:
        self.calls.append({"path": path, "method": method, **options})
        reply = self.replies.pop(0) if self.replies else {"kind": "Anything"}
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, FakeResponse):
            return reply
        return reply, 200, {}

    @property
    def last(self) -> dict[str, Any]:
        return self.calls[-1]


def _status_error(code: int, reason: str, message: str = "") -> ApiException:
    error = ApiException(status=code, reason=reason)
    error.body = json.dumps(
        {"kind": "Status", "status": "Failure", "code": code, "reason": reason, "message": message}
    )
    return error


@pytest.fixture
def api() -> FakeApiClient:
    return FakeApiClient()


@pytest.fixture
def client(api: FakeApiClient) -> Client:
    return Client(api, field_manager="widget-controller")  # type: ignore[arg-type]


def test_resource_paths_for_core_grouped_namespaced_and_cluster_scoped_kinds() -> None:
    assert kinds.PODS.path(namespace="ns", name="p") == "/api/v1/namespaces/ns/pods/p"
    assert kinds.NODES.path(name="n", subresource="status") == "/api/v1/nodes/n/status"
    assert kinds.LEASES.api_version == "coordination.k8s.io/v1"
    assert GADGETS.path(namespace="ns") == "/apis/example.dev/v1/namespaces/ns/gadgets"
    assert GADGETS.path() == "/apis/example.dev/v1/gadgets", "all namespaces"
    assert CLUSTERED.path(namespace="ignored", name="c") == "/apis/example.dev/v1/clustereds/c"
    assert kinds.PODS.api_version == "v1"


async def test_create_posts_as_the_field_manager_in_the_bodys_namespace(
    api: FakeApiClient, client: Client
) -> None:
    body = {"metadata": {"name": "g", "namespace": "ns"}, "spec": {}}
    await client.create(GADGETS, body)
    call = api.last
    assert (call["method"], call["path"]) == ("POST", "/apis/example.dev/v1/namespaces/ns/gadgets")
    assert call["query_params"] == [("fieldManager", "widget-controller")]
    assert call["body"] == body


async def test_replace_puts_the_body_with_its_resource_version_to_the_subresource(
    api: FakeApiClient, client: Client
) -> None:
    body = {"metadata": {"name": "g", "namespace": "ns", "resourceVersion": "42"}, "status": {}}
    await client.replace(GADGETS, body, subresource="status")
    call = api.last
    assert call["method"] == "PUT"
    assert call["path"] == "/apis/example.dev/v1/namespaces/ns/gadgets/g/status"
    assert call["body"]["metadata"]["resourceVersion"] == "42"


@pytest.mark.parametrize(
    ("patch_type", "content_type"),
    [
        ("merge", "application/merge-patch+json"),
        ("json", "application/json-patch+json"),
        ("strategic", "application/strategic-merge-patch+json"),
    ],
)
async def test_patch_sends_the_content_type_of_its_kind(
    api: FakeApiClient, client: Client, patch_type: Any, content_type: str
) -> None:
    await client.patch(GADGETS, "g", {"spec": {}}, namespace="ns", patch_type=patch_type)
    assert api.last["header_params"]["Content-Type"] == content_type
    assert api.last["method"] == "PATCH"


async def test_delete_sends_preconditions_and_propagation(
    api: FakeApiClient, client: Client
) -> None:
    await client.delete(
        GADGETS, "g", namespace="ns", uid="u-1", resource_version="9", propagation="Foreground"
    )
    assert api.last["method"] == "DELETE"
    assert api.last["body"] == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": "u-1", "resourceVersion": "9"},
        "propagationPolicy": "Foreground",
    }


async def test_list_page_passes_selectors_limit_and_continue(
    api: FakeApiClient, client: Client
) -> None:
    await client.list_page(
        GADGETS, namespace="ns", label_selector="a=b", limit=50, continue_token="tok"
    )
    assert api.last["method"] == "GET"
    assert api.last["query_params"] == [
        ("labelSelector", "a=b"),
        ("limit", "50"),
        ("continue", "tok"),
    ]


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (_status_error(404, "NotFound"), errors.NotFound),
        (_status_error(409, "Conflict"), errors.Conflict),
        (_status_error(409, "AlreadyExists"), errors.AlreadyExists),
        (_status_error(422, "Invalid", "spec.size: must be >= 0"), errors.Invalid),
        (aiohttp.ClientConnectionError("refused"), errors.ConnectionFailed),
        (TimeoutError(), errors.ConnectionFailed),
    ],
)
async def test_failures_are_raised_as_typed_errors_and_counted(
    api: FakeApiClient, client: Client, failure: BaseException, expected: type[errors.ApiError]
) -> None:
    resource = Resource("example.dev", "v1", f"counted{id(failure)}", "Counted", namespaced=False)
    api.replies.append(failure)
    with pytest.raises(expected) as raised:
        await client.get(resource, "x")
    assert raised.value.__cause__ is failure
    code = str(getattr(failure, "status", "error"))
    labels = {"verb": "GET", "resource": resource.plural, "code": code}
    assert REGISTRY.get_sample_value("rest_client_requests_total", labels) == 1


async def test_requests_are_counted_by_verb_resource_and_code(
    api: FakeApiClient, client: Client
) -> None:
    resource = Resource("example.dev", "v1", "tallies", "Tally", namespaced=False)
    await client.list_page(resource)
    await client.get(resource, "one")
    await client.get(resource, "two")

    def count(verb: str) -> float | None:
        labels = {"verb": verb, "resource": "tallies", "code": "200"}
        return REGISTRY.get_sample_value("rest_client_requests_total", labels)

    assert (count("LIST"), count("GET")) == (1, 2)


def _line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


async def test_watch_streams_events_and_bookmarks_from_the_version(
    api: FakeApiClient, client: Client
) -> None:
    response = FakeResponse(
        200,
        [
            _line("ADDED", {"metadata": {"name": "a", "resourceVersion": "11"}}),
            b"\n",
            _line("BOOKMARK", {"metadata": {"resourceVersion": "12"}}),
            _line("DELETED", {"metadata": {"name": "a", "resourceVersion": "13"}}),
        ],
    )
    api.replies.append(response)
    seen = [event async for event in client.watch(GADGETS, resource_version="10", namespace="ns")]
    assert seen == [
        WatchEvent("ADDED", {"metadata": {"name": "a", "resourceVersion": "11"}}),
        WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "12"}}),
        WatchEvent("DELETED", {"metadata": {"name": "a", "resourceVersion": "13"}}),
    ]
    query = dict(api.last["query_params"])
    assert query["watch"] == "true"
    assert query["allowWatchBookmarks"] == "true"
    assert query["resourceVersion"] == "10"
    assert api.last["_preload_content"] is False
    assert response.released


async def test_an_error_event_in_a_watch_is_raised_as_its_typed_error(
    api: FakeApiClient, client: Client
) -> None:
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    response = FakeResponse(200, [_line("ERROR", gone)])
    api.replies.append(response)
    with pytest.raises(errors.Gone):
        async for _ in client.watch(GADGETS, resource_version="1"):
            pass
    assert response.released


async def test_a_refused_watch_is_raised_as_its_typed_error(
    api: FakeApiClient, client: Client
) -> None:
    body = json.dumps({"kind": "Status", "code": 403, "reason": "Forbidden", "message": "no"})
    response = FakeResponse(403, [], body=body)
    api.replies.append(response)
    with pytest.raises(errors.Forbidden):
        async for _ in client.watch(GADGETS, resource_version="1"):
            pass
    assert response.released


async def test_a_watch_cut_mid_stream_is_a_connection_failure(
    api: FakeApiClient, client: Client
) -> None:
    cut = aiohttp.ClientPayloadError("Response payload is not completed")
    response = FakeResponse(
        200, [_line("ADDED", {"metadata": {"name": "a", "resourceVersion": "2"}}), cut]
    )
    api.replies.append(response)
    seen: list[WatchEvent] = []

    async def consume() -> None:
        async for event in client.watch(GADGETS, resource_version="1"):
            seen.append(event)

    with pytest.raises(errors.ConnectionFailed):
        await consume()
    assert [e.type for e in seen] == ["ADDED"]
    assert response.released
