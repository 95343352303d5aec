"""An operator restarted in the middle of a registration timeout, a repair, a drain and a
quota pause finishes each as an uninterrupted run would, on the real control plane: its
timers count from facts in the world (the VM's creation in the cloud, the Node's Ready
condition, the drain mark on the Node, the pool's ``status.cloudPause``), not from its own
start, and nothing is lost, leaked or doubled.

Each test stops the operator before a deadline and starts a new one after it: a timer
restarted from zero would wait the whole timeout again, a timer from the world acts on
the first pass.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from kubernetes_asyncio import client

from e2e import scenes
from e2e.node_faults import guarded_pod, pool_nodes, stop_reporting
from e2e.scenes import World
from harness import MERGE, POOLS, SimCloud, pool_body, settled, wait_for
from nodepool_operator import timestamps
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud.provider import VmName, VmState

#: Far longer than a pass, so a timer restarted at the new operator's start could not
#: end within ``PROMPTLY``.
TIMEOUT = 45
PROMPTLY = 30.0  # a loaded machine may take tens of seconds to start an operator


async def running_vms(cloud: SimCloud, pool: str) -> list[str]:
    assert cloud.client is not None
    return sorted(
        vm.name for vm in await cloud.client.list_vms(pool=pool) if vm.state == VmState.RUNNING
    )


async def sleep_until(moment: float) -> None:
    await asyncio.sleep(max(0.0, moment - time.time()))


async def refused_creates(cloud: SimCloud) -> int:
    """Creates the simulated cloud has refused for quota (403) since it started."""
    assert cloud.client is not None
    stats = await cloud.client.stats()
    return stats.responses_by_call.get("PUT /v1/vms/{name}", {}).get(403, 0)


async def test_a_restart_mid_quota_pause_keeps_the_pause_and_its_doubling(world: World) -> None:
    cloud: SimCloud = await world.start_simcloud("--create-latency", "0.2", "--quota", "0")
    operator = world.start_operator(cloud)
    await world.custom.create_cluster_custom_object(*POOLS, pool_body(world.pool, target=1))

    async def pause_after(failures: int) -> dict[str, Any] | None:
        pool = await world.custom.get_cluster_custom_object(*POOLS, world.pool)
        pause = pool.get("status", {}).get("cloudPause")
        return pause if pause and pause["failures"] >= failures else None

    pause = await wait_for(lambda: pause_after(3), within=90)  # paused 10 s, 20 s, now 40 s
    operator.stop()  # mid-pause
    refused = await refused_creates(cloud)
    until = timestamps.parse_rfc3339(pause["until"])
    assert until is not None
    operator = world.start_operator(cloud)

    if time.time() < until - 1:  # the new operator is up before the pause ends
        await sleep_until(until - 1)
        assert await refused_creates(cloud) == refused  # it asked the cloud nothing
    later = await wait_for(lambda: pause_after(4), within=PROMPTLY + 40)
    # Asked once the pause was over, refused again: the streak goes on from the status
    # (a pause kept in memory would start again at 1, 10 s).
    assert (later["reason"], later["failures"]) == ("QuotaExceeded", 4)
    assert await refused_creates(cloud) == refused + 1
    next_until = timestamps.parse_rfc3339(later["until"])
    assert next_until is not None
    assert next_until >= until + 80


async def test_a_restart_mid_registration_replaces_the_vm_when_its_timeout_ends(
    world: World,
) -> None:
    faults = {"kubeletNeverJoins": [{"zone": "sim-1a"}]}
    cloud: SimCloud = await world.start_simcloud(
        "--create-latency", "0.2", "--latency-jitter", "0", "--faults", json.dumps(faults)
    )
    operator = world.start_operator(cloud)
    spec = nodepool_api.NodePoolSpec(
        target_nodes=1,
        registration_timeout_seconds=TIMEOUT,
        template=nodepool_api.NodeTemplate(zones=("sim-1a", "sim-1b")),
    )
    await world.custom.create_cluster_custom_object(*POOLS, nodepool_api.manifest(world.pool, spec))
    stuck = f"{world.pool}-0"  # in sim-1a, whose kubelets never join
    await wait_for(lambda: pool_nodes(world.core, world.pool), within=30)
    assert cloud.client is not None
    vm = await cloud.client.get_vm(VmName(stuck))
    assert vm is not None

    node = await world.core.read_node(stuck)
    registered = node.metadata.creation_timestamp.timestamp()

    operator.stop()  # mid-registration: its Node never turned Ready
    await sleep_until(max(vm.created_at, registered) + TIMEOUT + 1)
    operator = world.start_operator(cloud)

    async def replaced() -> bool:
        return stuck not in await running_vms(cloud, world.pool)

    await wait_for(replaced, within=PROMPTLY)
    await wait_for(lambda: settled(world.custom, world.pool, 1), within=60)
    assert await running_vms(cloud, world.pool) == [f"{world.pool}-1"]  # in sim-1b
    assert list(await pool_nodes(world.core, world.pool)) == [f"{world.pool}-1"]
    pool = await world.custom.get_cluster_custom_object(*POOLS, world.pool)
    [backoff] = pool["status"]["zoneBackoffs"]
    assert (backoff["zone"], backoff["reason"]) == ("sim-1a", "RegistrationTimeout")
    assert operator.errors_logged() == []


async def test_a_restart_mid_repair_replaces_the_node_when_its_timeout_ends(world: World) -> None:
    cloud, operator, custom = await scenes.settled_pool(
        world, target=2, create_latency=0.2, notReadyTimeoutSeconds=TIMEOUT
    )
    before = await pool_nodes(world.core, world.pool)
    broken = f"{world.pool}-1"

    operator.stop()
    await stop_reporting(world.core, broken)
    node = await world.core.read_node(broken)
    [ready] = [c for c in node.status.conditions if c.type == "Ready"]
    since = ready.last_transition_time.timestamp()
    await sleep_until(since + TIMEOUT + 1)
    operator = world.start_operator(cloud)

    async def replaced() -> bool:
        return before[broken] not in (await pool_nodes(world.core, world.pool)).values()

    await wait_for(replaced, within=PROMPTLY)
    await wait_for(lambda: settled(custom, world.pool, 2), within=60)
    after = await pool_nodes(world.core, world.pool)
    assert after[f"{world.pool}-0"] == before[f"{world.pool}-0"]
    assert await running_vms(cloud, world.pool) == sorted(after)  # none leaked, none doubled
    assert "event=node-repair" in operator.output()
    assert operator.errors_logged() == []


async def test_a_restart_mid_drain_keeps_the_drain_and_its_start(world: World) -> None:
    cloud, operator, custom = await scenes.settled_pool(world, target=1, create_latency=0.2)
    guarded = await guarded_pod(world.api_client, world.core, world.namespace, world.pool)
    await custom.patch_cluster_custom_object(
        *POOLS, world.pool, {"spec": {"targetNodes": 0}}, _content_type=MERGE
    )
    victim = f"{world.pool}-0"

    async def drain_mark() -> str | None:
        node = await world.core.read_node(victim)
        return (node.metadata.annotations or {}).get("nodepool.dev/scale-down")

    started = await wait_for(drain_mark, within=30)
    operator.stop()  # mid-drain: the budget holds the pod
    operator = world.start_operator(cloud)

    async def blocked() -> bool:
        pool = await custom.get_cluster_custom_object(*POOLS, world.pool)
        found = pool.get("status", {}).get("conditions", [])
        return any(c["type"] == "Scaling" and c["reason"] == "DrainBlocked" for c in found)

    await wait_for(blocked, within=30)
    assert await drain_mark() == started  # the same drain, from the same start
    assert timestamps.parse_rfc3339(started) is not None
    pod = await world.core.read_namespaced_pod(guarded, world.namespace)
    assert pod.metadata.deletion_timestamp is None  # never taken past its budget

    policy = client.PolicyV1Api(world.api_client)
    await policy.patch_namespaced_pod_disruption_budget(
        "guard", world.namespace, {"spec": {"maxUnavailable": 1}}, _content_type=MERGE
    )
    await wait_for(lambda: settled(custom, world.pool, 0), within=60)
    assert await running_vms(cloud, world.pool) == []
    assert operator.errors_logged() == []
