"""The ``CloudProvider`` over simcloud's HTTP API, plus the admin calls tests use.

Every failure surfaces as a ``provider.CloudError`` (the status table is ``wire``'s);
the client never retries, because retry and backoff belong to the caller's workqueue.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

import aiohttp

from nodepool_operator import USER_AGENT, pacing
from nodepool_operator.cloud import catalog, credentials, provider
from nodepool_operator.cloud.simcloud import wire

__all__ = ["SimCloudClient"]

_T = TypeVar("_T")


class SimCloudClient:
    """Talks to the simcloud at ``endpoint`` (e.g. ``http://127.0.0.1:8787``).

    ``cluster`` scopes the client to one cluster's VMs (the operator's ``--cluster-name``):
    creates make VMs in it, and lists, gets and deletes see only its VMs. ``None`` is the
    unscoped view of every cluster, which tests and admin tools use.

    ``token`` is sent as ``Authorization: Bearer`` on every call, read afresh from its
    source each time (a rotated Secret takes effect at the next call); without one, calls
    carry no credential, which only a simcloud run with ``--insecure-no-auth`` accepts.

    ``timeout`` bounds each whole call; one that runs out raises a ``TransientCloudError``
    with code ``Timeout``, and may still have taken effect on the server.

    No error this client raises carries a request header: messages are built from the
    method, the path and the server's answer, and the token is scrubbed from them anyway
    in case a server echoes it.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        token: credentials.TokenSource | None = None,
        timeout: float = 10.0,
        cluster: str | None = None,
    ) -> None:
        self._endpoint = endpoint.rstrip("/")
        self._scope = {} if cluster is None else {"cluster": cluster}
        self._token = token
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._events_after = 0  # the last event id given (``events``)

    @property
    def endpoint(self) -> str:
        return self._endpoint

    async def create_vm(
        self, *, name: provider.VmName, pool: str, spec: provider.MachineSpec
    ) -> provider.VirtualMachine:
        body = wire.machine_to_json(pool=pool, spec=spec)
        _, data = await self._call("PUT", _vm_path(name), json_body=body, params=self._scope)
        return _decode(wire.vm_from_json, data)

    async def delete_vm(self, name: provider.VmName) -> None:
        await self._call("DELETE", _vm_path(name), params=self._scope)

    async def list_vms(self, *, pool: str) -> list[provider.VirtualMachine]:
        _, data = await self._call("GET", "/v1/vms", params={**self._scope, "pool": pool})
        return _decode(_vms_from_json, data)

    async def get_vm(self, name: provider.VmName) -> provider.VirtualMachine | None:
        status, data = await self._call("GET", _vm_path(name), params=self._scope, missing_ok=True)
        return None if status == 404 else _decode(wire.vm_from_json, data)

    async def catalog(self) -> catalog.Catalog:
        """What simcloud sells (``--catalog``); empty when it makes any shape asked."""
        _, data = await self._call("GET", "/v1/catalog")
        return _decode(catalog.parse, data)

    async def events(self, *, wait: float) -> list[provider.CloudEvent]:
        """The cloud's events after the last this client was given (spot interruption
        warnings, VMs taken back), waiting up to ``wait`` seconds for one (kept a second
        under this client's timeout, so a quiet wait is an empty answer, not a timeout).
        A new client starts from the first event simcloud kept: a restarted reader sees
        again what it may not have acted on."""
        longest = max(0.0, (self._timeout.total or 10.0) - 1.0)
        after = str(self._events_after)
        params = {**self._scope, "after": after, "wait": str(min(wait, longest))}
        _, data = await self._call("GET", "/v1/events", params=params)
        found = _decode(_events_from_json, data)
        if found:
            self._events_after = max(number for number, _ in found)
        return [event for _, event in found]

    async def handled(self, event: provider.CloudEvent) -> None:
        """Nothing to forget: the stream is read by position, not consumed."""

    async def interrupt(self, names: list[str]) -> list[provider.VirtualMachine]:
        """Give those spot VMs their interruption notice now (an admin call, for tests
        and demos); returns them as they are now."""
        _, data = await self._call(
            "POST", "/admin/interrupt", json_body={"names": names}, params=self._scope
        )
        return _decode(_vms_from_json, data)

    async def recommend_rebalance(self, names: list[str]) -> list[provider.VirtualMachine]:
        """Tell a rebalance recommendation for those spot VMs now (an admin call, for
        tests and demos: the event stream only, the VMs run on); returns them."""
        body = {"names": names, "kind": "RebalanceRecommendation"}
        _, data = await self._call("POST", "/admin/interrupt", json_body=body, params=self._scope)
        return _decode(_vms_from_json, data)

    async def faults(self) -> wire.Faults:
        _, data = await self._call("GET", "/admin/faults")
        return _decode(wire.Faults().merged, data)

    async def set_faults(self, faults: wire.Faults) -> wire.Faults:
        """Replace every fault at once; returns what the server now applies."""
        _, data = await self._call("PUT", "/admin/faults", json_body=faults.to_json())
        return _decode(wire.Faults().merged, data)

    async def stats(self) -> wire.SimCloudStats:
        _, data = await self._call("GET", "/admin/stats", params=self._scope)
        return _decode(wire.SimCloudStats.from_json, data)

    async def reset_stats(self) -> None:
        """Zero the call counts (VM creation counts are kept)."""
        await self._call("DELETE", "/admin/stats")

    async def close(self) -> None:
        self._closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> SimCloudClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        json_body: object = None,
        params: Mapping[str, str] | None = None,
        missing_ok: bool = False,
    ) -> tuple[int, object]:
        """Status and decoded JSON body (``None`` if empty) of a successful call.

        With ``missing_ok``, a 404 for an absent VM is a success too; a 404 without the
        ``VmNotFound`` code still raises, since a wrong endpoint must not look like
        "no such VM" to a controller that would then create one.
        """
        headers, token = self._auth_headers()
        try:
            return await self._send(
                method,
                path,
                json_body=json_body,
                params=params,
                headers=headers,
                missing_ok=missing_ok,
            )
        except provider.CloudError as e:
            clean = credentials.redacted(e.message, token)
            if clean != e.message:
                e.args = (clean, *e.args[1:])
            raise

    def _auth_headers(self) -> tuple[dict[str, str], str | None]:
        if self._token is None:
            return {}, None
        try:
            token = self._token.read()
        except credentials.CredentialError as e:
            # Transient: the Secret may be mounted or fixed without a restart.
            raise provider.TransientCloudError(str(e), code="CredentialUnavailable") from e
        return {"Authorization": f"Bearer {token}"}, token

    async def _send(
        self,
        method: str,
        path: str,
        *,
        json_body: object,
        params: Mapping[str, str] | None,
        headers: Mapping[str, str],
        missing_ok: bool,
    ) -> tuple[int, object]:
        what = f"simcloud {method} {path}"
        try:
            async with self._get_session().request(
                method, self._endpoint + path, json=json_body, params=params, headers=headers
            ) as response:
                status = response.status
                retry_after = pacing.parse_retry_after(
                    response.headers.get("Retry-After"), http_date=True, now=time.time
                )
                text = await response.text()
        except TimeoutError as e:
            raise provider.TransientCloudError(
                f"{what}: no answer within {self._timeout.total}s", code="Timeout"
            ) from e
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as e:
            raise provider.TransientCloudError(f"{what}: {e}", code="ConnectionError") from e
        except aiohttp.ClientError as e:
            raise provider.PermanentCloudError(f"{what}: {e}", code="ClientError") from e
        try:
            data: object = json.loads(text) if text else None
        except ValueError:
            data = None
            if status < 400:
                raise provider.PermanentCloudError(
                    f"{what}: answered {status} with a body that is not JSON",
                    code="InvalidResponse",
                ) from None
        missing = isinstance(data, dict) and data.get("code") == "VmNotFound"
        if status == 404 and missing_ok and missing:
            return status, None
        if status >= 400:
            raise wire.error_for_status(status, body=data, retry_after=retry_after)
        return status, data

    def _get_session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("SimCloudClient is closed")
        # Created on first use, since a ClientSession binds the running event loop.
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=self._timeout, headers={"User-Agent": USER_AGENT}
            )
        return self._session


def _vm_path(name: provider.VmName) -> str:
    return f"/v1/vms/{urllib.parse.quote(name, safe='')}"


def _events_from_json(data: object) -> list[tuple[int, provider.CloudEvent]]:
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ValueError("expected {'items': [...]}")
    return [wire.event_from_json(item) for item in items]


def _vms_from_json(data: object) -> list[provider.VirtualMachine]:
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ValueError("expected {'items': [...]}")
    return [wire.vm_from_json(item) for item in items]


def _decode(parse: Callable[[object], _T], data: object) -> _T:
    try:
        return parse(data)
    except ValueError as e:
        raise provider.PermanentCloudError(
            f"simcloud answered with an unexpected body: {e}", code="InvalidResponse"
        ) from e


if TYPE_CHECKING:
    # Checked by mypy, so the client cannot drift from the protocol the controller uses.
    _provider: type[provider.CloudProvider] = SimCloudClient
    _catalog_source: type[provider.CatalogSource] = SimCloudClient
    _event_source: type[provider.EventSource] = SimCloudClient
