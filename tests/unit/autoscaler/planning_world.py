"""Builders of a plan maker over the shared fakes, and of the pods, Nodes, pools and
Autoscalers it reads: what the observe, volumes, zones and whole-cluster tests share.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler.decide.batch_plan import (
    Observation,
)
from nodepool_operator.controllers.autoscaler.plan_maker import PlanMaker
from nodepool_operator.controllers.autoscaler.snapshot.scale_requests import (
    RequestLedger,
)
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.testing import FakeWallClock, informer_of


def node(name: str, *, ready: bool = True, cordoned: bool = False, pool: str = "small") -> Object:
    return {
        "metadata": {
            "name": name,
            "labels": {wellknown.POOL_LABEL: pool},
            # Owned by the pool (``pool()``'s uid), as the NodePool controller makes them.
            "ownerReferences": [{"kind": "NodePool", "name": pool, "uid": f"{pool}-uid"}],
        },
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
        },
    }


def pod(name: str, *, cpu: str = "1", namespace: str = "apps", **extra: Any) -> Object:
    node_name = extra.pop("node", None)
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
        **extra.pop("spec", {}),
    }
    status: dict[str, Any] = {"phase": "Pending"}
    if node_name:
        spec["nodeName"] = node_name
        status["phase"] = "Running"
    elif extra.pop("marked", True):
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]
    meta = {
        "name": name,
        "namespace": namespace,
        "uid": name,
        "resourceVersion": "1",
        "creationTimestamp": "2026-11-29T10:00:00Z",
        **extra,
    }
    return {"metadata": meta, "spec": spec, "status": status}


def pool(name: str = "small", *, target: int = 2, weight: int = 0) -> Object:
    spec = nodepool_api.NodePoolSpec(
        target_nodes=target,
        weight=weight,
        template=nodepool_api.NodeTemplate(cpu="4", memory="16Gi"),
    )
    body = nodepool_api.manifest(name, spec)
    body["metadata"].update(uid=f"{name}-uid", resourceVersion="7")
    return body


def autoscaler(
    name: str, *, pool_name: str = "small", created: str = "2026-11-29T09:00:00Z", **spec: Any
) -> Object:
    body = autoscaler_api.manifest(
        name, autoscaler_api.AutoscalerSpec(node_pool_name=pool_name, **spec)
    )
    body["metadata"].update(uid=f"{name}-uid", creationTimestamp=created)
    return body


NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def observer(
    *,
    nodes: Iterable[Object] = (),
    pods: Iterable[Object] = (),
    pools: Iterable[Object] | None = None,
    autoscalers: Iterable[Object] | None = None,
    daemon_sets: Iterable[Object] = (),
    now: float = NOW,
) -> PlanMaker:
    return PlanMaker(
        autoscalers=informer_of(  # type: ignore[arg-type]
            *(autoscalers if autoscalers is not None else [autoscaler("nas", namespaces=["apps"])]),
            version="10",
        ),
        pools=informer_of(*(pools if pools is not None else [pool()]), version="10"),  # type: ignore[arg-type]
        nodes=informer_of(*nodes, version="10"),  # type: ignore[arg-type]
        pods=informer_of(*pods, version="10"),  # type: ignore[arg-type]
        requests=informer_of(version="10"),  # type: ignore[arg-type]
        daemon_sets=informer_of(*daemon_sets, version="10"),  # type: ignore[arg-type]
        ledger=RequestLedger(),
        wall_clock=FakeWallClock(now),
    )


SPEC = autoscaler_api.AutoscalerSpec(node_pool_name="small", namespaces=("apps",))


async def observe(
    o: PlanMaker, name: str = "nas", spec: autoscaler_api.AutoscalerSpec = SPEC
) -> Observation:
    seen = await o.observe(name, spec)
    assert isinstance(seen, Observation), seen
    return seen


def names(pods: Iterable[Object]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]
