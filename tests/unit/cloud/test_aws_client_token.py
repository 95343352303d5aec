"""The client token on an EC2 that honours it (moto does not): a fake EC2 client that
keeps tokens as EC2 documents them, answering a repeated token with the same instance,
whatever state it is in now, terminated included (for at least 24 hours)."""

from __future__ import annotations

import contextlib
import datetime
import itertools
from collections.abc import AsyncIterator
from typing import Any

from nodepool_operator.api import launch
from nodepool_operator.cloud import aws, provider

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


class TokenKeepingEc2:
    """The EC2 calls the provider makes, with EC2's client-token rule and no describe
    lag; ``hide_from_describe`` simulates a describe that has not caught up yet."""

    def __init__(self) -> None:
        self.instances: list[dict[str, Any]] = []
        self.by_token: dict[str, dict[str, Any]] = {}
        self.launches = 0
        self.hide_from_describe = False
        self._ids = (f"i-{n:017x}" for n in itertools.count(1))

    async def run_instances(self, **request: Any) -> dict[str, Any]:
        known = self.by_token.get(request["ClientToken"])
        if known is None:
            self.launches += 1
            known = {
                "InstanceId": next(self._ids),
                "State": {"Name": "pending"},
                "Placement": {"AvailabilityZone": "us-east-1a"},
                "LaunchTime": datetime.datetime.now(datetime.UTC),
                "Tags": request["TagSpecifications"][0]["Tags"],
            }
            self.instances.append(known)
            self.by_token[request["ClientToken"]] = known
        return {"Instances": [known]}

    def get_paginator(self, _operation: str) -> Any:
        ec2 = self

        class Pages:
            async def paginate(self, Filters: list[dict[str, Any]]) -> AsyncIterator[Any]:  # noqa: N803
                yield {"Reservations": [{"Instances": ec2._matching(Filters)}]}

        return Pages()

    async def describe_instance_types(self, **_: Any) -> dict[str, Any]:
        return {
            "InstanceTypes": [{"VCpuInfo": {"DefaultVCpus": 2}, "MemoryInfo": {"SizeInMiB": 8192}}]
        }

    async def terminate_instances(self, InstanceIds: list[str]) -> dict[str, Any]:  # noqa: N803
        for instance in self.instances:
            if instance["InstanceId"] in InstanceIds:
                instance["State"] = {"Name": "terminated"}
        return {}

    def _matching(self, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.hide_from_describe:
            return []
        found = []
        for instance in self.instances:
            tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
            values = {
                f["Name"]: tags.get(f["Name"].removeprefix("tag:"))
                if f["Name"].startswith("tag:")
                else instance["State"]["Name"]
                for f in filters
            }
            if all(values[f["Name"]] in f["Values"] for f in filters):
                found.append(instance)
        return found


class FakeSession:
    def __init__(self, ec2: TokenKeepingEc2) -> None:
        self.ec2 = ec2

    def create_client(self, *_: Any, **__: Any) -> Any:
        @contextlib.asynccontextmanager
        async def client() -> AsyncIterator[TokenKeepingEc2]:
            yield self.ec2

        return client()


def _provider(ec2: TokenKeepingEc2) -> aws.Ec2Provider:
    return aws.Ec2Provider(session=FakeSession(ec2))


async def test_a_launch_the_describe_missed_is_answered_with_the_same_instance() -> None:
    ec2 = TokenKeepingEc2()
    cloud = _provider(ec2)
    first = await cloud.create_vm(name=NAME, pool="web", spec=SPEC)
    ec2.hide_from_describe = True  # a second operator's describe has not caught up

    again = await cloud.create_vm(name=NAME, pool="web", spec=SPEC)

    assert again.provider_id == first.provider_id
    assert ec2.launches == 1


async def test_a_reused_name_after_termination_gets_a_new_instance() -> None:
    ec2 = TokenKeepingEc2()
    cloud = _provider(ec2)
    old = await cloud.create_vm(name=NAME, pool="web", spec=SPEC)
    await cloud.delete_vm(NAME)

    new = await cloud.create_vm(name=NAME, pool="web", spec=SPEC)

    assert new.provider_id != old.provider_id
    assert new.state is provider.VmState.PROVISIONING
    assert ec2.launches == 2


async def test_the_token_chain_is_walked_the_same_way_by_every_operator() -> None:
    ec2 = TokenKeepingEc2()
    cloud = _provider(ec2)
    await cloud.create_vm(name=NAME, pool="web", spec=SPEC)
    await cloud.delete_vm(NAME)
    second = await cloud.create_vm(name=NAME, pool="web", spec=SPEC)
    ec2.hide_from_describe = True
    restarted = _provider(ec2)

    again = await restarted.create_vm(name=NAME, pool="web", spec=SPEC)

    assert again.provider_id == second.provider_id
    assert ec2.launches == 2
