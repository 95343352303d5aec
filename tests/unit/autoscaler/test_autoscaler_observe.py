"""What a scan sees, read from the caches: free room, unneeded nodes, pods, requests."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from nodepool_operator.api import autoscaler as nas
from nodepool_operator.api import nodepool as np
from nodepool_operator.controllers.autoscaler.fit import Resources
from nodepool_operator.controllers.autoscaler.handoff import RequestLedger, request_name
from nodepool_operator.controllers.autoscaler.observe import Observer
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.informer import object_key

GI = 1024**3


class FakeInformer:
    def __init__(self, *objects: Object, version: str = "10") -> None:
        self.store = {object_key(o): o for o in objects}
        self.indexes: dict[str, Callable[[Object], Iterable[str]]] = {}
        self.resource_version = version

    def add_index(self, name: str, func: Callable[[Object], Iterable[str]]) -> None:
        self.indexes[name] = func

    def get(self, name: str, namespace: str | None = None) -> Object | None:
        return self.store.get(f"{namespace}/{name}" if namespace else name)

    def by_index(self, index: str, value: str) -> list[Object]:
        return [o for o in self.store.values() if value in self.indexes[index](o)]


def node(name: str, *, ready: bool = True, cordoned: bool = False) -> Object:
    return {
        "metadata": {"name": name, "labels": {np.POOL_LABEL: "small"}},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
        },
    }


def pod(name: str, *, cpu: str = "1", namespace: str = "apps", **extra: Any) -> Object:
    node_name = extra.pop("node", None)
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]
    }
    status: dict[str, Any] = {"phase": "Pending"}
    if node_name:
        spec["nodeName"] = node_name
        status["phase"] = "Running"
    elif extra.pop("marked", True):
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]
    meta = {"name": name, "namespace": namespace, "uid": name, "resourceVersion": "1", **extra}
    return {"metadata": meta, "spec": spec, "status": status}


def pool(target: int = 2) -> Object:
    spec = np.NodePoolSpec(target_nodes=target, template=np.NodeTemplate(cpu="4", memory="16Gi"))
    body = np.manifest("small", spec)
    body["metadata"].update(uid="pool-uid", resourceVersion="7")
    return body


def observer(*, nodes: list[Object], pods: list[Object]) -> Observer:
    return Observer(
        pools=FakeInformer(pool()),  # type: ignore[arg-type]
        nodes=FakeInformer(*nodes),  # type: ignore[arg-type]
        pods=FakeInformer(*pods),  # type: ignore[arg-type]
        requests=FakeInformer(),  # type: ignore[arg-type]
        ledger=RequestLedger(),
    )


SPEC = nas.AutoscalerSpec(node_pool_name="small", namespaces=("apps",))


def test_free_room_counts_only_ready_schedulable_nodes_minus_their_pods() -> None:
    seen = observer(
        nodes=[node("n1"), node("n2", ready=False), node("n3", cordoned=True)],
        pods=[pod("a", node="n1", cpu="1500m"), pod("b", node="n1", cpu="500m")],
    ).observe(SPEC)
    assert seen is not None
    assert seen.pool.free == (Resources(cpu=2000, memory=14 * GI, pods=108),)
    # n3 is cordoned: a node (nothing in flight) but no room; n2 is still booting.
    assert (seen.pool.ready, seen.pool.cordoned, seen.pool.target) == (2, 1, 2)
    assert seen.pool.in_flight == 0
    assert seen.pool_uid == "pool-uid"


def test_nodes_with_only_daemonset_or_mirror_pods_are_unneeded() -> None:
    daemon = pod("d", node="n1", ownerReferences=[{"kind": "DaemonSet", "name": "ds"}])
    mirror = pod("m", node="n2", annotations={"kubernetes.io/config.mirror": "x"})
    busy = pod("b", node="n3")
    nodes = [node("n1"), node("n2"), node("n3"), node("n4")]
    seen = observer(nodes=nodes, pods=[daemon, mirror, busy]).observe(SPEC)
    assert seen is not None
    assert seen.unneeded == ("n1", "n2", "n4")


def test_pods_are_split_into_fitting_and_never_fitting_in_the_watched_namespaces() -> None:
    pods = [
        pod("fits"),
        pod("huge", cpu="8"),
        pod("broken", cpu="lots"),
        pod("not-yet-marked", marked=False),
        pod("elsewhere", namespace="other"),
    ]
    seen = observer(nodes=[], pods=pods).observe(SPEC)
    assert seen is not None
    assert [p["metadata"]["name"] for p in seen.fitting] == ["fits"]
    assert seen.requests == (Resources(cpu=1000, memory=GI),)
    reasons = {p["metadata"]["name"]: why for p, why in seen.unfit}
    assert "requests cpu 8000m" in reasons["huge"]
    assert "cannot be read" in reasons["broken"]
    assert (seen.pending, seen.unschedulable, seen.pending_fitting) == (4, 3, 2)
    everywhere = observer(nodes=[], pods=pods).observe(nas.AutoscalerSpec(node_pool_name="small"))
    assert everywhere is not None
    assert everywhere.pending == 5


def test_a_missing_pool_is_none() -> None:
    seen = observer(nodes=[], pods=[]).observe(nas.AutoscalerSpec(node_pool_name="nope"))
    assert seen is None


def test_the_ledger_shows_our_request_until_the_cache_does_or_moves_past_it() -> None:
    ledger = RequestLedger()
    created = {"metadata": {"name": "r1", "resourceVersion": "20"}}
    ledger.record("small", created)
    assert ledger.visible("small", [], cache_version="19") == [created]
    cached = [{"metadata": {"name": "r1", "resourceVersion": "20"}}]
    assert ledger.visible("small", cached, cache_version="20") == cached
    assert ledger.visible("small", [], cache_version="19") == []  # forgotten once seen
    ledger.record("small", created)
    assert ledger.visible("small", [], cache_version="25") == []  # answered and deleted


def test_request_names_are_valid_readable_and_distinct() -> None:
    assert request_name("nas", direction="up", millis=1_800_000_000_000) == "nas-mywpiww0-up"
    assert int("mywpiww0", 36) == 1_800_000_000_000  # base 36 of the creation time in ms
    assert request_name("nas", direction="up", millis=1) != request_name(
        "nas", direction="up", millis=2
    )
    long = "a" * 199 + "." + "b" * 50
    name = request_name(long, direction="down", millis=1)
    assert len(name) <= 253
    assert name == "a" * 199 + "-1-down"
    later_up = request_name("nas", direction="up", millis=1_800_000_000_001)
    earlier_down = request_name("nas", direction="down", millis=1_800_000_000_000)
    assert later_up > earlier_down  # the name breaks a same-second tie by time
