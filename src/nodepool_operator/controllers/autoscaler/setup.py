"""Wiring of the Autoscaler's two controllers: the planner and the per-Autoscaler status.

The planner (``planner``, one key) plans and hands over for every pool; the Autoscaler
controller reports each Autoscaler's verdict, woken by its spec and by the planner. Both
run on the leader only, as every controller the manager starts.

The Pod and Node informers are requested exactly as the NodePool controller requests
them, so the process keeps one WATCH of each; the Autoscaler adds its own indexes.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodepool_operator.controllers import cached, offerings
from nodepool_operator.controllers.autoscaler import planner as planner_module
from nodepool_operator.controllers.autoscaler import watches
from nodepool_operator.controllers.autoscaler.act.handoff import ScaleRequester
from nodepool_operator.controllers.autoscaler.act.nominations import Nominator
from nodepool_operator.controllers.autoscaler.act.notices import Notices
from nodepool_operator.controllers.autoscaler.config import AutoscalerConfig
from nodepool_operator.controllers.autoscaler.consolidator import PDBS, Consolidator
from nodepool_operator.controllers.autoscaler.controller import NAME, AutoscalerReconciler
from nodepool_operator.controllers.autoscaler.decisions import PoolDecider
from nodepool_operator.controllers.autoscaler.plan_maker import PlanMaker
from nodepool_operator.controllers.autoscaler.snapshot import volumes
from nodepool_operator.controllers.autoscaler.snapshot.pod_profiles import ProfileCache
from nodepool_operator.controllers.autoscaler.snapshot.scale_requests import RequestLedger
from nodepool_operator.controllers.autoscaler.verdicts import AutoscalerVerdicts
from nodepool_operator.controllers.resources import (
    AUTOSCALERS,
    NODEPOOLS,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    SCALEREQUESTS,
    STORAGE_CLASSES,
)
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import kinds
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.controller import Controller, GenerationChanged, Request
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import Informer, InformerSource, keep_write_times
from nodepool_operator.runtime.manager import Manager

__all__ = ["Reads", "planner_reads", "setup"]


@dataclass(frozen=True)
class Reads:
    """The informers the Autoscaler reads, and the planner built on them."""

    autoscalers: Informer
    pools: Informer
    nodes: Informer
    pods: Informer
    requests: Informer
    daemon_sets: Informer
    volumes: volumes.VolumeReads
    plan_maker: PlanMaker
    ledger: RequestLedger


def planner_reads(
    cache: InformerSource,
    *,
    config: AutoscalerConfig,
    wall_clock: clock_module.WallClock,
    offerings_catalog: offerings.OfferingsCatalog | None = None,
) -> Reads:
    """Request the Autoscaler's informers from ``cache`` and build its planner on them.

    The controller passes the manager's cache; ``nodepool-operator plan`` and ``explain``
    pass one holding a recording of the same informers, so they run this same planner.
    """
    # With who wrote each one's status when: the status reconcile times its holds from it.
    autoscalers = cache.informer(AUTOSCALERS, transform=keep_write_times)
    # Shared with the NodePool controller, which times its status writes the same way.
    pools = cache.informer(NODEPOOLS, transform=keep_write_times)
    # Every Node, pool or not: the simulation counts all of them (pods on a system node
    # take part in affinity and spread); the NodePool controller reads its pools' Nodes
    # through the NODES_BY_POOL index.
    nodes = cache.informer(kinds.NODES, transform=cached.node_fields)
    pods = cache.informer(kinds.PODS, transform=cached.pod_fields)
    requests = cache.informer(SCALEREQUESTS)
    daemon_sets = cache.informer(kinds.DAEMONSETS)
    volume_reads = volumes.VolumeReads(
        claims=cache.informer(PERSISTENT_VOLUME_CLAIMS, transform=cached.claim_fields),
        volumes=cache.informer(PERSISTENT_VOLUMES, transform=cached.volume_fields),
        classes=cache.informer(STORAGE_CLASSES, transform=cached.storage_class_fields),
    )
    ledger = RequestLedger()
    plan_maker = PlanMaker(
        autoscalers=autoscalers,
        pools=pools,
        nodes=nodes,
        pods=pods,
        requests=requests,
        daemon_sets=daemon_sets,
        ledger=ledger,
        cache=ProfileCache(config.request_cache_size),
        expendable_priority=config.expendable_pods_priority_cutoff,
        wall_clock=wall_clock,
        volume_reads=volume_reads,
        offerings_catalog=offerings_catalog,
    )
    return Reads(
        autoscalers, pools, nodes, pods, requests, daemon_sets, volume_reads, plan_maker, ledger
    )


def setup(
    manager: Manager,
    *,
    config: AutoscalerConfig,
    offerings_catalog: offerings.OfferingsCatalog | None = None,
) -> Controller:
    """Create the planner and the Autoscaler controller, their informers (shared through
    the manager) and their watches; returns the Autoscaler controller.

    ``offerings_catalog``: the catalog the NodePool controller launches offerings from;
    without it a pool with requirements is not grown (its pods are told why)."""
    client = manager.client.for_manager(f"{NAME}-controller")
    wall_clock = clock_module.RealWallClock()
    reads = planner_reads(
        manager.cache, config=config, wall_clock=wall_clock, offerings_catalog=offerings_catalog
    )
    recorder = EventRecorder(client, component=f"{NAME}-controller", clock=manager.clock)
    manager.on_drained.append(recorder.flush)
    verdicts = AutoscalerVerdicts()
    reporter = AutoscalerReconciler(
        client=client,
        autoscalers=reads.autoscalers,
        verdicts=verdicts,
        recorder=recorder,
        clock=manager.clock,
        wall_clock=wall_clock,
        count_writes_per_second=config.count_writes_per_second,
    )
    controller = Controller(
        name=NAME,
        reconciler=reporter,
        max_concurrent_reconciles=config.max_concurrent_reconciles,
        clock=manager.clock,
    )
    # Our own status writes do not move the generation: they wake nobody.
    controller.watch(reads.autoscalers, predicates=[GenerationChanged()])

    def wake(autoscaler: Object) -> None:
        if reporter.needs_write(autoscaler):
            controller.queue.add(Request(name=str(autoscaler["metadata"]["name"])))

    planner = planner_module.Planner(
        plan_maker=reads.plan_maker,
        decider=_decider(
            client,
            reads,
            # Read when a Node is about to be tainted or named: from the cache, so a batch
            # makes no API read.
            budgets=manager.cache.informer(PDBS),
            recorder=recorder,
            config=config,
            wall_clock=wall_clock,
        ),
        verdicts=verdicts,
        wake=wake,
        clock=manager.clock,
        parallelism=config.hand_over_parallelism,
        unready_limits=config.unready_limits,
        nominator=(
            Nominator(
                client=client,
                cached_pod=lambda namespace, name: reads.pods.get(name, namespace),
                clock=manager.clock,
                wall_clock=wall_clock,
                parallelism=config.nomination_parallelism,
            )
            if config.await_nominations_seconds > 0
            else None
        ),
    )
    manager.add(controller)
    manager.add(_planning(planner, reads, clock=manager.clock))
    return controller


def _planning(
    planner: planner_module.Planner, reads: Reads, *, clock: clock_module.Clock
) -> Controller:
    """The planner as a controller of one key, watching what its plan reads."""
    planning = Controller(
        name=planner_module.NAME, reconciler=planner, max_concurrent_reconciles=1, clock=clock
    )
    watches.watch_dependencies(
        planning,
        mapper=planner.triggered,
        pod_mapper=planner.pod_triggered,
        window=planner.window,
        autoscalers=reads.autoscalers,
        pods=reads.pods,
        nodes=reads.nodes,
        pools=reads.pools,
        requests=reads.requests,
        daemon_sets=reads.daemon_sets,
        volumes=reads.volumes,
    )
    return planning


def _decider(
    client: Client,
    reads: Reads,
    *,
    budgets: Informer,
    recorder: EventRecorder,
    config: AutoscalerConfig,
    wall_clock: clock_module.WallClock,
) -> PoolDecider:
    return PoolDecider(
        consolidator=Consolidator(
            client=client,
            nodes=reads.nodes,
            pods=reads.pods,
            budgets=budgets,
            # Volumes included: a pod that cannot follow its data never counts as movable.
            profile=reads.plan_maker.scheduling_profile,
            recorder=recorder,
            wall_clock=wall_clock,
            # Consolidation by price: whether a replacement was asked for, and prices.
            requests=reads.requests,
            offerings_catalog=reads.plan_maker.offerings_catalog,
        ),
        requester=ScaleRequester(
            client=client,
            ledger=reads.ledger,
            wall_clock=wall_clock,
            await_nominations_seconds=config.await_nominations_seconds,
        ),
        notices=Notices(
            recorder,
            parallelism=config.event_parallelism,
            triggered_per_request=config.triggered_events_per_request,
        ),
    )
