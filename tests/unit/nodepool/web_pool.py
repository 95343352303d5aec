"""The ``web`` pool of the unregistered-taint and registration tests: 4 CPU / 16Gi nodes
with a taint of their own, and its VMs as the cloud reports them."""

from __future__ import annotations

from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud.provider import VirtualMachine
from nodepool_operator.cloud.testing import virtual_machine

POOL: dict[str, Any] = {"metadata": {"name": "web", "uid": "uid-web"}}
TEMPLATE = nodepool_api.NodeTemplate(
    cpu="4", memory="16Gi", pods=110, taints=(nodepool_api.Taint(key="gpu", effect="NoSchedule"),)
)
CREATED = 1_800_000_000.0
UNREGISTERED = {"key": wellknown.UNREGISTERED_TAINT_KEY, "effect": "NoSchedule"}


def vm(name: str) -> VirtualMachine:
    return virtual_machine(name, pool="web", created_at=CREATED, zone="")
