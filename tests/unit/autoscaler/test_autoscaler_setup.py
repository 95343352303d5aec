"""Wiring: the Autoscaler shares the NodePool controller's watches instead of adding its own."""

from __future__ import annotations

from typing import Any

from nodepool_operator import timestamps
from nodepool_operator.controllers.autoscaler import setup as autoscaler_setup
from nodepool_operator.controllers.autoscaler.config import AutoscalerConfig
from nodepool_operator.controllers.autoscaler.consolidator import PDBS
from nodepool_operator.controllers.autoscaler.controller import AutoscalerReconciler
from nodepool_operator.controllers.autoscaler.planner import Planner
from nodepool_operator.controllers.nodepool import setup as nodepool_setup
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.runtime.client import Client
from nodepool_operator.runtime.clock import RealWallClock
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.manager import Manager
from unit.autoscaler.reconcile_world import status_entry


async def test_one_watch_per_resource_for_both_controllers() -> None:
    manager = Manager(Client(api=None, field_manager="test"))  # no request is made here
    cloud: Any = object()
    nodepool_setup.setup(manager, cloud=cloud, config=NodePoolConfig())
    autoscaler_setup.setup(manager, config=AutoscalerConfig())
    watched = sorted((i.resource.plural, i.label_selector or "") for i in manager.cache.informers())
    assert watched == [
        ("autoscalers", ""),
        ("daemonsets", ""),
        ("nodepools", ""),
        ("nodes", ""),  # every Node: pods on nodes of no pool count too
        ("persistentvolumeclaims", ""),
        ("persistentvolumes", ""),
        ("poddisruptionbudgets", ""),  # consolidation's budgets: no LIST in a batch
        ("pods", ""),
        ("scalerequests", ""),
        ("storageclasses", ""),
    ]
    assert [c.name for c in manager.controllers] == ["nodepool", "autoscaler", "autoscaler-planner"]


async def test_the_autoscaler_cache_keeps_when_the_controller_last_wrote_each_status() -> None:
    """The status reconcile times its holds from that record (it survives a restart), so
    the cache it reads must keep it, and its status writer read it under the field
    manager the controller writes as."""
    manager = Manager(Client(api=None, field_manager="test"))
    controller = autoscaler_setup.setup(manager, config=AutoscalerConfig())
    [autoscalers] = [i for i in manager.cache.informers() if i.resource.plural == "autoscalers"]
    reconciler = controller.reconciler
    assert isinstance(reconciler, AutoscalerReconciler)
    # The manager its status writes are recorded under is the one its holds read.
    assert reconciler.status.client.field_manager == "autoscaler-controller"
    assert reconciler.status.field_manager == "autoscaler-controller"
    written = status_entry("autoscaler-controller", "2026-11-29T10:05:00Z")
    cached = autoscalers.transform({"metadata": {"name": "nas", "managedFields": [written]}})
    assert "fieldsV1" not in cached["metadata"]["managedFields"][0]
    assert reconciler.status.written_at(cached) == timestamps.parse_rfc3339("2026-11-29T10:05:00Z")


async def test_consolidation_proves_its_moves_with_the_plans_profiles_volumes_included() -> None:
    manager = Manager(Client(api=None, field_manager="test"))
    config = AutoscalerConfig()
    wall_clock = RealWallClock()
    reads = autoscaler_setup.planner_reads(manager.cache, config=config, wall_clock=wall_clock)
    recorder = EventRecorder(manager.client, component="test", clock=manager.clock)
    decider = autoscaler_setup._decider(
        manager.client,
        reads,
        budgets=manager.cache.informer(PDBS),
        recorder=recorder,
        config=config,
        wall_clock=wall_clock,
    )
    assert decider.consolidator.profile == reads.plan_maker.scheduling_profile


async def test_the_planner_hands_over_as_many_pools_at_a_time_as_configured() -> None:
    manager = Manager(Client(api=None, field_manager="test"))
    config = AutoscalerConfig(hand_over_parallelism=7, max_concurrent_reconciles=2)
    controller = autoscaler_setup.setup(manager, config=config)
    [planning] = [c for c in manager.controllers if c.name == "autoscaler-planner"]
    assert isinstance(planning.reconciler, Planner)
    assert planning.reconciler.parallelism == 7  # not the status reconciles' 2
    assert controller.max_concurrent_reconciles == 2
