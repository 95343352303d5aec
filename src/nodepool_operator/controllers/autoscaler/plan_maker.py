"""The batch's plan, made from the caches now: the snapshot read on the event loop
(``snapshot.gather``), the scheduling simulation run in a worker thread (``simulation``),
the answer held as a ``decide.batch_plan.BatchPlan``. The planner (``planner``) makes one
per batch; ``nodepool-operator plan`` and ``explain`` make one from a recording.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.cloud.catalog import Catalog
from nodepool_operator.cloud.provider import CloudError
from nodepool_operator.controllers import offerings
from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.autoscaler.decide import batch_plan
from nodepool_operator.controllers.autoscaler.snapshot import volumes
from nodepool_operator.controllers.autoscaler.snapshot.gather import Gathered, Gatherer
from nodepool_operator.controllers.autoscaler.snapshot.pod_profiles import (
    DEFAULT_EXPENDABLE_PRIORITY,
    NOMINATED_INDEX,
    PENDING_INDEX,
    ProfileCache,
    nominated_index,
    pending_index,
)
from nodepool_operator.controllers.autoscaler.snapshot.pool_reads import PoolReads
from nodepool_operator.controllers.autoscaler.snapshot.scale_requests import RequestLedger
from nodepool_operator.controllers.resources import add_shared_indexes
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime.informer import Informer

__all__ = ["PlanMaker"]


class PlanMaker:
    """Reads pools, nodes, pods, DaemonSets and ScaleRequests; plans for all Autoscalers."""

    def __init__(
        self,
        *,
        autoscalers: Informer,
        pools: Informer,
        nodes: Informer,
        pods: Informer,
        requests: Informer,
        daemon_sets: Informer,
        ledger: RequestLedger,
        cache: ProfileCache | None = None,
        expendable_priority: int = DEFAULT_EXPENDABLE_PRIORITY,
        wall_clock: clock_module.WallClock | None = None,
        volume_reads: volumes.VolumeReads | None = None,
        offerings_catalog: offerings.OfferingsCatalog | None = None,
    ) -> None:
        """``volume_reads``: the claims, volumes and classes the volume filters read;
        None leaves pods' claims unjudged (a planner without those caches).
        ``offerings_catalog``: the cloud's catalog (shared with the NodePool controller),
        which pools with requirements are planned with; None: they are not grown."""
        self.offerings_catalog = offerings_catalog
        self.autoscalers = autoscalers
        self.pools = pools
        self.nodes = nodes
        self.pods = pods
        self.cache = cache or ProfileCache()
        self.pool_reads = PoolReads(
            nodes=nodes,
            pods=pods,
            requests=requests,
            ledger=ledger,
            cache=self.cache,
            wall_clock=wall_clock or clock_module.RealWallClock(),
        )
        self.gatherer = Gatherer(
            autoscalers=autoscalers,
            pools=pools,
            daemon_sets=daemon_sets,
            reads=self.pool_reads,
            cache=self.cache,
            expendable_priority=expendable_priority,
            wall_clock=self.pool_reads.wall_clock,
            volume_reads=volume_reads,
        )
        pods.add_index(PENDING_INDEX, pending_index)
        pods.add_index(NOMINATED_INDEX, nominated_index)
        add_shared_indexes(nodes=nodes, pods_=pods, requests=requests)

    @property
    def wall_clock(self) -> clock_module.WallClock:
        return self.pool_reads.wall_clock

    @wall_clock.setter
    def wall_clock(self, clock: clock_module.WallClock) -> None:
        self.pool_reads.wall_clock = self.gatherer.wall_clock = clock

    def scheduling_profile(self, pod: Mapping[str, Any]) -> PodProfile | str:
        """The pod's profile as the plan judges a pending pod's, volumes included
        (``Gatherer.scheduling_profile``): what consolidation proves its moves with."""
        return self.gatherer.scheduling_profile(pod)

    def inputs(self) -> Gathered:
        """What a plan would read now, for the tools that explain one (``inspection``)."""
        known = self.offerings_catalog.known() if self.offerings_catalog is not None else None
        return self.gatherer.gather(known)

    async def _catalog(self) -> Catalog | None:
        """The catalog, read again once its time is up; the one last read while the cloud
        does not answer (None: never read)."""
        if self.offerings_catalog is None:
            return None
        try:
            return await self.offerings_catalog.current()
        except CloudError:
            return self.offerings_catalog.known()

    async def plan(self) -> batch_plan.BatchPlan:
        """One plan of every pending pod against every pool and node, from the caches now."""
        gathered = self.gatherer.gather(await self._catalog())
        # Simulating tens of thousands of pods takes long enough to starve the informers
        # and the lease renewal if it ran on the event loop; its inputs are immutable
        # snapshots, so it runs in a worker thread.
        outcome = await asyncio.to_thread(gathered.simulate)
        return batch_plan.BatchPlan(gathered, outcome)

    async def observe(self, name: str, spec: autoscaler_api.AutoscalerSpec) -> batch_plan.Part:
        """A fresh plan's part for one Autoscaler (tools and tests; the planner plans once
        for all of them)."""
        return batch_plan.part_of(await self.plan(), name, spec)
