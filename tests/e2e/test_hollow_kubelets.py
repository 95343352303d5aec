"""The operator on real kubelets: each simcloud VM boots a hollow kubelet (kubemark), the
real kubelet code over a fake container runtime, which registers its Node (or finds the
one the operator made), reports what it finds (1 CPU, 3840Mi, whatever the VM's shape),
renews its Lease, runs the pods bound to it and stops them when they are deleted.

Every other e2e test runs its Nodes through kwok, which only patches the status of Nodes
the operator made. These check what only a kubelet does: registration in either order,
readiness reported by the kubelet before any pod is bound, pods run and stopped by it. A
small set, so the tier stays a few minutes long in CI.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

import workloads
from e2e import hollow
from e2e.autoscaling import events, phases
from e2e.scenes import World
from harness import MERGE, POOLS, REQUESTS, settled, wait_for
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud.provider import VmState
from nodepool_operator.controllers.nodepool import nodes as node_ops

#: The template says what kubemark's fake cAdvisor reports on every VM, so the plan and
#: the kubelets agree (a template that overstates them is another test's).
ONE_CPU_NODE = hollow.ONE_CPU_NODE


def pool_manifest(name: str, *, target: int, min_nodes: int = 0) -> dict[str, Any]:
    spec = nodepool_api.NodePoolSpec(
        target_nodes=target, min_nodes=min_nodes, max_nodes=6, template=ONE_CPU_NODE
    )
    return nodepool_api.manifest(name, spec)


async def pool_nodes(core: client.CoreV1Api, pool: str) -> list[Any]:
    found = await core.list_node(label_selector=f"{wellknown.POOL_LABEL}={pool}")
    return list(found.items)


def ready_since(node: Any) -> float | None:
    for condition in node.status.conditions or ():
        if condition.type == "Ready" and condition.status == "True":
            return condition.last_transition_time.timestamp()
    return None


def assert_registered_by_its_kubelet(node: Any, pool_uid: str) -> None:
    """A Node a hollow kubelet reported on (kwok reports ``kwok``, and manages only Nodes
    annotated for it), with the kubelet's capacity, owned by the pool, registered."""
    name = node.metadata.name
    info = node.status.node_info
    assert info.kubelet_version.startswith("v1."), (name, info.kubelet_version)
    assert info.container_runtime_version.startswith("fakeRuntime"), name
    assert node_ops.KWOK_ANNOTATION not in (node.metadata.annotations or {}), name
    assert node.spec.provider_id == f"kubemark://{name}"
    assert node.status.capacity["memory"] == "3840Mi"
    assert [ref.uid for ref in node.metadata.owner_references or ()] == [pool_uid], name
    taints = [t.key for t in node.spec.taints or ()]
    assert wellknown.UNREGISTERED_TAINT_KEY not in taints, (name, taints)


async def test_pods_run_on_the_kubelets_the_plan_asked_for_and_leave_with_them(
    world: World,
) -> None:
    cloud = await hollow.hollow_cloud(world)
    # The default flags (--simulated-nodes with simcloud): the VMs say their kubelet is
    # their own, so kwok is never asked to play it.
    operator = world.start_operator(cloud)
    await world.custom.create_cluster_custom_object(
        *POOLS, pool_manifest(world.pool, target=1, min_nodes=1)
    )
    await wait_for(lambda: settled(world.custom, world.pool, 1), within=90)
    await world.create_autoscaler(unneeded_seconds=5)
    # 10 pods of 250m: four to a 1-CPU node, so three nodes.
    selector = {wellknown.POOL_LABEL: world.pool}
    deployment = workloads.deployment("web", selector=selector, replicas=10, cpu="250m")
    await world.apps.create_namespaced_deployment(world.namespace, deployment)

    async def all_running() -> bool:
        return (await phases(world.core, world.namespace)).get("Running", 0) == 10

    await wait_for(all_running, within=180)
    await wait_for(lambda: settled(world.custom, world.pool, 3), within=60)

    pool = await world.custom.get_cluster_custom_object(*POOLS, world.pool)
    nodes = {node.metadata.name: node for node in await pool_nodes(world.core, world.pool)}
    requests = await world.custom.list_cluster_custom_object(
        *REQUESTS, label_selector=wellknown.pool_selector(world.pool)
    )
    asked = [r["spec"]["targetNodes"] for r in requests["items"]]
    assert cloud.client is not None
    stats = await cloud.client.stats()
    assert len(nodes) == 3
    assert max(asked) == 3, asked  # the plan asked for these three, and got no more
    assert {n: c for n, c in stats.creations_by_name.items() if n.startswith(world.pool)} == {
        name: 1 for name in nodes
    }
    for node in nodes.values():
        assert_registered_by_its_kubelet(node, pool["metadata"]["uid"])
    pods = (await world.core.list_namespaced_pod(world.namespace)).items
    for pod in pods:
        assert pod.spec.node_name in nodes, pod.spec.node_name
        scheduled = next(c for c in pod.status.conditions if c.type == "PodScheduled")
        ready = ready_since(nodes[pod.spec.node_name])
        assert ready is not None
        # No pod was bound before its Node's kubelet reported Ready (whole seconds).
        assert scheduled.last_transition_time.timestamp() >= ready, pod.metadata.name
    assert sorted({pod.spec.node_name for pod in pods}) == sorted(nodes)

    await world.apps.patch_namespaced_deployment_scale(
        "web", world.namespace, {"spec": {"replicas": 0}}, _content_type=MERGE
    )

    async def no_pods() -> bool:
        return not (await world.core.list_namespaced_pod(world.namespace)).items

    await wait_for(no_pods, within=60)  # the kubelets stopped them: nobody else deletes
    await wait_for(lambda: settled(world.custom, world.pool, 1), within=120)
    left = await pool_nodes(world.core, world.pool)
    vms = [vm for vm in await cloud.client.list_vms(pool=world.pool) if vm.state is VmState.RUNNING]
    assert [vm.name for vm in vms] == [node.metadata.name for node in left]
    assert operator.errors_logged() == []


async def test_a_restarted_operator_adopts_the_nodes_kubelets_registered_without_it(
    world: World,
) -> None:
    # VMs that boot for 12 s: the first operator is stopped while they boot, and its stop
    # may wait for a cloud long poll in flight (the interruption stream's, up to 5 s).
    cloud = await world.start_hollow_simcloud("--create-latency", "12", "--latency-jitter", "0.5")
    first = world.start_operator(cloud)
    await world.custom.create_cluster_custom_object(*POOLS, pool_manifest(world.pool, target=3))

    async def launched() -> list[str]:
        assert cloud.client is not None
        vms = await cloud.client.list_vms(pool=world.pool)
        return [vm.name for vm in vms] if len(vms) == 3 else []

    names = await wait_for(launched, within=60)
    first.stop()  # while the three boot
    assert await pool_nodes(world.core, world.pool) == []  # so no Node is the operator's

    async def registered_by_kubelets() -> list[Any]:
        found = await pool_nodes(world.core, world.pool)
        return found if len(found) == 3 and all(ready_since(n) for n in found) else []

    strangers = await wait_for(registered_by_kubelets, within=90)
    assert all(not n.metadata.owner_references for n in strangers)
    uids = {n.metadata.name: n.metadata.uid for n in strangers}

    second = world.start_operator(cloud)
    await wait_for(lambda: settled(world.custom, world.pool, 3), within=90)

    pool = await world.custom.get_cluster_custom_object(*POOLS, world.pool)
    adopted = await pool_nodes(world.core, world.pool)
    for node in adopted:
        assert_registered_by_its_kubelet(node, pool["metadata"]["uid"])
    # The same three Nodes (none deleted and made again) on the same three VMs.
    assert {n.metadata.name: n.metadata.uid for n in adopted} == uids
    assert cloud.client is not None
    stats = await cloud.client.stats()
    assert stats.deletions_started == 0
    assert {n: c for n, c in stats.creations_by_name.items() if n in names} == {
        name: 1 for name in names
    }
    assert "event=node-adopted" in second.output()
    assert second.errors_logged() == []
    # Never taken for someone else's: no "not owned" warning about them either.
    assert await events(world.core, "default", name=world.pool, reason="NodeNotOwned") == []
