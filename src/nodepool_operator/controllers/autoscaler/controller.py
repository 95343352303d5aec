"""The Autoscaler controller: one Autoscaler per reconcile, level-based.

Each pass reads the shared caches (``observe``), reviews the pool's underused nodes
(``consolidation``: their timers and taints live on the Nodes), warns pods that can
never fit once (``notices``), decides (``plan``, pure), hands a decision over as one
ScaleRequest (``handoff``) and reports through the status writer, which sends nothing
when nothing changed. A pass runs when the Autoscaler's spec changes, after its batch
window when a pod, node, pool or request it depends on changes (``watches``), and every
``scanIntervalSeconds`` (sooner when a node's unneeded timer is about to run out).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from nodepool_operator import pacing
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.controllers.autoscaler import metrics, plan, report
from nodepool_operator.controllers.autoscaler.consolidation import Consolidator, Review
from nodepool_operator.controllers.autoscaler.handoff import ScaleRequester
from nodepool_operator.controllers.autoscaler.notices import Notices
from nodepool_operator.controllers.autoscaler.observe import (
    ConflictingAutoscaler,
    Observation,
    Observer,
)
from nodepool_operator.controllers.resources import AUTOSCALERS
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import conditions, errors
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.controller import Request, Result
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import Informer
from nodepool_operator.runtime.status import StatusWriter

__all__ = ["NAME", "AutoscalerReconciler"]

log = logging.getLogger(__name__)

NAME = "autoscaler"
#: Status fields that only count pods: written at most once per scan interval.
_COUNTS = frozenset({"pendingPods", "unschedulablePods"})


class AutoscalerReconciler:
    """Decides, one Autoscaler per pass, whether its pool needs more nodes or fewer."""

    def __init__(
        self,
        *,
        client: Client,
        autoscalers: Informer,
        observer: Observer,
        requester: ScaleRequester,
        notices: Notices,
        recorder: EventRecorder,
        clock: clock_module.Clock,
        wall_clock: clock_module.WallClock,
        count_writes_per_second: float = 5.0,
    ) -> None:
        self.autoscalers = autoscalers
        self.observer = observer
        self.requester = requester
        self.notices = notices
        self.recorder = recorder
        self.clock = clock
        self.wall_clock = wall_clock
        self.status = StatusWriter(client, AUTOSCALERS, controller=NAME)
        self.consolidator = Consolidator(
            client=client,
            nodes=observer.nodes,
            pods=observer.pods,
            profile=observer.cache.get,
            recorder=recorder,
            wall_clock=wall_clock,
        )
        self._written_at: dict[str, float] = {}  # key -> when its status was last written
        # key -> (limit reason, pods) last looked at for nodes beyond maxNodes
        # One budget for every Autoscaler's counts-only writes: their total stays bounded
        # however many Autoscalers watch the pods that move.
        self._count_writes = pacing.TokenBucket(
            now=clock.now,
            rate=count_writes_per_second,
            burst=max(1, round(2 * count_writes_per_second)),
        )

    async def reconcile(self, request: Request) -> Result:
        autoscaler = self.autoscalers.get(request.name)
        if autoscaler is None:
            self._forget(request.name)
            return Result()
        spec = autoscaler_api.spec_of(autoscaler)
        seen = await self.observer.observe(request.name, spec)
        if seen is None or isinstance(seen, ConflictingAutoscaler):
            await self._report(autoscaler, seen=seen, decision=None, made=None)
            return Result(requeue_after=spec.scan_interval_seconds)
        review = await self._review(autoscaler, spec=spec, seen=seen)
        decision = self._decide(request.name, spec=spec, seen=seen, review=review)
        # The decision and its request first; the events that explain them follow.
        made = await self._hand_over(autoscaler, seen=seen, decision=decision)
        if made is not None and decision.victims:
            await self.consolidator.announce(review, request=made.name)
        warned = await self.notices.unfit(seen.unfit)
        warned += await self._warn_beyond_max(request.name, seen=seen, decision=decision)
        level = logging.INFO if decision.action != "none" or warned else logging.DEBUG
        line = report.decision_line(seen, decision, warned=warned, made=made, dry_run=spec.dry_run)
        log.log(level, "%s", line)
        await self._report(autoscaler, seen=seen, decision=decision, made=made)
        next_scan = self._next_scan(spec, review)
        if seen.stale and (seen.pending or decision.action != "none"):
            # Decided from a plan older than the caches with something at stake: look again
            # soon. With nothing pending and nothing asked, the events of its own pods and
            # pool wake it and its scan bounds the rest; looking again every window would
            # be a thousand reconciles a second while a thousand pools' Nodes come up.
            next_scan = min(next_scan, float(spec.batch_window_seconds))
        return Result(requeue_after=next_scan)

    def _blocker(self, spec: autoscaler_api.AutoscalerSpec, seen: Observation) -> str | None:
        return plan.scale_down_blocker(
            seen.pool, enabled=spec.scale_down.enabled, pending_fitting=seen.pending_fitting
        )

    async def _review(
        self, autoscaler: Object, *, spec: autoscaler_api.AutoscalerSpec, seen: Observation
    ) -> Review:
        """Consolidation's pass over the pool's nodes. A dry run writes nothing, Nodes
        included: it decides scale-ups only."""
        if spec.dry_run:
            return Review()
        return await self.consolidator.review(
            autoscaler,
            pool=seen.pool.name,
            room=max(0, seen.pool.target - seen.pool.min_nodes),
            policy=spec.scale_down,
            blocked=self._blocker(spec, seen),
            cluster=seen.cluster,
            daemon_sets=seen.daemon_sets,
        )

    def _decide(
        self, key: str, *, spec: autoscaler_api.AutoscalerSpec, seen: Observation, review: Review
    ) -> plan.Decision:
        started = time.perf_counter()
        decision = plan.decide(
            seen.pool,
            seen.up,
            unneeded=review.victims,
            unneeded_seconds=spec.scale_down.unneeded_seconds,
            blocked=self._blocker(spec, seen),
        )
        metrics.nodepool_autoscaler_planning_seconds.observe(time.perf_counter() - started)
        metrics.nodepool_autoscaler_unschedulable_pods.labels(key).set(seen.unschedulable)
        metrics.nodepool_autoscaler_unfit_pods.labels(key).set(len(seen.unfit))
        return decision

    async def _hand_over(
        self, autoscaler: Object, *, seen: Observation, decision: plan.Decision
    ) -> autoscaler_api.LastScaleRequest | None:
        key = str(autoscaler["metadata"]["name"])
        if decision.action == "none":
            return None
        if autoscaler_api.spec_of(autoscaler).dry_run:
            await self.notices.would_request(
                autoscaler, decision, pool=seen.pool.name, pods=seen.triggering
            )
            return None
        direction = "up" if decision.action == "scale-up" else "down"
        made = await self.requester.request(
            key,
            pool=seen.pool.name,
            pool_uid=seen.pool_uid,
            target=decision.target,
            basis=seen.basis,
            direction=direction,
            reason=decision.reason,
            remove_nodes=decision.victims,
            new_node_zones=seen.up.new_node_zones if direction == "up" else None,
        )
        metrics.nodepool_autoscaler_scale_requests_total.labels(key, direction).inc()
        await self.notices.requested(
            autoscaler,
            decision,
            pool=seen.pool.name,
            made=made,
            pods=seen.triggering,
            passed_over=seen.passed_over,
        )
        return made

    async def _warn_beyond_max(
        self, key: str, *, seen: Observation, decision: plan.Decision
    ) -> int:
        """NotTriggerScaleUp naming the limit for the pods only nodes beyond maxNodes could
        host (the plan says which); returns how many were new. Pods on nodes that exist or
        boot, or on the new nodes granted, are not told."""
        if not decision.limited or not seen.beyond_max:
            return 0
        reason = plan.limit_reason(seen.pool, decision)
        return await self.notices.unfit([(pod, reason) for pod in seen.beyond_max])

    async def _report(
        self,
        autoscaler: Object,
        *,
        seen: Observation | ConflictingAutoscaler | None,
        decision: plan.Decision | None,
        made: autoscaler_api.LastScaleRequest | None,
    ) -> None:
        current = self.status.current(autoscaler)
        before = current.get("conditions")
        status = report.autoscaler_status(
            autoscaler={**autoscaler, "status": current},
            seen=seen,
            decision=decision,
            last_request=made or autoscaler_api.AutoscalerStatus.from_dict(current).last_request,
            now=conditions.rfc3339(self.wall_clock.time()),
        )
        key = str(autoscaler["metadata"]["name"])
        if self._counts_only_changed(key, current, status, autoscaler_api.spec_of(autoscaler)):
            return
        try:
            if await self.status.update(autoscaler, status) is None:
                return
        except errors.NotFound:
            return  # deleted meanwhile: nobody left to tell
        self._written_at[key] = self.clock.now()
        for reason, message in report.alarms(before, status["conditions"]):
            log.info("event=%s message=%r", reason, message)
            await self.recorder.event(autoscaler, type="Warning", reason=reason, message=message)

    def _counts_only_changed(
        self,
        key: str,
        current: Mapping[str, Any],
        status: Mapping[str, Any],
        spec: autoscaler_api.AutoscalerSpec,
    ) -> bool:
        """Only the pod counts moved, and either the status was written less than a scan
        interval ago or the budget of counts-only writes shared by all Autoscalers is spent:
        the write waits for a later pass. In a burst the counts move with every pod (for
        every Autoscaler watching the namespace); a decision, a condition or a new
        generation is always written at once."""
        moved = {k for k in status.keys() | current.keys() if status.get(k) != current.get(k)}
        if not moved or not moved <= _COUNTS:
            return False
        written = self._written_at.get(key)
        if written is not None and self.clock.now() - written < spec.scan_interval_seconds:
            return True
        return not self._count_writes.allow()

    @staticmethod
    def _next_scan(spec: autoscaler_api.AutoscalerSpec, review: Review) -> float:
        delay = float(spec.scan_interval_seconds)
        if review.next_check is not None:
            delay = min(delay, max(review.next_check, 0.0))
        return delay

    def _forget(self, key: str) -> None:
        self._written_at.pop(key, None)
        self.status.forget({"metadata": {"name": key}})
