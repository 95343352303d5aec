"""The NodePool controller: level-based, one pool per reconcile.

desired = ``spec.targetNodes`` (within min and max); observed = the pool's VMs (from the
cloud) and Nodes (from the cache). Each pass moves observed one step towards desired and
reports progress through the status writer, which sends nothing when nothing changed.
While the pool is scaling the key is looked at again every ``poll_interval`` (from 0.1 s
up while VMs boot); once it is stable nothing runs for it until an event (spec change,
ScaleRequest, Node change) or the cloud resync.

Everything the reconciler talks to is injected: the API client, the caches, the pool's
lifecycle (``lifecycle.PoolLifecycle``: inventory, launch, registration, repair,
termination) and both clocks.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud.provider import CloudError, RateLimited
from nodepool_operator.controllers import allocatable
from nodepool_operator.controllers.nodepool import (
    answering,
    backoff,
    drain,
    inventory,
    pausing,
    plan,
    repair,
    report,
    request_facts,
    revisit,
)
from nodepool_operator.controllers.nodepool import metrics as pool_metrics
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.controllers.resources import NODEPOOLS
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import conditions, errors, finalizers, versions
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.controller import Request, Result
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import Informer

__all__ = ["FINALIZER", "NAME", "Lifecycle", "NodePoolReconciler", "operator_error"]

log = logging.getLogger(__name__)

NAME = "nodepool"
FINALIZER = "nodepool.dev/cleanup"


class Lifecycle(Protocol):
    """What the reconciler asks of the cloud and the cluster (``lifecycle.PoolLifecycle``)."""

    async def observe(self, pool: Object) -> plan.PoolView: ...

    async def converge(
        self,
        pool: Object,
        spec: nodepool_api.NodePoolSpec,
        desired: int,
        *,
        may_create: bool = True,
        may_register: bool = True,
        zones: backoff.ZoneLedger | None = None,
    ) -> plan.PoolView: ...

    async def tear_down(self, pool: Object) -> tuple[int, drain.DrainProgress]: ...

    def forget_pool(self, pool: str) -> None: ...

    def wrote_nodes(self, nodes: Sequence[Object]) -> None: ...


def operator_error(error: CloudError) -> errors.DependencyError:
    """A cloud's error as the runtime's: unavailable (asked again with backoff, or after
    the wait the cloud named) or refused (looked at again much later)."""
    retry_after = error.retry_after if isinstance(error, RateLimited) else None
    kind = errors.DependencyUnavailable if error.transient else errors.DependencyRefused
    return kind(f"cloud {error.code}: {error}", retry_after=retry_after)


class NodePoolReconciler:
    def __init__(
        self,
        *,
        client: Client,
        pools: Informer,
        scale_requests: Informer,
        lifecycle: Lifecycle,
        recorder: EventRecorder,
        config: NodePoolConfig,
        clock: clock_module.Clock,
        wall_clock: clock_module.WallClock,
    ) -> None:
        self.client = client
        self.pools = pools
        self.lifecycle = lifecycle
        self.recorder = recorder
        self.config = config
        self.clock = clock
        self.wall_clock = wall_clock
        self.answers = answering.RequestAnswers(
            client=client,
            scale_requests=scale_requests,
            retention=config.request_retention,
            controller=NAME,
            recorder=recorder,
            wall_clock=wall_clock,
        )
        self.reporter = report.PoolReporter(
            client=client,
            recorder=recorder,
            config=config,
            controller=NAME,
            clock=clock,
            wall_clock=wall_clock,
        )
        self.paused_steps = pausing.PausedSteps(
            status=self.reporter.status, recorder=recorder, config=config, wall_clock=wall_clock
        )
        self.revisits = revisit.Revisits(config)
        # Per pool, the copy our last write of it got back, until the cache catches up.
        self._written: dict[str, Object] = {}

    async def reconcile(self, request: Request) -> Result:
        """One pass over the pool; a Result, or an ``errors.OperatorError`` that tells the
        runtime what to do next (the cloud's errors are mapped here, at the boundary)."""
        try:
            return await self._reconcile(request)
        except CloudError as error:
            raise operator_error(error) from error

    async def _reconcile(self, request: Request) -> Result:
        cached = self.pools.get(request.name)
        if cached is None:
            return await self._gone(request.name)
        pool = self._newest(cached)
        if pool["metadata"].get("deletionTimestamp"):
            return await self._finalize(pool)
        pool = self._seen(await self._patch_finalizers(pool, finalizers.adding(pool, FINALIZER)))
        pool_requests = self.answers.of_pool(request.name)
        # A target a request moved is acted on in this pass, from the pool as written.
        answered = await self.answers.answer(pool, pool_requests)
        # The Nodes a request's answer marked for removal are this pass's victims: acted
        # on as marked even where the cache does not show the marks yet.
        self.lifecycle.wrote_nodes(self.answers.take_marked(request.name))
        if answered is None:
            return Result()  # the pool is gone: its deletion event brings the next pass
        pool = self._seen(answered)
        spec = nodepool_api.spec_of(pool)
        desired = plan.desired_nodes(spec)
        zones = self._zone_ledger(pool, spec)
        try:
            view, pause = await self.paused_steps.step(
                pool,
                functools.partial(self.lifecycle.converge, pool, spec, desired, zones=zones),
            )
            if view is None:  # the cloud refused a step: look again at what there is
                view = await self.lifecycle.observe(pool)
        except inventory.ListingDoubtful as doubt:
            return Result(requeue_after=await self.reporter.doubt(pool, doubt, desired=desired))
        self.reporter.trusted(request.name)
        await zones.tell(self.recorder, pool)
        view = dataclasses.replace(view, zone_backoffs=zones.current(), cloud_pause=pause)
        view = await self._note_reported_allocatable(pool, spec, view)
        degraded = (pause.reason, pause.message) if pause else zones.degraded()
        if degraded is None and view.repair_held is not None:
            degraded = (repair.REPAIR_HELD, view.repair_held)
        if degraded is None and view.launch_held is not None:
            degraded = view.launch_held
        held = await self.reporter.report(pool, desired=desired, view=view, degraded=degraded)
        pool_metrics.set_cost(request.name, view.cost_per_hour)
        await self.answers.note_launches(pool_requests, view)
        await self.answers.mark_zones_served(pool_requests, view.nodes.values())
        next_expiry = await self.answers.delete_expired(
            pool_requests,
            registration_timeout=spec.registration_timeout_seconds,
            nominations_settled=request_facts.nominations_settled(
                view.vms, view.nodes, desired=desired
            ),
        )
        due = [d for d in (next_expiry, held) if d is not None]
        next_pass_in = self.revisits.next_pass_in(
            request.name,
            view,
            desired,
            pause=pause,
            zones=zones,
            due=min(due) if due else None,
            now=self.wall_clock.time(),
        )
        return Result(requeue_after=next_pass_in)

    def _zone_ledger(self, pool: Object, spec: nodepool_api.NodePoolSpec) -> backoff.ZoneLedger:
        """The pool's zone backoffs as its status holds them (our last write of it, if the
        cache has not caught up): the world is their record, so a restart keeps them."""
        status = nodepool_api.status_of({"status": self.reporter.status.current(pool)})
        return backoff.ZoneLedger(
            template=spec.template, entries=status.zone_backoffs, now=self.wall_clock.time()
        )

    async def _note_reported_allocatable(
        self, pool: Object, spec: nodepool_api.NodePoolSpec, view: plan.PoolView
    ) -> plan.PoolView:
        """The view with what the pool's kubelets report against its template, from the
        record the status holds (so a restart keeps it); one event when the template
        fields it shows overstated change."""
        if spec.requirements:
            # Its nodes have many shapes, none the template's: nothing to compare with.
            return view
        status = nodepool_api.status_of({"status": self.reporter.status.current(pool)})
        held = status.reported_allocatable
        now = conditions.rfc3339(self.wall_clock.time())
        record = allocatable.observe(held, spec.template, view.nodes.values(), now=now)
        same_template = (
            held is not None and held.template_allocatable == record.template_allocatable
        )
        before = allocatable.overstated(held, spec.template) if same_template and held else []
        after = allocatable.overstated(record, spec.template)
        if after and after != before:
            _, _, message = allocatable.condition(record, spec.template)
            await self.recorder.event(
                pool, type="Warning", reason=allocatable.EVENT_REASON, message=message
            )
            log.warning("event=allocatable-overstated %s", message)
        return dataclasses.replace(view, reported_allocatable=record)

    async def _gone(self, name: str) -> Result:
        self._forget(name)
        exists, next_expiry = await self.answers.answer_orphans(name)
        if exists or next_expiry is None:
            return Result()
        return Result(requeue_after=next_expiry)

    def _newest(self, cached: Object) -> Object:
        """The cached pool, or the copy our own last write got back when the cache has
        not caught up with it: a pass never acts on a target older than one we wrote."""
        name = cached["metadata"]["name"]
        ours = self._written.get(name)
        if ours is not None and ours["metadata"].get("uid") == cached["metadata"].get("uid"):
            order = versions.compare(
                str(ours["metadata"].get("resourceVersion", "")),
                str(cached["metadata"].get("resourceVersion", "")),
            )
            if order is not None and order > 0:
                return ours
        self._written.pop(name, None)
        return cached

    def _seen(self, pool: Object) -> Object:
        self._written[pool["metadata"]["name"]] = pool
        return pool

    def _forget(self, name: str) -> None:
        pool_metrics.set_cost(name, None)
        """Drop what we remember of a pool that is gone (a new one may take its name).
        The answered requests stay: they are known by uid, so a new pool of the same name
        cannot be confused with them, and they keep a lagging cache from making a request
        for the missing pool be answered twice."""
        self._written.pop(name, None)
        self.revisits.forget(name)
        self.reporter.forget(name)
        self.lifecycle.forget_pool(name)

    async def _finalize(self, pool: Object) -> Result:
        if not finalizers.has(pool, FINALIZER):
            return Result()
        # The same drain as a scale-down first: pods leave through the Eviction API.
        try:
            remaining, drains = await self.lifecycle.tear_down(pool)
        except inventory.ListingDoubtful as doubt:
            return Result(requeue_after=await self.reporter.doubt(pool, doubt, desired=0))
        self.reporter.trusted(pool["metadata"]["name"])
        if remaining and drains.blocked:
            # Say why the deletion waits, as a blocked scale-down does (a status write
            # only when it changes).
            held = nodepool_api.status_of({"status": self.reporter.status.current(pool)})
            view = dataclasses.replace(
                await self.lifecycle.observe(pool),
                blocked=drains.blocked,
                reported_allocatable=held.reported_allocatable,
            )
            await self.reporter.report(pool, desired=0, view=view, degraded=None)
        if remaining:
            wait = self.config.poll_interval if drains.done else drains.retry_in
            return Result(requeue_after=wait) if wait is not None else Result()
        await self._patch_finalizers(pool, finalizers.removing(pool, FINALIZER))
        self.reporter.status.forget(pool)
        return Result()

    async def _patch_finalizers(self, pool: Object, patch: dict[str, Any] | None) -> Object:
        """``pool`` as it stands after ``patch`` (sent only if there is one): conditional
        on the resourceVersion, so a concurrent edit of the list gives 409 (a requeue)
        instead of being overwritten."""
        if patch is None:
            return pool
        return await self.client.patch(NODEPOOLS, pool["metadata"]["name"], patch)
