"""A drain on a real kubelet: the operator only asks (the Eviction API, under the pod's
PodDisruptionBudget), and the hollow kubelet running the pod carries the deletion out.

On kwok a test stands in for the kubelet that ends a deleted pod; here nobody does: the
eviction gives the pod its ``terminationGracePeriodSeconds``, the kubelet stops its
containers (at once: its runtime is fake) and reports the pod ended, and only then does
the operator delete the VM (a drain waits for each pod to end; the object left on the gone
Node is the pod garbage collector's). While the budget allows no eviction, nothing is
deleted at all.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kubernetes_asyncio import client

import workloads
from e2e import hollow
from e2e.scenes import World
from harness import MERGE, POOLS, settled, wait_for
from nodepool_devtools.cluster import audit, controlplane
from nodepool_operator.api import wellknown
from nodepool_operator.cloud.provider import VmName, VmState

GRACE_SECONDS = 30
OPERATOR_USER = controlplane.IDENTITIES["operator"].user


async def the_pod(core: client.CoreV1Api, namespace: str) -> Any:
    found = await core.list_namespaced_pod(namespace, label_selector="app=guarded")
    return found.items[0] if len(found.items) == 1 else None


async def test_a_budget_holds_the_drain_and_the_kubelet_finishes_the_evicted_pod(
    world: World,
) -> None:
    log = world.cluster.audit_log()
    cloud, operator, custom, core = await hollow.hollow_pool(world, target=1, max_nodes=2)
    assert cloud.client is not None
    policy = client.PolicyV1Api(world.api_client)
    [vm] = [v.name for v in await cloud.client.list_vms(pool=world.pool)]

    web = workloads.deployment(
        "guarded",
        selector={wellknown.POOL_LABEL: world.pool},
        replicas=1,
        cpu="100m",
        terminationGracePeriodSeconds=GRACE_SECONDS,
    )
    await world.apps.create_namespaced_deployment(world.namespace, web)

    async def running() -> Any:
        pod = await the_pod(core, world.namespace)
        return pod if pod is not None and pod.status.phase == "Running" else None

    pod = await wait_for(running, within=60)  # the kubelet runs it (its fake runtime)
    assert pod.spec.node_name == vm
    budget = {
        "metadata": {"name": "guard"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    await policy.create_namespaced_pod_disruption_budget(world.namespace, budget)

    async def budget_observed() -> bool:
        found = await policy.read_namespaced_pod_disruption_budget("guard", world.namespace)
        return bool(found.status and found.status.observed_generation)

    await wait_for(budget_observed, within=30)
    log.mark()
    await custom.patch_cluster_custom_object(
        *POOLS, world.pool, {"spec": {"targetNodes": 0}}, _content_type=MERGE
    )

    async def told_blocked() -> list[str]:
        events = await core.list_namespaced_event(
            "default", field_selector=f"involvedObject.name={world.pool},reason=DrainBlocked"
        )
        return [event.message for event in events.items]

    [message] = await wait_for(told_blocked, within=30)
    assert f"PodDisruptionBudget {world.namespace}/guard" in message
    await asyncio.sleep(5)  # held: the pod runs on, its VM and Node stay
    held = await the_pod(core, world.namespace)
    assert held.metadata.uid == pod.metadata.uid
    assert held.metadata.deletion_timestamp is None
    machine = await cloud.client.get_vm(VmName(vm))
    assert machine is not None
    assert machine.state is VmState.RUNNING

    # The budget allows one: the eviction goes through, and the kubelet ends the pod.
    leaving_grace: int | None = None
    phase: str | None = None
    pod_finished: float | None = None  # stopped, as its kubelet reports, or gone
    vm_deleting: float | None = None
    await policy.patch_namespaced_pod_disruption_budget(
        "guard", world.namespace, {"spec": {"maxUnavailable": 1}}, _content_type=MERGE
    )
    deadline = time.monotonic() + 60
    while (pod_finished is None or vm_deleting is None) and time.monotonic() < deadline:
        now = time.monotonic()
        # The VM first: a pod that ends between the two reads is seen ended in the same
        # round, never a round after a VM that went once it had ended.
        machine = await cloud.client.get_vm(VmName(vm))
        if machine is None or machine.state is not VmState.RUNNING:
            vm_deleting = vm_deleting or now
        found = await core.list_namespaced_pod(
            world.namespace, field_selector=f"metadata.name={pod.metadata.name}"
        )
        if not found.items:
            pod_finished = pod_finished or now
            continue
        leaving = found.items[0]
        if leaving.metadata.deletion_timestamp is not None:
            leaving_grace = leaving.metadata.deletion_grace_period_seconds
        if leaving.status.phase in ("Succeeded", "Failed"):
            phase = leaving.status.phase
            pod_finished = pod_finished or now
        await asyncio.sleep(0.1)
    assert pod_finished is not None
    assert vm_deleting is not None
    assert vm_deleting >= pod_finished  # the VM went once the kubelet had stopped the pod
    await wait_for(lambda: settled(custom, world.pool, 0), within=60)

    # The operator asked; the kubelet stopped the pod, within the grace period the
    # eviction gave it, and reported it ended. The operator wrote nothing of the pod's.
    writes = audit.writes(log.events_since_mark(), user=OPERATOR_USER)
    evictions = [w for w in writes if w.target == "pods/eviction"]
    assert any(w.code == 429 for w in evictions)
    assert any(w.code == 201 for w in evictions)
    assert [w.target for w in writes if w.target in ("pods", "pods/status")] == []
    assert leaving_grace == GRACE_SECONDS
    assert phase in ("Succeeded", "Failed")
    assert operator.errors_logged() == []
