"""An EC2-compatible server for the aws provider's tests: moto's server as a child process
on loopback, with what a test needs to launch there (an image, a subnet per zone, a
security group) and a raw view of its instances to count them.

The provider finds credentials and region in the environment, as in production: a test
sets ``AWS_*`` variables (``ENV``), never a flag.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3

from nodepool_operator.api import launch
from nodepool_operator.cloud import aws
from nodepool_operator.cluster import children

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
        return [i for i in self.instances(**{aws.POOL_TAG: pool}) if i["State"]["Name"] not in gone]


@contextlib.contextmanager
def running(log: Path) -> Iterator[MotoEc2]:
    """A started moto server, stopped on the way out."""
    server = MotoEc2(log)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def tag(instance: dict[str, Any], key: str) -> str | None:
    return next((t["Value"] for t in instance.get("Tags", []) if t["Key"] == key), None)
