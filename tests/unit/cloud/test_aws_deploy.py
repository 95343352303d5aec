"""deploy/aws: the IAM policy grants exactly the EC2 calls the provider makes (recorded
from a real SDK session against moto), on the resources it makes them on, launching and
terminating only instances tagged with the cluster the component names; the kustomize
component runs the operator with --cloud=aws --cluster-name on an IRSA-annotated
ServiceAccount."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import aiobotocore.session
import pytest
import yaml

import ec2_server
from nodepool_devtools.cluster import binaries
from nodepool_operator.api import launch
from nodepool_operator.cloud import aws, aws_launch, provider

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
POLICY: dict[str, Any] = json.loads((DEPLOY / "aws" / "iam-policy.json").read_text())
# The example cluster name the policy's conditions and the component's flag share.
CLUSTER = "my-cluster"


def _statements(action: str) -> list[dict[str, Any]]:
    return [
        s
        for s in POLICY["Statement"]
        if action in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    ]


async def test_the_policy_allows_every_ec2_call_the_provider_makes_and_no_other(
    moto: ec2_server.MotoEc2, aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    moto.reset()
    session = aiobotocore.session.get_session()
    called: set[str] = set()
    session.register("before-call.ec2", lambda model, **_: called.add(f"ec2:{model.name}"))
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", moto.endpoint)
    async with session.create_client("sqs") as sqs:
        queue = (await sqs.create_queue(QueueName=f"{CLUSTER}-interruptions"))["QueueUrl"]
        not_ours = {"detail-type": "EC2 Instance Rebalance Recommendation", "detail": {}}
        await sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(not_ours))
    session.register("before-call.sqs", lambda model, **_: called.add(f"sqs:{model.name}"))
    cloud = aws.Ec2Provider(
        cluster_name=CLUSTER, endpoint_url=moto.endpoint, session=session, interruption_queue=queue
    )
    spec = provider.MachineSpec(
        cpu=ec2_server.CPU,
        memory=ec2_server.MEMORY,
        pods=110,
        pool_uid="uid",
        launch=launch.ProviderSection(aws=moto.launch_settings()),
    )
    try:
        name = provider.VmName("p-0")
        await cloud.create_vm(name=name, pool="p", spec=spec)
        await cloud.list_vms(pool="p")
        await cloud.get_vm(name)
        await cloud.delete_vm(name)
        await cloud.catalog()
        await cloud.events(wait=0)  # receives, and deletes the message it cannot act on
    finally:
        await cloud.close()

    granted = {
        action
        for s in POLICY["Statement"]
        for action in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert called == {
        "ec2:DescribeInstances",
        "ec2:DescribeInstanceTypes",
        "ec2:DescribeInstanceTypeOfferings",
        "ec2:DescribeSpotPriceHistory",
        "ec2:RunInstances",
        "ec2:TerminateInstances",
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
    }
    # Tagging at launch needs CreateTags; an instance profile needs PassRole.
    assert granted == called | {"ec2:CreateTags", "iam:PassRole"}


def _tag_conditions(statement: dict[str, Any], prefix: str) -> tuple[dict[str, str], set[str]]:
    """The tag values a statement's StringEquals requires, and the tags its Null requires
    present, for condition keys starting with ``prefix`` (``aws:RequestTag/``, ...)."""
    condition = statement["Condition"]
    equal = {
        key.removeprefix(prefix): value
        for key, value in condition.get("StringEquals", {}).items()
        if key.startswith(prefix)
    }
    present = {
        key.removeprefix(prefix)
        for key, value in condition.get("Null", {}).items()
        if key.startswith(prefix) and value == "false"
    }
    return equal, present


def _allows(statement: dict[str, Any], prefix: str, tags: dict[str, str]) -> bool:
    equal, present = _tag_conditions(statement, prefix)
    return all(tags.get(k) == v for k, v in equal.items()) and present <= set(tags)


def _sent_tags(cluster: str) -> dict[str, str]:
    """The tags an operator of ``cluster`` puts in its RunInstances request."""
    settings = launch.AwsLaunch(
        instance_type="m5.large", image_id="ami-12c6146b", subnets={"a": "subnet-1a2b3c4d"}
    )
    request = aws_launch.run_parameters(
        cluster=cluster,
        name=provider.VmName("p-0"),
        pool="p",
        spec=provider.MachineSpec(cpu="2", memory="8Gi", pods=110),
        settings=settings,
        subnet="subnet-1a2b3c4d",
    )
    return {t["Key"]: t["Value"] for t in request["TagSpecifications"][0]["Tags"]}


def test_launch_and_terminate_are_conditioned_on_this_cluster_s_tags() -> None:
    sent, others = _sent_tags(CLUSTER), _sent_tags("other-cluster")
    [launch_instances] = [
        s for s in _statements("ec2:RunInstances") if "arn:aws:ec2:*:*:instance/*" in s["Resource"]
    ]
    [terminate] = _statements("ec2:TerminateInstances")
    [tagging] = _statements("ec2:CreateTags")

    # What this cluster's operator sends passes; another cluster's launch, or its
    # instances, do not.
    assert _allows(launch_instances, "aws:RequestTag/", sent)
    assert not _allows(launch_instances, "aws:RequestTag/", others)
    assert _allows(terminate, "aws:ResourceTag/", sent)
    assert not _allows(terminate, "aws:ResourceTag/", others)
    assert not _allows(
        terminate, "aws:ResourceTag/", {k: v for k, v in sent.items() if k != aws_launch.POOL_TAG}
    )
    assert _tag_conditions(launch_instances, "aws:RequestTag/") == (
        {f"kubernetes.io/cluster/{CLUSTER}": "owned", aws_launch.CLUSTER_TAG: CLUSTER},
        {aws_launch.POOL_TAG},
    )
    assert tagging["Condition"]["StringEquals"]["ec2:CreateAction"] == "RunInstances"
    assert _allows(tagging, "aws:RequestTag/", sent)
    assert all(s["Effect"] == "Allow" for s in POLICY["Statement"])


def test_the_component_runs_the_operator_on_ec2_with_irsa(tmp_path: Path) -> None:
    # An overlay outside the base, as a user keeps it (kustomize refuses one inside).
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    overlay = tmp_path / "my-install"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": ["../deploy"],
                "components": ["../deploy/aws"],
            }
        )
    )
    kubectl = binaries.ensure_binaries()["kubectl"]
    rendered = subprocess.run(
        [str(kubectl), "kustomize", str(overlay)], check=True, capture_output=True, text=True
    ).stdout
    objects = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(rendered)}

    account = objects[("ServiceAccount", "nodepool-operator")]
    [container] = objects[("Deployment", "nodepool-operator")]["spec"]["template"]["spec"][
        "containers"
    ]
    assert account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith(
        "arn:aws:iam::"
    )
    assert container["args"][:4] == [
        "run",
        "--cloud=aws",
        f"--cluster-name={CLUSTER}",
        "--no-simulated-nodes",
    ]
    assert not [a for a in container["args"] if a.startswith(("--cloud-endpoint", "--cloud-token"))]
    assert {"name": "AWS_REGION", "value": "us-east-1"} in container["env"]
