"""The whole operator with ``--cloud aws`` against an EC2-compatible server (moto, a
process on loopback), on the real control plane: scale up, SIGKILL mid-scale and restart,
scale down, delete the pool. At every step the instances are exactly the pool's Nodes,
none launched twice, and none left running at the end.

moto ignores ``ClientToken``, so what keeps a restarted operator from launching a second
instance for a VM here is the provider's describe by tag.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

import ec2_server
from harness import CLI, MERGE, POOLS, Operator, operator_args, remove_pool, settled, wait_for
from nodepool_operator.api import launch
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud import aws
from nodepool_operator.cluster.pytest_plugin import Cluster

ZONES = ("us-east-1a", "us-east-1b")


@pytest.fixture
def moto(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ec2_server.MotoEc2]:
    # The operator's SDK finds these in its environment, as it would on a real host.
    for key, value in ec2_server.ENV.items():
        monkeypatch.setenv(key, value)
    with ec2_server.running(tmp_path / "moto.log") as server:
        yield server


@pytest.fixture
def start_aws_operator(
    cluster: Cluster, tmp_path: Path, operator_rbac: None, moto: ec2_server.MotoEc2
) -> Iterator[Callable[..., Operator]]:
    started: list[Operator] = []

    def start(*extra: str) -> Operator:
        kubeconfig = (
            cluster.plane.kubeconfig_for("operator") if cluster.plane else cluster.kubeconfig
        )
        cloud = ("--cloud", "aws", "--cloud-endpoint", moto.endpoint)
        args = [*CLI, *operator_args(kubeconfig, *cloud), *extra]
        operator = Operator("operator", args, tmp_path / f"operator-{len(started)}.log")
        operator.start()
        started.append(operator)
        return operator

    yield start
    for operator in started:
        operator.stop()


def _pool(name: str, settings: launch.AwsLaunch, *, target: int) -> dict[str, Any]:
    spec = nodepool_api.NodePoolSpec(
        target_nodes=target,
        max_nodes=10,
        template=nodepool_api.NodeTemplate(
            cpu=ec2_server.CPU,
            memory=ec2_server.MEMORY,
            pods=110,
            zones=ZONES,
            provider=launch.ProviderSection(aws=settings),
        ),
    )
    return nodepool_api.manifest(name, spec)


async def _nodes(core: client.CoreV1Api, pool: str) -> dict[str, Any]:
    found = await core.list_node(label_selector=f"{nodepool_api.POOL_LABEL}={pool}")
    return {n.metadata.name: n for n in found.items}


async def _assert_exactly(
    moto: ec2_server.MotoEc2, core: client.CoreV1Api, pool: str, *, count: int, launched: int
) -> None:
    """``count`` instances up, one per Node and named as it, in the Node's zone and with
    its provider ID; ``launched`` instances ever launched for the pool (no duplicate)."""
    live = moto.running_in_pool(pool)
    names = [ec2_server.tag(i, aws.VM_NAME_TAG) for i in live]
    nodes = await _nodes(core, pool)
    assert len(live) == count
    assert sorted(names) == sorted(nodes)  # one instance per Node, none twice
    for instance in live:
        node = nodes[ec2_server.tag(instance, aws.VM_NAME_TAG)]
        zone = instance["Placement"]["AvailabilityZone"]
        assert node.spec.provider_id == f"aws:///{zone}/{instance['InstanceId']}"
        assert node.metadata.labels[nodepool_api.ZONE_LABEL] == zone
    every = moto.instances(**{aws.POOL_TAG: pool})
    per_name = collections.Counter(ec2_server.tag(i, aws.VM_NAME_TAG) for i in every)
    assert len(every) == launched
    assert [n for n, times in per_name.items() if times > 1] == []


async def test_scale_up_crash_scale_down_and_delete_on_ec2(
    api_client: client.ApiClient,
    moto: ec2_server.MotoEc2,
    start_aws_operator: Callable[..., Operator],
    pool_name: str,
) -> None:
    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)
    settings = moto.launch_settings()
    await custom.create_cluster_custom_object(*POOLS, _pool(pool_name, settings, target=0))
    # One launch at a time, so that the kill below finds some instances launched and
    # others not yet asked for.
    operator = start_aws_operator("--create-parallelism", "1")
    await wait_for(lambda: settled(custom, pool_name, 0), within=60)

    # Scale up, and kill the operator as soon as the first instance exists.
    await custom.patch_cluster_custom_object(
        *POOLS, pool_name, {"spec": {"targetNodes": 6}}, _content_type=MERGE
    )

    async def launching() -> bool:
        return len(moto.instances(**{aws.POOL_TAG: pool_name})) >= 1

    await wait_for(launching, within=60, every=0.05)
    operator.kill()
    before_restart = len(moto.instances(**{aws.POOL_TAG: pool_name}))
    operator = start_aws_operator()
    await wait_for(lambda: settled(custom, pool_name, 6), within=120)
    await _assert_exactly(moto, core, pool_name, count=6, launched=6)
    print(f"instances when the operator was killed: {before_restart} of 6")

    # Scale down: the drained Nodes' instances are terminated, none other.
    await custom.patch_cluster_custom_object(
        *POOLS, pool_name, {"spec": {"targetNodes": 2}}, _content_type=MERGE
    )
    await wait_for(lambda: settled(custom, pool_name, 2), within=120)
    await _assert_exactly(moto, core, pool_name, count=2, launched=6)

    # Delete the pool: every instance goes with it.
    await remove_pool(custom, pool_name, within=120)
    assert moto.running_in_pool(pool_name) == []
    assert await _nodes(core, pool_name) == {}
    assert operator.errors_logged() == []


async def test_a_template_the_instance_type_cannot_hold_makes_the_pool_degraded(
    api_client: client.ApiClient,
    moto: ec2_server.MotoEc2,
    start_aws_operator: Callable[..., Operator],
    pool_name: str,
) -> None:
    custom = client.CustomObjectsApi(api_client)
    body = _pool(pool_name, moto.launch_settings(), target=1)
    body["spec"]["template"]["cpu"] = "4"  # m5.large has 2 vCPUs
    await custom.create_cluster_custom_object(*POOLS, body)
    start_aws_operator()

    async def degraded() -> dict[str, Any] | None:
        pool = await custom.get_cluster_custom_object(*POOLS, pool_name)
        for condition in pool.get("status", {}).get("conditions", []):
            if condition["type"] == "Degraded" and condition["status"] == "True":
                return dict(condition)
        return None

    condition = await wait_for(degraded, within=60)
    assert condition["reason"] == "InstanceTypeMismatch"
    assert "m5.large has 2 vCPUs" in condition["message"]
    assert moto.instances(**{aws.POOL_TAG: pool_name}) == []
