"""The manager: one process's informers, controllers, leader election and HTTP endpoints.

Start-up order: the HTTP endpoints (so probes answer at once), then leader election if
enabled, then the informers, then — only once every informer has synced, so no reconcile
ever acts on a partial cache — the controllers. Shutdown (SIGTERM, or ``stop`` set) runs
backwards: the controllers drain their in-flight reconciles, the informers stop, the lease
is released.

HTTP: ``/healthz`` (the event loop answers), ``/readyz`` (caches synced and, with leader
election, either leading or standing by), ``/metrics`` (Prometheus text format).
"""

from __future__ import annotations

import asyncio
import logging

import prometheus_client
from aiohttp import web

from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime.client import Client
from nodepool_operator.runtime.controller import Controller
from nodepool_operator.runtime.informer import InformerCache
from nodepool_operator.runtime.leader import LeaderElectionConfig, LeaderElector

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
        clock: clock_module.Clock | None = None,
    ) -> None:
        self.client = client
        self.clock = clock or clock_module.RealClock()
        self.cache = InformerCache(client, clock=self.clock)
        self.controllers: list[Controller] = []
        self.leader_election = leader_election
        self.elector = (
            LeaderElector(client, leader_election, clock=self.clock) if leader_election else None
        )
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self.bound_port: int | None = None
        self.started = asyncio.Event()  # controllers are running
        self._runner: web.AppRunner | None = None

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
            await self.cache.stop()
            self.started.clear()

    def ready(self) -> bool:
        if self.elector is not None and not self.elector.is_leader:
            return True  # a standby is ready to take over; it serves no traffic anyway
        return all(i.has_synced() for i in self.cache.informers()) and self.started.is_set()

    async def _start_http(self) -> None:
        if self.metrics_port is None:
            return
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.metrics_host, self.metrics_port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.bound_port = sockets[0].getsockname()[1] if sockets else self.metrics_port
        log.info(
            "event=serving address=%s:%s paths=/healthz,/readyz,/metrics",
            self.metrics_host,
            self.bound_port,
        )

    async def _stop_http(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, _: web.Request) -> web.Response:
        if self.ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="caches not synced")

    async def _metrics(self, _: web.Request) -> web.Response:
        body = prometheus_client.generate_latest(prometheus_client.REGISTRY)
        return web.Response(
            body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST}
        )
