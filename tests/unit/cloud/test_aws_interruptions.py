"""EC2's interruption messages from SQS (a moto server, through the SDK): each kind read as
the event it is, named by the VM's tag; a message deleted once every event of it is
handled; messages nothing here acts on deleted at once."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import aiobotocore.session
import pytest

import ec2_server
from nodepool_operator.cloud import aws, aws_interruptions, provider

CLUSTER = "prod"
NAME = provider.VmName("web-0")


@pytest.fixture
async def queue(
    moto: ec2_server.MotoEc2, aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[str, Any]]:
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", moto.endpoint)
    moto.reset()
    session = aiobotocore.session.get_session()
    async with session.create_client("sqs", endpoint_url=moto.endpoint) as sqs:
        url = (await sqs.create_queue(QueueName="interruptions"))["QueueUrl"]
        yield url, sqs


@pytest.fixture
async def ec2(moto: ec2_server.MotoEc2, queue: tuple[str, Any]) -> AsyncIterator[aws.Ec2Provider]:
    cloud = aws.Ec2Provider(
        cluster_name=CLUSTER, endpoint_url=moto.endpoint, interruption_queue=queue[0]
    )
    yield cloud
    await cloud.close()


@pytest.fixture
async def instance(ec2: aws.Ec2Provider, moto: ec2_server.MotoEc2) -> str:
    """The EC2 instance id of a VM launched as ``NAME`` in pool ``web``."""
    spec = ec2_server.machine_spec(moto.launch_settings())
    vm = await ec2.create_vm(name=NAME, pool="web", spec=spec)
    return vm.provider_id.rsplit("/", 1)[1]


def message(detail_type: str, detail: dict[str, Any], *, time: str = "2026-12-06T10:00:00Z") -> str:
    return json.dumps(
        {
            "version": "0",
            "detail-type": detail_type,
            "source": "aws.ec2",
            "time": time,
            "detail": detail,
        }
    )


async def send(queue: tuple[str, Any], *bodies: str) -> None:
    url, sqs = queue
    for body in bodies:
        await sqs.send_message(QueueUrl=url, MessageBody=body)


async def left(queue: tuple[str, Any]) -> int:
    url, sqs = queue
    return await ec2_server.queue_depth(sqs, url)


async def test_each_kind_is_read_as_its_event_and_named_by_the_vm(
    ec2: aws.Ec2Provider, instance: str, queue: tuple[str, Any]
) -> None:
    await send(
        queue,
        message(
            "EC2 Spot Instance Interruption Warning",
            {"instance-id": instance, "instance-action": "terminate"},
        ),
        message("EC2 Instance Rebalance Recommendation", {"instance-id": instance}),
        message(
            "EC2 Instance State-change Notification", {"instance-id": instance, "state": "stopping"}
        ),
        json.dumps(
            {
                "detail-type": "AWS Health Event",
                "source": "aws.health",
                "time": "2026-12-06T10:00:00Z",
                "detail": {
                    "service": "EC2",
                    "eventTypeCategory": "scheduledChange",
                    "startTime": "2026-12-09T02:00:00Z",
                    "affectedEntities": [{"entityValue": instance}],
                },
            }
        ),
    )
    found = await ec2.events(wait=1)
    by_kind = {e.kind: e for e in found}
    assert set(by_kind) == {
        "SpotInterruptionWarning",
        "RebalanceRecommendation",
        "InstanceStateChange",
        "ScheduledChange",
    }
    assert all((e.name, e.pool) == (NAME, "web") for e in found)
    warning = by_kind["SpotInterruptionWarning"]
    assert warning.terminate_at == warning.at + 120
    assert by_kind["InstanceStateChange"].state == "stopping"
    assert by_kind["ScheduledChange"].terminate_at is not None
    assert await left(queue) == 4  # nothing deleted before it is handled
    for event in found:
        await ec2.handled(event)
    assert await left(queue) == 0


async def test_what_nothing_here_acts_on_is_deleted_at_once(
    ec2: aws.Ec2Provider, instance: str, queue: tuple[str, Any]
) -> None:
    await send(
        queue,
        message("EC2 Spot Instance Interruption Warning", {"instance-id": "i-0someoneelse"}),
        message(
            "EC2 Instance State-change Notification", {"instance-id": instance, "state": "running"}
        ),
        message("EC2 Fleet Error", {"instance-id": instance}),
        "not json at all",
    )
    assert await ec2.events(wait=1) == []
    assert await left(queue) == 0


async def test_a_message_naming_two_vms_goes_once_both_are_handled() -> None:
    deleted: list[str] = []

    class Sqs:
        async def receive_message(self, **_: Any) -> dict[str, Any]:
            body = json.dumps(
                {
                    "detail-type": "AWS Health Event",
                    "time": "2026-12-06T10:00:00Z",
                    "detail": {
                        "service": "EC2",
                        "eventTypeCategory": "scheduledChange",
                        "affectedEntities": [{"entityValue": "i-1"}, {"entityValue": "i-2"}],
                    },
                }
            )
            return {"Messages": [{"ReceiptHandle": "r", "Body": body}]}

        async def delete_message(self, *, ReceiptHandle: str, **_: Any) -> None:  # noqa: N803
            deleted.append(ReceiptHandle)

    async def client() -> Any:
        return Sqs()

    async def vm_of(instance: str) -> tuple[provider.VmName, str]:
        return provider.VmName(f"vm-{instance}"), "web"

    reader = aws_interruptions.SqsEvents(queue_url="q", client=client, vm_of=vm_of)
    first, second = await reader.events(wait=0)
    await reader.handled(first)
    assert deleted == []
    await reader.handled(dataclasses.replace(second))
    assert deleted == ["r"]
