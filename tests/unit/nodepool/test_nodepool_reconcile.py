"""The NodePool reconciler's decisions on fakes (API, caches, cloud) and fake clocks: what
it creates, registers, drains and removes, what it shows in status (and when it writes
nothing), when it looks again, and how it backs off from a cloud that refuses."""

from __future__ import annotations

import asyncio
from typing import Any

from nodepool_operator.cloud.provider import (
    QuotaExceeded,
    VmState,
)
from nodepool_operator.controllers.nodepool import registration
from nodepool_operator.controllers.nodepool.controller import FINALIZER
from nodepool_operator.runtime import errors
from nodepool_operator.runtime.client import Object, Resource
from unit.nodepool import drain_world as fakes
from unit.nodepool.reconcile_world import CONFIG, World

# --- scale up ----------------------------------------------------------------------------


async def test_a_vm_the_create_call_reports_running_gets_its_node_in_the_same_pass() -> None:
    world = World()
    world.pool(3)

    delay = await world.reconcile()

    assert world.cloud.created == ["p-0", "p-1", "p-2"]
    assert sorted(world.nodes_created()) == ["p-0", "p-1", "p-2"]
    # Nothing boots: the Nodes' own events (through the watch) bring the next pass.
    assert delay == CONFIG.poll_interval


async def test_a_node_created_a_moment_ago_is_not_created_again_before_the_cache_shows_it() -> None:
    world = World()
    world.pool(2)
    await world.reconcile()

    await world.reconcile()  # the cache does not show the Nodes yet

    assert sorted(world.nodes_created()) == ["p-0", "p-1"]


async def test_booting_vms_are_polled_from_a_tenth_of_a_second_doubling_to_the_interval() -> None:
    world = World()
    world.cloud.boot_state = VmState.PROVISIONING
    world.pool(1)

    delays = [await world.reconcile() for _ in range(6)]

    # The cloud is asked again soon after the create, then less often up to the interval.
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert world.nodes_created() == []

    world.cloud.vms["p-0"] = VmState.RUNNING
    await world.reconcile()
    assert world.nodes_created() == ["p-0"]


async def test_the_nodes_of_one_decision_are_created_concurrently_within_the_bound() -> None:
    world = World()
    in_flight, most = 0, 0
    accepted = world.api.create

    async def slow_create(resource: Resource, body: Object, **kw: Any) -> Object:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0)  # let the others start: they overlap only if run together
        in_flight -= 1
        return await accepted(resource, body, **kw)

    world.api.create = slow_create  # type: ignore[method-assign]
    world.pool(8)

    await world.reconcile()

    assert len(world.nodes_created()) == 8
    assert most == CONFIG.create_parallelism


async def test_a_template_the_api_server_refuses_is_refused_once_not_once_per_node() -> None:
    world = World()
    tried: list[str] = []

    async def refuse(resource: Resource, body: Object, **_: Any) -> Object:
        tried.append(body["metadata"]["name"])
        raise errors.Invalid("Node is invalid: metadata.labels: Invalid value")

    world.api.create = refuse  # type: ignore[method-assign]
    world.pool(5)

    await world.reconcile()

    assert tried == ["p-0"]
    assert world.condition("Degraded")["reason"] == registration.NODE_REFUSED


# --- status ------------------------------------------------------------------------------


async def test_a_stable_pool_shows_ready_and_writes_nothing_on_the_next_pass() -> None:
    world = World("p-0", "p-1")
    world.nodes.put(fakes.node("p-0"))
    world.nodes.put(fakes.node("p-1"))
    world.pool(2, generation=4)

    await world.reconcile()
    [status] = world.api.status_patches
    assert status["observedGeneration"] == 4
    assert (status["currentNodes"], status["readyNodes"]) == (2, 2)
    assert status["scaleOperation"] == "inactive"
    assert world.condition("Ready")["status"] == "True"
    assert world.condition("Scaling")["reason"] == "Stable"
    assert world.condition("Degraded")["status"] == "False"

    for _ in range(3):
        await world.reconcile()

    assert len(world.api.status_patches) == 1
    assert world.reconciler.reporter.status.skipped == 3


async def test_a_scale_up_shows_active_until_the_nodes_are_ready_then_completes() -> None:
    world = World()
    world.pool(2)

    await world.reconcile()
    assert world.api.status_patches[-1]["scaleOperation"] == "active"
    assert world.condition("Scaling")["reason"] == "ScalingUp"

    world.show_created_nodes()
    await world.reconcile()

    assert world.api.status_patches[-1]["scaleOperation"] == "inactive"
    assert world.api.status_patches[-1]["readyNodes"] == 2
    assert world.condition("Scaling")["status"] == "False"
    # The Scaling condition says it to the reader of ``kubectl describe``: no event too.
    assert "ScaleCompleted" not in [r for _, r, _ in world.recorder.events]


async def test_a_pool_without_the_finalizer_gets_it_with_a_version_precondition() -> None:
    world = World()
    world.pool(0, finalizers=[])
    patches: list[Any] = []
    written = world.api.patch

    async def record(resource: Resource, name: str, patch: Any, **kw: Any) -> Object:
        if resource.plural == "nodepools" and "subresource" not in kw:
            patches.append(patch)
        return await written(resource, name, patch, **kw)

    world.api.patch = record  # type: ignore[method-assign]
    await world.reconcile()

    assert patches == [{"metadata": {"finalizers": [FINALIZER], "resourceVersion": "5"}}]


# --- scale down --------------------------------------------------------------------------


async def test_a_scale_down_drains_the_emptiest_node_then_removes_its_vm_and_node() -> None:
    world = World("p-0", "p-1")
    world.nodes.put(fakes.node("p-0"))
    world.nodes.put(fakes.node("p-1"))
    world.pods.put(fakes.pod("busy-a", node_name="p-0"))
    world.pods.put(fakes.pod("busy-b", node_name="p-0"))
    world.pods.put(fakes.pod("web", node_name="p-1"))
    world.pool(1)

    await world.reconcile()
    assert ("patch", "nodes", "p-1") in world.api.writes()  # cordoned
    assert world.api.evictions("web") == 1
    assert world.cloud.deleted_at == {}  # its pod first

    world.pods.remove("ns/web")
    world.nodes.put(fakes.draining_since("p-1", fakes.START))
    await world.reconcile()

    assert world.cloud.order == ["vm p-1"]
    assert world.nodes_deleted() == ["p-1"]
    assert world.api.evictions("busy-a") == 0


# --- the cloud refuses -------------------------------------------------------------------


async def test_a_quota_pauses_creation_until_the_backoff_or_a_new_generation() -> None:
    world = World()
    world.cloud.refuse = QuotaExceeded("quota of 0 VMs reached")
    world.pool(2)

    delay = await world.reconcile()
    assert delay == CONFIG.degraded_backoff
    assert world.condition("Degraded")["reason"] == "QuotaExceeded"
    assert ("Warning", "CloudError", "quota of 0 VMs reached") in world.recorder.events

    world.cloud.refuse = None
    world.advance(CONFIG.degraded_backoff / 2)
    await world.reconcile()
    assert world.cloud.created == []  # still pausing: the cloud is not asked

    world.pool(3, generation=2)  # the user changed the spec: that is new information
    await world.reconcile()
    assert world.cloud.created == ["p-0", "p-1", "p-2"]
    assert world.condition("Degraded")["status"] == "False"


async def test_a_pause_ends_when_its_time_has_passed() -> None:
    world = World()
    world.cloud.refuse = QuotaExceeded("quota of 0 VMs reached")
    world.pool(1)
    await world.reconcile()

    world.cloud.refuse = None
    world.advance(CONFIG.degraded_backoff)
    await world.reconcile()

    assert world.cloud.created == ["p-0"]


async def test_the_pause_is_recorded_in_the_status_and_kept_by_a_restarted_operator() -> None:
    world = World()
    world.cloud.refuse = QuotaExceeded("quota of 0 VMs reached")
    world.pool(2)
    await world.reconcile()
    first = world.reconciler.reporter.status.current(world.pools.get("p") or {})["cloudPause"]
    world.advance(CONFIG.degraded_backoff)
    await world.reconcile()  # refused again: the pause doubles
    [pool] = world.pools.list()
    recorded = world.reconciler.reporter.status.current(pool)
    assert first["failures"] == 1
    assert (recorded["cloudPause"]["failures"], recorded["cloudPause"]["reason"]) == (
        2,
        "QuotaExceeded",
    )

    # A new operator process: nothing remembered, the pool read back with its status.
    world.cloud.refuse = None
    world.pools.put({**pool, "status": recorded})
    world.reconciler = world.reconciler_for(world.pools)
    world.advance(2 * CONFIG.degraded_backoff - 1)
    delay = await world.reconcile()
    assert world.cloud.created == []  # the pause the status records still holds
    assert delay == 1

    world.advance(1)
    await world.reconcile()
    assert world.cloud.created == ["p-0", "p-1"]
    assert "cloudPause" not in world.reconciler.reporter.status.current(pool)
    assert world.condition("Degraded")["status"] == "False"
