"""Consolidation keeps a Node's view until the Node or the pods on it change."""

from __future__ import annotations

from typing import Any

from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler.snapshot.consolidation_views import NodeViews
from nodepool_operator.controllers.autoscaler.snapshot.pod_profiles import ProfileCache
from nodepool_operator.controllers.resources import NODES_BY_POOL
from nodepool_operator.runtime.client import Object
from unit.autoscaler.pod_caches import StampedPods

POOL = "pool-a"
POOL_UID = "uid-a"


class Nodes:
    """Nodes by pool, as the informer files them."""

    def __init__(self) -> None:
        self.store: dict[str, Object] = {}

    def put(self, node: Object) -> None:
        self.store[node["metadata"]["name"]] = node

    def remove(self, name: str) -> None:
        del self.store[name]

    def by_index(self, index: str, value: str) -> list[Object]:
        assert index == NODES_BY_POOL
        labels = (n["metadata"]["labels"] for n in self.store.values())
        return [
            n
            for n, found in zip(self.store.values(), labels, strict=True)
            if found.get(wellknown.POOL_LABEL) == value
        ]

    def get(self, name: str, namespace: str | None = None) -> Object | None:
        return self.store.get(name)

    def __len__(self) -> int:
        return len(self.store)


def node(
    name: str,
    *,
    version: str = "1",
    annotations: dict[str, str] | None = None,
    owner: str | None = POOL_UID,
) -> Object:
    owners = [] if owner is None else [{"kind": "NodePool", "name": POOL, "uid": owner}]
    return {
        "metadata": {
            "name": name,
            "resourceVersion": version,
            "labels": {wellknown.POOL_LABEL: POOL},
            "annotations": dict(annotations or {}),
            "ownerReferences": owners,
        },
        "spec": {},
        "status": {
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(name: str, on: str) -> Object:
    return {
        "metadata": {"name": name, "namespace": "apps", "uid": name, "resourceVersion": "1"},
        "spec": {
            "nodeName": on,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
        "status": {"phase": "Running"},
    }


class Reviewing:
    """The pool's views as a pass reads them."""

    def __init__(self, nodes: Nodes, pods: StampedPods) -> None:
        self.read = NodeViews(
            nodes=nodes,  # type: ignore[arg-type]
            pods=pods,  # type: ignore[arg-type]
            profile=ProfileCache().get,
        )
        self._views = self.read._views

    def views(self, pool: str) -> list[Any]:
        return self.read.of_pool(pool, pool_uid=POOL_UID)


def consolidator(nodes: Nodes, pods: StampedPods) -> Reviewing:
    return Reviewing(nodes, pods)


def test_a_view_is_kept_until_its_node_or_its_pods_change() -> None:
    nodes, pods = Nodes(), StampedPods()
    nodes.put(node("n1"))
    nodes.put(node("n2"))
    pods.put(pod("p1", "n1"))
    reviewing = consolidator(nodes, pods)

    first = reviewing.views(POOL)
    assert [v.name for v in first] == ["n1", "n2"]
    assert pods.reads == 2
    again = reviewing.views(POOL)
    assert all(a is b for a, b in zip(first, again, strict=True))
    assert pods.reads == 2  # neither Node's pods were read again

    pods.put(pod("p2", "n2"))  # n2's pods change: only n2 is read again
    moved = reviewing.views(POOL)
    assert moved[0] is first[0]
    assert [p["metadata"]["name"] for p in moved[1].to_move] == ["p2"]
    assert pods.reads == 3

    stamp = {wellknown.UNNEEDED_SINCE_ANNOTATION: "2026-12-04T12:00:00Z"}
    nodes.put(node("n1", version="2", annotations=stamp))  # n1 changes: only n1 is read again
    stamped = reviewing.views(POOL)
    assert first[0].since is None
    assert stamped[0].since is not None
    assert pods.reads == 4
    assert stamped[1] is moved[1]


def test_a_node_without_a_resource_version_is_read_every_time() -> None:
    nodes, pods = Nodes(), StampedPods()
    unversioned = node("n1", version="")
    nodes.put(unversioned)
    reviewing = consolidator(nodes, pods)
    reviewing.views(POOL)
    reviewing.views(POOL)
    assert pods.reads == 2


def test_views_of_nodes_that_are_gone_are_dropped() -> None:
    nodes, pods = Nodes(), StampedPods()
    reviewing = consolidator(nodes, pods)
    for index in range(200):
        nodes.put(node(f"old-{index}"))
    reviewing.views(POOL)
    for index in range(200):
        nodes.remove(f"old-{index}")
    nodes.put(node("new"))
    assert [v.name for v in reviewing.views(POOL)] == ["new"]
    assert set(reviewing.read._views) == {"new"}


def test_a_node_labelled_with_the_pool_but_not_owned_by_it_is_not_the_pools() -> None:
    nodes, pods = Nodes(), StampedPods()
    nodes.put(node("owned"))
    nodes.put(node("labelled-only", owner=None))
    nodes.put(node("other-pools-uid", owner="uid-of-an-older-pool"))
    assert [v.name for v in consolidator(nodes, pods).views(POOL)] == ["owned"]
