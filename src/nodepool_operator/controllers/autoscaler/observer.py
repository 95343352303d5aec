"""The one plan of the whole cluster, and each Autoscaler's part of it.

All Autoscalers' pending pods are planned together: one scheduling simulation
(``simulation``) over every pool's nodes gives each pod to at most one pool, so two pools
never grow for the same pods. ``Observer.plan`` makes that plan from what ``gather``
reads; ``Observer.part`` cuts one Autoscaler's share out of it. The planner
(``planner``) makes one plan per batch; ``nodepool-operator plan`` and ``explain`` make
one from a recording.

A pool is planned for by one Autoscaler: the oldest that names it. Any other Autoscaler
naming the same pool is reported as conflicting and decides nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.controllers.autoscaler import plan, simulation, volumes
from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.autoscaler.gather import Gathered, Gatherer
from nodepool_operator.controllers.autoscaler.handoff import RequestLedger
from nodepool_operator.controllers.autoscaler.pool_reads import PoolReads, PoolView
from nodepool_operator.controllers.autoscaler.profiles import (
    DEFAULT_EXPENDABLE_PRIORITY,
    NOMINATED_INDEX,
    PENDING_INDEX,
    ProfileCache,
    nominated_index,
    pending_index,
)
from nodepool_operator.controllers.resources import add_shared_indexes
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.informer import Informer

__all__ = ["ConflictingAutoscaler", "Observation", "Observer", "Part", "Plan"]


@dataclass(frozen=True)
class ConflictingAutoscaler:
    """This Autoscaler names a pool another (older) Autoscaler already plans for."""

    pool: str
    owner: str


@dataclass(frozen=True)
class Observation:
    """One Autoscaler's part of the plan: its pool, and the pods waiting for it."""

    pool: plan.PoolFacts
    pool_uid: str
    basis: int  # the pool's spec.targetNodes the plan started from
    up: simulation.PoolOutcome
    fitting: tuple[Object, ...]  # unschedulable pods the plan gives to this pool
    triggering: tuple[Object, ...]  # of those, the ones on its new nodes
    beyond_max: tuple[Object, ...]  # of those, the ones only nodes past maxNodes could host
    unfit: tuple[tuple[Object, str], ...]  # unschedulable pods of its namespaces no node can host
    waiting: int  # pending pods of its namespaces the scheduler has not judged yet
    pending_fitting: int  # pods that keep the pool from shrinking: planned here or not judged yet
    unneeded: tuple[str, ...]  # Ready nodes running only DaemonSet or mirror pods
    # The whole cluster's nodes and DaemonSets as the plan saw them (for consolidation).
    cluster: tuple[simulation.ExistingNode, ...] = ()
    daemon_sets: tuple[simulation.DaemonSetView, ...] = ()
    # Of ``triggering``, the pods sent here because the pool ranked before this one could
    # not grow, each with why (the pool's name and its limit or backoff).
    passed_over: tuple[tuple[Object, str], ...] = ()

    @property
    def pending(self) -> int:
        """The pending pods this Autoscaler answers for: those the plan gives its pool (its
        nodes or new ones) and those of its namespaces no pool can host. Not the pods the
        plan gives other pools or other nodes, nor those the scheduler has not judged yet:
        in a burst those move with every pod, for every Autoscaler of the namespace."""
        return len(self.fitting) + len(self.unfit)

    @property
    def unschedulable(self) -> int:
        """Of ``pending``, the pods the scheduler marked unschedulable: all of them, as the
        plan takes no other pod."""
        return self.pending


#: An Autoscaler's part: its observation, a conflict, or None when its pool does not exist.
Part = Observation | ConflictingAutoscaler | None


@dataclass(frozen=True)
class _Share:
    """The plan's pods seen from one set of namespaces (empty: all of them)."""

    unfit: tuple[tuple[Object, str], ...]  # unschedulable pods no node can host, and why
    waiting: int  # pending pods the scheduler has not judged yet


@dataclass(frozen=True)
class Plan:
    """What one plan read, and where it put the pods."""

    world: Gathered
    outcome: simulation.Outcome
    # Namespaces -> their share, cut once per plan: a batch hands out a part to every
    # Autoscaler, and most of them name the same namespaces (usually all).
    _shares: dict[frozenset[str], _Share] = field(default_factory=dict, compare=False, repr=False)

    def share(self, namespaces: frozenset[str]) -> _Share:
        found = self._shares.get(namespaces)
        if found is None:
            world, outcome = self.world, self.outcome

            def watched(pod: Object) -> bool:
                return not namespaces or pod["metadata"].get("namespace") in namespaces

            unfit = tuple(
                (pod, outcome.unfit[i])
                for i, pod in enumerate(world.pending)
                if i in outcome.unfit and watched(pod)
            )
            broken = tuple((pod, why) for pod, why in world.unreadable if watched(pod))
            found = _Share(unfit + broken, sum(1 for pod in world.waiting if watched(pod)))
            self._shares[namespaces] = found
        return found


def _cannot_grow(name: str, pool: PoolView | None) -> str:
    """Why pool ``name`` grows no more, in a pod's event."""
    if pool is not None and pool.facts.cannot_grow is not None:
        return f"NodePool {name}, ranked first for it, cannot grow: {pool.facts.cannot_grow}"
    at = f" {pool.facts.max_nodes}" if pool is not None else ""
    return f"NodePool {name}, ranked first for it, is at maxNodes{at}"


class Observer:
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
    ) -> None:
        """``volume_reads``: the claims, volumes and classes the volume filters read;
        None leaves pods' claims unjudged (a planner without those caches)."""
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
        return self.gatherer.gather()

    async def plan(self) -> Plan:
        """One plan of every pending pod against every pool and node, from the caches now."""
        gathered = self.gatherer.gather()
        # Simulating tens of thousands of pods takes long enough to starve the informers
        # and the lease renewal if it ran on the event loop; its inputs are immutable
        # snapshots, so it runs in a worker thread.
        outcome = await asyncio.to_thread(gathered.simulate)
        return Plan(gathered, outcome)

    async def observe(self, name: str, spec: autoscaler_api.AutoscalerSpec) -> Part:
        """A fresh plan's part for one Autoscaler (tools and tests; the planner plans once
        for all of them)."""
        return self.part(await self.plan(), name, spec)

    @staticmethod
    def part(made: Plan, name: str, spec: autoscaler_api.AutoscalerSpec) -> Part:
        """The Autoscaler's part of the plan; None when its pool does not exist."""
        world, outcome = made.world, made.outcome
        owner = world.owners.get(spec.node_pool_name)
        if owner is not None and owner != name:
            return ConflictingAutoscaler(pool=spec.node_pool_name, owner=owner)
        pool = world.pools.get(spec.node_pool_name)
        if pool is None:
            return None
        up = outcome.pools.get(pool.facts.name) or simulation.PoolOutcome(0, 0, (), ())
        share = made.share(frozenset(spec.namespaces))
        return Observation(
            pool=pool.facts,
            pool_uid=pool.uid,
            basis=pool.basis,
            up=up,
            fitting=tuple(world.pending[i] for i in up.hosted),
            triggering=tuple(world.pending[i] for i in up.triggering),
            beyond_max=tuple(world.pending[i] for i in up.beyond),
            passed_over=tuple(
                (world.pending[i], _cannot_grow(preferred, world.pools.get(preferred)))
                for i, preferred in up.passed_over
            ),
            unfit=share.unfit,
            waiting=share.waiting,
            pending_fitting=len(up.hosted) + share.waiting,
            unneeded=pool.unneeded,
            cluster=world.nodes,
            daemon_sets=world.daemon_sets,
        )
