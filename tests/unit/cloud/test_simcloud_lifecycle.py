"""VM lifecycle through the client: idempotent create and delete, states over time,
listing by pool, and state that outlives the server."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable

import pytest

from nodepool_operator.cloud import credentials, provider
from nodepool_operator.cloud.simcloud import client, server, store
from unit.cloud import simcloud_calls

CREATE_LATENCY = 10.0  # as the config fixture sets them
DELETE_LATENCY = 5.0
SPEC = provider.MachineSpec(cpu="4", memory="16Gi", pods=110)
NAME = provider.VmName("pool-a-0")


async def test_create_returns_a_provisioning_vm_with_its_provider_id(
    cloud: client.SimCloudClient, clock: store.WallClock
) -> None:
    vm = await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)

    assert vm.name == NAME
    assert vm.pool == "pool-a"
    assert (vm.cpu, vm.memory) == ("4", "16Gi")
    assert vm.state is provider.VmState.PROVISIONING
    assert vm.provider_id == "simcloud:///default/pool-a-0"
    assert vm.created_at == clock()
    assert vm.zone is not None


async def test_create_twice_with_one_name_makes_one_vm(cloud: client.SimCloudClient) -> None:
    first = await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)
    second = await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)

    assert second == first
    assert await cloud.list_vms(pool="pool-a") == [first]
    stats = await cloud.stats()
    assert stats.creations_by_name == {NAME: 1}
    assert stats.responses_by_call["PUT /v1/vms/{name}"] == {201: 1, 200: 1}


async def test_create_with_an_existing_name_keeps_the_first_spec(
    cloud: client.SimCloudClient,
) -> None:
    first = await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)
    bigger = dataclasses.replace(SPEC, cpu="8")

    again = await cloud.create_vm(name=NAME, pool="pool-a", spec=bigger)

    assert again == first


async def test_create_with_a_name_taken_by_another_pool_is_a_conflict(
    cloud: client.SimCloudClient,
) -> None:
    await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)

    with pytest.raises(provider.VmConflict) as raised:
        await cloud.create_vm(name=NAME, pool="pool-b", spec=SPEC)

    assert raised.value.transient is False
    assert raised.value.code == "VmConflict"


async def test_vm_is_running_once_its_create_latency_has_passed(
    cloud: client.SimCloudClient, advance: Callable[[float], None]
) -> None:
    await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)

    advance(CREATE_LATENCY - 0.01)
    still_booting = await cloud.get_vm(NAME)
    advance(0.01)
    booted = await cloud.get_vm(NAME)

    assert still_booting is not None
    assert still_booting.state is provider.VmState.PROVISIONING
    assert booted is not None
    assert booted.state is provider.VmState.RUNNING


async def test_boot_times_stay_within_mean_plus_or_minus_jitter(
    serving: simcloud_calls.Serving,
    clock: store.WallClock,
    advance: Callable[[float], None],
) -> None:
    async with serving(clock=clock, latency_jitter_seconds=2.0) as cloud:
        for i in range(20):
            await cloud.create_vm(name=provider.VmName(f"pool-a-{i}"), pool="pool-a", spec=SPEC)

        advance(CREATE_LATENCY - 2.0 - 0.01)
        early = {vm.state for vm in await cloud.list_vms(pool="pool-a")}
        advance(4.0 + 0.02)
        late = {vm.state for vm in await cloud.list_vms(pool="pool-a")}

    assert early == {provider.VmState.PROVISIONING}
    assert late == {provider.VmState.RUNNING}


async def test_vm_becomes_running_on_the_real_clock(
    serving: simcloud_calls.Serving,
) -> None:
    # The one test on real time: a short latency, and no assertion that can lose a race
    # with a busy machine (only that RUNNING is never seen before the latency has passed).
    async with serving(create_latency_seconds=0.1) as cloud:
        created = await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)
        for _ in range(100):
            vm = await cloud.get_vm(NAME)
            assert vm is not None
            if vm.state is provider.VmState.RUNNING:
                break
            await asyncio.sleep(0.02)
        else:
            pytest.fail("VM never became RUNNING")
        assert time.time() - created.created_at >= 0.1


async def test_delete_twice_and_delete_of_an_absent_vm_both_succeed(
    cloud: client.SimCloudClient,
) -> None:
    await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)

    await cloud.delete_vm(NAME)
    await cloud.delete_vm(NAME)
    await cloud.delete_vm(provider.VmName("never-existed"))

    assert (await cloud.stats()).deletions_started == 1


async def test_deleted_vm_is_deleting_then_gone_after_the_delete_latency(
    cloud: client.SimCloudClient, advance: Callable[[float], None]
) -> None:
    await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)
    advance(CREATE_LATENCY)
    await cloud.delete_vm(NAME)

    deleting = await cloud.get_vm(NAME)
    advance(DELETE_LATENCY)

    assert deleting is not None
    assert deleting.state is provider.VmState.DELETING
    assert await cloud.get_vm(NAME) is None
    assert await cloud.list_vms(pool="pool-a") == []


async def test_create_of_a_deleting_name_returns_the_deleting_vm(
    cloud: client.SimCloudClient,
) -> None:
    await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)
    await cloud.delete_vm(NAME)

    vm = await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)

    assert vm.state is provider.VmState.DELETING
    assert (await cloud.stats()).creations_by_name == {NAME: 1}


async def test_create_of_a_name_that_is_gone_makes_a_new_vm(
    cloud: client.SimCloudClient, advance: Callable[[float], None]
) -> None:
    old = await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)
    await cloud.delete_vm(NAME)
    advance(DELETE_LATENCY)

    new = await cloud.create_vm(name=NAME, pool="pool-b", spec=SPEC)

    assert new.state is provider.VmState.PROVISIONING
    assert (new.pool, new.created_at) == ("pool-b", old.created_at + DELETE_LATENCY)
    assert (await cloud.stats()).creations_by_name == {NAME: 2}


async def test_list_returns_only_the_pools_vms_by_name(cloud: client.SimCloudClient) -> None:
    for name, pool in [("a-1", "pool-a"), ("b-0", "pool-b"), ("a-0", "pool-a")]:
        await cloud.create_vm(name=provider.VmName(name), pool=pool, spec=SPEC)

    listed = await cloud.list_vms(pool="pool-a")

    assert [vm.name for vm in listed] == ["a-0", "a-1"]
    assert await cloud.list_vms(pool="pool-c") == []


async def test_get_of_an_absent_vm_is_none(cloud: client.SimCloudClient) -> None:
    assert await cloud.get_vm(provider.VmName("nope")) is None


async def test_vms_and_their_timeline_survive_a_server_restart(
    token: credentials.TokenFile,
    config: server.SimCloudConfig,
    clock: store.WallClock,
    advance: Callable[[float], None],
) -> None:
    async with (
        server.SimCloudServer(config, clock=clock) as sim,
        client.SimCloudClient(sim.endpoint, token=token) as cloud,
    ):
        created = await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)

    advance(CREATE_LATENCY)
    async with (
        server.SimCloudServer(config, clock=clock) as sim,
        client.SimCloudClient(sim.endpoint, token=token) as cloud,
    ):
        after = await cloud.get_vm(NAME)
        again = await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)
        stats = await cloud.stats()

    assert after == dataclasses.replace(created, state=provider.VmState.RUNNING)
    assert again == after
    assert stats.creations_by_name == {NAME: 1}


async def test_a_vm_is_placed_in_the_zone_its_create_names(cloud: client.SimCloudClient) -> None:
    spec = dataclasses.replace(SPEC, zone="eu-west-1b")

    created = await cloud.create_vm(name=NAME, pool="pool-a", spec=spec)

    assert created.zone == "eu-west-1b"
    assert await cloud.get_vm(NAME) == created
    assert await cloud.list_vms(pool="pool-a") == [created]


async def test_without_a_zone_the_cloud_chooses_one_of_its_own_for_good(
    cloud: client.SimCloudClient,
) -> None:
    created = await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)

    assert created.zone in store.ZONES
    assert (await cloud.get_vm(NAME)) == created


async def test_a_zone_that_cannot_be_a_label_value_is_an_invalid_machine_spec(
    cloud: client.SimCloudClient,
) -> None:
    spec = dataclasses.replace(SPEC, zone="eu west")

    with pytest.raises(provider.InvalidMachineSpec, match="zone"):
        await cloud.create_vm(name=NAME, pool="pool-a", spec=spec)
    assert await cloud.list_vms(pool="pool-a") == []


async def test_a_vm_keeps_its_zone_across_a_server_restart(
    token: credentials.TokenFile, config: server.SimCloudConfig, clock: store.WallClock
) -> None:
    spec = dataclasses.replace(SPEC, zone="zone-c")
    async with (
        server.SimCloudServer(config, clock=clock) as sim,
        client.SimCloudClient(sim.endpoint, token=token) as cloud,
    ):
        await cloud.create_vm(name=NAME, pool="pool-a", spec=spec)

    async with (
        server.SimCloudServer(config, clock=clock) as sim,
        client.SimCloudClient(sim.endpoint, token=token) as cloud,
    ):
        after = await cloud.get_vm(NAME)
        # The name is the idempotency key: asking again elsewhere moves nothing.
        again = await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)

    assert after is not None
    assert after.zone == "zone-c"
    assert again.zone == "zone-c"
