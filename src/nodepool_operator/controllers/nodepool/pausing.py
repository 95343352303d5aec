"""A pool's step towards its size, held back while its cloud pause is in force.

The pause is the pool's ``status.cloudPause`` (``backoff.CloudPauses`` is its rule): read
at the start of the step from the status (our last write of it, if the cache has not
caught up), started or lengthened by a refusal asking again would not change, and handed
back for the status to record. A cloud refusal holds back VM creations only: Nodes of
VMs already running still register. A Node the API server refused holds back both.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Protocol

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud.provider import PermanentCloudError
from nodepool_operator.controllers.nodepool import backoff, plan, registration
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.status import StatusWriter

__all__ = ["Converge", "PausedSteps"]

log = logging.getLogger(__name__)


class Converge(Protocol):
    """One step of the pool towards its size, with what the pause allows."""

    def __call__(self, *, may_create: bool, may_register: bool) -> Awaitable[plan.PoolView]: ...


class PausedSteps:
    def __init__(
        self,
        *,
        status: StatusWriter,
        recorder: EventRecorder,
        config: NodePoolConfig,
        wall_clock: clock_module.WallClock,
    ) -> None:
        self.status = status
        self.recorder = recorder
        self.wall_clock = wall_clock
        self.pauses = backoff.CloudPauses(
            initial=config.degraded_backoff, maximum=config.degraded_backoff_max
        )

    def in_force(self, pool: Object, *, now: float) -> nodepool_api.CloudPause | None:
        """The cloud pause that holds the pool's VM creations back at ``now``."""
        generation = int(pool["metadata"].get("generation", 0))
        return self.pauses.in_force(self._recorded(pool), generation=generation, now=now)

    async def step(
        self, pool: Object, converge: Converge
    ) -> tuple[plan.PoolView | None, nodepool_api.CloudPause | None]:
        """What the step observed (None if the cloud refused it) and the cloud pause in
        force afterwards, as the status should record it (None once a step the pause did
        not hold back was not refused)."""
        recorded = self._recorded(pool)
        pause = self.in_force(pool, now=self.wall_clock.time())
        try:
            view = await converge(
                may_create=pause is None,
                may_register=pause is None or pause.reason != registration.NODE_REFUSED,
            )
        except PermanentCloudError as error:
            pause = self._record(pool, recorded, error.code or type(error).__name__, str(error))
            await self._tell(pool, pause, event="cloud-refused", reason="CloudError")
            return None, pause
        if view.refused is not None:
            pause = self._record(pool, recorded, *view.refused)
            await self._tell(pool, pause, event="node-create-refused", reason=pause.reason)
        return view, pause

    def _recorded(self, pool: Object) -> nodepool_api.CloudPause | None:
        return nodepool_api.status_of({"status": self.status.current(pool)}).cloud_pause

    def _record(
        self, pool: Object, recorded: nodepool_api.CloudPause | None, reason: str, message: str
    ) -> nodepool_api.CloudPause:
        """The pause a refusal starts now, after the one the status records."""
        return self.pauses.refused(
            recorded,
            reason=reason,
            message=message,
            generation=int(pool["metadata"].get("generation", 0)),
            now=self.wall_clock.time(),
        )

    async def _tell(
        self, pool: Object, pause: nodepool_api.CloudPause, *, event: str, reason: str
    ) -> None:
        await self.recorder.event(pool, type="Warning", reason=reason, message=pause.message)
        log.warning(
            "event=%s reason=%s failures=%d until=%s",
            event,
            pause.reason,
            pause.failures,
            pause.until,
        )
