"""EC2 for the aws provider's tests, two ways.

``MotoEc2``: moto's server as a child process on loopback, with what a test needs to
launch there (an image, a subnet per zone, a security group) and a raw view of its
instances to count them; ``refuse_capacity`` makes the real SDK session answer
``RunInstances`` in chosen subnets with EC2's ``InsufficientInstanceCapacity``, which moto
never does. The provider finds credentials and region in the environment, as in
production: a test sets ``AWS_*`` variables (``ENV``), never a flag.

``FakeEc2``: the few EC2 calls the provider makes, in memory, with what moto lacks: client
tokens kept as EC2 documents them (a repeated token is answered with the instance it
first made, terminated included), a describe that can lag, terminated instances that
drop out of describes as they do after about an hour, and a count of every call.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import itertools
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any

import aiobotocore.session
import boto3

from nodepool_devtools.cluster import children
from nodepool_operator.api import launch
from nodepool_operator.cloud import aws_launch, provider

REGION = "us-east-1"
# moto accepts any credentials; these only let the SDK's chain find some.
ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": REGION,
    "AWS_DEFAULT_REGION": REGION,
}
# moto's m5.large: 2 vCPUs, 8192 MiB.
INSTANCE_TYPE = "m5.large"
CPU, MEMORY = "2", "8Gi"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class MotoEc2:
    """``python -m moto.server`` on a free loopback port."""

    def __init__(self, log: Path) -> None:
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process = children.ChildProcess(
            "moto",
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            log,
        )

    def start(self, *, within: float = 60.0) -> None:
        self.process.start()
        deadline = time.monotonic() + within
        while True:
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/data.json", timeout=2):
                    return
            except (urllib.error.URLError, OSError):
                if not self.process.running:
                    raise AssertionError(f"moto exited:\n{self.process.output()}") from None
                if time.monotonic() > deadline:
                    raise AssertionError("moto did not start") from None
                time.sleep(0.2)

    def stop(self) -> None:
        self.process.stop()

    def reset(self) -> None:
        """Forget every instance (moto's own reset call)."""
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass

    def ec2(self) -> Any:
        return boto3.client(
            "ec2",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=ENV["AWS_SECRET_ACCESS_KEY"],
        )

    def launch_settings(self, **changes: Any) -> launch.AwsLaunch:
        """Settings that launch in this server's default VPC: an Amazon image, the
        default subnet of each zone, the default security group."""
        ec2 = self.ec2()
        image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        subnets = {s["AvailabilityZone"]: s["SubnetId"] for s in ec2.describe_subnets()["Subnets"]}
        group = ec2.describe_security_groups(GroupNames=["default"])["SecurityGroups"][0]
        fields: dict[str, Any] = {
            "instance_type": INSTANCE_TYPE,
            "image_id": image,
            "subnets": subnets,
            "security_group_ids": (group["GroupId"],),
            **changes,
        }
        return launch.AwsLaunch(**fields)

    def instances(self, **tags: str) -> list[dict[str, Any]]:
        """Every instance whose tags include ``tags`` (keys as ``aws``'s tag constants),
        in any state, terminated included."""
        filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in tags.items()]
        pages = self.ec2().get_paginator("describe_instances").paginate(Filters=filters)
        return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]

    def running_in_pool(self, pool: str) -> list[dict[str, Any]]:
        """The pool's instances that are not terminated or terminating."""
        gone = {"terminated", "shutting-down"}
        return [
            i
            for i in self.instances(**{aws_launch.POOL_TAG: pool})
            if i["State"]["Name"] not in gone
        ]


@contextlib.contextmanager
def running(log: Path) -> Iterator[MotoEc2]:
    """A started moto server, stopped on the way out."""
    server = MotoEc2(log)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def machine_spec(settings: launch.AwsLaunch, **changes: Any) -> provider.MachineSpec:
    """A spec ``INSTANCE_TYPE`` fits, launched with ``settings`` in us-east-1c; ``changes``
    replace any of its fields."""
    section = launch.ProviderSection(aws=settings)
    spec = provider.MachineSpec(
        cpu=CPU, memory=MEMORY, pods=110, zone="us-east-1c", pool_uid="uid", launch=section
    )
    return dataclasses.replace(spec, **changes)


async def queue_depth(sqs: Any, url: str) -> int:
    """The SQS queue's messages: those waiting and those received but not yet deleted."""
    counted = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    answer = await sqs.get_queue_attributes(QueueUrl=url, AttributeNames=counted)
    return sum(int(answer["Attributes"][name]) for name in counted)


def tag(instance: dict[str, Any], key: str) -> str | None:
    return next((t["Value"] for t in instance.get("Tags", []) if t["Key"] == key), None)


def refuse_capacity(session: aiobotocore.session.AioSession, subnets: Iterable[str]) -> None:
    """``RunInstances`` in any of ``subnets`` is answered as EC2 answers a zone out of
    capacity (500, ``InsufficientInstanceCapacity``), through the SDK's own error path."""
    refused = set(subnets)

    def answer(params: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]] | None:
        if params.get("body", {}).get("SubnetId") not in refused:
            return None
        http = type("Http", (), {"status_code": 500, "headers": {}})()
        error = {
            "Code": "InsufficientInstanceCapacity",
            "Message": "We currently do not have sufficient capacity in the Availability Zone",
        }
        return http, {"Error": error, "ResponseMetadata": {"HTTPStatusCode": 500}}

    session.register("before-call.ec2.RunInstances", answer)


class FakeEc2:
    """The EC2 calls the provider makes, with EC2's client-token rule.

    ``lagging()``: inside it, describes show the instances as they were on entry (a
    describe that has not caught up with the launches since). ``forget_terminated()``:
    terminated instances leave describes, as about an hour after termination, while
    their tokens stay known. ``calls`` counts calls by operation, ``filters_seen``
    keeps every describe's filters.
    """

    def __init__(self, *, zone: str = "us-east-1a") -> None:
        self.instances: list[dict[str, Any]] = []
        self.by_token: dict[str, dict[str, Any]] = {}
        self.calls: collections.Counter[str] = collections.Counter()
        self.filters_seen: list[list[dict[str, Any]]] = []
        self._frozen: list[dict[str, Any]] | None = None
        self._forgotten: set[str] = set()
        self._zone = zone
        self._ids = (f"i-{n:017x}" for n in itertools.count(1))
        self._clock = (
            datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(seconds=n)
            for n in itertools.count()
        )

    @property
    def launches(self) -> int:
        return len(self.instances)

    async def run_instances(self, **request: Any) -> dict[str, Any]:
        self.calls["RunInstances"] += 1
        known = self.by_token.get(request["ClientToken"])
        if known is None:
            known = {
                "InstanceId": next(self._ids),
                "State": {"Name": "pending"},
                "Placement": {"AvailabilityZone": self._zone},
                "LaunchTime": next(self._clock),
                "Tags": request["TagSpecifications"][0]["Tags"],
            }
            self.instances.append(known)
            self.by_token[request["ClientToken"]] = known
        return {"Instances": [dict(known)]}

    def get_paginator(self, operation: str) -> Any:
        assert operation == "describe_instances"
        ec2 = self

        class Pages:
            async def paginate(self, Filters: list[dict[str, Any]]) -> AsyncIterator[Any]:  # noqa: N803
                ec2.calls["DescribeInstances"] += 1
                ec2.filters_seen.append(Filters)
                yield {"Reservations": [{"Instances": ec2._matching(Filters)}]}

        return Pages()

    async def describe_instance_types(self, **_: Any) -> dict[str, Any]:
        self.calls["DescribeInstanceTypes"] += 1
        return {
            "InstanceTypes": [{"VCpuInfo": {"DefaultVCpus": 2}, "MemoryInfo": {"SizeInMiB": 8192}}]
        }

    async def terminate_instances(self, InstanceIds: list[str]) -> dict[str, Any]:  # noqa: N803
        self.calls["TerminateInstances"] += 1
        for instance in self.instances:
            if instance["InstanceId"] in InstanceIds:
                instance["State"] = {"Name": "terminated"}
        return {}

    def forget_terminated(self) -> None:
        self._forgotten |= {
            i["InstanceId"] for i in self.instances if i["State"]["Name"] == "terminated"
        }

    @contextlib.contextmanager
    def lagging(self) -> Iterator[None]:
        self._frozen = [{**i, "State": dict(i["State"])} for i in self.instances]
        try:
            yield
        finally:
            self._frozen = None

    def session(self) -> Any:
        """An SDK session whose EC2 client is this fake."""
        ec2 = self

        class Session:
            def create_client(self, *_: Any, **__: Any) -> Any:
                @contextlib.asynccontextmanager
                async def client() -> AsyncIterator[FakeEc2]:
                    yield ec2

                return client()

        return Session()

    def _matching(self, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        found = []
        for instance in self.instances if self._frozen is None else self._frozen:
            if instance["InstanceId"] in self._forgotten:
                continue
            tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
            values = {
                f["Name"]: tags.get(f["Name"].removeprefix("tag:"))
                if f["Name"].startswith("tag:")
                else instance["State"]["Name"]
                for f in filters
            }
            if all(values[f["Name"]] in f["Values"] for f in filters):
                found.append(dict(instance))
        return found
