"""A small typed client for any API resource, objects as plain dicts.

It sits on kubernetes_asyncio's ``ApiClient`` (authentication, TLS, connection pooling,
kubeconfig) and adds what the runtime needs and the generated per-kind APIs do not give
uniformly: one code path for core and custom resources, every write under the
controller's field manager, errors translated once into
:mod:`nodepool_operator.runtime.errors`, a streaming watch with bookmarks, and a count of
every request by verb, resource and status code.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from nodepool_operator import USER_AGENT
from nodepool_operator.runtime import errors, metrics

__all__ = ["Client", "Object", "PatchType", "Resource", "WatchEvent", "read_by_listing"]

Object = dict[str, Any]

#: Seconds a single request (not a watch) may take before it fails as a transient error.
DEFAULT_REQUEST_TIMEOUT = 30.0
PatchType = Literal["merge", "json", "strategic"]

_CONTENT_TYPES: dict[PatchType, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the API: ``Resource("", "v1", "pods", "Pod", namespaced=True)``."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if subresource:
            base += f"/{subresource}"
        return base


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: Object


class Client:
    """Requests on behalf of one field manager (one per controller, docs/field-ownership.md)."""

    def __init__(
        self,
        api: k8s.ApiClient,
        *,
        field_manager: str,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        self.api = api
        if isinstance(api, k8s.ApiClient):  # not on the stand-ins unit tests pass
            # Set on the shared ApiClient, not per request: its default headers override a
            # request's own, and every caller of this connection speaks for the operator.
            api.user_agent = USER_AGENT
        self.field_manager = field_manager
        # The generated client sets no timeout at all: one hung request would block its
        # key (or an informer's LIST) for ever.
        self.request_timeout = request_timeout

    def for_manager(self, field_manager: str) -> Client:
        """The same connection, writing as another field manager."""
        return Client(self.api, field_manager=field_manager, request_timeout=self.request_timeout)

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Object:
        return await self._call("GET", resource, resource.path(namespace=namespace, name=name))

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
        """One page of a LIST; the caller follows ``metadata.continue``."""
        query = _query(
            labelSelector=label_selector,
            fieldSelector=field_selector,
            limit=limit,
            resourceVersion=resource_version,
            **{"continue": continue_token},
        )
        return await self._call("GET", resource, resource.path(namespace=namespace), query=query)

    async def create(
        self, resource: Resource, body: Mapping[str, Any], *, namespace: str | None = None
    ) -> Object:
        namespace = namespace or body.get("metadata", {}).get("namespace")
        query = _query(fieldManager=self.field_manager)
        path = resource.path(namespace=namespace)
        return await self._call("POST", resource, path, query=query, body=body)

    async def replace(
        self, resource: Resource, body: Mapping[str, Any], *, subresource: str | None = None
    ) -> Object:
        """PUT: the body's ``metadata.resourceVersion`` is the precondition (409 when stale)."""
        meta = body["metadata"]
        path = resource.path(
            namespace=meta.get("namespace"), name=meta["name"], subresource=subresource
        )
        query = _query(fieldManager=self.field_manager)
        return await self._call("PUT", resource, path, query=query, body=body)

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
    ) -> Object:
        query = _query(fieldManager=self.field_manager)
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        headers = {"Content-Type": _CONTENT_TYPES[patch_type]}
        return await self._call("PATCH", resource, path, query=query, body=patch, headers=headers)

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> Object:
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        preconditions = {
            k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v
        }
        if preconditions:
            options["preconditions"] = preconditions
        if propagation:
            options["propagationPolicy"] = propagation
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        path = resource.path(namespace=namespace, name=name)
        return await self._call("DELETE", resource, path, body=options)

    async def create_subresource(
        self,
        resource: Resource,
        name: str,
        subresource: str,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
    ) -> Object:
        """POST to a subresource, e.g. a Pod's ``eviction``."""
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        return await self._call("POST", resource, path, body=body)

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
        """Stream events after ``resource_version``; ends when the server closes the watch.

        An ERROR event (e.g. 410 Gone: the version is too old) is raised as the typed error.
        """
        query = _query(
            watch="true",
            allowWatchBookmarks="true",
            resourceVersion=resource_version,
            labelSelector=label_selector,
            fieldSelector=field_selector,
            timeoutSeconds=timeout_seconds,
        )
        path = resource.path(namespace=namespace)
        async with errors.translated():
            response = await self.api.call_api(
                path,
                "GET",
                query_params=query,
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                # No total timeout: a watch lives until timeoutSeconds; reads still time out.
                _request_timeout=timeout_seconds + 30,
            )
        metrics.rest_client_requests_total.labels(
            "WATCH", resource.plural, str(response.status)
        ).inc()
        try:
            if not 200 <= response.status < 300:
                raise await _refused(response)
            async with errors.translated():
                async for line in response.content:
                    if not line.strip():
                        continue
                    raw = json.loads(line)
                    if raw.get("type") == "ERROR":
                        status = raw.get("object") or {}
                        raise errors.from_status(status)
                    yield WatchEvent(type=raw["type"], object=raw["object"])
        finally:
            response.release()

    async def _call(
        self,
        method: str,
        resource: Resource,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Object:
        header_params = {"Accept": "application/json", "Content-Type": "application/json"}
        header_params.update(headers or {})
        code = "error"
        started = time.perf_counter()
        try:
            result, status, _ = await self.api.call_api(
                path,
                method,
                query_params=query or [],
                header_params=header_params,
                body=body,
                response_types_map={200: "object", 201: "object", 202: "object"},
                auth_settings=["BearerToken"],
                _return_http_data_only=False,
                _request_timeout=self.request_timeout,
            )
            code = str(status)
            return dict(result)
        except ApiException as error:
            code = str(error.status)
            raise errors.from_api_exception(error) from error
        except Exception as error:
            if errors.is_connection_error(error):
                raise errors.ConnectionFailed(str(error) or type(error).__name__) from error
            raise
        finally:
            verb = _verb(method, path, resource)
            metrics.rest_client_requests_total.labels(verb, resource.plural, code).inc()
            metrics.rest_client_request_duration_seconds.labels(verb, resource.plural).observe(
                time.perf_counter() - started
            )


async def read_by_listing(
    client: Client, resource: Resource, name: str, *, namespace: str | None = None
) -> Object | None:
    """The object ``name`` as the API server has it now, or None when there is none: a
    LIST by name rather than a GET, for a role that reads by listing (the operator's has
    no GET on Nodes or Pods, deploy/rbac), and one name is one item."""
    page = await client.list_page(
        resource, namespace=namespace, field_selector=f"metadata.name={name}"
    )
    found = [
        item
        for item in page.get("items") or ()
        if (item.get("metadata") or {}).get("name") == name
        and (namespace is None or item["metadata"].get("namespace", namespace) == namespace)
    ]
    return found[0] if found else None


async def _refused(response: Any) -> errors.ApiError:
    """The typed error of a refused watch. Unread responses are not checked by the
    generated client: a refused watch (403, 410, 500...) arrives as a plain Status body."""
    body = await response.text()
    try:
        status = json.loads(body)
    except ValueError:
        status = {"code": response.status, "message": body}
    return errors.from_status({"code": response.status, **status})


def _verb(method: str, path: str, resource: Resource) -> str:
    if method == "GET" and path.endswith(f"/{resource.plural}"):
        return "LIST"
    return method


def _query(**params: Any) -> list[tuple[str, str]]:
    return [(key, str(value)) for key, value in params.items() if value is not None]
