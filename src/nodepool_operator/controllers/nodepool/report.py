"""What a NodePool shows of itself: its status (written only when it changes), the
``ScaleCompleted`` event, how long a scale operation took, and a listing in doubt.

A listing the controller cannot act on (``inventory.ListingDoubtful``) sets only
``Degraded``, is told once per reason (one event), and is asked again on the runtime's
per-key backoff: 1 poll interval, then 2, 4, ... up to the resync interval.
"""

from __future__ import annotations

import logging

from nodepool_operator.controllers.nodepool import inventory, plan
from nodepool_operator.controllers.nodepool import metrics as pool_metrics
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.controllers.resources import NODEPOOLS
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import conditions, ratelimit
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.status import StatusWriter

__all__ = ["PoolReporter"]

log = logging.getLogger(__name__)


class PoolReporter:
    """Writes one controller's view of its pools into their status, and says why."""

    def __init__(
        self,
        *,
        client: Client,
        recorder: EventRecorder,
        config: NodePoolConfig,
        controller: str,
        clock: clock_module.Clock,
        wall_clock: clock_module.WallClock,
    ) -> None:
        self.recorder = recorder
        self.controller = controller
        self.clock = clock
        self.wall_clock = wall_clock
        self.status = StatusWriter(client, NODEPOOLS, controller=controller)
        self._scaling_since: dict[str, tuple[float, str]] = {}
        self.listing_backoff = ratelimit.ItemExponentialFailureRateLimiter[str](
            base_delay=config.poll_interval, max_delay=config.cloud_resync_interval
        )
        self._doubted: dict[str, str] = {}  # pool -> reason of the doubt last told

    async def report(
        self, pool: Object, *, desired: int, view: plan.PoolView, degraded: tuple[str, str] | None
    ) -> None:
        """Write the status ``view`` calls for, if it differs from the one there is."""
        current = self.status.current(pool)
        status = plan.pool_status(
            pool={**pool, "status": current},
            desired=desired,
            view=view,
            degraded=degraded,
            now=self._now(),
        )
        was = current.get("scaleOperation", "inactive")
        if await self.status.update(pool, status) is None:
            return
        now_is = status["scaleOperation"]
        self._time_scale_operation(pool["metadata"]["name"], now_is, view, desired)
        if was == "active" and now_is == "inactive":
            await self.recorder.event(
                pool,
                type="Normal",
                reason="ScaleCompleted",
                message=f"{status['readyNodes']} nodes ready",
            )
        log.info(
            "event=status operation=%s current=%d ready=%d desired=%d",
            now_is,
            status["currentNodes"],
            status["readyNodes"],
            desired,
        )

    async def doubt(self, pool: Object, doubt: inventory.ListingDoubtful) -> float:
        """Say that the listing cannot be acted on; seconds until it is asked again."""
        name = pool["metadata"]["name"]
        if self._doubted.get(name) != doubt.reason:
            self._doubted[name] = doubt.reason
            await self.recorder.event(
                pool, type="Warning", reason=doubt.reason, message=doubt.message
            )
        status = plan.degraded_status(
            pool={**pool, "status": self.status.current(pool)},
            reason=doubt.reason,
            message=doubt.message,
            now=self._now(),
        )
        await self.status.update(pool, status)
        delay = self.listing_backoff.when(name)
        log.warning(
            "event=cloud-listing-doubtful reason=%s retry_in=%.1fs",
            doubt.reason,
            delay,
        )
        return delay

    def trusted(self, name: str) -> None:
        """The pool's listing could be acted on again: the doubt and its backoff end."""
        self.listing_backoff.forget(name)
        self._doubted.pop(name, None)

    def forget(self, name: str) -> None:
        """Drop what is remembered of a pool that is gone (a new one may take its name)."""
        self._scaling_since.pop(name, None)
        self.trusted(name)
        self.status.forget({"metadata": {"name": name}})

    def _now(self) -> str:
        return conditions.rfc3339(self.wall_clock.time())

    def _time_scale_operation(
        self, name: str, operation: str, view: plan.PoolView, desired: int
    ) -> None:
        if operation == "active" and name not in self._scaling_since:
            direction = "up" if len(view.vms) < desired else "down"
            self._scaling_since[name] = (self.clock.now(), direction)
        elif operation == "inactive" and name in self._scaling_since:
            started, direction = self._scaling_since.pop(name)
            pool_metrics.nodepool_scale_operation_seconds.labels(direction=direction).observe(
                self.clock.now() - started
            )
