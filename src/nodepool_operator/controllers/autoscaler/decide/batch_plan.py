"""Every Autoscaler's part of the batch's plan, pure.

All Autoscalers' pending pods are planned together: one scheduling simulation
(``simulation``) over every pool's nodes gives each pod to at most one pool, so two pools
never grow for the same pods. ``BatchPlan`` holds what the batch read (``snapshot``) and
the simulation's outcome; ``part_of`` cuts one Autoscaler's share out of it. No I/O and
no clock: ``plan_maker`` reads the caches and runs the simulation.

A pool is planned for by one Autoscaler: the oldest that names it. Any other Autoscaler
naming the same pool is reported as conflicting and decides nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.controllers.autoscaler import simulation
from nodepool_operator.controllers.autoscaler.snapshot import pool_facts

if TYPE_CHECKING:  # types only: deciding reads no cache and holds no client
    from nodepool_operator.controllers.autoscaler.snapshot.gather import Gathered
    from nodepool_operator.controllers.autoscaler.snapshot.pool_reads import PoolRead
    from nodepool_operator.runtime.client import Object

__all__ = [
    "BatchPlan",
    "ConflictingAutoscaler",
    "MissingPool",
    "Observation",
    "Part",
    "part_of",
]


@dataclass(frozen=True)
class ConflictingAutoscaler:
    """This Autoscaler names a pool another (older) Autoscaler already plans for."""

    pool: str
    owner: str


@dataclass(frozen=True)
class Observation:
    """One Autoscaler's part of the plan: its pool, and the pods waiting for it."""

    pool: pool_facts.PoolFacts
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


@dataclass(frozen=True)
class MissingPool:
    """This Autoscaler names a pool that does not exist (or is being deleted): it decides
    nothing, and answers for the pods of its namespaces no node can host, each told why
    (the missing pool among the reasons, ``Plan.share``)."""

    pool: str
    unfit: tuple[tuple[Object, str], ...]
    waiting: int

    @property
    def pending(self) -> int:
        return len(self.unfit)

    @property
    def unschedulable(self) -> int:
        return self.pending


#: An Autoscaler's part: its observation, a conflict, or its pool missing.
Part = Observation | ConflictingAutoscaler | MissingPool


@dataclass(frozen=True)
class _Share:
    """The plan's pods seen from one set of namespaces (empty: all of them)."""

    unfit: tuple[tuple[Object, str], ...]  # unschedulable pods no node can host, and why
    waiting: int  # pending pods the scheduler has not judged yet


@dataclass(frozen=True)
class BatchPlan:
    """What one plan read, and where it put the pods."""

    world: Gathered
    outcome: simulation.SimulationOutcome
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
                (pod, _with_missing(outcome.unfit[i], pod, world.missing))
                for i, pod in enumerate(world.pending)
                if i in outcome.unfit and watched(pod)
            )
            broken = tuple((pod, why) for pod, why in world.unreadable if watched(pod))
            found = _Share(unfit + broken, sum(1 for pod in world.waiting if watched(pod)))
            self._shares[namespaces] = found
        return found


def _with_missing(
    reason: str, pod: Object, missing: Mapping[str, tuple[str, frozenset[str]]]
) -> str:
    """Why no node hosts ``pod``, with the missing pools of the Autoscalers that watch its
    namespace: the pool meant for it may be the one that does not exist. Every Autoscaler
    of the namespace tells the pod the same reason, so its event is not told twice."""
    namespace = pod["metadata"].get("namespace")
    absent = [
        f"NodePool {pool}, which Autoscaler {owner} scales, does not exist"
        for pool, (owner, namespaces) in sorted(missing.items())
        if not namespaces or namespace in namespaces
    ]
    if not absent:
        return reason
    if reason in (simulation.NO_AUTOSCALER, simulation.NO_NODE_LEFT):
        return "; ".join(absent)  # the missing pool is the whole story
    return "; ".join([reason, *absent])


def _cannot_grow(name: str, pool: PoolRead | None) -> str:
    """Why pool ``name`` grows no more, in a pod's event."""
    if pool is not None and pool.facts.cannot_grow is not None:
        return f"NodePool {name}, ranked first for it, cannot grow: {pool.facts.cannot_grow}"
    at = f" {pool.facts.max_nodes}" if pool is not None else ""
    return f"NodePool {name}, ranked first for it, is at maxNodes{at}"


def part_of(made: BatchPlan, name: str, spec: autoscaler_api.AutoscalerSpec) -> Part:
    """The Autoscaler's part of the plan."""
    world, outcome = made.world, made.outcome
    owner = world.owners.get(spec.node_pool_name)
    if owner is not None and owner != name:
        return ConflictingAutoscaler(pool=spec.node_pool_name, owner=owner)
    pool = world.pools.get(spec.node_pool_name)
    share = made.share(frozenset(spec.namespaces))
    if pool is None:
        return MissingPool(pool=spec.node_pool_name, unfit=share.unfit, waiting=share.waiting)
    up = outcome.pools.get(pool.facts.name) or simulation.PoolOutcome(0, 0, (), ())
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
