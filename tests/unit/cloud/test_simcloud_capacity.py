"""simcloud's capacity model: offerings (a zone, a shape, or both) that hold at most so
many VMs, set at start or through ``PUT /admin/faults`` and refused with their own error
code; VMs whose kubelet never joins; and the cluster every VM belongs to."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable

import aiohttp
import pytest

from nodepool_operator.cloud import credentials, provider
from nodepool_operator.cloud.simcloud import client, server, store, wire

SMALL = provider.MachineSpec(cpu="4", memory="16Gi", pods=110, zone="sim-1a")
LARGE = provider.MachineSpec(cpu="16", memory="64Gi", pods=110, zone="sim-1a")


def _limit(max_vms: int, **offering: str) -> store.CapacityLimit:
    return store.CapacityLimit(offering=store.MachineSelector(**offering), max_vms=max_vms)


async def test_a_zone_that_runs_out_refuses_with_insufficient_capacity_and_its_zone(
    cloud: client.SimCloudClient,
) -> None:
    await cloud.set_faults(wire.Faults(capacity=(_limit(1, zone="sim-1a"),)))
    await cloud.create_vm(name=provider.VmName("a-0"), pool="a", spec=SMALL)

    with pytest.raises(provider.InsufficientCapacity) as refused:
        await cloud.create_vm(name=provider.VmName("a-1"), pool="a", spec=SMALL)
    elsewhere = await cloud.create_vm(
        name=provider.VmName("a-2"), pool="a", spec=dataclasses.replace(SMALL, zone="sim-1b")
    )

    assert (refused.value.code, refused.value.zone, refused.value.shape) == (
        "InsufficientCapacity",
        "sim-1a",
        "4/16Gi",
    )
    assert not refused.value.transient
    assert await cloud.get_vm(provider.VmName("a-1")) is None
    assert elsewhere.zone == "sim-1b"


async def test_a_shape_without_capacity_is_refused_in_every_zone_while_others_fit(
    cloud: client.SimCloudClient,
) -> None:
    # "16000m" is the same shape as "16": limits compare quantities, not strings.
    await cloud.set_faults(wire.Faults(capacity=(_limit(0, cpu="16000m", memory="64Gi"),)))

    with pytest.raises(provider.InsufficientCapacity) as refused:
        await cloud.create_vm(
            name=provider.VmName("big-0"), pool="big", spec=dataclasses.replace(LARGE, zone=None)
        )
    small = await cloud.create_vm(name=provider.VmName("small-0"), pool="small", spec=SMALL)

    assert (refused.value.zone, refused.value.shape) == (None, "16/64Gi")
    assert small.state is provider.VmState.PROVISIONING


async def test_a_vm_without_a_zone_goes_to_a_zone_with_room(
    cloud: client.SimCloudClient,
) -> None:
    full = tuple(_limit(0, zone=z) for z in store.ZONES[:2])
    await cloud.set_faults(wire.Faults(capacity=full))
    anywhere = dataclasses.replace(SMALL, zone=None)

    placed = [
        await cloud.create_vm(name=provider.VmName(f"a-{i}"), pool="a", spec=anywhere)
        for i in range(4)
    ]

    assert {vm.zone for vm in placed} == {store.ZONES[2]}


async def test_capacity_comes_back_when_the_fault_is_cleared(
    cloud: client.SimCloudClient,
) -> None:
    await cloud.set_faults(wire.Faults(capacity=(_limit(0, zone="sim-1a"),)))
    with pytest.raises(provider.InsufficientCapacity):
        await cloud.create_vm(name=provider.VmName("a-0"), pool="a", spec=SMALL)

    await cloud.set_faults(wire.Faults())
    vm = await cloud.create_vm(name=provider.VmName("a-0"), pool="a", spec=SMALL)

    assert vm.zone == "sim-1a"


async def test_a_deleting_vm_holds_its_capacity_until_it_is_gone(
    cloud: client.SimCloudClient, advance: Callable[[float], None]
) -> None:
    await cloud.set_faults(wire.Faults(capacity=(_limit(1, zone="sim-1a"),)))
    await cloud.create_vm(name=provider.VmName("a-0"), pool="a", spec=SMALL)
    await cloud.delete_vm(provider.VmName("a-0"))

    with pytest.raises(provider.InsufficientCapacity):
        await cloud.create_vm(name=provider.VmName("a-1"), pool="a", spec=SMALL)
    advance(60.0)
    await cloud.create_vm(name=provider.VmName("a-1"), pool="a", spec=SMALL)


async def test_capacity_and_never_joining_kubelets_are_settable_as_json(
    sim: server.SimCloudServer, token: credentials.TokenFile
) -> None:
    auth = {"Authorization": f"Bearer {token.read()}"}
    patch = {
        "capacity": [{"zone": "sim-1a", "maxVms": 0}, {"cpu": "8", "memory": "32Gi", "maxVms": 2}],
        "kubeletNeverJoins": [{"zone": "sim-1c"}],
    }
    async with aiohttp.ClientSession(headers=auth) as session:
        async with session.put(f"{sim.endpoint}/admin/faults", json=patch) as response:
            applied = await response.json()
        async with session.put(
            f"{sim.endpoint}/admin/faults", json={"capacity": [{"zone": "x", "maxVMs": 1}]}
        ) as typo:
            refused = await typo.json()
        async with session.put(
            f"{sim.endpoint}/v1/vms/a-0",
            json={"pool": "a", "cpu": "4", "memory": "16Gi", "pods": 110, "zone": "sim-1a"},
        ) as create:
            answer = await create.json()

    assert response.status == 200
    assert applied["capacity"] == patch["capacity"]
    assert applied["kubeletNeverJoins"] == patch["kubeletNeverJoins"]
    assert typo.status == 400
    assert refused["code"] == "InvalidRequest"
    assert create.status == 503
    assert create.headers["X-Simcloud-Code"] == "InsufficientCapacity"
    assert (answer["code"], answer["zone"], answer["shape"]) == (
        "InsufficientCapacity",
        "sim-1a",
        "4/16Gi",
    )


async def test_faults_set_at_start_refuse_the_first_create(
    config: server.SimCloudConfig, token: credentials.TokenFile
) -> None:
    start = dataclasses.replace(config, capacity=(_limit(0, zone="sim-1a"),))
    async with (
        server.SimCloudServer(start) as sim,
        client.SimCloudClient(sim.endpoint, token=token) as cloud,
    ):
        with pytest.raises(provider.InsufficientCapacity):
            await cloud.create_vm(name=provider.VmName("a-0"), pool="a", spec=SMALL)
        assert (await cloud.faults()).capacity == start.capacity


async def test_a_vm_whose_kubelet_never_joins_runs_and_says_so(
    cloud: client.SimCloudClient, advance: Callable[[float], None]
) -> None:
    await cloud.set_faults(wire.Faults(kubelet_never_joins=(store.MachineSelector(zone="sim-1b"),)))
    joins = await cloud.create_vm(name=provider.VmName("a-0"), pool="a", spec=SMALL)
    silent = await cloud.create_vm(
        name=provider.VmName("a-1"), pool="a", spec=dataclasses.replace(SMALL, zone="sim-1b")
    )
    await cloud.set_faults(wire.Faults())
    advance(60.0)

    listed = {vm.name: vm for vm in await cloud.list_vms(pool="a")}

    assert (joins.kubelet_joins, silent.kubelet_joins) == (True, False)
    assert listed[provider.VmName("a-1")].state is provider.VmState.RUNNING
    # Fixed at creation: the kubelet of that machine never joins, fault cleared or not.
    assert listed[provider.VmName("a-1")].kubelet_joins is False
    assert listed[provider.VmName("a-0")].kubelet_joins is True


async def test_capacity_is_the_account_s_across_clusters(
    sim: server.SimCloudServer, token: credentials.TokenFile, cloud: client.SimCloudClient
) -> None:
    await cloud.set_faults(wire.Faults(capacity=(_limit(1, zone="sim-1a"),)))
    async with (
        client.SimCloudClient(sim.endpoint, token=token, cluster="prod") as prod,
        client.SimCloudClient(sim.endpoint, token=token, cluster="staging") as staging,
    ):
        await prod.create_vm(name=provider.VmName("a-0"), pool="a", spec=SMALL)
        with pytest.raises(provider.InsufficientCapacity):
            await staging.create_vm(name=provider.VmName("a-0"), pool="a", spec=SMALL)


async def test_two_clusters_keep_their_own_vms_of_one_name(
    sim: server.SimCloudServer, token: credentials.TokenFile, cloud: client.SimCloudClient
) -> None:
    async with (
        client.SimCloudClient(sim.endpoint, token=token, cluster="prod") as prod,
        client.SimCloudClient(sim.endpoint, token=token, cluster="staging") as staging,
    ):
        theirs = await prod.create_vm(name=provider.VmName("a-0"), pool="a", spec=SMALL)
        ours = await staging.create_vm(name=provider.VmName("a-0"), pool="a", spec=SMALL)
        await staging.delete_vm(provider.VmName("a-0"))
        prod_view = await prod.list_vms(pool="a")
        staging_stats = await staging.stats()
    everyone = await cloud.list_vms(pool="a")

    assert (theirs.provider_id, ours.provider_id) == (
        "simcloud:///prod/a-0",
        "simcloud:///staging/a-0",
    )
    assert [(vm.provider_id, vm.state) for vm in prod_view] == [
        (theirs.provider_id, provider.VmState.PROVISIONING)
    ]
    assert staging_stats.creations_by_name == {"a-0": 1}
    assert sorted(vm.provider_id for vm in everyone) == [theirs.provider_id, ours.provider_id]


def test_a_state_file_from_before_clusters_keeps_its_vms_in_the_default_cluster(
    state_path: str, clock: store.WallClock
) -> None:
    old = sqlite3.connect(state_path)
    old.executescript(
        """
        CREATE TABLE vms (name TEXT PRIMARY KEY, pool TEXT NOT NULL, cpu TEXT NOT NULL,
            memory TEXT NOT NULL, zone TEXT NOT NULL, created_at REAL NOT NULL,
            ready_at REAL NOT NULL, gone_at REAL);
        CREATE TABLE creations (name TEXT PRIMARY KEY, count INTEGER NOT NULL);
        INSERT INTO vms VALUES ('a-0', 'a', '4', '16Gi', 'sim-1a', 1.0, 2.0, NULL);
        INSERT INTO creations VALUES ('a-0', 3);
        """
    )
    old.close()
    timing = store.Timing(create_latency_seconds=1.0, delete_latency_seconds=1.0)

    migrated = store.SimCloudStore(state_path, timing=timing, clock=clock)
    try:
        [vm] = migrated.list_vms(cluster=store.DEFAULT_CLUSTER)
        assert (vm.name, vm.provider_id, vm.kubelet_joins) == (
            "a-0",
            "simcloud:///default/a-0",
            True,
        )
        assert migrated.list_vms(cluster="prod") == []
        assert migrated.creations_by_name() == {"a-0": 3}
    finally:
        migrated.close()
