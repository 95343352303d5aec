"""Wiring: the Autoscaler shares the NodePool controller's watches instead of adding its own."""

from __future__ import annotations

from typing import Any

from nodepool_operator.controllers.autoscaler import setup as autoscaler_setup
from nodepool_operator.controllers.autoscaler.config import AutoscalerConfig
from nodepool_operator.controllers.nodepool import setup as nodepool_setup
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.runtime.client import Client
from nodepool_operator.runtime.manager import Manager


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
        ("pods", ""),
        ("scalerequests", ""),
        ("storageclasses", ""),
    ]
    assert [c.name for c in manager.controllers] == ["nodepool", "autoscaler", "autoscaler-planner"]
