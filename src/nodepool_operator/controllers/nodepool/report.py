"""What a NodePool shows of itself: its status (written only when it changes), how long a
scale operation took, and a listing in doubt.

A scale operation costs a status write when it starts and one when it settles; in between,
a change that only reports progress (node counts, the Scaling and Ready messages,
ScalingUp turning WaitingForNodes) is written at most once per ``PROGRESS_INTERVAL``
seconds, never once per Node event: ``report`` returns when the held back write is due,
and the controller looks at the pool again then. The interval runs from the status's last
write as the status writer tells it (``StatusWriter.written_at``: the API server's record
of our field manager's status writes, which the NodePool cache keeps, so a restart holds
as an uninterrupted run; the writer's memory until the cache shows the write). Anything
else (a condition turning, a generation observed, a drain blocked, the cloud degraded) is
written at once. The operation's end has no event of its own: the ``Scaling`` condition
turning False, with its ``lastTransitionTime``, says it to the same reader (``kubectl
describe``).

A listing the controller cannot act on (``inventory.ListingDoubtful``) sets ``Degraded``
(and, while the target is not met, ``Ready`` False and ``Scaling`` ``WaitingForCloud``, so
no condition says all is well), is told once per reason (one event), and is asked again on
the runtime's per-key backoff: 1 poll interval, then 2, 4, ... up to the resync interval.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from nodepool_operator.controllers.nodepool import inventory, plan
from nodepool_operator.controllers.nodepool import metrics as pool_metrics
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.controllers.resources import NODEPOOLS
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import conditions, ratelimit
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.status import StatusWriter

__all__ = ["PROGRESS_INTERVAL", "PoolReporter", "progress_only"]

log = logging.getLogger(__name__)

#: At most one progress-only status write per pool this often while it scales (the
#: period at which cluster-autoscaler refreshes its own status, one scan).
PROGRESS_INTERVAL = 10.0
#: Scaling reasons that follow one another within an operation: progress, not news.
_PROGRESS_REASONS = frozenset({"ScalingUp", "ScalingDown", "WaitingForNodes"})
#: Status fields that move with every Node of an operation.
_PROGRESS_FIELDS = frozenset({"currentNodes", "readyNodes", "conditions"})


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
        self.status = StatusWriter(client, NODEPOOLS, controller=controller, wall_clock=wall_clock)
        self._scaling_since: dict[str, tuple[float, str]] = {}
        self.listing_backoff = ratelimit.ItemExponentialFailureRateLimiter[str](
            base_delay=config.poll_interval, max_delay=config.cloud_resync_interval
        )
        self._doubted: dict[str, str] = {}  # pool -> reason of the doubt last told

    async def report(
        self, pool: Object, *, desired: int, view: plan.PoolView, degraded: tuple[str, str] | None
    ) -> float | None:
        """Write the status ``view`` calls for, if it differs from the one there is; the
        seconds until a progress write held back is due, if one is."""
        current = self.status.current(pool)
        status = plan.pool_status(
            pool={**pool, "status": current},
            desired=desired,
            view=view,
            degraded=degraded,
            now=self._now(),
        )
        if progress_only(current, status):
            due = self._progress_due(pool)
            if due > 0:
                log.debug("event=status-held due_in=%.1fs", due)
                return due
        if await self.status.update(pool, status) is None:
            return None
        now_is = status["scaleOperation"]
        self._time_scale_operation(pool["metadata"]["name"], now_is, view, desired)
        log.info(
            "event=status operation=%s current=%d ready=%d desired=%d",
            now_is,
            status["currentNodes"],
            status["readyNodes"],
            desired,
        )
        return None

    def _progress_due(self, pool: Object) -> float:
        """Seconds until a progress-only write may go: ``PROGRESS_INTERVAL`` after the
        status was last written (``StatusWriter.written_at``). The newest condition
        ``lastTransitionTime`` is not read: a condition only turns in one of our writes,
        which moves the record too, so it never says a later write than the record."""
        written = self.status.written_at(pool)
        if written is None:
            return 0.0
        return written + PROGRESS_INTERVAL - self.wall_clock.time()

    async def doubt(self, pool: Object, doubt: inventory.ListingDoubtful, *, desired: int) -> float:
        """Say that the listing cannot be acted on, for a pool that should have ``desired``
        nodes; seconds until it is asked again."""
        name = pool["metadata"]["name"]
        first = self.listing_backoff.num_requeues(name) == 0 and name not in self._doubted
        delay = self.listing_backoff.when(name)
        if first:
            # One doubtful listing is asked again in a moment (``poll_interval``), and said
            # only if that fails too: a cloud that answers a 5xx now and then costs no
            # write and flips no condition (the soak's quiet minutes, docs/reliability.md).
            log.info(
                "event=cloud-listing-doubtful-once reason=%s retry_in=%.1fs", doubt.reason, delay
            )
            return delay
        if self._doubted.get(name) != doubt.reason:
            self._doubted[name] = doubt.reason
            await self.recorder.event(
                pool, type="Warning", reason=doubt.reason, message=doubt.message
            )
        status = plan.degraded_status(
            pool={**pool, "status": self.status.current(pool)},
            desired=desired,
            reason=doubt.reason,
            message=doubt.message,
            now=self._now(),
        )
        await self.status.update(pool, status)
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


def progress_only(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether ``desired`` differs from ``current`` only in how far a scale operation that
    goes on has come: counts, messages, and the Scaling reason moving among the steps of
    one operation. Conditions keep their type, status and (but for those steps) reason."""
    if current.get("scaleOperation") != "active" or desired.get("scaleOperation") != "active":
        return False
    moved = {key for key in current.keys() | desired.keys() if current.get(key) != desired.get(key)}
    if not moved or not moved <= _PROGRESS_FIELDS:
        return False
    before = current.get("conditions") or []
    after = desired.get("conditions") or []
    if [c.get("type") for c in before] != [c.get("type") for c in after]:
        return False
    return all(_same_state(old, new) for old, new in zip(before, after, strict=True))


def _same_state(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    if old.get("status") != new.get("status"):
        return False
    if old.get("lastTransitionTime") != new.get("lastTransitionTime"):
        return False
    if old.get("type") == "Degraded":
        return dict(old) == dict(new)
    if old.get("reason") == new.get("reason"):
        return True
    return old.get("type") == "Scaling" and {old.get("reason"), new.get("reason")} <= (
        _PROGRESS_REASONS
    )
