"""The client token on an EC2 that honours it (moto does not): ``ec2_server.FakeEc2`` keeps
tokens as EC2 documents them, answering a repeated token with the instance it first made,
whatever its state now, terminated included.

What must hold: two launches of one VM that race past a describe that has not caught up
make one instance, whichever replica of the operator makes them; a name reused makes a
new instance, however often it is reused."""

from __future__ import annotations

import asyncio

import ec2_server
from nodepool_operator.api import launch
from nodepool_operator.cloud import aws, aws_launch, provider

SETTINGS = launch.AwsLaunch(
    instance_type="m5.large", image_id="ami-12c6146b", subnets={"us-east-1a": "subnet-1234abcd"}
)
SPEC = provider.MachineSpec(
    cpu="2",
    memory="8Gi",
    pods=110,
    zone="us-east-1a",
    pool_uid="uid-1",
    launch=launch.ProviderSection(aws=SETTINGS),
)
NAME = provider.VmName("web-0")


def _replica(ec2: ec2_server.FakeEc2) -> aws.Ec2Provider:
    """One operator process; no describe is reused, so each call sees EC2 as it is."""
    return aws.Ec2Provider(cluster_name="prod", session=ec2.session(), listing_max_age=-1.0)


async def test_a_launch_the_describe_missed_is_answered_with_the_same_instance() -> None:
    ec2 = ec2_server.FakeEc2()
    with ec2.lagging():  # the second replica's describe has not caught up with the first
        first = await _replica(ec2).create_vm(name=NAME, pool="web", spec=SPEC)
        again = await _replica(ec2).create_vm(name=NAME, pool="web", spec=SPEC)

    assert again.provider_id == first.provider_id
    assert ec2.launches == 1


async def test_two_replicas_racing_to_launch_one_vm_make_one_instance() -> None:
    ec2 = ec2_server.FakeEc2()

    racing = await asyncio.gather(
        _replica(ec2).create_vm(name=NAME, pool="web", spec=SPEC),
        _replica(ec2).create_vm(name=NAME, pool="web", spec=SPEC),
    )

    assert racing[0].provider_id == racing[1].provider_id
    assert ec2.launches == 1


async def test_one_name_reused_50_times_makes_50_instances_and_no_duplicate() -> None:
    # Each cycle: a replica launches the VM, a second replica whose describe lags launches
    # it again (a retry, or a new leader), then it is terminated. Every 10th cycle the
    # name is reused only after EC2 stopped showing its terminated instances.
    ec2 = ec2_server.FakeEc2()
    leader, other = _replica(ec2), _replica(ec2)
    seen: list[str] = []
    for cycle in range(50):
        if cycle % 10 == 9:
            ec2.forget_terminated()
        with ec2.lagging():
            vm = await leader.create_vm(name=NAME, pool="web", spec=SPEC)
            raced = await other.create_vm(name=NAME, pool="web", spec=SPEC)
        assert raced.provider_id == vm.provider_id
        assert vm.state is provider.VmState.PROVISIONING
        seen.append(vm.provider_id)
        await (leader if cycle % 2 else other).delete_vm(NAME)

    assert len(set(seen)) == 50
    assert ec2.launches == 50
    # Per replica, a launch costs one RunInstances when the previous instance shows (44
    # cycles); a launch with none showing (the first, and the 5 after forgetting) walks
    # the tokens of the earlier such launches: 1, 2, ... 6 calls. No cap, and no walk
    # through all 50 incarnations.
    assert ec2.calls["RunInstances"] == 2 * 44 + 2 * (1 + 2 + 3 + 4 + 5 + 6)


def test_the_token_tells_clusters_pools_names_parameters_and_incarnations_apart() -> None:
    base = {
        "cluster": "prod",
        "pool_uid": "uid-1",
        "name": "web-0",
        "parameters": {"ImageId": "ami-1"},
        "anchor": None,
        "previous": None,
    }
    token = aws_launch.client_token(**base)  # type: ignore[arg-type]

    assert token == aws_launch.client_token(**base)  # type: ignore[arg-type]
    assert len(token) <= 64
    assert token.isascii()
    changes = [
        {"cluster": "staging"},
        {"pool_uid": "uid-2"},
        {"name": "web-1"},
        {"parameters": {"ImageId": "ami-2"}},
        {"anchor": "i-0123456789abcdef0"},
        {"previous": "i-0123456789abcdef0"},
    ]
    others = [aws_launch.client_token(**{**base, **change}) for change in changes]  # type: ignore[arg-type]
    assert token not in others
    assert len(set(others)) == len(others)
