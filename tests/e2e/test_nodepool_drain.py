"""Drains end to end: pods leave before their VM does, a PodDisruptionBudget holds a drain
(visibly, with few writes) until it allows the eviction, and a deleted pool drains first.

kwok removes a pod being deleted at once (there is no kubelet to run its shutdown), so a
slow shutdown is modelled with a finalizer on the pod that the test removes itself, some
seconds after the eviction: the pod is there, terminating, until then.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from e2e import scenes
from e2e.node_faults import guarded_pod
from e2e.scenes import World
from harness import MERGE, POOLS, SimCloud, settled, wait_for
from nodepool_devtools.cluster import audit
from nodepool_operator.cloud.provider import VmName

OPERATOR_USER = "nodepool-operator"
SLOW_SHUTDOWN = "e2e.nodepool.dev/slow-shutdown"
SHUTDOWN_SECONDS = 8.0


@pytest.fixture
async def core(api_client: client.ApiClient, namespace: str) -> AsyncIterator[client.CoreV1Api]:
    """The core API; at the end, the test's pods lose their finalizer so nothing stays."""
    api = client.CoreV1Api(api_client)
    yield api
    for pod in (await api.list_namespaced_pod(namespace)).items:
        with contextlib.suppress(ApiException):
            await api.patch_namespaced_pod(
                pod.metadata.name,
                namespace,
                {"metadata": {"finalizers": None}},
                _content_type=MERGE,
            )


def slow_pod(name: str, node: str, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod on ``node`` with a 20 s grace period whose shutdown the test ends."""
    return {
        "metadata": {"name": name, "labels": labels or {}, "finalizers": [SLOW_SHUTDOWN]},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 20,
            "containers": [{"name": "app", "image": "example.invalid/app"}],
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}],
        },
    }


async def read_pod(core: client.CoreV1Api, namespace: str, name: str) -> Any:
    try:
        return await core.read_namespaced_pod(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


async def end_shutdown(core: client.CoreV1Api, namespace: str, name: str) -> None:
    await core.patch_namespaced_pod(
        name, namespace, {"metadata": {"finalizers": None}}, _content_type=MERGE
    )


class Timeline:
    """When, seen by polling every 0.1 s, the pod started and finished leaving, and when
    its VM stopped running."""

    def __init__(self, core: client.CoreV1Api, cloud: SimCloud, namespace: str) -> None:
        self.core = core
        self.cloud = cloud
        self.namespace = namespace
        self.pod_leaving: float | None = None
        self.pod_gone: float | None = None
        self.vm_deleting: float | None = None

    async def follow(self, pod: str, vm: str) -> None:
        assert self.cloud.client is not None
        while self.vm_deleting is None or self.pod_gone is None:
            now = time.monotonic()
            # The VM first: a pod that goes between the two reads of a round is then seen
            # gone in that round, never a round after a VM deleted once it had gone.
            machine = await self.cloud.client.get_vm(VmName(vm))
            if machine is None or machine.state != "Running":
                self.vm_deleting = self.vm_deleting or now
            found = await read_pod(self.core, self.namespace, pod)
            if found is None:
                self.pod_gone = self.pod_gone or now
            elif found.metadata.deletion_timestamp is not None:
                self.pod_leaving = self.pod_leaving or now
            await asyncio.sleep(0.1)


async def test_a_pod_shutting_down_slowly_is_gone_before_its_vm_is_deleted(
    world: World, core: client.CoreV1Api
) -> None:
    cloud, operator, custom = await scenes.settled_pool(world, target=1)
    node = f"{world.pool}-0"
    await core.create_namespaced_pod(world.namespace, slow_pod("slow", node))

    timeline = Timeline(core, cloud, world.namespace)
    follower = asyncio.create_task(timeline.follow("slow", node))
    await custom.patch_cluster_custom_object(
        *POOLS, world.pool, {"spec": {"targetNodes": 0}}, _content_type=MERGE
    )
    await wait_for(lambda: asyncio.sleep(0, timeline.pod_leaving), within=30)
    await asyncio.sleep(SHUTDOWN_SECONDS)
    assert timeline.vm_deleting is None  # the pod is still shutting down: the VM stays
    await end_shutdown(core, world.namespace, "slow")
    await asyncio.wait_for(follower, timeout=30)
    await wait_for(lambda: settled(custom, world.pool, 0), within=30)

    assert timeline.pod_leaving is not None
    assert timeline.pod_gone is not None
    assert timeline.vm_deleting is not None
    assert timeline.pod_gone - timeline.pod_leaving >= SHUTDOWN_SECONDS
    assert timeline.vm_deleting >= timeline.pod_gone
    assert operator.errors_logged() == []


async def test_a_budget_allowing_nothing_holds_the_drain_visibly_until_it_allows(
    world: World, core: client.CoreV1Api
) -> None:
    log = world.cluster.audit_log()
    _, operator, custom = await scenes.settled_pool(world, target=1)
    policy = client.PolicyV1Api(world.api_client)
    guarded = await guarded_pod(world.api_client, core, world.namespace, world.pool)
    log.mark()
    await custom.patch_cluster_custom_object(
        *POOLS, world.pool, {"spec": {"targetNodes": 0}}, _content_type=MERGE
    )

    async def blocked() -> dict[str, Any] | None:
        pool = await custom.get_cluster_custom_object(*POOLS, world.pool)
        for condition in pool.get("status", {}).get("conditions", []):
            if condition["type"] == "Scaling" and condition["reason"] == "DrainBlocked":
                return dict(condition)
        return None

    condition = await wait_for(blocked, within=30)
    assert f"PodDisruptionBudget {world.namespace}/guard" in condition["message"]
    assert f"pod {world.namespace}/{guarded}" in condition["message"]
    await asyncio.sleep(15)  # held: a few evictions on a backoff, no other writes

    writes = audit.writes(log.events_since_mark(), user=OPERATOR_USER)
    evictions = [w for w in writes if w.target == "pods/eviction"]
    # 1 + 2 + 4 + 8 s of backoff: at most 5 tries in the ~16 s since the first.
    assert 2 <= len(evictions) <= 6
    assert all(w.code == 429 for w in evictions)
    others = [w for w in writes if w.target != "pods/eviction"]
    # The cordon, the ScaleDown and DrainBlocked events, the status (active, then blocked).
    assert len(others) <= 8, [(w.verb, w.target, w.name) for w in others]
    events = await core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={world.pool},reason=DrainBlocked"
    )
    [event] = events.items
    assert event.type == "Warning"
    assert event.count == 1
    assert "guard" in event.message
    assert await read_pod(core, world.namespace, guarded) is not None

    await policy.patch_namespaced_pod_disruption_budget(
        "guard", world.namespace, {"spec": {"maxUnavailable": 1}}, _content_type=MERGE
    )
    await wait_for(lambda: settled(custom, world.pool, 0), within=60)
    assert await read_pod(core, world.namespace, guarded) is None
    assert operator.errors_logged() == []


async def test_deleting_a_pool_evicts_its_pods_before_removing_vms_and_nodes(
    world: World, core: client.CoreV1Api
) -> None:
    log = world.cluster.audit_log()
    cloud, operator, custom = await scenes.settled_pool(world, target=1)
    node = f"{world.pool}-0"
    await core.create_namespaced_pod(world.namespace, slow_pod("slow", node))
    log.mark()

    timeline = Timeline(core, cloud, world.namespace)
    follower = asyncio.create_task(timeline.follow("slow", node))
    await custom.delete_cluster_custom_object(*POOLS, world.pool)
    await wait_for(lambda: asyncio.sleep(0, timeline.pod_leaving), within=30)
    await asyncio.sleep(SHUTDOWN_SECONDS / 2)
    assert timeline.vm_deleting is None
    assert (await core.read_node(node)).spec.unschedulable
    await end_shutdown(core, world.namespace, "slow")
    await asyncio.wait_for(follower, timeout=30)

    assert timeline.vm_deleting is not None
    assert timeline.pod_gone is not None
    assert timeline.vm_deleting >= timeline.pod_gone
    writes = audit.writes(log.events_since_mark(), user=OPERATOR_USER)
    evictions = [(w.name, w.code) for w in writes if w.target == "pods/eviction"]
    assert evictions
    assert {name for name, _ in evictions} == {"slow"}
    assert all(code in (200, 201) for _, code in evictions)

    async def node_gone() -> bool:
        try:
            await core.read_node(node)
        except ApiException as error:
            return error.status == 404
        return False

    await wait_for(node_gone, within=30)
    assert operator.errors_logged() == []


async def test_a_drain_timeout_deletes_what_a_budget_holds_then_removes_the_node(
    world: World, core: client.CoreV1Api
) -> None:
    log = world.cluster.audit_log()
    _, operator, custom = await scenes.settled_pool(world, target=1, drainTimeoutSeconds=10)
    guarded = await guarded_pod(world.api_client, core, world.namespace, world.pool)
    log.mark()
    await custom.patch_cluster_custom_object(
        *POOLS, world.pool, {"spec": {"targetNodes": 0}}, _content_type=MERGE
    )

    # Held by the budget first, as without a timeout; then, the timeout past, the pod is
    # deleted (not evicted: the budget would refuse) and the node goes.
    await wait_for(lambda: settled(custom, world.pool, 0), within=90)
    writes = audit.writes(log.events_since_mark(), user=OPERATOR_USER)
    refused = [w for w in writes if w.target == "pods/eviction" and w.code == 429]
    deleted = [w for w in writes if w.verb == "delete" and w.target == "pods"]
    assert refused
    assert [(w.name, w.code) for w in deleted] == [(guarded, 200)]
    events = await core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={world.pool},reason=DrainTimeout"
    )
    [event] = events.items
    assert event.type == "Warning"
    assert f"node {world.pool}-0" in event.message
    assert await read_pod(core, world.namespace, guarded) is None
    assert operator.errors_logged() == []
