"""One pool's pass: its decision from the planner's plan, then the acts.

For the Autoscaler that plans for a pool, in phase order: consolidation's proposal for the
pool's underused nodes (``consolidator``: their timers and taints live on the Nodes) and
the pool's decision (``decide.scaling``), both pure; then the acts: the proposal's Node
marks, the decision handed over as one ScaleRequest (``act.handoff``); then, as a second
step (``PoolPass.tell``), tell the pods, Nodes and the Autoscaler (``act.notices``) and
log one line.
The planner hands over every pool of a batch before it tells any: the events of a burst
(up to a dozen per request) would otherwise hold the next pools' requests back by as
many API round trips. The Autoscaler's own reconcile only reports the result in its
status.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.controllers.autoscaler import metrics
from nodepool_operator.controllers.autoscaler.act.handoff import ScaleRequester
from nodepool_operator.controllers.autoscaler.act.notices import Notices
from nodepool_operator.controllers.autoscaler.consolidator import Consolidator, PoolTurn
from nodepool_operator.controllers.autoscaler.decide import (
    consolidation_replace,
    scaling,
    status_report,
)
from nodepool_operator.controllers.autoscaler.decide.batch_plan import Observation
from nodepool_operator.controllers.autoscaler.decide.consolidation_choice import (
    Choice,
    PoolBudgets,
)
from nodepool_operator.controllers.autoscaler.decide.consolidation_replace import Replacement
from nodepool_operator.controllers.autoscaler.decide.consolidation_rules import Review
from nodepool_operator.runtime.client import Object

__all__ = ["PoolDecider", "PoolPass"]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class PoolPass:
    """What one pool's pass decided and made, and the events that explain it."""

    decision: scaling.ScalingDecision
    made: autoscaler_api.LastScaleRequest | None
    next_check: float | None  # seconds until a node's unneeded timer runs out
    #: Writes the events (and the log line) that explain the decision; best effort.
    tell: Callable[[], Awaitable[None]]


async def _quietly(key: str, notice: str, step: Awaitable[T], failed: T) -> T:
    """One notice of a decision: a fault there is logged and leaves the others (and the
    decision's log line) to be written; events are best effort."""
    try:
        return await step
    except Exception:
        log.exception("event=notice-failed autoscaler=%s notice=%s", key, notice)
        return failed


class PoolDecider:
    """Decides for one pool at a time and hands the decision over."""

    def __init__(
        self, *, consolidator: Consolidator, requester: ScaleRequester, notices: Notices
    ) -> None:
        self.consolidator = consolidator
        self.requester = requester
        self.notices = notices

    async def decide(
        self, autoscaler: Object, seen: Observation, *, turn: PoolTurn, choice: Choice
    ) -> PoolPass:
        """Consolidation's proposal (from the pool's ``turn`` and its part of the batch's
        ``choice``) and the pool's decision, both pure; then the acts: the proposal's Node
        marks, the hand-over. The events are left to ``PoolPass.tell``."""
        key = str(autoscaler["metadata"]["name"])
        spec = autoscaler_api.spec_of(autoscaler)
        # Decide first, from the marks as they will be; then write them, then the request.
        proposal = self.consolidator.propose(autoscaler, turn, choice)
        review = proposal.review
        decision = self._decide(key, spec=spec, seen=seen, review=review)
        launch: Replacement | None = review.launch
        if launch is not None and decision.action == "none" and not spec.dry_run:
            # Consolidation by price launches the cheaper Node before its victims go.
            decision = consolidation_replace.launch_decision(seen.pool, launch)
        else:
            launch = None
        await self.consolidator.apply(proposal)
        made = await self._hand_over(autoscaler, seen=seen, decision=decision, launch=launch)

        async def tell() -> None:
            await self._tell(autoscaler, seen=seen, decision=decision, review=review, made=made)

        return PoolPass(decision, made, review.next_check, tell)

    async def _tell(
        self,
        autoscaler: Object,
        *,
        seen: Observation,
        decision: scaling.ScalingDecision,
        review: Review,
        made: autoscaler_api.LastScaleRequest | None,
    ) -> None:
        key = str(autoscaler["metadata"]["name"])
        spec = autoscaler_api.spec_of(autoscaler)
        pool = seen.pool.name
        if spec.dry_run and decision.action != "none":
            would = self.notices.would_request(
                autoscaler, decision, pool=pool, pods=seen.triggering
            )
            await _quietly(key, "would-request", would, None)
        if made is not None:
            requested = self.notices.requested(
                autoscaler,
                decision,
                pool=pool,
                made=made,
                pods=seen.triggering,
                passed_over=seen.passed_over,
            )
            await _quietly(key, "requested", requested, None)
            if decision.victims:
                announced = self.consolidator.announce(review, request=made.name)
                await _quietly(key, "consolidation", announced, None)
        warned = await _quietly(key, "unfit", self.notices.unfit(seen.unfit), 0)
        beyond = self._warn_beyond_max(seen=seen, decision=decision)
        warned += await _quietly(key, "beyond-max", beyond, 0)
        level = logging.INFO if decision.action != "none" or warned else logging.DEBUG
        line = status_report.decision_line(
            seen, decision, warned=warned, made=made, dry_run=spec.dry_run
        )
        log.log(level, "autoscaler=%s %s", key, line)

    @staticmethod
    def _blocker(spec: autoscaler_api.AutoscalerSpec, seen: Observation) -> str | None:
        return scaling.scale_down_blocker(
            seen.pool, enabled=spec.scale_down.enabled, pending_fitting=seen.pending_fitting
        )

    def turn(
        self,
        autoscaler: Object,
        seen: Observation,
        *,
        leaving: frozenset[str] = frozenset(),
        held: frozenset[str] = frozenset(),
        unhealthy: frozenset[str] = frozenset(),
    ) -> PoolTurn:
        """What consolidation needs to know of the pool and its Autoscaler this batch;
        ``leaving``: the Nodes the pool's open requests name already; ``held``: those
        preemption is making room on; ``unhealthy``: the cluster's Nodes being repaired
        (they use their pool's disruption budget)."""
        spec = autoscaler_api.spec_of(autoscaler)
        return PoolTurn(
            leaving=leaving,
            held=held,
            pool=seen.pool.name,
            pool_uid=seen.pool_uid,
            room=max(0, seen.pool.target - seen.pool.min_nodes),
            policy=spec.scale_down,
            blocked=self._blocker(spec, seen),
            dry_run=spec.dry_run,
            budgets=PoolBudgets(seen.pool.budgets, unhealthy),
            headroom=max(0, seen.pool.max_nodes - seen.pool.target),
        )

    def _decide(
        self, key: str, *, spec: autoscaler_api.AutoscalerSpec, seen: Observation, review: Review
    ) -> scaling.ScalingDecision:
        started = time.perf_counter()
        decision = scaling.decide(
            seen.pool,
            seen.up,
            unneeded=review.would_remove if spec.dry_run else review.victims,
            unneeded_seconds=spec.scale_down.unneeded_seconds,
            blocked=self._blocker(spec, seen),
        )
        metrics.nodepool_autoscaler_planning_seconds.observe(time.perf_counter() - started)
        metrics.nodepool_autoscaler_unschedulable_pods.labels(key).set(seen.unschedulable)
        metrics.nodepool_autoscaler_unfit_pods.labels(key).set(len(seen.unfit))
        return decision

    async def _hand_over(
        self,
        autoscaler: Object,
        *,
        seen: Observation,
        decision: scaling.ScalingDecision,
        launch: Replacement | None = None,
    ) -> autoscaler_api.LastScaleRequest | None:
        key = str(autoscaler["metadata"]["name"])
        if decision.action == "none" or autoscaler_api.spec_of(autoscaler).dry_run:
            return None
        direction = "up" if decision.action == "scale-up" else "down"
        offerings = (
            {launch.offering: 1}
            if launch is not None
            else seen.up.new_node_offerings
            if direction == "up"
            else None
        )
        made = await self.requester.request(
            key,
            pool=seen.pool.name,
            pool_uid=seen.pool_uid,
            target=decision.target,
            basis=seen.basis,
            direction=direction,
            reason=decision.reason,
            remove_nodes=decision.victims,
            # A pool with requirements names its new nodes' offerings (each in a zone).
            new_node_zones=(
                seen.up.new_node_zones if direction == "up" and not offerings else None
            ),
            new_node_offerings=offerings,
            # New Nodes for pending pods wait until those pods are nominated on them; a
            # replacement's pods are on Nodes already, and the request that removes
            # Nodes adds none.
            await_nominations=direction == "up" and launch is None,
        )
        metrics.nodepool_autoscaler_scale_requests_total.labels(key, direction).inc()
        return made

    async def _warn_beyond_max(
        self, *, seen: Observation, decision: scaling.ScalingDecision
    ) -> int:
        """NotTriggerScaleUp naming the limit for the pods only nodes beyond maxNodes could
        host (the plan says which); returns how many were new. Pods on nodes that exist or
        boot, or on the new nodes granted, are not told."""
        if not decision.limited or not seen.beyond_max:
            return 0
        reason = scaling.limit_reason(seen.pool, decision)
        return await self.notices.unfit([(pod, reason) for pod in seen.beyond_max])
