"""deploy/aws: the IAM policy grants exactly the EC2 calls the provider makes (recorded
from a real SDK session against moto), on the resources it makes them on; the kustomize
component runs the operator with --cloud=aws on an IRSA-annotated ServiceAccount."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiobotocore.session
import pytest
import yaml

import ec2_server
from nodepool_operator.api import launch
from nodepool_operator.cloud import aws, provider
from nodepool_operator.cluster import binaries

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
POLICY: dict[str, Any] = json.loads((DEPLOY / "aws" / "iam-policy.json").read_text())


def _statements(action: str) -> list[dict[str, Any]]:
    return [
        s
        for s in POLICY["Statement"]
        if action in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    ]


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ec2_server.MotoEc2]:
    with ec2_server.running(tmp_path_factory.mktemp("moto") / "moto.log") as server:
        yield server


async def test_the_policy_allows_every_ec2_call_the_provider_makes_and_no_other(
    moto: ec2_server.MotoEc2, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in ec2_server.ENV.items():
        monkeypatch.setenv(key, value)
    moto.reset()
    session = aiobotocore.session.get_session()
    called: set[str] = set()
    session.register("before-call.ec2", lambda model, **_: called.add(f"ec2:{model.name}"))
    cloud = aws.Ec2Provider(endpoint_url=moto.endpoint, session=session)
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
        "ec2:RunInstances",
        "ec2:TerminateInstances",
    }
    # Tagging at launch needs CreateTags; an instance profile needs PassRole.
    assert granted == called | {"ec2:CreateTags", "iam:PassRole"}


def test_instances_are_launched_and_terminated_only_with_the_pool_tag() -> None:
    on_instances = [
        s for s in _statements("ec2:RunInstances") if "arn:aws:ec2:*:*:instance/*" in s["Resource"]
    ]
    [terminate] = _statements("ec2:TerminateInstances")
    [tagging] = _statements("ec2:CreateTags")

    assert [s["Condition"] for s in on_instances] == [
        {"Null": {f"aws:RequestTag/{aws.POOL_TAG}": "false"}}
    ]
    assert terminate["Condition"] == {"Null": {f"aws:ResourceTag/{aws.POOL_TAG}": "false"}}
    assert tagging["Condition"] == {"StringEquals": {"ec2:CreateAction": "RunInstances"}}
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
    assert container["args"][:3] == ["run", "--cloud=aws", "--no-simulated-nodes"]
    assert not [a for a in container["args"] if a.startswith(("--cloud-endpoint", "--cloud-token"))]
    assert {"name": "AWS_REGION", "value": "us-east-1"} in container["env"]
