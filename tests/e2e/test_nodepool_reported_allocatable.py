"""Kubelets that report less than the template, on the real control plane.

Every Node of the pool has its allocatable memory lowered below the template's the moment
its kubelet (kwok) reports it Ready, as a real kubelet with kube-reserved and an eviction
threshold would report it. A pod that fits the template but no such Node must not make
the pool grow node after node: at most one node above what the pods need, the pool's
condition and one event naming the template field, and the same after a restart.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio import client

from e2e.autoscaling import (
    History,
    events,
    running,
)
from e2e.scenes import World
from harness import POOLS, Sampler, wait_for
from nodepool_operator.api import wellknown
from workloads import deployment

GI = 2**30
#: What the "kubelets" report: 12Gi where the template (cpu 4, memory 16Gi) says 16Gi.
REPORTED_MEMORY = str(12 * GI)


class Kubelets(Sampler):
    """Lowers the allocatable memory of each Node of the pool once, when it turns Ready,
    and counts the writes: a second write for one Node would mean something put the
    template's figure back."""

    def __init__(self, core: client.CoreV1Api, pool: str) -> None:
        self.core = core
        self.pool = pool
        self.writes: dict[str, int] = {}

    async def _run(self) -> None:
        selector = wellknown.pool_selector(self.pool)
        while True:
            for node in (await self.core.list_node(label_selector=selector)).items:
                ready = any(
                    c.type == "Ready" and c.status == "True" for c in node.status.conditions or ()
                )
                allocatable = node.status.allocatable or {}
                if ready and allocatable.get("memory") != REPORTED_MEMORY:
                    await self.core.patch_node_status(
                        node.metadata.name,
                        {"status": {"allocatable": {"memory": REPORTED_MEMORY}}},
                    )
                    name = node.metadata.name
                    self.writes[name] = self.writes.get(name, 0) + 1
            await asyncio.sleep(0.05)


async def pool_events(core: client.CoreV1Api, pool: str) -> list[client.CoreV1Event]:
    found = await core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={pool},reason=KubeletsReportLess"
    )
    return list(found.items)


async def test_a_pool_whose_kubelets_report_less_stops_one_node_above_need_across_a_restart(
    world: World,
) -> None:
    cloud, operator = await world.operated(latency=1)
    kubelets = Kubelets(world.core, world.pool)
    kubelets.start()
    await world.create_pool(max_nodes=6)
    history = History(world.custom, world.pool)
    history.start()
    try:
        await world.create_autoscaler()
        # Two pods of 4Gi share one 12Gi node; a 14Gi pod fits the template, no real node.
        on_pool = {wellknown.POOL_LABEL: world.pool}
        small = deployment("small", selector=on_pool, replicas=2, cpu="500m", memory="4Gi")
        big = deployment("big", selector=on_pool, replicas=1, cpu="500m", memory="14Gi")
        await world.apps.create_namespaced_deployment(world.namespace, small)
        await world.apps.create_namespaced_deployment(world.namespace, big)
        await wait_for(lambda: running(world.core, world.namespace, 2), within=90)

        async def told() -> client.CoreV1Event | None:
            pods = (
                await world.core.list_namespaced_pod(world.namespace, label_selector="app=big")
            ).items
            for pod in pods:
                found = await events(
                    world.core, world.namespace, name=pod.metadata.name, reason="NotTriggerScaleUp"
                )
                if found and "memory" in found[-1].message:
                    return found[-1]
            return None

        warning = await wait_for(told, within=60)
        assert f"requests {14 * GI} of memory, a node offers {12 * GI}" in warning.message

        async def overstated() -> dict[str, Any] | None:
            pool = await world.custom.get_cluster_custom_object(*POOLS, world.pool)
            status = pool.get("status") or {}
            shown = [
                c
                for c in status.get("conditions") or ()
                if c["type"] == "AllocatableOverstated" and c["status"] == "True"
            ]
            return status if shown else None

        status = await wait_for(overstated, within=30)
        [shown] = [c for c in status["conditions"] if c["type"] == "AllocatableOverstated"]
        field = "spec.template.memory: template 16Gi, kubelets report 12Gi"
        assert shown["reason"] == "KubeletsReportLess"
        assert field in shown["message"]
        assert status["reportedAllocatable"]["lowest"] == {"memory": REPORTED_MEMORY}
        [event] = await wait_for(lambda: pool_events(world.core, world.pool), within=30)
        assert event.type == "Warning"
        assert field in event.message

        # A few scans more: the pool does not grow for the 14Gi pod.
        await asyncio.sleep(5)
        need = 1  # the two small pods
        assert max(history.values) <= need + 1, history.values

        operator.stop()
        operator = world.start_operator(cloud)
        await asyncio.sleep(8)  # the restarted operator scans and reconciles several times
        assert max(history.values) <= need + 1, history.values
        assert await running(world.core, world.namespace, 2)
        [again] = await pool_events(world.core, world.pool)  # the record was there: no new event
        assert again.count == 1
        pool = await world.custom.get_cluster_custom_object(*POOLS, world.pool)
        assert pool["status"]["reportedAllocatable"] == status["reportedAllocatable"]
        # kwok left every lowered figure as the "kubelet" wrote it: one write per Node.
        assert kubelets.writes, "no Node turned Ready"
        assert set(kubelets.writes.values()) == {1}, kubelets.writes
        assert operator.errors_logged() == []
    finally:
        await history.stop()
        await kubelets.stop()
