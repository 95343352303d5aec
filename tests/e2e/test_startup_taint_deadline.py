"""A startup taint its agent never removes (a CNI or a device plugin failing on one node):
past ``registrationTimeoutSeconds`` the node is unhealthy to both controllers. The NodePool
controller replaces it, with an event naming the taint; the Autoscaler no longer counts on
its room; the pod meant for it runs on the replacement, where the agent did its work."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from kubernetes_asyncio import client

from e2e.autoscaling import make_autoscaler, pod, running
from harness import POOLS, Operator, SimCloud, lift_taint, wait_for
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown

AGENT = nodepool_api.Taint(key="example.com/cni-not-ready", effect="NoSchedule")
DEADLINE = 20  # registrationTimeoutSeconds


async def test_a_startup_taint_never_lifted_replaces_the_node_and_its_pod_runs_elsewhere(
    api_client: client.ApiClient,
    start_simcloud: Any,
    start_operator: Any,
    pool_name: str,
    autoscaler_name: str,
    namespace: str,
) -> None:
    cloud: SimCloud = await start_simcloud("--create-latency", "1", "--latency-jitter", "0")
    operator: Operator = start_operator(cloud)
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    spec = nodepool_api.NodePoolSpec(
        target_nodes=0,
        max_nodes=4,
        registration_timeout_seconds=DEADLINE,
        template=nodepool_api.NodeTemplate(cpu="4", memory="16Gi", startup_taints=(AGENT,)),
    )
    await custom.create_cluster_custom_object(*POOLS, nodepool_api.manifest(pool_name, spec))
    await make_autoscaler(custom, autoscaler_name, pool=pool_name, namespace=namespace)
    broken: list[str] = []  # the uid of the first node: its agent never finishes

    async def agents() -> None:
        """Each node's agent lifts the taint once the node is up, but the first's fails."""
        while True:
            found = await core.list_node(label_selector=wellknown.pool_selector(pool_name))
            for node in found.items:
                taints = node.spec.taints or []
                if not any(t.key == AGENT.key for t in taints) or not node.status.allocatable:
                    continue
                if not broken:
                    broken.append(node.metadata.uid)
                if node.metadata.uid != broken[0]:
                    await lift_taint(core, node, AGENT.key)
            await asyncio.sleep(0.5)

    task = asyncio.create_task(agents())
    try:
        selector = {wellknown.POOL_LABEL: pool_name}
        await core.create_namespaced_pod(namespace, pod("web", {"nodeSelector": selector}))
        await wait_for(lambda: running(core, namespace, 1), within=DEADLINE + 90)
        [web] = (await core.list_namespaced_pod(namespace)).items
        nodes = await core.list_node(label_selector=wellknown.pool_selector(pool_name))
        uids = {n.metadata.name: n.metadata.uid for n in nodes.items}
        assert broken
        assert broken[0] not in uids.values()  # the stuck node was replaced
        assert uids[web.spec.node_name] != broken[0]

        async def repair_told() -> list[Any]:
            found = await core.list_event_for_all_namespaces(field_selector="reason=NodeRepair")
            return [e for e in found.items if AGENT.key in (e.message or "")]

        [told, *_] = await wait_for(repair_told, within=30)
        assert "startup taint" in told.message
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert operator.errors_logged() == []
