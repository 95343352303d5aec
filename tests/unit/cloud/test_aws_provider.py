"""What the EC2 provider does beyond the shared contract: the tags and launch settings an
instance gets, the instance type check, no duplicate after a crash, the client token,
and how EC2 errors are classed. Launches go to a moto server process through the SDK."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator

import botocore.exceptions
import pytest

import ec2_server
from nodepool_operator.api import launch
from nodepool_operator.cloud import aws, provider

NAME = provider.VmName("web-0")


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ec2_server.MotoEc2]:
    with ec2_server.running(tmp_path_factory.mktemp("moto") / "moto.log") as server:
        yield server


@pytest.fixture
def settings(moto: ec2_server.MotoEc2, monkeypatch: pytest.MonkeyPatch) -> launch.AwsLaunch:
    for key, value in ec2_server.ENV.items():
        monkeypatch.setenv(key, value)
    moto.reset()
    return moto.launch_settings(tags={"team": "web", "cost-center": "42"})


@pytest.fixture
async def ec2(
    moto: ec2_server.MotoEc2, settings: launch.AwsLaunch
) -> AsyncIterator[aws.Ec2Provider]:
    cloud = aws.Ec2Provider(endpoint_url=moto.endpoint)
    yield cloud
    await cloud.close()


def _spec(settings: launch.AwsLaunch, **changes: object) -> provider.MachineSpec:
    spec = provider.MachineSpec(
        cpu=ec2_server.CPU,
        memory=ec2_server.MEMORY,
        pods=110,
        zone="us-east-1c",
        pool_uid="0b7c-uid",
        launch=launch.ProviderSection(aws=settings),
    )
    return dataclasses.replace(spec, **changes)


async def test_an_instance_carries_the_pool_the_name_the_uid_and_the_extra_tags(
    ec2: aws.Ec2Provider, moto: ec2_server.MotoEc2, settings: launch.AwsLaunch
) -> None:
    vm = await ec2.create_vm(name=NAME, pool="web", spec=_spec(settings))

    [instance] = moto.instances(**{aws.VM_NAME_TAG: NAME})
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags[aws.POOL_TAG] == "web"
    assert tags[aws.POOL_UID_TAG] == "0b7c-uid"
    assert tags["Name"] == NAME
    assert (tags["team"], tags["cost-center"]) == ("web", "42")
    assert instance["InstanceType"] == ec2_server.INSTANCE_TYPE
    assert instance["ImageId"] == settings.image_id
    assert instance["SubnetId"] == settings.subnets["us-east-1c"]
    assert [g["GroupId"] for g in instance["SecurityGroups"]] == list(settings.security_group_ids)
    assert vm.provider_id == f"aws:///us-east-1c/{instance['InstanceId']}"


async def test_a_vm_without_a_zone_goes_to_the_first_zone_s_subnet(
    ec2: aws.Ec2Provider, moto: ec2_server.MotoEc2, settings: launch.AwsLaunch
) -> None:
    vm = await ec2.create_vm(name=NAME, pool="web", spec=_spec(settings, zone=None))

    first_zone = min(settings.subnets)
    assert vm.zone == first_zone
    [instance] = moto.instances(**{aws.VM_NAME_TAG: NAME})
    assert instance["SubnetId"] == settings.subnets[first_zone]


async def test_a_restarted_operator_finds_the_instance_instead_of_launching_another(
    moto: ec2_server.MotoEc2, settings: launch.AwsLaunch
) -> None:
    # moto ignores ClientToken, so only the describe by tag can prevent the duplicate here.
    before_crash = aws.Ec2Provider(endpoint_url=moto.endpoint)
    first = await before_crash.create_vm(name=NAME, pool="web", spec=_spec(settings))
    await before_crash.close()
    after_restart = aws.Ec2Provider(endpoint_url=moto.endpoint)

    again = await after_restart.create_vm(name=NAME, pool="web", spec=_spec(settings))
    await after_restart.close()

    assert again.provider_id == first.provider_id
    assert len(moto.instances(**{aws.VM_NAME_TAG: NAME})) == 1


async def test_an_instance_type_smaller_than_the_template_is_refused_before_launch(
    ec2: aws.Ec2Provider, moto: ec2_server.MotoEc2, settings: launch.AwsLaunch
) -> None:
    with pytest.raises(provider.InvalidMachineSpec) as refused:
        await ec2.create_vm(name=NAME, pool="web", spec=_spec(settings, cpu="4"))

    assert refused.value.code == "InstanceTypeMismatch"
    assert "m5.large has 2 vCPUs and 8192Mi" in refused.value.message
    assert moto.instances(**{aws.VM_NAME_TAG: NAME}) == []


async def test_template_memory_above_the_type_s_is_refused(
    ec2: aws.Ec2Provider, settings: launch.AwsLaunch
) -> None:
    with pytest.raises(provider.InvalidMachineSpec, match="memory 9Gi"):
        await ec2.create_vm(name=NAME, pool="web", spec=_spec(settings, memory="9Gi"))


async def test_an_unknown_instance_type_is_an_invalid_spec(
    ec2: aws.Ec2Provider, settings: launch.AwsLaunch
) -> None:
    unknown = dataclasses.replace(settings, instance_type="zz9.huge")

    with pytest.raises(provider.InvalidMachineSpec) as refused:
        await ec2.create_vm(name=NAME, pool="web", spec=_spec(unknown))

    assert refused.value.code == "InvalidInstanceType"


async def test_a_template_without_an_aws_section_is_an_invalid_spec(
    ec2: aws.Ec2Provider, settings: launch.AwsLaunch
) -> None:
    with pytest.raises(provider.InvalidMachineSpec) as refused:
        await ec2.create_vm(name=NAME, pool="web", spec=_spec(settings, launch=None))

    assert refused.value.code == "NoLaunchSettings"


async def test_a_zone_without_a_subnet_is_an_invalid_spec(
    ec2: aws.Ec2Provider, settings: launch.AwsLaunch
) -> None:
    with pytest.raises(provider.InvalidMachineSpec) as refused:
        await ec2.create_vm(name=NAME, pool="web", spec=_spec(settings, zone="eu-west-3a"))

    assert refused.value.code == "NoSubnetForZone"


def test_the_client_token_is_stable_and_tells_pools_names_and_incarnations_apart() -> None:
    base = {"pool_uid": "uid-1", "name": "web-0", "parameters": {"ImageId": "ami-1"}}
    token = aws.client_token(**base, previous=None)

    assert token == aws.client_token(**base, previous=None)
    assert len(token) <= 64
    assert token.isascii()
    others = [
        aws.client_token(**{**base, "pool_uid": "uid-2"}, previous=None),
        aws.client_token(**{**base, "name": "web-1"}, previous=None),
        aws.client_token(**{**base, "parameters": {"ImageId": "ami-2"}}, previous=None),
        aws.client_token(**base, previous="i-0123456789abcdef0"),
    ]
    assert token not in others
    assert len(set(others)) == len(others)


def _answer(code: str, status: int) -> botocore.exceptions.ClientError:
    response = {
        "Error": {"Code": code, "Message": f"the {code} message"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return botocore.exceptions.ClientError(response, "RunInstances")


@pytest.mark.parametrize(
    ("code", "status", "kind", "classed_code"),
    [
        ("InsufficientInstanceCapacity", 500, provider.PermanentCloudError, None),
        ("InstanceLimitExceeded", 400, provider.QuotaExceeded, None),
        ("VcpuLimitExceeded", 400, provider.QuotaExceeded, None),
        ("RequestLimitExceeded", 503, provider.RateLimited, None),
        ("InternalError", 500, provider.TransientCloudError, None),
        ("Unavailable", 503, provider.TransientCloudError, None),
        ("AuthFailure", 401, provider.PermanentCloudError, "AuthFailure"),
        ("UnauthorizedOperation", 403, provider.PermanentCloudError, "AuthFailure"),
        ("InvalidAMIID.NotFound", 400, provider.InvalidMachineSpec, None),
        ("InvalidSubnetID.NotFound", 400, provider.InvalidMachineSpec, None),
        ("DryRunOperation", 412, provider.PermanentCloudError, None),
    ],
)
def test_ec2_errors_are_classed(
    code: str, status: int, kind: type[provider.CloudError], classed_code: str | None
) -> None:
    classed = aws.classify(_answer(code, status), what="RunInstances")

    assert type(classed) is kind
    assert classed.code == (classed_code or code)
    assert classed.message.startswith(f"RunInstances: {code}: the {code} message")


def test_capacity_is_permanent_even_when_ec2_answers_it_with_a_5xx() -> None:
    # EC2 sends InsufficientInstanceCapacity as a 500; retrying the same zone does not help.
    classed = aws.classify(_answer("InsufficientInstanceCapacity", 500), what="RunInstances")

    assert not classed.transient


def test_an_auth_failure_says_where_to_look() -> None:
    classed = aws.classify(_answer("UnauthorizedOperation", 403), what="RunInstances")

    assert "IAM" in classed.message
    assert "deploy/aws/" in classed.message


def test_missing_credentials_and_unreachable_endpoints_are_classed() -> None:
    missing = aws.classify(botocore.exceptions.NoCredentialsError(), what="DescribeInstances")
    unreachable = aws.classify(
        botocore.exceptions.EndpointConnectionError(endpoint_url="https://ec2.example"),
        what="DescribeInstances",
    )

    assert (type(missing), missing.code) == (provider.PermanentCloudError, "NoCredentials")
    assert "web identity / IRSA" in missing.message
    assert type(unreachable) is provider.TransientCloudError
