"""simcloud's HTTP server: a JSON API over the store, with fault injection and call stats.

Routes (bodies and VMs as in ``wire``)::

    PUT    /v1/vms/{name}   {pool, cpu, memory, pods,  201 made, 200 existed (same pool),
                            zone?, nodeLabels?,
                            nodeTaints?}
                                                       400, 403 QuotaExceeded, 409 VmConflict,
                                                       503 InsufficientCapacity
    DELETE /v1/vms/{name}                              202 + VM (deleting), 204 absent
    GET    /v1/vms?pool=P                              200 {"items": [VM, ...]}, by name;
                                                       every pool's without ``pool``
    GET    /v1/vms/{name}                              200 VM, 404 VmNotFound
    GET    /v1/events?after=N&wait=S                   200 {"items": [event, ...]}: the
                                                       stream after event N, waiting up
                                                       to S s for one
    GET    /healthz                                    200 {"ok": true}
    POST   /admin/interrupt {names, kind?}             200 {"items": [VM, ...]}, 400 (a
                                                       VM absent or not spot); kind
                                                       SpotInterruptionWarning (default:
                                                       the notice, terminateAt) or
                                                       RebalanceRecommendation (told only)
    GET    /admin/faults                               200 faults
    PUT    /admin/faults    partial faults, null clears a limit   200 faults, 400
    GET    /admin/stats                                200 stats (?cluster=C: creations
                                                       of that cluster only)
    DELETE /admin/stats                                204, zeroes the call counts

Every route but ``/healthz`` (a kubelet probe) needs ``Authorization: Bearer <token>``,
the token being the content of ``token_file`` (re-read when it changes, so a rotated
Secret works); anything else is answered 401 ``Unauthorized`` before any fault or effect,
and the comparison takes the same time wherever the tokens differ. Only a config with
``insecure_no_auth`` (``--insecure-no-auth``, for local experiments) serves without a
token. Neither the token nor any request header is ever logged.

Only ``/v1`` calls are faulted and counted: tests poll ``/admin`` and ``/healthz`` and must
not disturb what they measure. In order, a ``/v1`` call may be: refused with 429 by the
token bucket; refused with 503 before it takes effect; taken into effect and then answered
500 anyway; delayed by ``slow_call_seconds`` after it took effect. The last two are how a
real cloud loses responses, and what makes idempotent creation necessary.

Every ``/v1`` route takes ``?cluster=NAME`` (see ``wire``): the operator's client always
sends it, so two clusters sharing this cloud neither see nor touch each other's VMs.

Faults start from the config and live in memory; VMs live in the SQLite file.

With ``kubelets`` (``--kubelets hollow``) every running VM boots a hollow kubelet, told the
``nodeLabels`` and ``nodeTaints`` of its create (see ``kubelets``); without, nothing runs
on the VMs and kwok plays their kubelets on the local control plane.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import hmac
import json
import logging
import math
import os
import pathlib
import random
import signal
import sqlite3
import time
from types import TracebackType
from typing import Final

from aiohttp import typedefs, web

from nodepool_operator import pacing
from nodepool_operator.cloud import catalog, credentials, provider
from nodepool_operator.cloud.simcloud import kubelets as kubelets_module
from nodepool_operator.cloud.simcloud import store, wire

__all__ = ["SimCloudConfig", "SimCloudServer", "run", "serve"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimCloudConfig:
    """Everything a simcloud process needs; the fault fields are only the initial faults.

    ``port=0`` binds a free port; ``port_file``, if set, receives the bound port (written
    atomically, removed on a clean stop) so another process can find it.

    Exactly one of ``token_file`` (the bearer token every call must carry) and
    ``insecure_no_auth`` (serve anyone) must be given: an open cloud is never a default.
    """

    state_path: str = "simcloud.sqlite3"
    host: str = "127.0.0.1"
    port: int = 8787
    port_file: str | None = None
    create_latency_seconds: float = 5.0
    latency_jitter_seconds: float = 2.0
    delete_latency_seconds: float = 2.0
    transient_error_rate: float = 0.0
    rate_limit_per_second: float | None = None
    rate_limit_burst: int = 10
    quota_max_vms: int | None = None
    slow_call_seconds: float = 0.0
    capacity: tuple[store.CapacityLimit, ...] = ()
    kubelet_never_joins: tuple[store.MachineSelector, ...] = ()
    partitioned: frozenset[str] = frozenset()
    seed: int | None = None
    token_file: str | None = None
    insecure_no_auth: bool = False
    # None: no kubelet runs on the VMs (kwok plays them on the local control plane).
    kubelets: kubelets_module.KubeletConfig | None = None
    # The instance types and priced offerings it sells (``catalog``); None: any shape.
    catalog_path: str | None = None
    # How long a spot VM runs after its interruption notice.
    spot_notice_seconds: float = store.DEFAULT_SPOT_NOTICE_SECONDS
    spot_interruptions: tuple[store.InterruptionRate, ...] = ()

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in [0, 65535]: {self.port}")
        if (self.token_file is None) == (not self.insecure_no_auth):
            raise ValueError(
                "give exactly one of --token-file (the bearer token clients must send) "
                "and --insecure-no-auth (no authentication, for local experiments)"
            )
        if not self.spot_notice_seconds >= 0.0:
            raise ValueError(f"spot notice seconds must be >= 0: {self.spot_notice_seconds}")
        # Building them validates them, so a bad flag fails at startup, not on first use.
        self.timing()
        self.faults()
        self.sold()

    def with_faults(self, patch: object) -> SimCloudConfig:
        """This config with its faults patched as ``PUT /admin/faults`` would (a JSON
        object); raises ``ValueError`` on an unknown key or a bad value."""
        faults = self.faults().merged(patch)
        if faults.list_empty:
            raise ValueError("listEmpty cannot be set at start")
        return dataclasses.replace(
            self,
            transient_error_rate=faults.transient_error_rate,
            rate_limit_per_second=faults.rate_limit_per_second,
            rate_limit_burst=faults.rate_limit_burst,
            quota_max_vms=faults.quota_max_vms,
            slow_call_seconds=faults.slow_call_seconds,
            capacity=faults.capacity,
            kubelet_never_joins=faults.kubelet_never_joins,
            partitioned=faults.partitioned,
            spot_interruptions=faults.spot_interruptions,
        )

    def sold(self) -> catalog.Catalog:
        """The catalog of ``catalog_path``; ``ValueError`` (``CatalogError``) naming the
        file and the entry when it cannot be read."""
        return catalog.NOTHING if self.catalog_path is None else catalog.load(self.catalog_path)

    def timing(self) -> store.Timing:
        return store.Timing(
            create_latency_seconds=self.create_latency_seconds,
            delete_latency_seconds=self.delete_latency_seconds,
            latency_jitter_seconds=self.latency_jitter_seconds,
        )

    def faults(self) -> wire.Faults:
        return wire.Faults(
            transient_error_rate=self.transient_error_rate,
            rate_limit_per_second=self.rate_limit_per_second,
            rate_limit_burst=self.rate_limit_burst,
            quota_max_vms=self.quota_max_vms,
            slow_call_seconds=self.slow_call_seconds,
            capacity=self.capacity,
            kubelet_never_joins=self.kubelet_never_joins,
            partitioned=self.partitioned,
            spot_interruptions=self.spot_interruptions,
        )


class SimCloudServer:
    """One simcloud listening on a socket; ``async with`` starts and stops it.

    ``clock`` drives VM lifecycles and the rate limiter, so tests can move time by hand;
    ``slow_call_seconds`` is a real sleep either way.
    """

    def __init__(self, config: SimCloudConfig, *, clock: store.WallClock = time.time) -> None:
        self._config = config
        self._clock = clock
        self._runner: web.AppRunner | None = None
        self._state: _SimCloud | None = None
        self._port: int | None = None
        self._kubelets: kubelets_module.HollowKubelets | None = None
        self._kubelet_sync: asyncio.Task[None] | None = None
        self._ticking: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("simcloud is not started")
        return self._port

    @property
    def endpoint(self) -> str:
        """The base URL a client on this machine reaches the server at."""
        host = self._config.host
        if host in ("", "0.0.0.0"):
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        config = self._config
        state = _SimCloud(
            vms=store.SimCloudStore(
                config.state_path,
                timing=config.timing(),
                clock=self._clock,
                rng=random.Random(config.seed),
                provider_ids=(
                    store.simcloud_provider_id
                    if config.kubelets is None
                    else kubelets_module.provider_id
                ),
                boots_kubelets=config.kubelets is not None,
                sold=config.sold(),
            ),
            faults=config.faults(),
            clock=self._clock,
            # A separate stream, so enabling faults does not shift the VM latencies.
            rng=random.Random(None if config.seed is None else config.seed + 1),
            token=None if config.token_file is None else credentials.TokenFile(config.token_file),
            spot_notice_seconds=config.spot_notice_seconds,
        )
        if state.token is not None:
            try:
                state.token.read()  # fail at startup, not on the first call
            except credentials.CredentialError:
                state.vms.close()
                raise
        # handler_cancellation: a client that timed out should not keep a slow call
        # sleeping on the server; a short shutdown_timeout keeps stops quick.
        runner = web.AppRunner(
            _make_app(state),
            access_log=None,
            handler_cancellation=True,
            shutdown_timeout=1.0,
        )
        try:
            await runner.setup()
            site = web.TCPSite(runner, config.host, config.port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            state.vms.close()
            raise
        self._runner, self._state = runner, state
        self._port = _bound_port(runner)
        self._ticking = asyncio.create_task(_tick_every_second(state))
        if config.kubelets is not None:
            self._kubelets = kubelets_module.HollowKubelets(config.kubelets)
            self._kubelet_sync = asyncio.create_task(_sync_kubelets(self._kubelets, state))
        if config.port_file is not None:
            _write_port_file(config.port_file, self._port)

    @property
    def kubelets(self) -> kubelets_module.HollowKubelets | None:
        """The VMs' hollow kubelets (``--kubelets hollow``), or None (kwok plays them)."""
        return self._kubelets

    def tick(self) -> None:
        """Let the cloud's time pass now (it does every second by itself): for tests that
        move a fake clock."""
        if self._state is not None:
            self._state.tick()

    async def stop(self) -> None:
        runner, state = self._runner, self._state
        self._runner = self._state = None
        sync, self._kubelet_sync = self._kubelet_sync, None
        ticking, self._ticking = self._ticking, None
        for task in (sync, ticking):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._kubelets is not None:
            await self._kubelets.close()
            self._kubelets = None
        if runner is not None:
            await runner.cleanup()
        if state is not None:
            state.vms.close()
        if self._config.port_file is not None and self._port is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._config.port_file)

    async def __aenter__(self) -> SimCloudServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


async def serve(
    config: SimCloudConfig,
    *,
    ready: asyncio.Event | None = None,
    stop: asyncio.Event | None = None,
    clock: store.WallClock = time.time,
) -> None:
    """Serve until ``stop`` is set (or the task is cancelled); set ``ready`` once bound."""
    async with SimCloudServer(config, clock=clock) as server:
        if config.insecure_no_auth:
            log.warning("simcloud serves without authentication (--insecure-no-auth)")
        log.info(
            "simcloud listening endpoint=%s auth=%s state=%s faults=%s",
            server.endpoint,
            "none" if config.insecure_no_auth else "bearer-token-file",
            config.state_path,
            json.dumps(config.faults().to_json(), separators=(",", ":")),
        )
        if ready is not None:
            ready.set()
        await (stop if stop is not None else asyncio.Event()).wait()
    log.info("simcloud stopped")


#: How often the cloud's own time is let pass (``_SimCloud.tick``).
TICK_SECONDS: Final = 1.0


async def _tick_every_second(state: _SimCloud) -> None:
    while True:
        try:
            state.tick()
        except Exception:
            # The next tick tries again; a store error must not end the cloud's time.
            log.exception("simcloud tick failed")
        await asyncio.sleep(TICK_SECONDS)


async def _sync_kubelets(kubelets: kubelets_module.HollowKubelets, sim: _SimCloud) -> None:
    """Keep one kubelet per running VM (see ``kubelets``); the VMs' states are derived
    from the clock, so nothing but this loop notices that one has booted."""
    while True:
        try:
            kubelets.sync(sim.vms.booted(), partitioned=sim.faults.partitioned)
        except (sqlite3.OperationalError, OSError) as error:
            # A busy state file or a failed start: the next round tries again.
            log.warning("event=kubelet-sync-failed error=%r", str(error))
        await asyncio.sleep(kubelets_module.SYNC_SECONDS)


def run(config: SimCloudConfig) -> None:
    """Serve in the foreground until SIGINT or SIGTERM, then stop cleanly."""
    # A no-op if the caller (the CLI) configured logging already.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s level=%(levelname)s %(message)s")
    asyncio.run(_serve_until_signalled(config))


async def _serve_until_signalled(config: SimCloudConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        await serve(config, stop=stop)
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


@dataclasses.dataclass(eq=False, kw_only=True)
class _SimCloud:
    """The mutable state of one server: store, faults and counters."""

    vms: store.SimCloudStore
    faults: wire.Faults
    clock: store.WallClock
    rng: random.Random
    token: credentials.TokenFile | None = None
    bucket: pacing.TokenBucket | None = None
    calls: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    responses: collections.Counter[int] = dataclasses.field(default_factory=collections.Counter)
    responses_by_call: collections.defaultdict[str, collections.Counter[int]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(collections.Counter)
    )
    deletions_started: int = 0
    spot_notice_seconds: float = store.DEFAULT_SPOT_NOTICE_SECONDS
    last_tick: float | None = None

    def __post_init__(self) -> None:
        self.set_faults(self.faults)

    def tick(self) -> None:
        """Let the cloud's own time pass: spot VMs get their notices at the fault's rate
        over the time since the last tick, and VMs whose notice ran out are taken back."""
        now = self.clock()
        seconds = 0.0 if self.last_tick is None else now - self.last_tick
        self.last_tick = now
        noticed = self.vms.interrupt_at_rate(
            self.faults.spot_interruptions,
            seconds=seconds,
            notice_seconds=self.spot_notice_seconds,
        )
        reclaimed = self.vms.reclaim_due()
        if noticed or reclaimed:
            log.info(
                "simcloud spot noticed=%d reclaimed=%s",
                noticed,
                ",".join(vm.name for vm in reclaimed) or "-",
            )

    def set_faults(self, faults: wire.Faults) -> None:
        old = self.faults
        self.faults = faults
        limit = (faults.rate_limit_per_second, faults.rate_limit_burst)
        if self.bucket is None or limit != (old.rate_limit_per_second, old.rate_limit_burst):
            self.bucket = (
                None
                if faults.rate_limit_per_second is None
                else pacing.TokenBucket(
                    now=self.clock,
                    rate=faults.rate_limit_per_second,
                    burst=faults.rate_limit_burst,
                )
            )

    def count(self, call: str, status: int) -> None:
        self.calls[call] += 1
        self.responses[status] += 1
        self.responses_by_call[call][status] += 1

    def reset_counts(self) -> None:
        self.calls.clear()
        self.responses.clear()
        self.responses_by_call.clear()
        self.deletions_started = 0

    def stats(self, *, cluster: str | None = None) -> wire.SimCloudStats:
        return wire.SimCloudStats(
            calls=dict(self.calls),
            responses=dict(self.responses),
            responses_by_call={call: dict(codes) for call, codes in self.responses_by_call.items()},
            deletions_started=self.deletions_started,
            creations_by_name=self.vms.creations_by_name(cluster=cluster),
        )


_SIM = web.AppKey("simcloud", _SimCloud)
# The error code, also in a header so the access log line need not parse the body.
_CODE_HEADER = "X-Simcloud-Code"


def _make_app(state: _SimCloud) -> web.Application:
    app = web.Application(middlewares=[_middleware])
    app[_SIM] = state
    app.router.add_put("/v1/vms/{name}", _create_vm)
    app.router.add_delete("/v1/vms/{name}", _delete_vm)
    app.router.add_get("/v1/vms", _list_vms)
    app.router.add_get("/v1/vms/{name}", _get_vm)
    app.router.add_get("/v1/catalog", _get_catalog)
    app.router.add_get("/v1/events", _get_events)
    app.router.add_post("/admin/interrupt", _post_interrupt)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/admin/faults", _get_faults)
    app.router.add_put("/admin/faults", _put_faults)
    app.router.add_get("/admin/stats", _get_stats)
    app.router.add_delete("/admin/stats", _reset_stats)
    return app


@web.middleware
async def _middleware(request: web.Request, handler: typedefs.Handler) -> web.StreamResponse:
    sim = request.app[_SIM]
    started = time.perf_counter()
    call = f"{request.method} {_route(request)}"
    refusal = _refusal(request, sim.token)
    response: web.StreamResponse
    if refusal is not None:
        response, fault, slow = refusal, "-", 0.0
        if request.path.startswith("/v1/"):
            sim.count(call, response.status)
    elif not request.path.startswith("/v1/"):
        response, fault, slow = await _answer(request, handler), "-", 0.0
    else:
        # Read once: a fault change in mid-call must not half-apply to this call.
        faults = sim.faults
        response, fault = await _answer_with_faults(request, handler, sim=sim, faults=faults)
        sim.count(call, response.status)
        slow = faults.slow_call_seconds
    try:
        if slow > 0:
            fault = "slow" if fault == "-" else f"{fault},slow"
            await asyncio.sleep(slow)
    except asyncio.CancelledError:
        fault = f"{fault},client-gone"
        raise
    finally:
        log.log(
            logging.DEBUG if request.path == "/healthz" else logging.INFO,
            "simcloud call method=%s route=%s name=%s status=%d code=%s fault=%s ms=%.1f",
            request.method,
            _route(request),
            request.match_info.get("name", "-"),
            response.status,
            response.headers.get(_CODE_HEADER, "-"),
            fault,
            (time.perf_counter() - started) * 1000,
        )
    return response


def _refusal(request: web.Request, token: credentials.TokenFile | None) -> web.Response | None:
    """401 unless the request carries the current token (or is a probe, or auth is off)."""
    if token is None or request.path == "/healthz":
        return None
    try:
        expected = token.read().encode()
    except credentials.CredentialError as e:
        log.error("simcloud cannot check credentials error=%r", str(e))
        return _json_error(500, "InternalError", "simcloud cannot read its token file")
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    # compare_digest: the time taken does not depend on where the tokens first differ.
    if scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), expected):
        return None
    response = _json_error(401, "Unauthorized", "missing or wrong bearer token")
    response.headers["WWW-Authenticate"] = 'Bearer realm="simcloud"'
    return response


async def _answer_with_faults(
    request: web.Request, handler: typedefs.Handler, *, sim: _SimCloud, faults: wire.Faults
) -> tuple[web.StreamResponse, str]:
    """The response to a ``/v1`` call once faults had their say, and which fault it was."""
    if sim.bucket is not None and not sim.bucket.allow():
        wait = sim.bucket.wait()
        response = _error_response(provider.RateLimited("rate limit exceeded", retry_after=wait))
        # Whole seconds, as RFC 9110 allows no fraction; rounding up never invites a
        # retry that is still too early.
        response.headers["Retry-After"] = str(max(1, math.ceil(wait)))
        return response, "rate-limited"
    if sim.rng.random() >= faults.transient_error_rate:
        return await _answer(request, handler), "-"
    if sim.rng.random() < 0.5:
        return _error_response(provider.TransientCloudError("injected fault")), "unavailable"
    await _answer(request, handler)
    error = provider.TransientCloudError("injected fault after effect", code="InternalError")
    return _error_response(error), "internal-error-after-effect"


async def _answer(request: web.Request, handler: typedefs.Handler) -> web.StreamResponse:
    """The handler's response, with errors turned into JSON bodies."""
    try:
        return await handler(request)
    except provider.CloudError as e:
        return _error_response(e)
    except web.HTTPException as e:
        # Unknown routes and methods: JSON like every other error, for one client path.
        code = "".join(e.reason.title().split()) or f"HTTP{e.status}"
        return _json_error(e.status, code, e.reason)
    except sqlite3.OperationalError as e:
        # Another process holds the state file's lock past the busy timeout: the caller
        # may retry, so it must see a transient error, not a bug.
        log.warning("simcloud state busy error=%r", str(e))
        return _error_response(provider.TransientCloudError(f"state file busy: {e}"))
    except Exception:
        log.exception("simcloud handler failed")
        return _json_error(500, "InternalError", "simcloud failed; see its log")


def _error_response(error: provider.CloudError) -> web.Response:
    response = web.json_response(wire.error_to_json(error), status=wire.status_for_error(error))
    response.headers[_CODE_HEADER] = error.code
    return response


def _json_error(status: int, code: str, message: str) -> web.Response:
    response = web.json_response(wire.error_json(code, message), status=status)
    response.headers[_CODE_HEADER] = code
    return response


def _route(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return "unmatched" if resource is None else resource.canonical


async def _create_vm(request: web.Request) -> web.StreamResponse:
    sim = request.app[_SIM]
    pool, spec = wire.machine_from_json(await _json_object(request))
    faults = sim.faults
    vm, created = sim.vms.create_vm(
        cluster=_cluster(request),
        name=provider.VmName(request.match_info["name"]),
        pool=pool,
        spec=spec,
        quota_max_vms=faults.quota_max_vms,
        capacity=faults.capacity,
        kubelet_never_joins=faults.kubelet_never_joins,
    )
    return web.json_response(wire.vm_to_json(vm), status=201 if created else 200)


async def _delete_vm(request: web.Request) -> web.StreamResponse:
    sim = request.app[_SIM]
    vm, started = sim.vms.delete_vm(
        provider.VmName(request.match_info["name"]), cluster=_cluster(request)
    )
    if started:
        sim.deletions_started += 1
    if vm is None:
        return web.Response(status=204)
    return web.json_response(wire.vm_to_json(vm), status=202)


async def _list_vms(request: web.Request) -> web.StreamResponse:
    sim = request.app[_SIM]
    vms = (
        []
        if sim.faults.list_empty
        else sim.vms.list_vms(cluster=_cluster(request), pool=request.query.get("pool"))
    )
    return web.json_response({"items": [wire.vm_to_json(vm) for vm in vms]})


async def _get_vm(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    vm = request.app[_SIM].vms.get_vm(provider.VmName(name), cluster=_cluster(request))
    if vm is None:
        return _json_error(404, "VmNotFound", f"no VM named {name!r}")
    return web.json_response(wire.vm_to_json(vm))


async def _get_catalog(request: web.Request) -> web.StreamResponse:
    return web.json_response(request.app[_SIM].vms.catalog.to_json())


#: The longest a ``GET /v1/events`` waits for an event (as SQS's long poll: 20 s).
MAX_EVENTS_WAIT: Final = 20.0
_EVENTS_POLL: Final = 0.2


async def _get_events(request: web.Request) -> web.StreamResponse:
    """``?after=ID&wait=SECONDS``: the events after ``after`` (0: all kept), waiting up
    to ``wait`` seconds for one; ``{"items": [...]}``, oldest first."""
    sim = request.app[_SIM]
    try:
        after = int(request.query.get("after", "0"))
        wait = min(max(float(request.query.get("wait", "0")), 0.0), MAX_EVENTS_WAIT)
    except ValueError as e:
        raise provider.PermanentCloudError(
            f"after and wait must be numbers: {e}", code="InvalidRequest"
        ) from e
    deadline = asyncio.get_running_loop().time() + wait
    while True:
        found = sim.vms.events(after=after, cluster=_cluster(request))
        left = deadline - asyncio.get_running_loop().time()
        if found or left <= 0:
            return web.json_response({"items": [wire.event_to_json(e) for e in found]})
        await asyncio.sleep(min(_EVENTS_POLL, left))


async def _post_interrupt(request: web.Request) -> web.StreamResponse:
    """``{"names": [...], "kind": ...}``: give those spot VMs their interruption notice
    now (``kind`` absent or ``SpotInterruptionWarning``), or tell a rebalance
    recommendation for them (``RebalanceRecommendation``: the stream only)."""
    sim = request.app[_SIM]
    body = await _json_object(request)
    names = body.get("names")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise provider.PermanentCloudError(
            "names must be a list of VM names", code="InvalidRequest"
        )
    kind = body.get("kind", store.SPOT_INTERRUPTION_WARNING)
    if kind == store.REBALANCE_RECOMMENDATION:
        told = sim.vms.recommend_rebalance([str(n) for n in names], cluster=_cluster(request))
    elif kind == store.SPOT_INTERRUPTION_WARNING:
        told = sim.vms.interrupt(
            [str(n) for n in names],
            cluster=_cluster(request),
            notice_seconds=sim.spot_notice_seconds,
        )
    else:
        raise provider.PermanentCloudError(
            f"kind must be {store.SPOT_INTERRUPTION_WARNING} or"
            f" {store.REBALANCE_RECOMMENDATION}: {kind!r}",
            code="InvalidRequest",
        )
    return web.json_response({"items": [wire.vm_to_json(vm) for vm in told]})


async def _healthz(request: web.Request) -> web.StreamResponse:
    return web.json_response({"ok": True})


async def _get_faults(request: web.Request) -> web.StreamResponse:
    return web.json_response(request.app[_SIM].faults.to_json())


async def _put_faults(request: web.Request) -> web.StreamResponse:
    sim = request.app[_SIM]
    try:
        faults = sim.faults.merged(await _json_object(request))
    except ValueError as e:
        raise provider.PermanentCloudError(str(e), code="InvalidRequest") from e
    sim.set_faults(faults)
    log.info("simcloud faults %s", json.dumps(faults.to_json(), separators=(",", ":")))
    return web.json_response(faults.to_json())


async def _get_stats(request: web.Request) -> web.StreamResponse:
    stats = request.app[_SIM].stats(cluster=_cluster(request))
    return web.json_response(stats.to_json())


async def _reset_stats(request: web.Request) -> web.StreamResponse:
    request.app[_SIM].reset_counts()
    return web.Response(status=204)


def _cluster(request: web.Request) -> str | None:
    """The cluster the call is scoped to; None: unscoped (every cluster)."""
    return request.query.get("cluster") or None


async def _json_object(request: web.Request) -> dict[str, object]:
    try:
        body = await request.json()
    except ValueError as e:
        raise provider.PermanentCloudError(f"body is not JSON: {e}", code="InvalidRequest") from e
    if not isinstance(body, dict):
        raise provider.PermanentCloudError("body must be a JSON object", code="InvalidRequest")
    return body


def _bound_port(runner: web.AppRunner) -> int:
    address = runner.addresses[0]
    # IPv4 sockname is (host, port), IPv6 (host, port, flow, scope).
    return int(address[1])


def _write_port_file(path: str, port: int) -> None:
    # Write-then-rename, so a process polling the file never reads half a number.
    target = pathlib.Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    partial.write_text(f"{port}\n")
    partial.replace(target)
