"""What the EC2 provider does beyond the shared contract: the tags and launch settings an
instance gets (cluster, IMDS, root volume, launch template), the instance type check, no
duplicate after a crash, one describe per pass, and how EC2 errors are classed. Launches
go to a moto server process through the SDK; the describe count uses the in-memory
``ec2_server.FakeEc2``."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import aiobotocore.session
import botocore.exceptions
import pytest

import ec2_server
from nodepool_operator.api import launch
from nodepool_operator.cloud import aws, aws_errors, aws_launch, provider

NAME = provider.VmName("web-0")
CLUSTER = "prod"


@pytest.fixture
def settings(moto: ec2_server.MotoEc2, aws_env: None) -> launch.AwsLaunch:
    moto.reset()
    return moto.launch_settings(tags={"team": "web", "cost-center": "42"})


@pytest.fixture
async def ec2(
    moto: ec2_server.MotoEc2, settings: launch.AwsLaunch
) -> AsyncIterator[aws.Ec2Provider]:
    cloud = aws.Ec2Provider(cluster_name=CLUSTER, endpoint_url=moto.endpoint)
    yield cloud
    await cloud.close()


def _spec(settings: launch.AwsLaunch, **changes: object) -> provider.MachineSpec:
    return ec2_server.machine_spec(settings, pool_uid="0b7c-uid", **changes)


async def test_an_instance_carries_the_pool_the_name_the_uid_and_the_extra_tags(
    ec2: aws.Ec2Provider, moto: ec2_server.MotoEc2, settings: launch.AwsLaunch
) -> None:
    vm = await ec2.create_vm(name=NAME, pool="web", spec=_spec(settings))

    [instance] = moto.instances(**{aws_launch.VM_NAME_TAG: NAME})
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags[aws_launch.POOL_TAG] == "web"
    assert tags[aws_launch.POOL_UID_TAG] == "0b7c-uid"
    assert tags["Name"] == NAME
    assert tags[f"kubernetes.io/cluster/{CLUSTER}"] == "owned"
    assert tags[aws_launch.CLUSTER_TAG] == CLUSTER
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
    [instance] = moto.instances(**{aws_launch.VM_NAME_TAG: NAME})
    assert instance["SubnetId"] == settings.subnets[first_zone]


async def test_a_restarted_operator_finds_the_instance_instead_of_launching_another(
    moto: ec2_server.MotoEc2, settings: launch.AwsLaunch
) -> None:
    # moto ignores ClientToken, so only the describe by tag can prevent the duplicate here.
    before_crash = aws.Ec2Provider(cluster_name=CLUSTER, endpoint_url=moto.endpoint)
    first = await before_crash.create_vm(name=NAME, pool="web", spec=_spec(settings))
    await before_crash.close()
    after_restart = aws.Ec2Provider(cluster_name=CLUSTER, endpoint_url=moto.endpoint)

    again = await after_restart.create_vm(name=NAME, pool="web", spec=_spec(settings))
    await after_restart.close()

    assert again.provider_id == first.provider_id
    assert len(moto.instances(**{aws_launch.VM_NAME_TAG: NAME})) == 1


async def test_imdsv2_is_required_with_hop_limit_1_unless_the_template_says_otherwise(
    ec2: aws.Ec2Provider, moto: ec2_server.MotoEc2, settings: launch.AwsLaunch
) -> None:
    relaxed = dataclasses.replace(
        settings,
        metadata_options=launch.MetadataOptions(
            http_tokens="optional", http_put_response_hop_limit=2
        ),
    )
    await ec2.create_vm(name=NAME, pool="web", spec=_spec(settings))
    await ec2.create_vm(name=provider.VmName("web-1"), pool="web", spec=_spec(relaxed))

    [default] = moto.instances(**{aws_launch.VM_NAME_TAG: NAME})
    [chosen] = moto.instances(**{aws_launch.VM_NAME_TAG: "web-1"})
    assert default["MetadataOptions"]["HttpTokens"] == "required"
    assert default["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
    assert chosen["MetadataOptions"]["HttpTokens"] == "optional"
    assert chosen["MetadataOptions"]["HttpPutResponseHopLimit"] == 2


async def test_the_root_volume_has_the_template_s_size_and_type(
    ec2: aws.Ec2Provider, moto: ec2_server.MotoEc2, settings: launch.AwsLaunch
) -> None:
    sized = dataclasses.replace(
        settings, root_volume=launch.RootVolume(volume_size=120, volume_type="gp2")
    )

    await ec2.create_vm(name=NAME, pool="web", spec=_spec(sized))

    [instance] = moto.instances(**{aws_launch.VM_NAME_TAG: NAME})
    [root] = [d for d in instance["BlockDeviceMappings"] if d["DeviceName"] == "/dev/xvda"]
    [volume] = moto.ec2().describe_volumes(VolumeIds=[root["Ebs"]["VolumeId"]])["Volumes"]
    assert (volume["Size"], volume["VolumeType"]) == (120, "gp2")


async def test_a_launch_template_is_named_in_the_launch(
    moto: ec2_server.MotoEc2, settings: launch.AwsLaunch
) -> None:
    template = moto.ec2().create_launch_template(
        LaunchTemplateName="nodes", LaunchTemplateData={"InstanceType": "t3.micro"}
    )["LaunchTemplate"]
    by_id = launch.LaunchTemplateRef(id=template["LaunchTemplateId"], version="1")
    by_name = launch.LaunchTemplateRef(name="nodes")
    session = aiobotocore.session.get_session()
    sent: list[dict[str, object]] = []
    session.register(
        "provide-client-params.ec2.RunInstances", lambda params, **_: sent.append(params)
    )
    cloud = aws.Ec2Provider(cluster_name=CLUSTER, endpoint_url=moto.endpoint, session=session)
    try:
        for index, ref in enumerate([by_id, by_name]):
            templated = dataclasses.replace(settings, launch_template=ref)
            await cloud.create_vm(
                name=provider.VmName(f"web-{index}"), pool="web", spec=_spec(templated)
            )
    finally:
        await cloud.close()

    assert [p["LaunchTemplate"] for p in sent] == [
        {"LaunchTemplateId": template["LaunchTemplateId"], "Version": "1"},
        {"LaunchTemplateName": "nodes", "Version": "$Default"},
    ]
    # The section's own settings override the template's.
    assert {i["InstanceType"] for i in moto.running_in_pool("web")} == {ec2_server.INSTANCE_TYPE}


async def test_another_cluster_s_instance_of_the_same_name_is_never_adopted_or_deleted(
    moto: ec2_server.MotoEc2, settings: launch.AwsLaunch
) -> None:
    production = aws.Ec2Provider(cluster_name="production", endpoint_url=moto.endpoint)
    staging = aws.Ec2Provider(cluster_name="staging", endpoint_url=moto.endpoint)
    try:
        theirs = await production.create_vm(name=NAME, pool="web", spec=_spec(settings))
        ours = await staging.create_vm(name=NAME, pool="web", spec=_spec(settings))
        listed = await staging.list_vms(pool="web")
        await staging.delete_vm(NAME)
        after = await production.get_vm(NAME)
    finally:
        await production.close()
        await staging.close()

    assert ours.provider_id != theirs.provider_id
    assert [vm.provider_id for vm in listed] == [ours.provider_id]
    assert after is not None
    assert after.provider_id == theirs.provider_id
    assert after.state is provider.VmState.RUNNING


async def test_a_zone_out_of_capacity_sends_a_zoneless_vm_to_the_next_zone_s_subnet(
    moto: ec2_server.MotoEc2, settings: launch.AwsLaunch
) -> None:
    first, second = sorted(settings.subnets)[:2]
    session = aiobotocore.session.get_session()
    ec2_server.refuse_capacity(session, [settings.subnets[first]])
    cloud = aws.Ec2Provider(cluster_name=CLUSTER, endpoint_url=moto.endpoint, session=session)
    try:
        vm = await cloud.create_vm(name=NAME, pool="web", spec=_spec(settings, zone=None))
        with pytest.raises(provider.InsufficientCapacity) as refused:
            await cloud.create_vm(
                name=provider.VmName("web-1"), pool="web", spec=_spec(settings, zone=first)
            )
    finally:
        await cloud.close()

    assert vm.zone == second
    assert (refused.value.zone, refused.value.shape) == (first, ec2_server.INSTANCE_TYPE)
    assert refused.value.code == "InsufficientInstanceCapacity"


async def test_one_describe_serves_every_listing_and_create_of_a_pass() -> None:
    fake = ec2_server.FakeEc2()
    now = [0.0]
    cloud = aws.Ec2Provider(
        cluster_name=CLUSTER, session=fake.session(), listing_max_age=2.0, monotonic=lambda: now[0]
    )
    fake_settings = launch.AwsLaunch(
        instance_type="m5.large", image_id="ami-12c6146b", subnets={"us-east-1a": "subnet-1a2b3c4d"}
    )
    spec = _spec(fake_settings, zone="us-east-1a")

    for pool in ("web", "batch", "gpu"):
        await cloud.list_vms(pool=pool)
    await asyncio.gather(
        *(
            cloud.create_vm(name=provider.VmName(f"{pool}-{i}"), pool=pool, spec=spec)
            for pool in ("web", "batch")
            for i in range(5)
        )
    )
    web = await cloud.list_vms(pool="web")
    one_pass = fake.calls["DescribeInstances"]
    now[0] += 2.5  # the next pass
    await asyncio.gather(*(cloud.list_vms(pool=pool) for pool in ("web", "batch", "gpu")))

    assert one_pass == 1
    assert fake.calls["DescribeInstances"] == 2
    assert fake.calls["RunInstances"] == 10
    assert fake.calls["DescribeInstanceTypes"] == 1
    assert [vm.name for vm in web] == [f"web-{i}" for i in range(5)]
    assert all(f["Name"] != "instance-state-name" for f in fake.filters_seen[0])
    assert {f["Name"] for f in fake.filters_seen[0]} == {
        f"tag:kubernetes.io/cluster/{CLUSTER}",
        f"tag:{aws_launch.CLUSTER_TAG}",
    }


async def test_an_instance_type_smaller_than_the_template_is_refused_before_launch(
    ec2: aws.Ec2Provider, moto: ec2_server.MotoEc2, settings: launch.AwsLaunch
) -> None:
    with pytest.raises(provider.InvalidMachineSpec) as refused:
        await ec2.create_vm(name=NAME, pool="web", spec=_spec(settings, cpu="4"))

    assert refused.value.code == "InstanceTypeMismatch"
    assert "m5.large has 2 vCPUs and 8192Mi" in refused.value.message
    assert moto.instances(**{aws_launch.VM_NAME_TAG: NAME}) == []


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


def _answer(code: str, status: int) -> botocore.exceptions.ClientError:
    response = {
        "Error": {"Code": code, "Message": f"the {code} message"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return botocore.exceptions.ClientError(response, "RunInstances")


@pytest.mark.parametrize(
    ("code", "status", "kind", "classed_code"),
    [
        ("InsufficientInstanceCapacity", 500, provider.InsufficientCapacity, None),
        ("Unsupported", 400, provider.InsufficientCapacity, None),
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
    classed = aws_errors.classify(_answer(code, status), what="RunInstances")

    assert type(classed) is kind
    assert classed.code == (classed_code or code)
    assert classed.message.startswith(f"RunInstances: {code}: the {code} message")


def test_capacity_is_permanent_even_when_ec2_answers_it_with_a_5xx() -> None:
    # EC2 sends InsufficientInstanceCapacity as a 500; retrying the same zone does not help.
    classed = aws_errors.classify(_answer("InsufficientInstanceCapacity", 500), what="RunInstances")

    assert not classed.transient


def test_an_auth_failure_says_where_to_look() -> None:
    classed = aws_errors.classify(_answer("UnauthorizedOperation", 403), what="RunInstances")

    assert "IAM" in classed.message
    assert "deploy/aws/" in classed.message


def test_missing_credentials_and_unreachable_endpoints_are_classed() -> None:
    missing = aws_errors.classify(
        botocore.exceptions.NoCredentialsError(), what="DescribeInstances"
    )
    unreachable = aws_errors.classify(
        botocore.exceptions.EndpointConnectionError(endpoint_url="https://ec2.example"),
        what="DescribeInstances",
    )

    assert (type(missing), missing.code) == (provider.PermanentCloudError, "NoCredentials")
    assert "web identity / IRSA" in missing.message
    assert type(unreachable) is provider.TransientCloudError


async def test_a_stopped_instance_is_not_taken_for_one_being_deleted_and_is_terminated(
    ec2: aws.Ec2Provider, moto: ec2_server.MotoEc2, settings: launch.AwsLaunch
) -> None:
    vm = await ec2.create_vm(name=NAME, pool="web", spec=_spec(settings))
    [instance] = moto.instances(**{aws_launch.VM_NAME_TAG: NAME})
    moto.ec2().stop_instances(InstanceIds=[instance["InstanceId"]])
    [stopped] = moto.instances(**{aws_launch.VM_NAME_TAG: NAME})
    assert stopped["State"]["Name"] == "stopped"
    fresh = aws.Ec2Provider(cluster_name=CLUSTER, endpoint_url=moto.endpoint)
    try:
        listed = await fresh.list_vms(pool="web")
        found = await fresh.get_vm(NAME)
        await fresh.delete_vm(NAME)  # what repair, or the pool's deletion, then asks
    finally:
        await fresh.close()

    # Deleting would be waited on for ever (nothing deletes a VM being deleted): the
    # instance and its volumes would leak, and its pool's deletion would never end.
    assert [(v.name, v.state) for v in listed] == [(NAME, provider.VmState.RUNNING)]
    assert found is not None
    assert found.provider_id == vm.provider_id
    assert moto.running_in_pool("web") == []  # terminated
