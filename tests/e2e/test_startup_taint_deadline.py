"""A startup taint its agent never removes (a CNI or a device plugin failing on one node):
past ``registrationTimeoutSeconds`` the node is unhealthy to both controllers. The NodePool
controller replaces it, with an event naming the taint; the Autoscaler no longer counts on
its room; the pod meant for it runs on the replacement, where the agent did its work."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from e2e.autoscaling import pod, running
from e2e.scenes import World
from harness import POOLS, lift_taint, wait_for
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown

AGENT = nodepool_api.Taint(key="example.com/cni-not-ready", effect="NoSchedule")
DEADLINE = 20  # registrationTimeoutSeconds


async def test_a_startup_taint_never_lifted_replaces_the_node_and_its_pod_runs_elsewhere(
    world: World,
) -> None:
    _, operator = await world.operated(latency=1)
    spec = nodepool_api.NodePoolSpec(
        target_nodes=0,
        max_nodes=4,
        registration_timeout_seconds=DEADLINE,
        template=nodepool_api.NodeTemplate(cpu="4", memory="16Gi", startup_taints=(AGENT,)),
    )
    await world.custom.create_cluster_custom_object(*POOLS, nodepool_api.manifest(world.pool, spec))
    await world.create_autoscaler(scale_down=False)
    broken: list[str] = []  # the uid of the first node: its agent never finishes

    async def agents() -> None:
        """Each node's agent lifts the taint once the node is up, but the first's fails."""
        while True:
            found = await world.core.list_node(label_selector=wellknown.pool_selector(world.pool))
            for node in found.items:
                taints = node.spec.taints or []
                if not any(t.key == AGENT.key for t in taints) or not node.status.allocatable:
                    continue
                if not broken:
                    broken.append(node.metadata.uid)
                if node.metadata.uid != broken[0]:
                    await lift_taint(world.core, node, AGENT.key)
            await asyncio.sleep(0.5)

    task = asyncio.create_task(agents())
    try:
        selector = {wellknown.POOL_LABEL: world.pool}
        await world.core.create_namespaced_pod(
            world.namespace, pod("web", {"nodeSelector": selector})
        )
        await wait_for(lambda: running(world.core, world.namespace, 1), within=DEADLINE + 90)
        [web] = (await world.core.list_namespaced_pod(world.namespace)).items
        nodes = await world.core.list_node(label_selector=wellknown.pool_selector(world.pool))
        uids = {n.metadata.name: n.metadata.uid for n in nodes.items}
        assert broken
        assert broken[0] not in uids.values()  # the stuck node was replaced
        assert uids[web.spec.node_name] != broken[0]

        async def repair_told() -> list[Any]:
            found = await world.core.list_event_for_all_namespaces(
                field_selector="reason=NodeRepair"
            )
            return [e for e in found.items if AGENT.key in (e.message or "")]

        [told, *_] = await wait_for(repair_told, within=30)
        assert "startup taint" in told.message
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert operator.errors_logged() == []
