"""The manager: one process's informers, controllers, leader election and HTTP endpoints.

Start-up order: the HTTP endpoints (so probes answer at once), then leader election if
enabled, then the informers, then — only once every informer has synced, so no reconcile
ever acts on a partial cache — the controllers. Shutdown (SIGTERM, or ``stop`` set) runs
backwards: the controllers drain their in-flight reconciles, the informers stop, the lease
is released.

HTTP: ``/healthz`` (the event loop answers), ``/readyz`` (caches synced and, with leader
election, either leading or standing by), ``/metrics`` (Prometheus text format). With a
``health_port`` the probes get their own plain-HTTP listener (kubelet probes carry no
token), and ``/metrics`` alone is on the metrics port, over TLS when ``metrics_tls`` is
given and behind ``metrics_authorizer`` (TokenReview + SubjectAccessReview) when that is.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence

import prometheus_client
from aiohttp import web

from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime.client import Client
from nodepool_operator.runtime.controller import Controller
from nodepool_operator.runtime.informer import InformerCache
from nodepool_operator.runtime.leader import LeaderElectionConfig, LeaderElector
from nodepool_operator.runtime.metrics_auth import Decision, MetricsAuthorizer

__all__ = ["Manager"]

log = logging.getLogger(__name__)

SYNC_TIMEOUT_SECONDS = 120.0


class Manager:
    def __init__(
        self,
        client: Client,
        *,
        leader_election: LeaderElectionConfig | None = None,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        health_port: int | None = None,
        metrics_tls: ssl.SSLContext | None = None,
        metrics_authorizer: MetricsAuthorizer | None = None,
        clock: clock_module.Clock | None = None,
    ) -> None:
        self.client = client
        self.clock = clock or clock_module.RealClock()
        self.cache = InformerCache(client, clock=self.clock)
        self.controllers: list[Controller] = []
        # Run once the controllers have drained on a clean stop (an event recorder's
        # repeats still inside their window are written then, not lost with the process).
        self.on_drained: list[Callable[[], Awaitable[None]]] = []
        self.leader_election = leader_election
        self.elector = (
            LeaderElector(client, leader_election, clock=self.clock) if leader_election else None
        )
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self.health_port = health_port
        self.metrics_tls = metrics_tls
        self.metrics_authorizer = metrics_authorizer
        self.bound_port: int | None = None  # of /metrics (and the probes without health_port)
        self.health_bound_port: int | None = None
        self.started = asyncio.Event()  # controllers are running
        self._runners: list[web.AppRunner] = []

    def add(self, controller: Controller) -> None:
        self.controllers.append(controller)

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set; then drain and clean up."""
        await self._start_http()
        try:
            if self.elector is None:
                await self._run_controllers(stop)
            else:
                await self._run_elected(self.elector, stop)
        finally:
            await self._stop_http()

    async def _run_elected(self, elector: LeaderElector, stop: asyncio.Event) -> None:
        election = asyncio.create_task(
            elector.run(lambda: self._run_controllers(stop)), name="leader-election"
        )
        stopping = asyncio.create_task(stop.wait(), name="manager-stop")
        try:
            await asyncio.wait({election, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not election.done() and not elector.is_leader:
                # Stopped while standing by: nothing runs and no lease is held, so leave
                # now rather than wait, perhaps for ever, to be elected only to stop.
                election.cancel()
                await asyncio.wait({election})
                if election.cancelled():
                    return
            # Leading: the controllers see `stop`, drain, and the elector releases the lease.
            await election
        finally:
            stopping.cancel()
            if not election.done():  # we were cancelled ourselves
                election.cancel()
                await asyncio.wait({election})

    async def _run_controllers(self, stop: asyncio.Event) -> None:
        drain = True
        self.cache.start()
        try:
            await self.cache.wait_for_sync(within=SYNC_TIMEOUT_SECONDS)
            for informer in self.cache.informers():
                log.info(
                    "event=cache-synced resource=%s objects=%d",
                    informer.resource.plural,
                    len(informer),
                )
            for controller in self.controllers:
                controller.start()
            self.started.set()
            log.info("event=started controllers=%s", [c.name for c in self.controllers])
            await stop.wait()
            log.info("event=stopping action=drain-in-flight-reconciles")
            drain = True
        except asyncio.CancelledError:
            # Leadership lost (the elector cancels us): stop at once, do not drain.
            drain = False
            raise
        finally:
            await asyncio.gather(
                *(c.stop(drain=drain) for c in self.controllers), return_exceptions=True
            )
            if drain:  # still the leader: ours to write
                await asyncio.gather(*(f() for f in self.on_drained), return_exceptions=True)
            await self.cache.stop()
            self.started.clear()

    def ready(self) -> bool:
        if self.elector is not None and not self.elector.is_leader:
            return True  # a standby is ready to take over; it serves no traffic anyway
        return all(i.has_synced() for i in self.cache.informers()) and self.started.is_set()

    async def _start_http(self) -> None:
        probes: list[tuple[str, Handler]] = [("/healthz", self._healthz), ("/readyz", self._readyz)]
        if self.health_port is not None:
            self.health_bound_port = await self._serve(
                self.health_port, probes, tls=None, what="probes"
            )
            probes = []
        if self.metrics_port is not None:
            self.bound_port = await self._serve(
                self.metrics_port,
                [*probes, ("/metrics", self._metrics)],
                tls=self.metrics_tls,
                what="metrics",
            )

    async def _serve(
        self,
        port: int,
        routes: Sequence[tuple[str, Handler]],
        *,
        tls: ssl.SSLContext | None,
        what: str,
    ) -> int:
        app = web.Application()
        for path, handler in routes:
            app.router.add_get(path, handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        self._runners.append(runner)
        site = web.TCPSite(runner, self.metrics_host, port, ssl_context=tls)
        await site.start()
        bound = int(runner.addresses[0][1]) if runner.addresses else port
        log.info(
            "event=serving what=%s address=%s:%s scheme=%s auth=%s paths=%s",
            what,
            self.metrics_host,
            bound,
            "https" if tls is not None else "http",
            "tokenreview" if what == "metrics" and self.metrics_authorizer else "none",
            ",".join(path for path, _ in routes),
        )
        return bound

    async def _stop_http(self) -> None:
        runners, self._runners = self._runners, []
        for runner in runners:
            await runner.cleanup()

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, _: web.Request) -> web.Response:
        if self.ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="caches not synced")

    async def _metrics(self, request: web.Request) -> web.Response:
        if self.metrics_authorizer is not None:
            decision = await self.metrics_authorizer.decide(
                request.headers.get("Authorization"), path=request.path, verb="get"
            )
            if decision is not Decision.ALLOWED:
                return _refused(decision)
        body = prometheus_client.generate_latest(prometheus_client.REGISTRY)
        return web.Response(
            body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST}
        )


Handler = Callable[[web.Request], Awaitable[web.Response]]

_REFUSALS = {
    Decision.UNAUTHENTICATED: "Unauthorized",
    Decision.FORBIDDEN: "Forbidden",
    Decision.REVIEW_FAILED: "Internal Server Error",
}


def _refused(decision: Decision) -> web.Response:
    response = web.Response(status=int(decision), text=_REFUSALS[decision])
    if decision is Decision.UNAUTHENTICATED:
        response.headers["WWW-Authenticate"] = 'Bearer realm="nodepool-operator metrics"'
    return response
