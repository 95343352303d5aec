"""Answering a pool's ScaleRequests (``requests`` holds the rules), once each.

A request we answered may still show Pending in the cache for a moment: deciding it again
from that stale copy would answer it twice, and maybe differently. So the uids answered
are remembered until the cache shows them answered (or gone).
"""

from __future__ import annotations

import datetime
import logging

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.controllers.nodepool import request_handling
from nodepool_operator.controllers.resources import REQUESTS_BY_POOL, SCALEREQUESTS
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import errors
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import Informer
from nodepool_operator.runtime.status import StatusWriter

__all__ = ["RequestAnswers"]

log = logging.getLogger(__name__)


class RequestAnswers:
    """Turns pending ScaleRequests into a pool's target and cleans finished ones up."""

    def __init__(
        self,
        *,
        client: Client,
        scale_requests: Informer,
        retention: float,
        controller: str,
        recorder: EventRecorder,
        wall_clock: clock_module.WallClock,
    ) -> None:
        self.client = client
        self.scale_requests = scale_requests
        self.retention = retention
        self.recorder = recorder
        self.controller = controller
        self.wall_clock = wall_clock
        self.status = StatusWriter(client, SCALEREQUESTS, controller=controller)
        self._answered: dict[str, set[str]] = {}  # pool -> uids answered, maybe still Pending

    def of_pool(self, name: str) -> list[Object]:
        return self.scale_requests.by_index(REQUESTS_BY_POOL, name)

    async def answer(self, pool: Object, pool_requests: list[Object]) -> bool:
        """Turn the pool's pending requests into its target; True if the target moved or
        the pool turned out to be gone, so the pass must stop (an event follows)."""
        name = pool["metadata"]["name"]
        pending = await self._still_pending(self._unanswered(name, pool_requests))
        if not pending:
            return False
        decision = await request_handling.apply_pending(
            client=self.client, statuses=self.status, pool_name=name, pending=pending
        )
        self._remember(name, pending)
        if decision is None:
            log.info(
                "event=pool-gone requests-rejected=%d",
                len(pending),
            )
            await self._tell_rejected(pending, request_handling.missing_pool(name))
            return True
        if decision.phase == "Rejected":
            await self._tell_rejected(pending[-1:], decision.message)
        log.info(
            "event=scale-request-%s request=%s message=%r",
            decision.phase.lower(),
            pending[-1]["metadata"]["name"],
            decision.message,
        )
        return decision.target != nodepool_api.spec_of(pool).target_nodes

    async def answer_orphans(self, name: str) -> tuple[bool, float | None]:
        """Reject the pending requests for ``name``, a pool the cache does not have.

        Owned requests go with their pool (garbage collection); this answers the ones
        made by hand for a pool that never existed, or whose pool was deleted. Returns
        whether the pool exists after all (the cache lags behind it: its event is coming)
        and the seconds until the next finished request expires.
        """
        orphans = self.of_pool(name)
        pending = self._unanswered(name, orphans)
        if pending:
            if await request_handling.pool_exists(self.client, name):
                return True, None
            message = request_handling.missing_pool(name)
            await request_handling.reject(self.status, pending, message)
            self._remember(name, pending)
            await self._tell_rejected(pending, message)
            log.info(
                "event=scale-request-rejected requests=%s message=%r",
                ",".join(r["metadata"]["name"] for r in pending),
                message,
            )
        next_expiry = await self.delete_expired(orphans)
        if not self._answered.get(name):
            self._answered.pop(name, None)
        return False, next_expiry

    async def delete_expired(self, pool_requests: list[Object]) -> float | None:
        """Delete finished requests past retention; seconds until the next one expires."""
        now = datetime.datetime.fromtimestamp(self.wall_clock.time(), datetime.UTC)
        expired, next_expiry = request_handling.expired_requests(
            pool_requests, now=now, retention=self.retention
        )
        await request_handling.delete_requests(self.client, expired)
        return next_expiry

    async def _still_pending(self, pending: list[Object]) -> list[Object]:
        """Those of ``pending`` the server still shows Pending. Our answer may have been
        written with its reply lost (a timeout): then the cache can still show the
        request Pending and we remember nothing, and answering it again could answer it
        differently (the pool's target may have moved since)."""
        fresh = []
        for request in pending:
            try:
                found = await self.client.get(SCALEREQUESTS, request["metadata"]["name"])
            except errors.NotFound:
                continue
            if _is_pending(found) and found["metadata"].get("uid") == request["metadata"]["uid"]:
                fresh.append(found)
        return fresh

    async def _tell_rejected(self, rejected: list[Object], message: str) -> None:
        """A Warning on each rejected request, so ``kubectl describe`` and event
        pipelines show why a scale did not happen (the phase says it only to those who
        look at the request's status)."""
        for request in rejected:
            await self.recorder.event(
                request, type="Warning", reason="ScaleRequestRejected", message=message
            )

    def _remember(self, pool: str, answered: list[Object]) -> None:
        self._answered.setdefault(pool, set()).update(r["metadata"]["uid"] for r in answered)

    def _unanswered(self, pool: str, every: list[Object]) -> list[Object]:
        """The pending requests (oldest first) not answered already; the memory keeps
        only the uids the cache still shows Pending."""
        still_pending = {r["metadata"]["uid"] for r in every if _is_pending(r)}
        answered = self._answered.get(pool, set()) & still_pending
        self._answered[pool] = answered
        return [
            r
            for r in request_handling.pending_requests(every)
            if r["metadata"]["uid"] not in answered
        ]


def _is_pending(obj: Object) -> bool:
    return scalerequest_api.status_of(obj).phase == "Pending"
