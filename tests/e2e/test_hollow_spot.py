"""A spot node taken back from under real (hollow) kubelets: simcloud sells spot c4s whose
VMs boot kubemark's kubelet and gives one of a pool of three a 30 s interruption notice.
The operator marks the Node, launches its replacement (a VM whose kubelet registers it a
few seconds later) and drains it through the Eviction API; each evicted pod is ended by
its own kubelet within its grace period, its Deployment's replacement runs on another
kubelet, and all of that before the cloud takes the VM; then the Node and VM are gone and
the pool has three Ready Nodes again."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import spot_pools
import workloads
from e2e import hollow
from e2e.consolidating import pool_nodes
from e2e.scenes import World
from harness import POOLS, settled, wait_for
from nodepool_operator.api import wellknown

NOTICE_SECONDS = 30
REPLICAS = 4


async def test_a_spot_notice_moves_the_pods_between_real_kubelets_before_the_vm_is_gone(
    world: World, tmp_path: Path
) -> None:
    cloud = await world.start_hollow_simcloud(
        *hollow.BOOT,
        *("--catalog", str(spot_pools.catalog_file(tmp_path))),
        *("--spot-notice-seconds", str(NOTICE_SECONDS)),
    )
    assert cloud.client is not None
    operator = world.start_operator(cloud)
    custom, core, namespace = world.custom, world.core, world.namespace
    await custom.create_cluster_custom_object(*POOLS, spot_pools.spot_pool(world.pool))
    await wait_for(lambda: settled(custom, world.pool, 3), within=120)
    # Four pods of 200m with a grace period their kubelet honours, spread over the nodes.
    web = workloads.deployment(
        "web",
        selector={wellknown.POOL_LABEL: world.pool},
        replicas=REPLICAS,
        cpu="200m",
        terminationGracePeriodSeconds=5,
        topologySpreadConstraints=workloads.spread(
            {"app": "web"}, "kubernetes.io/hostname", whenUnsatisfiable="ScheduleAnyway"
        ),
    )
    await world.apps.create_namespaced_deployment(namespace, web)

    async def all_running() -> dict[str, str] | None:
        found = await hollow.running_pods(core, namespace)
        return found if len(found) == REPLICAS else None

    placed = await wait_for(all_running, within=90)
    per_node = {node: list(placed.values()).count(node) for node in set(placed.values())}
    victim = max(per_node, key=lambda name: per_node[name])
    victim_uid = (await core.read_node(victim)).metadata.uid
    [vm] = [v for v in await cloud.client.list_vms(pool=world.pool) if v.name == victim]
    before = {n.metadata.uid for n in await pool_nodes(core, world.pool)}

    lowest, first, sampling = REPLICAS, dict[str, float](), True

    async def sample() -> None:
        nonlocal lowest
        assert cloud.client is not None
        while sampling:
            running = await hollow.running_pods(core, namespace)
            lowest, now = min(lowest, len(running)), time.time()
            moved = len(running) == REPLICAS and victim not in running.values()
            if "moved" not in first and moved:
                first["moved"] = now
            if "replacement" not in first:
                for node in await pool_nodes(core, world.pool):
                    taints = {t.key for t in node.spec.taints or ()}
                    ready = any(
                        c.type == "Ready" and c.status == "True"
                        for c in node.status.conditions or ()
                    )
                    registered = wellknown.UNREGISTERED_TAINT_KEY not in taints
                    if node.metadata.uid not in before and ready and registered:
                        first["replacement"] = now
            live = await cloud.client.list_vms(pool=world.pool)
            if "vm_gone" not in first and not spot_pools.still_up(live, vm):
                first["vm_gone"] = now
            await asyncio.sleep(0.1)

    sampler = asyncio.create_task(sample())
    noticed_at = time.time()
    assert [given.name for given in await cloud.client.interrupt([victim])] == [victim]

    async def victim_node_gone() -> bool:
        found = await core.list_node(field_selector=f"metadata.name={victim}")
        return all(n.metadata.uid != victim_uid for n in found.items)

    await wait_for(victim_node_gone, within=NOTICE_SECONDS + 60)
    await wait_for(lambda: settled(custom, world.pool, 3), within=120)
    await wait_for(all_running, within=60)
    sampling = False
    await sampler

    # The replacement Ready and the pods Running on other kubelets before the VM is gone.
    assert {"replacement", "moved", "vm_gone"} <= set(first), first
    assert first["replacement"] < first["vm_gone"], first
    assert first["moved"] < first["vm_gone"], first
    assert first["moved"] - noticed_at < NOTICE_SECONDS, first
    # Only the victim's pods were ever down at once: the others ran on.
    assert lowest >= REPLICAS - per_node[victim], (lowest, per_node)
    capacity = {
        n.metadata.labels.get(wellknown.CAPACITY_TYPE_LABEL)
        for n in await pool_nodes(core, world.pool)
    }
    assert capacity == {"spot"}
    assert operator.errors_logged() == []
    print(
        f"replacement Ready after {first['replacement'] - noticed_at:.1f}s, pods Running"
        f" elsewhere after {first['moved'] - noticed_at:.1f}s, VM gone after"
        f" {first['vm_gone'] - noticed_at:.1f}s of {NOTICE_SECONDS}s;"
        f" {per_node[victim]} pods moved, Running never below {lowest}"
    )
