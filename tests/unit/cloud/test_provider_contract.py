"""The ``CloudProvider`` contract, one suite that every provider passes: the simulated
cloud (in process, on a hand-driven clock) and the EC2 provider (against a moto server
process on loopback, through the real SDK).

What the NodePool controller relies on: create is idempotent by name and refuses a name
another pool holds; listing is by pool; get and delete of an absent VM are no errors; a
created VM becomes Running, and a deleted one goes away. Each provider serves one cluster:
another cluster's VM of the same name is never seen, adopted or deleted. A zone out of
capacity is ``InsufficientCapacity`` with the zone and the shape (simcloud by its faults;
moto never runs out, so its SDK session answers as EC2 does, with
``ec2_server.refuse_capacity``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable

import aiobotocore.session
import pytest

import ec2_server
from nodepool_operator.api import launch
from nodepool_operator.cloud import aws, credentials, provider
from nodepool_operator.cloud.simcloud import client, server, store

NAME = provider.VmName("pool-a-0")
ZONE = "us-east-1b"
OTHER_ZONE = "us-east-1c"


@dataclasses.dataclass
class Contract:
    """A provider under test, and how to let its VMs move on (boot, go away)."""

    cloud: provider.CloudProvider
    other_cluster: provider.CloudProvider
    """The same cloud, as the provider of another cluster sees it."""
    settle: Callable[[], Awaitable[None]]
    spec: provider.MachineSpec
    no_capacity_in: Callable[[str], Awaitable[None]]
    """From now on, the zone has no room for ``spec``."""
    shape: str
    """How the provider names ``spec``'s shape in a capacity error."""


@pytest.fixture
def moto_settings(moto: ec2_server.MotoEc2) -> launch.AwsLaunch:
    moto.reset()
    return moto.launch_settings()


class _Monotonic:
    """The providers' clock for how long a describe is reused; moved by ``settle``."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def aws_clock() -> _Monotonic:
    return _Monotonic()


@pytest.fixture
def aws_session() -> aiobotocore.session.AioSession:
    return aiobotocore.session.get_session()


@pytest.fixture
async def ec2(
    aws_env: None,
    moto: ec2_server.MotoEc2,
    moto_settings: launch.AwsLaunch,
    aws_session: aiobotocore.session.AioSession,
    aws_clock: _Monotonic,
) -> AsyncIterator[tuple[aws.Ec2Provider, aws.Ec2Provider]]:
    ours = aws.Ec2Provider(
        cluster_name="ours",
        endpoint_url=moto.endpoint,
        session=aws_session,
        monotonic=aws_clock.__call__,
    )
    theirs = aws.Ec2Provider(
        cluster_name="theirs", endpoint_url=moto.endpoint, monotonic=aws_clock.__call__
    )
    yield ours, theirs
    await ours.close()
    await theirs.close()


@pytest.fixture
async def simcloud_clusters(
    sim: server.SimCloudServer, token: credentials.TokenFile
) -> AsyncIterator[tuple[client.SimCloudClient, client.SimCloudClient]]:
    async with (
        client.SimCloudClient(sim.endpoint, token=token, cluster="ours") as ours,
        client.SimCloudClient(sim.endpoint, token=token, cluster="theirs") as theirs,
    ):
        yield ours, theirs


@pytest.fixture(params=["simcloud", "aws"])
def contract(request: pytest.FixtureRequest) -> Contract:
    # Only the fixtures of the provider under test are set up (no moto for simcloud).
    if request.param == "simcloud":
        advance: Callable[[float], None] = request.getfixturevalue("advance")
        ours, theirs = request.getfixturevalue("simcloud_clusters")

        async def past_latencies() -> None:
            advance(60.0)  # beyond the conftest's create and delete latencies

        async def simcloud_full(zone: str) -> None:
            faults = await ours.faults()
            full = store.CapacityLimit(offering=store.MachineSelector(zone=zone), max_vms=0)
            await ours.set_faults(dataclasses.replace(faults, capacity=(*faults.capacity, full)))

        spec = provider.MachineSpec(cpu="4", memory="16Gi", pods=110, zone=ZONE, pool_uid="uid-a")
        return Contract(ours, theirs, past_latencies, spec, simcloud_full, "4/16Gi")
    settings: launch.AwsLaunch = request.getfixturevalue("moto_settings")
    session: aiobotocore.session.AioSession = request.getfixturevalue("aws_session")
    ours, theirs = request.getfixturevalue("ec2")
    clock: _Monotonic = request.getfixturevalue("aws_clock")

    async def past_describe_reuse() -> None:
        # moto moves an instance to running (and to terminated) at once; the providers
        # only need to describe again.
        clock.now += 60.0

    async def ec2_full(zone: str) -> None:
        ec2_server.refuse_capacity(session, [settings.subnets[zone]])

    spec = provider.MachineSpec(
        cpu=ec2_server.CPU,
        memory=ec2_server.MEMORY,
        pods=110,
        zone=ZONE,
        pool_uid="uid-a",
        launch=launch.ProviderSection(aws=settings),
    )
    return Contract(ours, theirs, past_describe_reuse, spec, ec2_full, ec2_server.INSTANCE_TYPE)


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


async def test_another_cluster_s_vm_of_the_same_name_is_not_seen_adopted_or_deleted(
    contract: Contract,
) -> None:
    theirs = await contract.other_cluster.create_vm(name=NAME, pool="pool-a", spec=contract.spec)

    invisible = await contract.cloud.get_vm(NAME)
    ours = await contract.cloud.create_vm(name=NAME, pool="pool-a", spec=contract.spec)
    listed = await contract.cloud.list_vms(pool="pool-a")
    await contract.cloud.delete_vm(NAME)
    await contract.settle()

    assert invisible is None
    assert ours.provider_id != theirs.provider_id
    assert [vm.provider_id for vm in listed] == [ours.provider_id]
    still = await contract.other_cluster.get_vm(NAME)
    assert still is not None
    assert (still.provider_id, still.state) == (theirs.provider_id, provider.VmState.RUNNING)
    assert await contract.cloud.get_vm(NAME) is None


async def test_a_zone_out_of_capacity_is_an_insufficient_capacity_error(
    contract: Contract,
) -> None:
    await contract.no_capacity_in(ZONE)

    with pytest.raises(provider.InsufficientCapacity) as refused:
        await contract.cloud.create_vm(name=NAME, pool="pool-a", spec=contract.spec)

    assert not refused.value.transient
    assert (refused.value.zone, refused.value.shape) == (ZONE, contract.shape)
    assert await contract.cloud.list_vms(pool="pool-a") == []
    assert await contract.cloud.get_vm(NAME) is None


async def test_a_zone_out_of_capacity_leaves_other_zones_alone(contract: Contract) -> None:
    await contract.no_capacity_in(ZONE)
    elsewhere = dataclasses.replace(contract.spec, zone=OTHER_ZONE)

    vm = await contract.cloud.create_vm(name=NAME, pool="pool-a", spec=elsewhere)

    assert vm.zone == OTHER_ZONE
