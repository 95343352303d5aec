"""The NodePool controller: level-based, one pool per reconcile.

desired = ``spec.targetNodes`` (within min and max); observed = the pool's VMs (from the
cloud) and Nodes (from the cache). Each pass moves observed one step towards desired and
reports progress through the status writer, which sends nothing when nothing changed.
While the pool is scaling the key is looked at again every ``poll_interval``; once it is
stable nothing runs for it until an event (spec change, ScaleRequest, Node change).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import time
import zlib
from typing import Any

from nodepool_operator.api import nodepool as np
from nodepool_operator.api import scalerequest as sr
from nodepool_operator.cloud.provider import CloudProvider, PermanentCloudError, VmState
from nodepool_operator.controllers.nodepool import actions, backoff, plan, requests
from nodepool_operator.controllers.nodepool import metrics as pool_metrics
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.controllers.resources import NODEPOOLS, SCALEREQUESTS
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import conditions, ratelimit
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.controller import (
    Request,
    Result,
)
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import Informer
from nodepool_operator.runtime.status import StatusWriter

__all__ = ["FINALIZER", "NAME", "NodePoolReconciler"]

log = logging.getLogger(__name__)

NAME = "nodepool"
FINALIZER = "nodepool.dev/cleanup"


class NodePoolReconciler:
    def __init__(
        self,
        *,
        client: Client,
        pools: Informer,
        nodes: Informer,
        pods: Informer,
        scale_requests: Informer,
        cloud: CloudProvider,
        recorder: EventRecorder,
        config: NodePoolConfig,
        wall_clock: clock_module.WallClock | None = None,
    ) -> None:
        self.client = client
        self.pools = pools
        self.requests = scale_requests
        self.cloud = cloud
        self.recorder = recorder
        self.config = config
        self.wall_clock = wall_clock or clock_module.RealWallClock()
        self.actions = actions.PoolActions(
            client=client,
            nodes=nodes,
            pods=pods,
            cloud=cloud,
            recorder=recorder,
            config=config,
            wall_clock=self.wall_clock,
        )
        self.pool_status = StatusWriter(client, NODEPOOLS, controller=NAME)
        self.request_status = StatusWriter(client, SCALEREQUESTS, controller=NAME)
        self.cloud_backoff = backoff.CloudBackoff(
            initial=config.degraded_backoff, maximum=config.degraded_backoff_max
        )
        # Requests we answered whose new status the cache may not show yet: deciding them
        # again from the stale copy would answer twice, and differently.
        self._answered: dict[str, set[str]] = {}
        self._scaling_since: dict[str, tuple[float, str]] = {}
        # A listing that cannot be acted on is asked again after 1 poll interval, then
        # 2, 4, ... up to the resync interval: the runtime's one per-key backoff.
        self.listing_backoff = ratelimit.ItemExponentialFailureRateLimiter[str](
            base_delay=config.poll_interval, max_delay=config.cloud_resync_interval
        )
        self._doubted: dict[str, str] = {}  # pool -> reason of the doubt last told

    async def reconcile(self, request: Request) -> Result:
        pool = self.pools.get(request.name)
        if pool is None:
            self._forget(request.name)
            return await self._answer_orphans(request.name)
        if pool["metadata"].get("deletionTimestamp"):
            return await self._finalize(pool)
        if FINALIZER not in (pool["metadata"].get("finalizers") or []):
            await self._add_finalizer(pool)
        pool_requests = self.requests.by_index("pool", request.name)
        if await self._answer_requests(pool, pool_requests):
            return Result()  # the spec write (or the pool's deletion) brings an event soon
        spec = np.spec_of(pool)
        desired = plan.desired_nodes(spec)
        try:
            view, pause = await self._converge(pool, spec, desired)
            if view is None:  # the cloud refused a step: look again at what there is
                view = await self.actions.observe(pool)
        except actions.ListingDoubtful as doubt:
            return await self._doubt(pool, doubt)
        self._trusted(request.name)
        degraded = (pause.reason, pause.message) if pause else None
        await self._report(pool, desired=desired, view=view, degraded=degraded)
        next_expiry = await self._delete_expired(pool_requests)
        return self._next(request.name, view, desired, pause, next_expiry)

    async def _doubt(self, pool: Object, doubt: actions.ListingDoubtful) -> Result:
        """A listing nothing may be deleted on: say so (condition, one event per reason)
        and ask the cloud again on a backoff."""
        name = pool["metadata"]["name"]
        if self._doubted.get(name) != doubt.reason:
            self._doubted[name] = doubt.reason
            await self.recorder.event(
                pool, type="Warning", reason=doubt.reason, message=doubt.message
            )
        status = plan.degraded_status(
            pool={**pool, "status": self.pool_status.current(pool)},
            reason=doubt.reason,
            message=doubt.message,
            now=conditions.rfc3339(self.wall_clock.time()),
        )
        await self.pool_status.update(pool, status)
        delay = self.listing_backoff.when(name)
        log.warning(
            "controller=%s key=%s event=cloud-listing-doubtful reason=%s retry_in=%.1fs",
            NAME,
            name,
            doubt.reason,
            delay,
        )
        return Result(requeue_after=delay)

    def _trusted(self, name: str) -> None:
        self.listing_backoff.forget(name)
        self._doubted.pop(name, None)

    async def _delete_expired(self, pool_requests: list[Object]) -> float | None:
        """Delete finished requests past retention; seconds until the next one expires."""
        now = datetime.datetime.fromtimestamp(self.wall_clock.time(), datetime.UTC)
        expired, next_expiry = requests.expired_requests(
            pool_requests, now=now, retention=self.config.request_retention
        )
        await requests.delete_requests(self.client, expired)
        return next_expiry

    async def _answer_orphans(self, name: str) -> Result:
        """Reject the pending requests for a pool that does not exist, and clean up.

        Owned requests go with their pool (garbage collection); this answers the ones
        made by hand for a pool that never existed, or whose pool was deleted.
        """
        orphans = self.requests.by_index("pool", name)
        pending = self._unanswered(name, requests.pending_requests(orphans), orphans)
        if pending:
            if await requests.pool_exists(self.client, name):
                return Result()  # the cache lags behind a new pool, whose event is coming
            message = requests.missing_pool(name)
            await requests.reject(self.request_status, pending, message)
            self._answered.setdefault(name, set()).update(r["metadata"]["uid"] for r in pending)
            log.info(
                "controller=%s key=%s event=scale-request-rejected requests=%s message=%r",
                NAME,
                name,
                ",".join(r["metadata"]["name"] for r in pending),
                message,
            )
        next_expiry = await self._delete_expired(orphans)
        if not self._answered.get(name):
            self._answered.pop(name, None)
        return Result() if next_expiry is None else Result(requeue_after=next_expiry)

    async def _converge(
        self, pool: Object, spec: np.NodePoolSpec, desired: int
    ) -> tuple[plan.PoolView | None, backoff.Pause | None]:
        """One step towards ``desired``: what was observed (None if the cloud refused the
        step) and the cloud pause in force afterwards, if any."""
        name = pool["metadata"]["name"]
        generation = int(pool["metadata"].get("generation", 0))
        now = time.monotonic()
        pause = self.cloud_backoff.active(name, generation=generation, now=now)
        try:
            view = await self.actions.converge(
                pool,
                spec,
                desired,
                may_create=pause is None,
                # A cloud refusal does not stop Nodes of running VMs; a Node refusal does.
                may_register=pause is None or pause.reason != actions.NODE_REFUSED,
            )
        except PermanentCloudError as error:
            now = time.monotonic()  # the cloud calls above may have taken a while
            pause = self.cloud_backoff.failed(name, error, generation=generation, now=now)
            await self.recorder.event(pool, type="Warning", reason="CloudError", message=str(error))
            log.warning(
                "controller=%s key=%s event=cloud-refused reason=%s retry_in=%.0fs",
                NAME,
                name,
                pause.reason,
                pause.until - now,
            )
            return None, pause
        if view.refused is not None:
            reason, message = view.refused
            now = time.monotonic()
            pause = self.cloud_backoff.refused(
                name, reason=reason, message=message, generation=generation, now=now
            )
            await self.recorder.event(pool, type="Warning", reason=reason, message=message)
            log.warning(
                "controller=%s key=%s event=node-create-refused reason=%s retry_in=%.0fs",
                NAME,
                name,
                reason,
                pause.until - now,
            )
        elif pause is None:
            self.cloud_backoff.succeeded(name)
        return view, pause

    async def _answer_requests(self, pool: Object, pool_requests: list[Object]) -> bool:
        """Turn the pool's pending ScaleRequests into its target; True if the target moved
        or the pool turned out to be gone, so this pass must stop."""
        name = pool["metadata"]["name"]
        pending = self._unanswered(name, requests.pending_requests(pool_requests), pool_requests)
        if not pending:
            return False
        decision = await requests.apply_pending(
            client=self.client, statuses=self.request_status, pool_name=name, pending=pending
        )
        self._answered.setdefault(name, set()).update(r["metadata"]["uid"] for r in pending)
        if decision is None:
            log.info(
                "controller=%s key=%s event=pool-gone requests-rejected=%d",
                NAME,
                name,
                len(pending),
            )
            return True
        log.info(
            "controller=%s key=%s event=scale-request-%s request=%s message=%r",
            NAME,
            name,
            decision.phase.lower(),
            pending[-1]["metadata"]["name"],
            decision.message,
        )
        return decision.target != np.spec_of(pool).target_nodes

    def _unanswered(self, pool: str, pending: list[Object], every: list[Object]) -> list[Object]:
        still_pending = {r["metadata"]["uid"] for r in every if _is_pending(r)}
        answered = self._answered.get(pool, set()) & still_pending
        self._answered[pool] = answered
        return [r for r in pending if r["metadata"]["uid"] not in answered]

    async def _report(
        self, pool: Object, *, desired: int, view: plan.PoolView, degraded: tuple[str, str] | None
    ) -> None:
        current = self.pool_status.current(pool)
        status = plan.pool_status(
            pool={**pool, "status": current},
            desired=desired,
            view=view,
            degraded=degraded,
            now=conditions.rfc3339(self.wall_clock.time()),
        )
        was = current.get("scaleOperation", "inactive")
        if await self.pool_status.update(pool, status) is None:
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
            "controller=%s key=%s event=status operation=%s current=%d ready=%d desired=%d",
            NAME,
            pool["metadata"]["name"],
            now_is,
            status["currentNodes"],
            status["readyNodes"],
            desired,
        )

    def _time_scale_operation(
        self, name: str, operation: str, view: plan.PoolView, desired: int
    ) -> None:
        if operation == "active" and name not in self._scaling_since:
            direction = "up" if len(view.vms) < desired else "down"
            self._scaling_since[name] = (time.monotonic(), direction)
        elif operation == "inactive" and name in self._scaling_since:
            started, direction = self._scaling_since.pop(name)
            pool_metrics.nodepool_scale_operation_seconds.labels(direction=direction).observe(
                time.monotonic() - started
            )

    def _next(
        self,
        name: str,
        view: plan.PoolView,
        desired: int,
        pause: backoff.Pause | None,
        next_expiry: float | None,
    ) -> Result:
        delays = [] if next_expiry is None else [next_expiry]
        if pause is not None:
            delays.append(max(pause.until - time.monotonic(), 0.01))
        # The cloud has no watch: look again while it owes us something (VMs booting, or
        # running without their Node yet, or to be created). Node readiness needs no
        # polling: it arrives through the Node watch. A drain says itself when it can move
        # on (a pod's backoff ends, a grace period runs out): never a fixed-rate retry.
        booting = any(vm.state != VmState.RUNNING or vm.name not in view.nodes for vm in view.vms)
        short = pause is None and len(view.vms) < desired
        if booting or short:
            delays.append(self.config.poll_interval)
        if view.recheck_in is not None:
            delays.append(max(view.recheck_in, 0.01))
        delays.append(self._resync_in(name))
        return Result(requeue_after=min(delays))

    def _resync_in(self, name: str) -> float:
        """When to list the pool's VMs again though nothing happened (the cloud has no
        watch: a VM deleted out of band is seen then): the resync interval, spread per pool
        between 0.75x and 1.25x (a stable hash) so pools do not list in lockstep."""
        spread = zlib.crc32(name.encode()) / 2**32
        return self.config.cloud_resync_interval * (0.75 + 0.5 * spread)

    async def _add_finalizer(self, pool: Object) -> None:
        finalizers = [*(pool["metadata"].get("finalizers") or []), FINALIZER]
        patch = {
            "metadata": {
                "finalizers": finalizers,
                # A merge patch with a resourceVersion is conditional: a concurrent edit of
                # the finalizer list gives 409 (requeue) instead of being overwritten.
                "resourceVersion": pool["metadata"]["resourceVersion"],
            }
        }
        await self.client.patch(NODEPOOLS, pool["metadata"]["name"], patch)

    def _forget(self, name: str) -> None:
        """Drop what we remember of a pool that is gone (a new one may take its name).

        The answered requests stay: they are known by uid, so a new pool of the same
        name cannot be confused with them, and they keep a lagging cache from making a
        request for the missing pool be answered twice.
        """
        self._scaling_since.pop(name, None)
        self.cloud_backoff.succeeded(name)
        self._trusted(name)
        self.actions.forget_pool(name)
        self.pool_status.forget({"metadata": {"name": name}})

    async def _finalize(self, pool: Object) -> Result:
        if FINALIZER not in (pool["metadata"].get("finalizers") or []):
            return Result()
        # The same drain as a scale-down first: pods leave through the Eviction API.
        try:
            remaining, drains = await self.actions.tear_down(pool)
        except actions.ListingDoubtful as doubt:
            return await self._doubt(pool, doubt)
        self._trusted(pool["metadata"]["name"])
        if remaining and drains.blocked:
            # Say why the deletion waits, as a blocked scale-down does (a status write
            # only when it changes).
            view = dataclasses.replace(await self.actions.observe(pool), blocked=drains.blocked)
            await self._report(pool, desired=0, view=view, degraded=None)
        if remaining:
            wait = self.config.poll_interval if drains.done else drains.retry_in
            return Result(requeue_after=wait) if wait is not None else Result()
        finalizers = [f for f in pool["metadata"]["finalizers"] if f != FINALIZER]
        patch: dict[str, Any] = {
            "metadata": {
                "finalizers": finalizers,
                "resourceVersion": pool["metadata"]["resourceVersion"],
            }
        }
        await self.client.patch(NODEPOOLS, pool["metadata"]["name"], patch)
        self.pool_status.forget(pool)
        return Result()


def _is_pending(obj: Object) -> bool:
    return sr.status_of(obj).phase == "Pending"
