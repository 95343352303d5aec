"""The whole operator with ``--cloud aws`` against an EC2-compatible server (moto, a
process on loopback), on the real control plane: scale up, SIGKILL mid-scale and restart,
scale down, delete the pool. At every step the instances are exactly the pool's Nodes,
none launched twice, and none left running at the end. And two clusters (two control
planes, two operators with their own ``--cluster-name``) sharing the one EC2 account,
each with a NodePool of the same name: neither sees, adopts or terminates the other's.

moto ignores ``ClientToken``, so what keeps a restarted operator from launching a second
instance for a VM here is the provider's describe by tag.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

import ec2_server
from e2e.scenes import Operators, World
from harness import CLI, MERGE, POOLS, Operator, operator_args, remove_pool, settled, wait_for
from nodepool_devtools.cluster import controlplane, install
from nodepool_devtools.cluster.pytest_plugin import Cluster, connected, local_plane
from nodepool_operator.api import launch, wellknown
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud import aws_launch

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
    operators = Operators(tmp_path)

    def start(*extra: str, kubeconfig: Path | None = None, cluster_name: str = "e2e") -> Operator:
        kubeconfig = kubeconfig or cluster.kubeconfig_for("operator")
        cloud = (
            *("--cloud", "aws", "--cloud-endpoint", moto.endpoint),
            *("--cluster-name", cluster_name),
            # kwok stands in for the instances' kubelets here; with aws the default is off.
            "--simulated-nodes",
        )
        return operators.start([*CLI, *operator_args(kubeconfig, *cloud), *extra])

    yield start
    operators.stop_all()


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
    found = await core.list_node(label_selector=f"{wellknown.POOL_LABEL}={pool}")
    return {n.metadata.name: n for n in found.items}


async def _assert_exactly(
    moto: ec2_server.MotoEc2, core: client.CoreV1Api, pool: str, *, count: int, launched: int
) -> None:
    """``count`` instances up, one per Node and named as it, in the Node's zone and with
    its provider ID; ``launched`` instances ever launched for the pool (no duplicate)."""
    live = moto.running_in_pool(pool)
    names = [ec2_server.tag(i, aws_launch.VM_NAME_TAG) for i in live]
    nodes = await _nodes(core, pool)
    assert len(live) == count
    assert sorted(names) == sorted(nodes)  # one instance per Node, none twice
    for instance in live:
        node = nodes[ec2_server.tag(instance, aws_launch.VM_NAME_TAG)]
        zone = instance["Placement"]["AvailabilityZone"]
        assert node.spec.provider_id == f"aws:///{zone}/{instance['InstanceId']}"
        assert node.metadata.labels[wellknown.ZONE_LABEL] == zone
    every = moto.instances(**{aws_launch.POOL_TAG: pool})
    per_name = collections.Counter(ec2_server.tag(i, aws_launch.VM_NAME_TAG) for i in every)
    assert len(every) == launched
    assert [n for n, times in per_name.items() if times > 1] == []


async def test_scale_up_crash_scale_down_and_delete_on_ec2(
    world: World, moto: ec2_server.MotoEc2, start_aws_operator: Callable[..., Operator]
) -> None:
    settings = moto.launch_settings()
    await world.custom.create_cluster_custom_object(*POOLS, _pool(world.pool, settings, target=0))
    # One launch at a time, so that the kill below finds some instances launched and
    # others not yet asked for.
    operator = start_aws_operator("--create-parallelism", "1")
    await wait_for(lambda: settled(world.custom, world.pool, 0), within=60)

    # Scale up, and kill the operator as soon as the first instance exists.
    await world.custom.patch_cluster_custom_object(
        *POOLS, world.pool, {"spec": {"targetNodes": 6}}, _content_type=MERGE
    )

    async def launching() -> bool:
        return len(moto.instances(**{aws_launch.POOL_TAG: world.pool})) >= 1

    await wait_for(launching, within=60, every=0.05)
    operator.kill()
    before_restart = len(moto.instances(**{aws_launch.POOL_TAG: world.pool}))
    operator = start_aws_operator()
    await wait_for(lambda: settled(world.custom, world.pool, 6), within=120)
    await _assert_exactly(moto, world.core, world.pool, count=6, launched=6)
    print(f"instances when the operator was killed: {before_restart} of 6")

    # Scale down: the drained Nodes' instances are terminated, none other.
    await world.custom.patch_cluster_custom_object(
        *POOLS, world.pool, {"spec": {"targetNodes": 2}}, _content_type=MERGE
    )
    await wait_for(lambda: settled(world.custom, world.pool, 2), within=120)
    await _assert_exactly(moto, world.core, world.pool, count=2, launched=6)

    # Delete the pool: every instance goes with it.
    await remove_pool(world.custom, world.pool, within=120)
    assert moto.running_in_pool(world.pool) == []
    assert await _nodes(world.core, world.pool) == {}
    assert operator.errors_logged() == []


async def test_a_template_the_instance_type_cannot_hold_makes_the_pool_degraded(
    world: World, moto: ec2_server.MotoEc2, start_aws_operator: Callable[..., Operator]
) -> None:
    body = _pool(world.pool, moto.launch_settings(), target=1)
    body["spec"]["template"]["cpu"] = "4"  # m5.large has 2 vCPUs
    await world.custom.create_cluster_custom_object(*POOLS, body)
    start_aws_operator()

    async def degraded() -> dict[str, Any] | None:
        pool = await world.custom.get_cluster_custom_object(*POOLS, world.pool)
        for condition in pool.get("status", {}).get("conditions", []):
            if condition["type"] == "Degraded" and condition["status"] == "True":
                return dict(condition)
        return None

    condition = await wait_for(degraded, within=60)
    assert condition["reason"] == "InstanceTypeMismatch"
    assert "m5.large has 2 vCPUs" in condition["message"]
    assert moto.instances(**{aws_launch.POOL_TAG: world.pool}) == []


@pytest.fixture
def second_plane(tmp_path: Path) -> Iterator[controlplane.ControlPlane]:
    """A second local control plane: another cluster, sharing nothing with the first but
    the EC2 account."""
    with local_plane(tmp_path / "second-control-plane") as plane:
        yield plane


@pytest.fixture
async def second_api(second_plane: controlplane.ControlPlane) -> AsyncIterator[client.ApiClient]:
    async with connected(second_plane.kubeconfig) as api:
        await install.install_crds(api)
        await install.grant_operator_rbac(api)
        yield api


async def test_two_clusters_share_an_account_and_a_pool_name_without_touching_each_other(
    world: World,
    second_api: client.ApiClient,
    second_plane: controlplane.ControlPlane,
    moto: ec2_server.MotoEc2,
    start_aws_operator: Callable[..., Operator],
) -> None:
    first, second = world.custom, client.CustomObjectsApi(second_api)
    settings = moto.launch_settings()
    await first.create_cluster_custom_object(*POOLS, _pool(world.pool, settings, target=2))
    await second.create_cluster_custom_object(*POOLS, _pool(world.pool, settings, target=1))
    first_operator = start_aws_operator(cluster_name="first")
    second_operator = start_aws_operator(
        kubeconfig=second_plane.kubeconfig_for("operator"), cluster_name="second"
    )

    await wait_for(lambda: settled(first, world.pool, 2), within=120)
    await wait_for(lambda: settled(second, world.pool, 1), within=120)
    live = moto.running_in_pool(world.pool)
    by_cluster = collections.Counter(ec2_server.tag(i, aws_launch.CLUSTER_TAG) for i in live)
    first_ids = {
        i["InstanceId"] for i in live if ec2_server.tag(i, aws_launch.CLUSTER_TAG) == "first"
    }
    assert len(live) == 3
    assert by_cluster == {"first": 2, "second": 1}
    # The same VM name in both clusters, one instance each.
    assert collections.Counter(ec2_server.tag(i, aws_launch.VM_NAME_TAG) for i in live) == {
        f"{world.pool}-0": 2,
        f"{world.pool}-1": 1,
    }
    for instance in live:
        owner = ec2_server.tag(instance, aws_launch.CLUSTER_TAG)
        assert ec2_server.tag(instance, f"kubernetes.io/cluster/{owner}") == "owned"

    # The second cluster's pool goes, and its instance with it; the first's stay up.
    await remove_pool(second, world.pool, within=120)
    remaining = moto.running_in_pool(world.pool)
    assert {i["InstanceId"] for i in remaining} == first_ids
    assert all(i["State"]["Name"] == "running" for i in remaining)
    assert await settled(first, world.pool, 2) is not None
    assert first_operator.errors_logged() == []
    assert second_operator.errors_logged() == []
