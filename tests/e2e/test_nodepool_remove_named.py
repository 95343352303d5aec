"""A ScaleRequest's ``removeNodes`` end to end, on the NodePool controller's side alone (no
Autoscaler exists: the test makes the requests as one would, and taints the Nodes as it
would): exactly the named Node is drained and removed while another tainted Node is
there, and a labelled Node the pool does not own may not be named."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from e2e import scenes
from e2e.scenes import World
from harness import POOLS, settled, wait_for
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud.provider import VmState
from nodepool_operator.controllers.nodepool import plan

REQUESTS = (scalerequest_api.GROUP, scalerequest_api.VERSION, scalerequest_api.PLURAL)
CONSOLIDATING = {"key": wellknown.CONSOLIDATING_TAINT_KEY, "effect": "NoSchedule"}


async def taint(core: client.CoreV1Api, name: str) -> None:
    """Taint the Node for consolidation, as the Autoscaler does (its whole taint list)."""
    node = await core.read_node(name)
    taints = [t.to_dict() for t in node.spec.taints or ()]
    taints = [{k: v for k, v in t.items() if v is not None} for t in taints]
    await core.patch_node(name, {"spec": {"taints": [*taints, CONSOLIDATING]}})


async def request_removal(
    custom: client.CustomObjectsApi, pool: dict[str, Any], *nodes: str
) -> str:
    """A scale-down request as the Autoscaler makes it: the target lowered by the Nodes
    named, computed from the pool's current target."""
    name = f"req-{uuid.uuid4().hex[:6]}"
    target = int(pool["spec"]["targetNodes"])
    spec = scalerequest_api.ScaleRequestSpec(
        node_pool_name=pool["metadata"]["name"],
        target_nodes=target - len(nodes),
        based_on_target_nodes=target,
        reason="consolidation (e2e)",
        requester="autoscaler/e2e",
        remove_nodes=nodes,
    )
    body = scalerequest_api.manifest(name, spec, pool_uid=pool["metadata"]["uid"])
    await custom.create_cluster_custom_object(*REQUESTS, body)
    return name


async def answered(custom: client.CustomObjectsApi, name: str) -> dict[str, Any] | None:
    obj = await custom.get_cluster_custom_object(*REQUESTS, name)
    status: dict[str, Any] = obj.get("status") or {}
    return status if status.get("phase", "Pending") != "Pending" else None


def pod(name: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": "example.invalid/app"}],
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}],
        },
    }


async def node_names(core: client.CoreV1Api, pool: str) -> set[str]:
    found = await core.list_node(label_selector=f"{wellknown.POOL_LABEL}={pool}")
    return {n.metadata.name for n in found.items}


async def test_a_request_removes_exactly_the_named_node_while_another_is_tainted(
    world: World,
) -> None:
    cloud, operator, custom = await scenes.settled_pool(world, target=3)
    named, other, untouched = f"{world.pool}-2", f"{world.pool}-1", f"{world.pool}-0"
    # Both carry the taint; `other` is first by name, `untouched` the emptiest.
    await taint(world.core, other)
    await taint(world.core, named)
    await world.core.create_namespaced_pod(world.namespace, pod("on-named", named))
    await world.core.create_namespaced_pod(world.namespace, pod("on-other", other))
    pool = await custom.get_cluster_custom_object(*POOLS, world.pool)

    request = await request_removal(custom, pool, named)

    status = await wait_for(lambda: answered(custom, request), within=30)
    assert (status["phase"], status["appliedTargetNodes"]) == ("Applied", 2), status
    await wait_for(lambda: settled(custom, world.pool, 2), within=60)
    assert await node_names(world.core, world.pool) == {untouched, other}
    assert cloud.client is not None
    vms = await cloud.client.list_vms(pool=world.pool)
    assert {vm.name for vm in vms if vm.state != VmState.DELETING} == {untouched, other}
    for kept in (untouched, other):
        node = await world.core.read_node(kept)
        assert not node.spec.unschedulable
        assert plan.SCALE_DOWN_ANNOTATION not in (node.metadata.annotations or {})
    # The other tainted Node keeps its pod. (Its taint is the Autoscaler's: with no
    # Autoscaler for the pool, the planner takes it off; the named one's stays until it
    # goes, its removal under way.)
    assert (
        await world.core.read_namespaced_pod("on-other", world.namespace)
    ).metadata.deletion_timestamp is None
    with contextlib.suppress(ApiException):
        found = await world.core.read_namespaced_pod("on-named", world.namespace)
        assert found.metadata.deletion_timestamp is not None  # evicted with its Node
    assert operator.errors_logged() == []


async def test_a_request_naming_a_labelled_node_the_pool_does_not_own_is_rejected(
    world: World,
) -> None:
    _, operator, custom = await scenes.settled_pool(world, target=2)
    stranger = f"{world.pool}-stranger"
    # Someone else's Node, labelled with the pool (and tainted, as an Autoscaler reading
    # the label alone would have): the pool does not own it.
    await world.core.create_node(
        {
            "metadata": {"name": stranger, "labels": {wellknown.POOL_LABEL: world.pool}},
            "spec": {"taints": [CONSOLIDATING]},
        }
    )
    try:
        pool = await custom.get_cluster_custom_object(*POOLS, world.pool)
        request = await request_removal(custom, pool, stranger)

        status = await wait_for(lambda: answered(custom, request), within=30)
        assert status["phase"] == "Rejected", status
        assert status["message"] == (
            f"node {stranger} named in removeNodes is not owned by NodePool {world.pool}; "
            "not applied"
        )
        after = await custom.get_cluster_custom_object(*POOLS, world.pool)
        assert after["spec"]["targetNodes"] == 2
        await wait_for(lambda: settled(custom, world.pool, 2), within=30)
        for name in await node_names(world.core, world.pool):
            node = await world.core.read_node(name)
            assert not node.spec.unschedulable, name
        events = await world.core.list_event_for_all_namespaces(
            field_selector=f"involvedObject.name={request},reason=ScaleRequestRejected"
        )
        assert any(stranger in e.message for e in events.items)
        assert operator.errors_logged() == []
    finally:
        with contextlib.suppress(ApiException):
            await world.core.delete_node(stranger)
