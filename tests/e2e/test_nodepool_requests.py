"""NodePool controller end to end: ScaleRequests (limits, basis, missing pool), scale-down
with drain, bad input, quota."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from e2e.scenes import World
from harness import MERGE, POOLS, REQUESTS, Operator, SimCloud, pool_body, settled, wait_for
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.api import wellknown


async def status_of(custom: client.CustomObjectsApi, group: tuple[str, ...], name: str) -> Any:
    obj = await custom.get_cluster_custom_object(*group, name)
    return obj.get("status", {})


async def create_request(
    custom: client.CustomObjectsApi,
    pool: dict[str, Any],
    target: int,
    *,
    based_on: int | None = None,
) -> str:
    name = f"req-{uuid.uuid4().hex[:6]}"
    spec = scalerequest_api.ScaleRequestSpec(
        node_pool_name=pool["metadata"]["name"],
        target_nodes=target,
        based_on_target_nodes=based_on,
        reason="test",
        requester="e2e",
    )
    body = scalerequest_api.manifest(name, spec, pool_uid=pool["metadata"]["uid"])
    await custom.create_cluster_custom_object(*REQUESTS, body)
    return name


async def test_scale_requests_are_applied_rejected_and_superseded(world: World) -> None:
    _, operator = await world.operated(latency=0.5)
    pool = await world.custom.create_cluster_custom_object(
        *POOLS, pool_body(world.pool, max_nodes=4)
    )

    applied = await create_request(world.custom, pool, 3)
    status = await wait_for(lambda: _phase_set(world.custom, applied), within=30)
    assert (status["phase"], status["appliedTargetNodes"]) == ("Applied", 3)
    await wait_for(lambda: settled(world.custom, world.pool, 3), within=60)

    too_many = await create_request(world.custom, pool, 9)
    status = await wait_for(lambda: _phase_set(world.custom, too_many), within=30)
    assert (status["phase"], status["appliedTargetNodes"]) == ("Applied", 4)
    assert "clamped to maxNodes" in status["message"]
    await wait_for(lambda: settled(world.custom, world.pool, 4), within=60)

    rejected = await create_request(world.custom, pool, 7)
    status = await wait_for(lambda: _phase_set(world.custom, rejected), within=30)
    assert status["phase"] == "Rejected"
    assert "maxNodes=4" in status["message"]
    assert operator.errors_logged() == []


async def _phase_set(custom: client.CustomObjectsApi, name: str) -> Any:
    status = await status_of(custom, REQUESTS, name)
    return status if status.get("phase", "Pending") != "Pending" else None


async def test_a_request_based_on_a_target_the_user_changed_since_is_superseded(
    world: World,
) -> None:
    _, operator = await world.operated(latency=0.5)
    pool = await world.custom.create_cluster_custom_object(
        *POOLS, pool_body(world.pool, max_nodes=4)
    )
    # The user scales to 2 after the requester read targetNodes=0.
    await world.custom.patch_cluster_custom_object(
        *POOLS, world.pool, {"spec": {"targetNodes": 2}}, _content_type=MERGE
    )

    stale = await create_request(world.custom, pool, 1, based_on=0)
    status = await wait_for(lambda: _phase_set(world.custom, stale), within=30)
    assert status["phase"] == "Superseded"
    assert "targetNodes=0" in status["message"]
    assert "now 2" in status["message"]
    assert "appliedTargetNodes" not in status
    assert (await world.custom.get_cluster_custom_object(*POOLS, world.pool))["spec"][
        "targetNodes"
    ] == 2

    current = await create_request(world.custom, pool, 3, based_on=2)
    status = await wait_for(lambda: _phase_set(world.custom, current), within=30)
    assert (status["phase"], status["appliedTargetNodes"]) == ("Applied", 3)
    await wait_for(lambda: settled(world.custom, world.pool, 3), within=60)
    assert operator.errors_logged() == []


async def test_a_request_for_a_pool_that_does_not_exist_is_rejected(world: World) -> None:
    cloud: SimCloud = await world.start_simcloud()
    operator: Operator = world.start_operator(cloud)
    missing = f"missing-{uuid.uuid4().hex[:6]}"
    name = f"req-{uuid.uuid4().hex[:6]}"
    # Made by hand: no owner, so no garbage collector would ever remove it.
    body = scalerequest_api.manifest(
        name, scalerequest_api.ScaleRequestSpec(node_pool_name=missing, target_nodes=2)
    )
    await world.custom.create_cluster_custom_object(*REQUESTS, body)
    try:
        status = await wait_for(lambda: _phase_set(world.custom, name), within=30)
        assert status["phase"] == "Rejected"
        assert status["message"] == f"NodePool {missing!r} does not exist"
        assert operator.errors_logged() == []
    finally:
        with contextlib.suppress(ApiException):
            await world.custom.delete_cluster_custom_object(*REQUESTS, name)


async def test_scale_down_cordons_drains_and_removes_the_emptiest_nodes(world: World) -> None:
    cloud: SimCloud = await world.start_simcloud(
        "--create-latency", "0.5", "--latency-jitter", "0", "--delete-latency", "0.5"
    )
    operator: Operator = world.start_operator(cloud)
    await world.custom.create_cluster_custom_object(*POOLS, pool_body(world.pool, target=3))
    await wait_for(lambda: settled(world.custom, world.pool, 3), within=60)
    busy = f"{world.pool}-0"
    pod = {
        "metadata": {"name": "busy"},
        "spec": {
            "nodeName": busy,
            "containers": [{"name": "app", "image": "example.invalid/app"}],
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}],
        },
    }
    await world.core.create_namespaced_pod(world.namespace, pod)

    await world.custom.patch_cluster_custom_object(
        *POOLS, world.pool, {"spec": {"targetNodes": 1}}, _content_type=MERGE
    )
    await wait_for(lambda: settled(world.custom, world.pool, 1), within=60)
    nodes = await world.core.list_node(label_selector=f"{wellknown.POOL_LABEL}={world.pool}")
    assert [n.metadata.name for n in nodes.items] == [busy]  # the node with a pod stayed
    assert not nodes.items[0].spec.unschedulable
    assert cloud.client is not None
    assert [
        vm.name for vm in await cloud.client.list_vms(pool=world.pool) if vm.state == "Running"
    ] == [busy]

    # Now the busy node must go too: its pod is evicted, then the node and VM are removed.
    await world.custom.patch_cluster_custom_object(
        *POOLS, world.pool, {"spec": {"targetNodes": 0}}, _content_type=MERGE
    )
    await wait_for(lambda: settled(world.custom, world.pool, 0), within=60)

    async def pod_gone() -> bool:
        try:
            await world.core.read_namespaced_pod("busy", world.namespace)
        except ApiException as error:
            return error.status == 404
        return False

    await wait_for(pod_gone, within=30)
    assert operator.errors_logged() == []


def bad_pool(spec: dict[str, Any]) -> dict[str, Any]:
    """A NodePool of a fresh name whose ``spec`` is sent as given, for the API server to
    judge."""
    return {
        "apiVersion": "nodepool.dev/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": f"bad-{uuid.uuid4().hex[:6]}"},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"targetNodes": -1}, "targetNodes"),
        ({"minNodes": 5, "maxNodes": 2}, "minNodes must be less than or equal to maxNodes"),
        ({"targetNodes": 11, "maxNodes": 10}, "targetNodes"),
        ({"weight": 101}, "weight"),
        ({"template": {"zones": ["a", "a"]}}, "Duplicate value"),
        ({"template": {"cpu": "1", "reserved": {"cpu": "2"}}}, "reserved.cpu must be less than"),
        ({"template": {"reserved": {"disk": "1"}}}, "reserved may name only"),
        (
            {
                "template": {
                    "extendedResources": {"example.com/gpu": "2"},
                    "reserved": {"example.com/gpu": "3"},
                }
            },
            "no larger than in extendedResources",
        ),
        ({"template": {"extendedResources": {"gpu": "1"}}}, "qualified names"),
        ({"template": {"extendedResources": {"example.com/gpu": "0.5"}}}, "whole numbers"),
    ],
)
async def test_invalid_specs_are_refused_with_422(
    api_client: client.ApiClient, crds_installed: None, spec: dict[str, Any], fragment: str
) -> None:
    custom = client.CustomObjectsApi(api_client)
    with pytest.raises(ApiException) as raised:
        await custom.create_cluster_custom_object(*POOLS, bad_pool(spec))
    assert raised.value.status == 422
    assert fragment in raised.value.body


async def test_unknown_fields_are_refused_under_strict_field_validation(
    api_client: client.ApiClient, crds_installed: None
) -> None:
    custom = client.CustomObjectsApi(api_client)
    body = bad_pool({"targetNodes": 1, "targetNodez": 3})
    with pytest.raises(ApiException) as raised:
        await custom.create_cluster_custom_object(*POOLS, body, field_validation="Strict")
    # The API server reports unknown fields as a strict-decoding error: 400, not 422.
    assert raised.value.status == 400
    assert "strict decoding error" in raised.value.body
    assert "spec.targetNodez" in raised.value.body


async def test_quota_error_sets_degraded_with_an_event_and_bounded_cloud_calls(
    world: World,
) -> None:
    cloud: SimCloud = await world.start_simcloud(
        "--create-latency", "0.5", "--latency-jitter", "0", "--quota", "2"
    )
    operator: Operator = world.start_operator(cloud)
    await world.custom.create_cluster_custom_object(*POOLS, pool_body(world.pool, target=5))

    async def degraded() -> Any:
        status = await status_of(world.custom, POOLS, world.pool)
        found = [c for c in status.get("conditions", []) if c["type"] == "Degraded"]
        return found[0] if found and found[0]["status"] == "True" else None

    condition = await wait_for(degraded, within=30)
    assert condition["reason"] == "QuotaExceeded"
    assert cloud.client is not None
    before = await cloud.client.stats()
    await asyncio.sleep(20)
    after = await cloud.client.stats()
    refused = after.responses_by_call.get("PUT /v1/vms/{name}", {}).get(403, 0) - (
        before.responses_by_call.get("PUT /v1/vms/{name}", {}).get(403, 0)
    )
    # The pause (10 s, then 20 s) allows at most one more round of the 3 missing creates
    # in 20 s; the rest are lists while the 2 accepted VMs boot and register. Polling
    # every 0.5 s without a pause would make 40 lists and 120 refused creates.
    assert refused <= 3, refused
    assert after.calls_total - before.calls_total <= 15, after.calls
    events = await world.core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={world.pool},reason=CloudError"
    )
    assert len(events.items) == 1
    assert events.items[0].type == "Warning"
    assert "quota" in events.items[0].message.lower()
    assert operator.errors_logged() == []


async def test_finished_requests_are_deleted_once_their_retention_has_passed(world: World) -> None:
    cloud = await world.cloud(latency=0.2)
    # Retention counts from the request's creation, and the operator may take seconds to
    # start on a loaded machine: 10 s leaves the Applied phase long enough to be seen.
    operator: Operator = world.start_operator(cloud, "--scale-request-retention", "10")
    pool = await world.custom.create_cluster_custom_object(
        *POOLS, pool_body(world.pool, max_nodes=4)
    )
    applied = await create_request(world.custom, pool, 1)
    status = await wait_for(lambda: _phase_set(world.custom, applied), within=30)
    assert status["phase"] == "Applied"

    async def gone() -> bool:
        try:
            await world.custom.get_cluster_custom_object(*REQUESTS, applied)
        except ApiException as error:
            if error.status == 404:
                return True
            raise
        return False

    # Retention counts from the request's creation; nothing else deletes requests here.
    await wait_for(gone, within=30)
    await wait_for(lambda: settled(world.custom, world.pool, 1), within=60)
    assert operator.errors_logged() == []
