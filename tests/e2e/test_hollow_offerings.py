"""A pool of many instance types on real (hollow) kubelets: a Node is what its kubelet
reports, not what the catalog sells. kubemark's kubelet reports 1 CPU / 3840Mi whatever
the type.

* A pod the catalog's figures say fits an h2 (2 CPU) fits no real Node. The Autoscaler
  believes each type's kubelets once one has spoken: it tries each type once, then the
  pod waits with a ``NotTriggerScaleUp`` giving the kubelets' figure, instead of buying
  the type the catalog overstates until ``maxNodes``.
* Consolidation by price carried out by real kubelets: a node of the dearer type whose pod
  a cheaper type holds is replaced by one, launched first; the kubelet ends the evicted
  pod and the replacement runs on the new node.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from kubernetes_asyncio import client

import catalogs
import workloads
from e2e import hollow
from e2e.autoscaling import create_autoscaler
from e2e.consolidating import autoscaler_events, pool_nodes
from e2e.scenes import World
from harness import MERGE, POOLS, SimCloud, wait_for
from nodepool_operator.api import wellknown
from nodepool_operator.cloud.provider import VmState

ZONE = "sim-1a"
#: (name, cores, GiB, price per hour): what the catalog sells; every kubelet says 1 / 3.75.
TYPES = (("h2", 2, 8, 0.10), ("h4", 4, 16, 0.20))


async def _cloud(world: World, tmp_path: Path) -> SimCloud:
    path = catalogs.catalog_file(tmp_path / "instance_types.json", TYPES, (ZONE,))
    cloud = await world.start_hollow_simcloud(*hollow.BOOT, "--catalog", str(path))
    assert cloud.client is not None
    return cloud


async def _ready_types(core: client.CoreV1Api, pool: str) -> list[str]:
    return sorted(
        n.metadata.labels.get(wellknown.INSTANCE_TYPE_LABEL, "")
        for n in await pool_nodes(core, pool)
        if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or ())
    )


async def test_each_type_is_tried_once_when_its_kubelets_report_less_than_the_catalog(
    world: World, tmp_path: Path
) -> None:
    cloud = await _cloud(world, tmp_path)
    world.start_operator(cloud)
    custom, core = world.custom, world.core
    pool = catalogs.many_types_pool(world.pool, TYPES, (ZONE,), max_nodes=5)
    await custom.create_cluster_custom_object(*POOLS, pool)
    await create_autoscaler(
        custom, world.autoscaler, pool=world.pool, namespace=world.namespace, scale_down=False
    )
    wide = workloads.deployment(
        "wide", selector={wellknown.POOL_LABEL: world.pool}, replicas=1, cpu="1500m"
    )
    await world.apps.create_namespaced_deployment(world.namespace, wide)

    async def launched() -> list[str]:
        vms = await cloud.client.list_vms(pool=world.pool)  # type: ignore[union-attr]
        return sorted(v.name for v in vms if v.state is not VmState.DELETING)

    async def two_ready() -> list[str] | None:
        ready = await _ready_types(core, world.pool)
        return ready if len(ready) >= 2 else None

    # The cheapest type first (the catalog says 1900m of it is free), then, once its
    # kubelet said 1 CPU, the next; no type a second time.
    assert await wait_for(two_ready, within=120) == ["h2", "h4"]
    seen = await launched()
    for _ in range(30):  # 30 s of the Autoscaler scanning every second
        await asyncio.sleep(1)
        assert await launched() == seen
    assert len(seen) == 2
    pods = await core.list_namespaced_pod(world.namespace, label_selector="app=wide")
    assert [p.spec.node_name for p in pods.items] == [None]
    # The Autoscaler says why it buys nothing more for the pod.
    events = await core.list_namespaced_event(
        world.namespace, field_selector=f"involvedObject.name={pods.items[0].metadata.name}"
    )
    said = [e.message for e in events.items if e.reason == "NotTriggerScaleUp"]
    assert said, [(e.reason, e.message) for e in events.items]
    for kind in ("h2", "h4"):  # each with what its kubelet reports, not the catalog's 1900m+
        assert (
            f"{world.pool}/{kind}/on-demand: requests 1500 of cpu, a node offers 1000" in (said[-1])
        )


async def test_a_node_is_replaced_by_a_cheaper_type_and_its_pod_runs_there(
    world: World, tmp_path: Path
) -> None:
    cloud = await _cloud(world, tmp_path)
    operator = world.start_operator(cloud)
    custom, core = world.custom, world.core
    # Only h4 at first: the pod gets an h4 node.
    pool = catalogs.many_types_pool(world.pool, TYPES[1:], (ZONE,), max_nodes=3)
    await custom.create_cluster_custom_object(*POOLS, pool)
    await create_autoscaler(
        custom, world.autoscaler, pool=world.pool, namespace=world.namespace, unneeded_seconds=5
    )
    web = workloads.deployment(
        "web", selector={wellknown.POOL_LABEL: world.pool}, replicas=1, cpu="300m"
    )
    await world.apps.create_namespaced_deployment(world.namespace, web)

    async def one_running() -> dict[str, str] | None:
        found = await hollow.running_pods(core, world.namespace)
        return found if len(found) == 1 else None

    before = await wait_for(one_running, within=90)
    [h4_node] = before.values()
    assert await _ready_types(core, world.pool) == ["h4"]

    # The user widens the pool to h2: the h4 node, 30% used, cannot be removed (its pod
    # fits on no other node) but one h2 holds its pod for half the price.
    await custom.patch_cluster_custom_object(
        *POOLS,
        world.pool,
        {"spec": {"requirements": catalogs.requirements(TYPES, (ZONE,))}},
        _content_type=MERGE,
    )

    async def on_one_h2() -> dict[str, str] | None:
        nodes = await pool_nodes(core, world.pool)
        found = await hollow.running_pods(core, world.namespace)
        if [n.metadata.labels.get(wellknown.INSTANCE_TYPE_LABEL) for n in nodes] != ["h2"]:
            return None
        return found if list(found.values()) == [nodes[0].metadata.name] else None

    after = await wait_for(on_one_h2, within=150)
    assert set(after) != set(before)  # the pod was evicted, its replacement runs on h2
    [replacing] = await autoscaler_events(core, world.autoscaler, "ConsolidationReplacing")
    assert f"replace {h4_node} ($0.2000/h) with one h2 in {ZONE} (on-demand, $0.1000/h)" in (
        replacing
    ), replacing
    assert operator.errors_logged() == []
