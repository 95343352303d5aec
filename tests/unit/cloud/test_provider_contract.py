"""The ``CloudProvider`` contract, one suite that every provider passes: the simulated
cloud (in process, on a hand-driven clock) and the EC2 provider (against a moto server
process on loopback, through the real SDK).

What the NodePool controller relies on: create is idempotent by name and refuses a name
another pool holds; listing is by pool; get and delete of an absent VM are no errors; a
created VM becomes Running, and a deleted one goes away.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest

import ec2_server
from nodepool_operator.api import launch
from nodepool_operator.cloud import aws, provider

NAME = provider.VmName("pool-a-0")
ZONE = "us-east-1b"


@dataclasses.dataclass
class Contract:
    """A provider under test, and how to let its VMs move on (boot, go away)."""

    cloud: provider.CloudProvider
    settle: Callable[[], Awaitable[None]]
    spec: provider.MachineSpec


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ec2_server.MotoEc2]:
    with ec2_server.running(tmp_path_factory.mktemp("moto") / "moto.log") as server:
        yield server


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in ec2_server.ENV.items():
        monkeypatch.setenv(key, value)


@pytest.fixture
def moto_settings(moto: ec2_server.MotoEc2) -> launch.AwsLaunch:
    moto.reset()
    return moto.launch_settings()


@pytest.fixture
async def ec2(
    aws_env: None, moto: ec2_server.MotoEc2, moto_settings: launch.AwsLaunch
) -> AsyncIterator[aws.Ec2Provider]:
    cloud = aws.Ec2Provider(endpoint_url=moto.endpoint)
    yield cloud
    await cloud.close()


async def _moto_needs_no_time() -> None:
    """moto moves an instance to running (and to terminated) at once."""


@pytest.fixture(params=["simcloud", "aws"])
def contract(request: pytest.FixtureRequest) -> Contract:
    # Only the fixtures of the provider under test are set up (no moto for simcloud).
    if request.param == "simcloud":
        advance: Callable[[float], None] = request.getfixturevalue("advance")

        async def past_latencies() -> None:
            advance(60.0)  # beyond the conftest's create and delete latencies

        spec = provider.MachineSpec(cpu="4", memory="16Gi", pods=110, zone=ZONE, pool_uid="uid-a")
        return Contract(request.getfixturevalue("cloud"), past_latencies, spec)
    settings: launch.AwsLaunch = request.getfixturevalue("moto_settings")
    spec = provider.MachineSpec(
        cpu=ec2_server.CPU,
        memory=ec2_server.MEMORY,
        pods=110,
        zone=ZONE,
        pool_uid="uid-a",
        launch=launch.ProviderSection(aws=settings),
    )
    return Contract(request.getfixturevalue("ec2"), _moto_needs_no_time, spec)


async def test_create_returns_the_vm_of_that_name_and_pool(contract: Contract) -> None:
    vm = await contract.cloud.create_vm(name=NAME, pool="pool-a", spec=contract.spec)

    assert (vm.name, vm.pool) == (NAME, "pool-a")
    assert (vm.cpu, vm.memory) == (contract.spec.cpu, contract.spec.memory)
    assert vm.state in (provider.VmState.PROVISIONING, provider.VmState.RUNNING)
    assert vm.zone == ZONE
    assert vm.provider_id
    assert vm.created_at > 0


async def test_create_twice_with_one_name_makes_one_vm(contract: Contract) -> None:
    first = await contract.cloud.create_vm(name=NAME, pool="pool-a", spec=contract.spec)
    second = await contract.cloud.create_vm(name=NAME, pool="pool-a", spec=contract.spec)

    assert second.provider_id == first.provider_id
    assert [vm.name for vm in await contract.cloud.list_vms(pool="pool-a")] == [NAME]


async def test_a_name_held_by_another_pool_is_a_conflict(contract: Contract) -> None:
    await contract.cloud.create_vm(name=NAME, pool="pool-a", spec=contract.spec)

    with pytest.raises(provider.VmConflict):
        await contract.cloud.create_vm(name=NAME, pool="pool-b", spec=contract.spec)
    assert await contract.cloud.list_vms(pool="pool-b") == []


async def test_listing_is_by_pool(contract: Contract) -> None:
    for name, pool in [("pool-a-0", "pool-a"), ("pool-a-1", "pool-a"), ("pool-b-0", "pool-b")]:
        await contract.cloud.create_vm(name=provider.VmName(name), pool=pool, spec=contract.spec)

    listed = await contract.cloud.list_vms(pool="pool-a")

    assert sorted(vm.name for vm in listed) == ["pool-a-0", "pool-a-1"]
    assert {vm.pool for vm in listed} == {"pool-a"}


async def test_an_absent_vm_reads_as_none_and_deletes_without_error(contract: Contract) -> None:
    absent = provider.VmName("pool-a-9")

    assert await contract.cloud.get_vm(absent) is None
    await contract.cloud.delete_vm(absent)
    assert await contract.cloud.list_vms(pool="pool-a") == []


async def test_a_created_vm_becomes_running(contract: Contract) -> None:
    created = await contract.cloud.create_vm(name=NAME, pool="pool-a", spec=contract.spec)
    await contract.settle()

    vm = await contract.cloud.get_vm(NAME)

    assert vm is not None
    assert vm.state is provider.VmState.RUNNING
    assert vm.provider_id == created.provider_id


async def test_a_deleted_vm_goes_away_and_a_second_delete_is_no_error(contract: Contract) -> None:
    await contract.cloud.create_vm(name=NAME, pool="pool-a", spec=contract.spec)
    await contract.settle()

    await contract.cloud.delete_vm(NAME)
    deleting = await contract.cloud.get_vm(NAME)
    await contract.cloud.delete_vm(NAME)
    await contract.settle()

    assert deleting is None or deleting.state is provider.VmState.DELETING
    assert await contract.cloud.get_vm(NAME) is None
    assert await contract.cloud.list_vms(pool="pool-a") == []


async def test_a_name_can_be_created_again_once_its_vm_is_gone(contract: Contract) -> None:
    first = await contract.cloud.create_vm(name=NAME, pool="pool-a", spec=contract.spec)
    await contract.settle()
    await contract.cloud.delete_vm(NAME)
    await contract.settle()

    again = await contract.cloud.create_vm(name=NAME, pool="pool-a", spec=contract.spec)

    assert again.name == NAME
    assert again.state is not provider.VmState.DELETING
    assert [vm.name for vm in await contract.cloud.list_vms(pool="pool-a")] == [NAME]
    if first.provider_id.startswith("aws:"):
        assert again.provider_id != first.provider_id  # a new instance, not the old one
