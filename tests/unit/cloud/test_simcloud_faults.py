"""Injected faults reach the caller as the right CloudError, and stats count what was asked."""

from __future__ import annotations

from collections.abc import Callable

import aiohttp
import pytest

from nodepool_operator.cloud import credentials, provider
from nodepool_operator.cloud.simcloud import client, server, wire
from unit.cloud import simcloud_calls

SPEC = provider.MachineSpec(cpu="4", memory="16Gi", pods=110)
NAME = provider.VmName("pool-a-0")
DELETE_LATENCY = 5.0  # as the config fixture sets it


def vm_name(i: int) -> provider.VmName:
    return provider.VmName(f"pool-a-{i}")


async def test_create_beyond_the_quota_is_a_permanent_quota_error(
    cloud: client.SimCloudClient,
) -> None:
    await cloud.set_faults(wire.Faults(quota_max_vms=2))
    await cloud.create_vm(name=vm_name(0), pool="pool-a", spec=SPEC)
    await cloud.create_vm(name=vm_name(1), pool="pool-a", spec=SPEC)

    with pytest.raises(provider.QuotaExceeded) as raised:
        await cloud.create_vm(name=vm_name(2), pool="pool-a", spec=SPEC)

    assert raised.value.transient is False
    assert isinstance(raised.value, provider.PermanentCloudError)
    assert raised.value.code == "QuotaExceeded"
    assert await cloud.get_vm(vm_name(2)) is None


async def test_create_of_an_existing_vm_succeeds_at_the_quota(
    cloud: client.SimCloudClient,
) -> None:
    await cloud.set_faults(wire.Faults(quota_max_vms=1))
    first = await cloud.create_vm(name=vm_name(0), pool="pool-a", spec=SPEC)

    assert await cloud.create_vm(name=vm_name(0), pool="pool-a", spec=SPEC) == first


async def test_a_deleting_vm_holds_its_quota_until_it_is_gone(
    cloud: client.SimCloudClient, advance: Callable[[float], None]
) -> None:
    await cloud.set_faults(wire.Faults(quota_max_vms=1))
    await cloud.create_vm(name=vm_name(0), pool="pool-a", spec=SPEC)
    await cloud.delete_vm(vm_name(0))

    with pytest.raises(provider.QuotaExceeded):
        await cloud.create_vm(name=vm_name(1), pool="pool-a", spec=SPEC)
    advance(DELETE_LATENCY)
    vm = await cloud.create_vm(name=vm_name(1), pool="pool-a", spec=SPEC)

    assert vm.state is provider.VmState.PROVISIONING


async def test_every_call_fails_transiently_at_error_rate_one(
    cloud: client.SimCloudClient,
) -> None:
    await cloud.set_faults(wire.Faults(transient_error_rate=1.0))

    with pytest.raises(provider.TransientCloudError) as raised:
        await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)
    with pytest.raises(provider.TransientCloudError):
        await cloud.list_vms(pool="pool-a")

    assert raised.value.transient is True
    assert raised.value.code in {"Unavailable", "InternalError"}
    assert set((await cloud.stats()).responses) <= {500, 503}


async def test_retrying_a_create_through_injected_errors_makes_one_vm(
    cloud: client.SimCloudClient,
) -> None:
    # Some injected errors come after the VM was made; the retries must find it.
    await cloud.set_faults(wire.Faults(transient_error_rate=1.0))
    for _ in range(8):
        with pytest.raises(provider.TransientCloudError):
            await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)
    await cloud.set_faults(wire.Faults())

    vm = await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)

    assert vm.name == NAME
    assert (await cloud.stats()).creations_by_name == {NAME: 1}


async def test_rate_limited_call_carries_retry_after(
    cloud: client.SimCloudClient, advance: Callable[[float], None]
) -> None:
    await cloud.set_faults(wire.Faults(rate_limit_per_second=0.5, rate_limit_burst=1))
    await cloud.list_vms(pool="pool-a")

    with pytest.raises(provider.RateLimited) as raised:
        await cloud.list_vms(pool="pool-a")
    advance(2.0)
    await cloud.list_vms(pool="pool-a")

    assert raised.value.retry_after == 2.0
    assert raised.value.transient is True
    assert isinstance(raised.value, provider.TransientCloudError)
    assert (await cloud.stats()).responses == {200: 2, 429: 1}


@pytest.mark.parametrize(
    ("cpu", "memory", "pods"),
    [
        ("0", "16Gi", 110),
        ("-1", "16Gi", 110),
        ("1.5", "16Gi", 110),
        ("0m", "16Gi", 110),
        ("four", "16Gi", 110),
        ("4", "16GB", 110),
        ("4", "0", 110),
        ("4", "-1Gi", 110),
        ("4", "Gi", 110),
        ("4", "16Gi", 0),
    ],
)
async def test_invalid_machine_spec_is_permanent_and_makes_no_vm(
    cloud: client.SimCloudClient, cpu: str, memory: str, pods: int
) -> None:
    spec = provider.MachineSpec(cpu=cpu, memory=memory, pods=pods)

    with pytest.raises(provider.InvalidMachineSpec) as raised:
        await cloud.create_vm(name=NAME, pool="pool-a", spec=spec)

    assert raised.value.transient is False
    assert raised.value.code == "InvalidMachineSpec"
    assert (await cloud.stats()).creations_by_name == {}


@pytest.mark.parametrize(("cpu", "memory"), [("500m", "512Mi"), ("96", "1.5Ti"), ("2", "8G")])
async def test_quantities_in_kubernetes_form_are_accepted(
    cloud: client.SimCloudClient, cpu: str, memory: str
) -> None:
    spec = provider.MachineSpec(cpu=cpu, memory=memory, pods=110)

    vm = await cloud.create_vm(name=NAME, pool="pool-a", spec=spec)

    assert (vm.cpu, vm.memory) == (cpu, memory)


async def test_a_name_that_cannot_be_a_node_name_is_a_permanent_error(
    cloud: client.SimCloudClient,
) -> None:
    with pytest.raises(provider.PermanentCloudError) as raised:
        await cloud.create_vm(name=provider.VmName("Pool_A"), pool="pool-a", spec=SPEC)

    assert raised.value.code == "InvalidRequest"


async def test_a_timed_out_create_may_have_made_the_vm_and_the_retry_finds_it(
    token: credentials.TokenFile, sim: server.SimCloudServer, cloud: client.SimCloudClient
) -> None:
    await cloud.set_faults(wire.Faults(slow_call_seconds=0.5))
    async with client.SimCloudClient(sim.endpoint, token=token, timeout=0.1) as impatient:
        with pytest.raises(provider.TransientCloudError) as raised:
            await impatient.create_vm(name=NAME, pool="pool-a", spec=SPEC)
    await cloud.set_faults(wire.Faults())

    vm = await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)

    assert raised.value.code == "Timeout"
    assert vm.name == NAME
    assert (await cloud.stats()).creations_by_name == {NAME: 1}


async def test_stats_count_v1_calls_by_route_and_status_and_not_admin_calls(
    cloud: client.SimCloudClient,
) -> None:
    await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)
    await cloud.get_vm(NAME)
    await cloud.get_vm(provider.VmName("absent"))
    await cloud.list_vms(pool="pool-a")
    await cloud.faults()

    stats = await cloud.stats()

    assert stats.calls == {
        "PUT /v1/vms/{name}": 1,
        "GET /v1/vms/{name}": 2,
        "GET /v1/vms": 1,
    }
    assert stats.responses_by_call["GET /v1/vms/{name}"] == {200: 1, 404: 1}
    assert stats.responses == {201: 1, 200: 2, 404: 1}
    assert stats.calls_total == 4
    assert stats.vms_created == 1


async def test_reset_stats_zeroes_calls_but_keeps_creations(
    cloud: client.SimCloudClient,
) -> None:
    await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)

    await cloud.reset_stats()
    stats = await cloud.stats()

    assert stats.calls == {}
    assert stats.creations_by_name == {NAME: 1}


async def test_faults_from_the_config_apply_from_the_start(
    serving: simcloud_calls.Serving,
) -> None:
    async with serving(quota_max_vms=0) as cloud:
        with pytest.raises(provider.QuotaExceeded):
            await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)
        assert (await cloud.faults()).quota_max_vms == 0


async def test_unknown_fault_keys_are_rejected(
    sim: server.SimCloudServer, token: credentials.TokenFile
) -> None:
    # Through raw HTTP: the typed client cannot even express a misspelt key.
    auth = {"Authorization": f"Bearer {token.read()}"}
    async with (
        aiohttp.ClientSession(headers=auth) as session,
        session.put(f"{sim.endpoint}/admin/faults", json={"quotaMaxVM": 1}) as response,
    ):
        body = await response.json()

    assert response.status == 400
    assert body["code"] == "InvalidRequest"


async def test_a_wrong_endpoint_is_an_error_not_an_absent_vm(
    token: credentials.TokenFile,
    sim: server.SimCloudServer,
) -> None:
    lost = f"{sim.endpoint}/not-the-api"
    error = await simcloud_calls.get_vm_error(lost, token, NAME, provider.PermanentCloudError)

    assert error.code == "NotFound"


async def test_a_stopped_server_is_a_transient_connection_error(
    token: credentials.TokenFile,
    config: server.SimCloudConfig,
) -> None:
    async with server.SimCloudServer(config) as sim:
        endpoint = sim.endpoint

    error = await simcloud_calls.get_vm_error(endpoint, token, NAME, provider.TransientCloudError)

    assert error.code == "ConnectionError"
