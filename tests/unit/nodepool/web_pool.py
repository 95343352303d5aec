"""The ``web`` pool of the unregistered-taint, nominations and registration tests: 4 CPU /
16Gi nodes with a taint of their own, its VMs as the cloud reports them, and its Nodes as
the operator creates them and as their kubelet first reports."""

from __future__ import annotations

import copy
from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud.provider import VirtualMachine
from nodepool_operator.cloud.testing import virtual_machine
from nodepool_operator.controllers.nodepool import nodes
from nodepool_operator.runtime import conditions
from nodepool_operator.runtime.client import Object

POOL: dict[str, Any] = {"metadata": {"name": "web", "uid": "uid-web"}}
TEMPLATE = nodepool_api.NodeTemplate(
    cpu="4", memory="16Gi", pods=110, taints=(nodepool_api.Taint(key="gpu", effect="NoSchedule"),)
)
CREATED = 1_800_000_000.0
UNREGISTERED = {"key": wellknown.UNREGISTERED_TAINT_KEY, "effect": "NoSchedule"}


def vm(name: str) -> VirtualMachine:
    return virtual_machine(name, pool="web", created_at=CREATED, zone="")


def created(name: str = "web-0") -> Object:
    """The Node as the operator creates it, before any kubelet wrote to it."""
    node = nodes.node_manifest(
        pool=POOL, vm=vm(name), template=TEMPLATE, simulated=False, unregistered=True
    )
    node["metadata"]["creationTimestamp"] = conditions.rfc3339(CREATED)
    return node


def reported(node: Object, *, heartbeat: float = CREATED + 5, **status: Any) -> Object:
    """``node`` after its kubelet's first status update."""
    node = copy.deepcopy(node)
    node["status"] = {
        **node["status"],
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "lastHeartbeatTime": conditions.rfc3339(heartbeat),
                "lastTransitionTime": conditions.rfc3339(heartbeat),
            }
        ],
        **status,
    }
    return node
