"""Which pod events wake the NodePool controller: only those that can move a drain on."""

from __future__ import annotations

import copy
from typing import Any

from nodepool_operator import timestamps
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.nodepool import plan, setup
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.controllers.nodepool.controller import NodePoolReconciler
from nodepool_operator.runtime.client import Client
from nodepool_operator.runtime.controller import Request
from nodepool_operator.runtime.manager import Manager


class Nodes:
    def __init__(self, *nodes: dict[str, Any]) -> None:
        self.store = {n["metadata"]["name"]: n for n in nodes}

    def get(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self.store.get(name)


def node(name: str, *, draining: bool) -> dict[str, Any]:
    annotations = {plan.SCALE_DOWN_ANNOTATION: "2026-11-29T10:00:00Z"} if draining else {}
    return {
        "metadata": {
            "name": name,
            "labels": {wellknown.POOL_LABEL: "p"},
            "annotations": annotations,
        }
    }


def pod(node_name: str | None) -> dict[str, Any]:
    spec = {"nodeName": node_name} if node_name else {}
    return {"metadata": {"name": "a", "namespace": "ns"}, "spec": spec, "status": {}}


def test_a_pod_on_a_draining_node_wakes_its_pool_and_others_wake_nothing() -> None:
    mapper = setup.pool_draining_pod(
        Nodes(node("p-0", draining=True), node("p-1", draining=False))  # type: ignore[arg-type]
    )
    assert mapper(pod("p-0")) == [Request(name="p")]
    assert mapper(pod("p-1")) == []
    assert mapper(pod("elsewhere")) == []
    assert mapper(pod(None)) == []


def test_only_a_deletion_or_an_annotation_change_of_a_pod_moves_a_drain() -> None:
    predicate = setup.PodLeftOrChanged()
    old = pod("p-0")
    assert not predicate.create(old)
    assert predicate.delete(old)
    leaving = copy.deepcopy(old)
    leaving["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    assert predicate.update(old, leaving)
    released = copy.deepcopy(old)
    released["metadata"]["annotations"] = {wellknown.DO_NOT_DISRUPT_ANNOTATION: "false"}
    assert predicate.update(old, released)
    running = copy.deepcopy(old)
    running["status"]["phase"] = "Running"
    assert not predicate.update(old, running)


async def test_the_pool_cache_keeps_when_the_controller_last_wrote_each_status() -> None:
    """The reporter holds progress writes from that record (it survives a restart), so
    the cache must keep it, and the status writer read it under the manager the
    controller writes as."""
    manager = Manager(Client(api=None, field_manager="test"))  # no request is made here
    cloud: Any = object()
    controller = setup.setup(manager, cloud=cloud, config=NodePoolConfig())
    [pools] = [i for i in manager.cache.informers() if i.resource.plural == "nodepools"]
    reconciler = controller.reconciler
    assert isinstance(reconciler, NodePoolReconciler)
    writer = reconciler.reporter.status
    assert writer.field_manager == writer.client.field_manager == "nodepool-controller"
    written = {
        "manager": "nodepool-controller",
        "operation": "Update",
        "subresource": "status",
        "apiVersion": "nodepool.dev/v1alpha1",
        "time": "2026-11-29T10:05:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:status": {"f:readyNodes": {}}},
    }
    cached = pools.transform({"metadata": {"name": "p", "managedFields": [written]}})
    assert "fieldsV1" not in cached["metadata"]["managedFields"][0]
    assert writer.written_at(cached) == timestamps.parse_rfc3339("2026-11-29T10:05:00Z")
