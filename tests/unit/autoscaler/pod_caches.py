"""A pod cache whose index stamps move only when a node's pods do, as the real informer's:
what the pool-read and consolidation-view tests share.
"""

from __future__ import annotations

from nodepool_operator.controllers.resources import PODS_BY_NODE
from nodepool_operator.runtime.client import Object


class StampedPods:
    """Pods by node, with a stamp per node that moves when one of its pods is put."""

    def __init__(self) -> None:
        self.on: dict[str, dict[str, Object]] = {}
        self.stamps: dict[str, int] = {}
        self.serial = 0
        self.reads = 0

    def put(self, pod: Object) -> None:
        node = pod["spec"]["nodeName"]
        self.on.setdefault(node, {})[pod["metadata"]["name"]] = pod
        self.serial += 1
        self.stamps[node] = self.serial

    def by_index(self, index: str, value: str) -> list[Object]:
        assert index == PODS_BY_NODE
        self.reads += 1
        return list(self.on.get(value, {}).values())

    def index_stamp(self, index: str, value: str) -> int:
        assert index == PODS_BY_NODE
        return self.stamps.get(value, 0)
