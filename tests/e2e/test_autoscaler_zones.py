"""Zones chosen for pods, on the real control plane: a zone-pinned pod gets one node in
its zone, the request says where it goes, and the zone is the VM's for good (a restart
and later scale-ups keep every node's zone and the pool balanced)."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client

from e2e.autoscaling import make_pool, pod
from e2e.scenes import World
from harness import MERGE, POOLS, REQUESTS, Operator, SimCloud, settled, wait_for
from nodepool_operator.api import wellknown

ZONE = wellknown.ZONE_LABEL
ZONES = ("zone-a", "zone-b", "zone-c")


async def node_zones(core: client.CoreV1Api, pool: str) -> dict[str, str]:
    found = await core.list_node(label_selector=wellknown.pool_selector(pool))
    return {n.metadata.name: n.metadata.labels.get(ZONE, "") for n in found.items}


async def node_count(core: client.CoreV1Api, pool: str, count: int) -> dict[str, str] | None:
    """The pool's Nodes' zones once it has ``count`` Nodes."""
    found = await node_zones(core, pool)
    return found if len(found) == count else None


async def vm_zones(cloud: SimCloud, pool: str) -> dict[str, str | None]:
    assert cloud.client is not None
    return {vm.name: vm.zone for vm in await cloud.client.list_vms(pool=pool)}


@pytest.fixture
async def cloud(world: World) -> SimCloud:
    """A simcloud whose VMs boot in one second; the test reads the zones it recorded."""
    return await world.cloud(latency=1)


async def test_one_zone_pinned_pod_on_an_empty_three_zone_pool_gets_one_node_in_its_zone(
    world: World, cloud: SimCloud
) -> None:
    operator: Operator = world.start_operator(cloud)
    await make_pool(world.custom, world.pool, zones=ZONES)
    await world.create_autoscaler(scale_down=False)
    selector = {wellknown.POOL_LABEL: world.pool, ZONE: "zone-c"}

    history = await world.scale_up(
        pods=[pod("pinned", {"nodeSelector": selector})],
        running_pods=1,
    )

    assert history.values == [0, 1]  # one step, one node: no filler in zone-a or zone-b
    [name] = await node_zones(world.core, world.pool)
    assert await node_zones(world.core, world.pool) == {name: "zone-c"}
    assert await vm_zones(cloud, world.pool) == {name: "zone-c"}
    placed = await world.core.read_namespaced_pod("pinned", world.namespace)
    assert placed.spec.node_name == name
    # The audit trail: the request said how many, and where.
    requests = await world.custom.list_cluster_custom_object(*REQUESTS)
    ours = [r for r in requests["items"] if r["spec"]["nodePoolName"] == world.pool]
    assert [(r["spec"]["targetNodes"], r["spec"].get("newNodeZones")) for r in ours] == [
        (1, {"zone-c": 1})
    ]

    # A restart keeps the zone (the VM's, not the name's), and a later scale-up by hand
    # fills the other zones first: the pool stays balanced.
    operator.stop()
    operator = world.start_operator(cloud)
    await scale_to(world.custom, world.pool, 3)

    zones = await wait_for(lambda: node_count(world.core, world.pool, 3), within=60)
    assert zones[name] == "zone-c"
    assert sorted(zones.values()) == list(ZONES)
    assert await vm_zones(cloud, world.pool) == zones

    # One more goes to zone-a (all level: the first listed); scaling back down takes it,
    # the newest of the zone with the most, and the pool is balanced again.
    await scale_to(world.custom, world.pool, 4)
    await wait_for(lambda: settled(world.custom, world.pool, 4), within=60)
    grown = await node_zones(world.core, world.pool)
    [extra] = set(grown) - set(zones)
    assert grown[extra] == "zone-a"
    await scale_to(world.custom, world.pool, 3)
    assert await wait_for(lambda: node_count(world.core, world.pool, 3), within=60) == zones
    await wait_for(lambda: settled(world.custom, world.pool, 3), within=60)
    live = {n: z for n, z in (await vm_zones(cloud, world.pool)).items() if n in zones}
    assert live == zones
    assert operator.errors_logged() == []


async def scale_to(custom: client.CustomObjectsApi, pool: str, target: int) -> None:
    await custom.patch_cluster_custom_object(
        *POOLS, pool, {"spec": {"targetNodes": target}}, _content_type=MERGE
    )
