"""PoolReads keeps what it read of a node's pods until the node's pods change."""

from __future__ import annotations

from typing import Any

from nodepool_operator.controllers.autoscaler.snapshot.pod_profiles import ProfileCache
from nodepool_operator.controllers.autoscaler.snapshot.pool_reads import PoolReads
from nodepool_operator.controllers.autoscaler.snapshot.scale_requests import RequestLedger
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime.client import Object
from unit.autoscaler.pod_caches import StampedPods


def _pod(name: str, node: str, *, cpu: str = "1", version: str = "1") -> Object:
    return {
        "metadata": {"name": name, "namespace": "apps", "uid": name, "resourceVersion": version},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
        },
        "status": {"phase": "Running"},
    }


def _reads(pods: StampedPods) -> PoolReads:
    unused: Any = None
    return PoolReads(
        nodes=unused,
        pods=pods,  # type: ignore[arg-type]
        requests=unused,
        ledger=RequestLedger(),
        cache=ProfileCache(),
        wall_clock=clock_module.RealWallClock(),
    )


def test_a_nodes_pods_are_read_again_only_when_they_changed() -> None:
    pods = StampedPods()
    pods.put(_pod("a", "n1"))
    pods.put(_pod("b", "n2"))
    reads = _reads(pods)

    reads.begin_plan()
    first = reads.bound("n1")
    assert [p.requests["cpu"] for p in first.running] == [1000]
    reads.bound("n2")
    assert pods.reads == 2

    reads.begin_plan()
    assert reads.bound("n1") is first, "nothing on n1 changed"
    pods.put(_pod("a", "n1", cpu="3", version="2"))
    changed = reads.bound("n1")
    assert [p.requests["cpu"] for p in changed.running] == [3000]
    assert pods.reads == 3


def test_a_node_no_plan_read_for_two_plans_is_forgotten() -> None:
    pods = StampedPods()
    pods.put(_pod("a", "n1"))
    reads = _reads(pods)
    reads.begin_plan()
    reads.bound("n1")
    reads.begin_plan()  # n1 not read in this plan (its node was away)
    reads.begin_plan()
    reads.bound("n1")
    assert pods.reads == 2
