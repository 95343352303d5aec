"""The Autoscaler controller: one Autoscaler per reconcile, level-based.

Each pass reads the shared caches (``observe``), warns pods that can never fit once
(``notices``), decides (``plan``, pure), hands a decision over as one ScaleRequest
(``handoff``) and reports through the status writer, which sends nothing when nothing
changed. A pass runs when the Autoscaler's spec changes, after its batch window when a
pod, node, pool or request it depends on changes (``watches``), and every
``scanIntervalSeconds`` (sooner when a node's unneeded timer is about to run out).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import time

from nodepool_operator.api import autoscaler as nas
from nodepool_operator.api import nodepool as np
from nodepool_operator.controllers.autoscaler import metrics, plan, report, watches
from nodepool_operator.controllers.autoscaler.config import AutoscalerConfig
from nodepool_operator.controllers.autoscaler.handoff import RequestLedger, ScaleRequester
from nodepool_operator.controllers.autoscaler.notices import Notices
from nodepool_operator.controllers.autoscaler.observe import Observation, Observer, RequestCache
from nodepool_operator.controllers.autoscaler.unneeded import UnneededTracker
from nodepool_operator.controllers.resources import AUTOSCALERS, NODEPOOLS, SCALEREQUESTS
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import errors, kinds
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.controller import Controller, GenerationChanged, Request, Result
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import Informer
from nodepool_operator.runtime.manager import Manager
from nodepool_operator.runtime.status import StatusWriter

__all__ = ["NAME", "AutoscalerConfig", "AutoscalerReconciler", "setup"]

log = logging.getLogger(__name__)

NAME = "autoscaler"


class AutoscalerReconciler:
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
    ) -> None:
        self.autoscalers = autoscalers
        self.observer = observer
        self.requester = requester
        self.notices = notices
        self.recorder = recorder
        self.clock = clock
        self.wall_clock = wall_clock
        self.status = StatusWriter(client, AUTOSCALERS, controller=NAME)
        self._trackers: dict[str, UnneededTracker] = {}

    async def reconcile(self, request: Request) -> Result:
        autoscaler = self.autoscalers.get(request.name)
        if autoscaler is None:
            self._forget(request.name)
            return Result()
        spec = nas.spec_of(autoscaler)
        seen = self.observer.observe(spec)
        if seen is None:
            await self._report(autoscaler, seen=None, decision=None, made=None)
            return Result(requeue_after=spec.scan_interval_seconds)
        warned = await self.notices.unfit(request.name, pool=spec.node_pool_name, pods=seen.unfit)
        decision = self._decide(request.name, spec, seen)
        self._log(request.name, seen, decision, warned)
        made = await self._hand_over(request.name, seen, decision)
        await self._report(autoscaler, seen=seen, decision=decision, made=made)
        return Result(requeue_after=self._next_scan(request.name, spec))

    def _decide(self, key: str, spec: nas.AutoscalerSpec, seen: Observation) -> plan.Decision:
        started = time.perf_counter()
        policy = spec.scale_down
        tracker = self._trackers.setdefault(key, UnneededTracker(self.clock))
        blocked = plan.scale_down_blocker(
            seen.pool, enabled=policy.enabled, pending_fitting=seen.pending_fitting
        )
        tracker.observe(seen.unneeded, blocked=blocked is not None)
        decision = plan.decide(
            seen.pool,
            seen.requests,
            unneeded=tracker.expired(policy.unneeded_seconds),
            unneeded_seconds=policy.unneeded_seconds,
            blocked=blocked,
        )
        metrics.nodepool_autoscaler_planning_seconds.observe(time.perf_counter() - started)
        metrics.nodepool_autoscaler_unschedulable_pods.labels(key).set(seen.unschedulable)
        metrics.nodepool_autoscaler_unfit_pods.labels(key).set(len(seen.unfit))
        return decision

    async def _hand_over(
        self, key: str, seen: Observation, decision: plan.Decision
    ) -> nas.LastScaleRequest | None:
        self.notices.keep_only(key, seen.fitting)
        if decision.action == "none":
            return None
        up = decision.action == "scale-up"
        made = await self.requester.request(
            key,
            pool=seen.pool.name,
            pool_uid=seen.pool_uid,
            target=decision.target,
            direction="up" if up else "down",
            reason=decision.reason,
        )
        metrics.nodepool_autoscaler_scale_requests_total.labels(key, "up" if up else "down").inc()
        change = f"{decision.current} -> {decision.target} nodes"
        log.info(
            "controller=%s key=%s event=scale-request-created request=%s pool=%s target=%d",
            NAME,
            key,
            made.name,
            seen.pool.name,
            decision.target,
        )
        autoscaler = self.autoscalers.get(key)
        if autoscaler is not None:
            await self.recorder.event(
                autoscaler,
                type="Normal",
                reason="ScaleUpRequested" if up else "ScaleDownRequested",
                message=f"{made.name}: NodePool {seen.pool.name} {change}: {decision.reason}",
            )
        if up:
            pods = [seen.fitting[i] for i in decision.involved]
            message = f"pod triggered scale-up of NodePool {seen.pool.name}: {change} ({made.name})"
            await self.notices.triggered(key, pods, message=message)
        return made

    async def _report(
        self,
        autoscaler: Object,
        *,
        seen: Observation | None,
        decision: plan.Decision | None,
        made: nas.LastScaleRequest | None,
    ) -> None:
        before = (autoscaler.get("status") or {}).get("conditions")
        status = report.autoscaler_status(
            autoscaler=autoscaler,
            seen=seen,
            decision=decision,
            last_request=made or nas.status_of(autoscaler).last_request,
            now=self._now(),
        )
        with contextlib.suppress(errors.NotFound):  # deleted meanwhile: nobody to tell
            if await self.status.update(autoscaler, status) is None:
                return
        for reason, message in report.alarms(before, status["conditions"]):
            name = autoscaler["metadata"]["name"]
            log.info("controller=%s key=%s event=%s message=%r", NAME, name, reason, message)
            await self.recorder.event(autoscaler, type="Warning", reason=reason, message=message)

    def _log(self, key: str, seen: Observation, decision: plan.Decision, warned: int) -> None:
        level = logging.INFO if decision.action != "none" or warned else logging.DEBUG
        line = report.decision_line(seen, decision, warned=warned)
        log.log(level, "controller=%s key=%s %s", NAME, key, line)

    def _next_scan(self, key: str, spec: nas.AutoscalerSpec) -> float:
        delay = float(spec.scan_interval_seconds)
        tracker = self._trackers.get(key)
        if spec.scale_down.enabled and tracker is not None:
            expiry = tracker.next_expiry(spec.scale_down.unneeded_seconds)
            if expiry is not None:
                delay = min(delay, expiry)
        return delay

    def _now(self) -> str:
        moment = datetime.datetime.fromtimestamp(self.wall_clock.time(), datetime.UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    def _forget(self, key: str) -> None:
        self._trackers.pop(key, None)
        self.notices.forget(key)
        self.status.forget({"metadata": {"name": key}})


def setup(manager: Manager, *, config: AutoscalerConfig) -> Controller:
    """Create the controller, its informers (shared through the manager) and its watches."""
    client = manager.client.for_manager(f"{NAME}-controller")
    cache = manager.cache
    autoscalers = cache.informer(AUTOSCALERS)
    pools = cache.informer(NODEPOOLS)
    nodes = cache.informer(kinds.NODES, label_selector=np.POOL_LABEL)
    pods = cache.informer(kinds.PODS)
    requests = cache.informer(SCALEREQUESTS)
    ledger = RequestLedger()
    recorder = EventRecorder(client, component=f"{NAME}-controller")
    wall_clock = clock_module.RealWallClock()
    reconciler = AutoscalerReconciler(
        client=client,
        autoscalers=autoscalers,
        observer=Observer(
            pools=pools,
            nodes=nodes,
            pods=pods,
            requests=requests,
            ledger=ledger,
            cache=RequestCache(config.request_cache_size),
        ),
        requester=ScaleRequester(client=client, ledger=ledger, wall_clock=wall_clock),
        notices=Notices(recorder, parallelism=config.event_parallelism),
        recorder=recorder,
        clock=manager.clock,
        wall_clock=wall_clock,
    )
    controller = Controller(
        name=NAME,
        reconciler=reconciler,
        max_concurrent_reconciles=config.max_concurrent_reconciles,
        clock=manager.clock,
    )
    # Our own status writes do not move the generation: they wake nobody.
    controller.watch(autoscalers, predicates=[GenerationChanged()])
    watches.watch_dependencies(
        controller.queue,
        triggers=watches.Triggers(autoscalers=autoscalers, nodes=nodes),
        pods=pods,
        nodes=nodes,
        pools=pools,
        requests=requests,
    )
    manager.add(controller)
    return controller
