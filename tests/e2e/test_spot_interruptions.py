"""A spot node taken back, on the real control plane: simcloud sells spot offerings
(``--catalog``) and gives one VM of a pool of three spot nodes a 30 s interruption notice
(``POST /admin/interrupt``). The operator marks the Node at once (annotation, NoSchedule
taint, cordon), launches its replacement at once and drains it through the Eviction API,
so that the replacement Node is Ready and the Deployment's pods run on other nodes before
the VM is gone, none lost, and the Node and its VM are gone after (the pool back at three
nodes).

Where the pool opts in (``spec.disruption.rebalanceRecommendation: Replace``), a
rebalance recommendation for one of its nodes cordons it and launches its replacement at
once without draining it; the notice that follows drains it with its replacement already
there. The CRD refuses an action it does not know (422).

And on EC2 (moto, with its SQS): a spot interruption warning in the queue for one of the
pool's instances is acted on the same way and then deleted; one for another cluster's
instance in the same account is deleted and changes nothing."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiobotocore.session
import pytest
from kubernetes_asyncio import client

import ec2_server
import spot_pools
from e2e.autoscaling import events
from e2e.scenes import World
from harness import CLI, POOLS, Operator, SimCloud, operator_args, settled, wait_for
from nodepool_devtools.cluster.pytest_plugin import Cluster
from nodepool_operator.api import launch, wellknown
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud import aws, provider
from nodepool_operator.controllers.nodepool.interruptions import notice
from nodepool_operator.runtime import conditions
from workloads import deployment

NOTICE_SECONDS = 30
REPLICAS = 10


async def _app_pods(core: client.CoreV1Api, namespace: str) -> list[Any]:
    return list((await core.list_namespaced_pod(namespace, label_selector="app=web")).items)


@pytest.fixture
async def spot_cloud(start_simcloud: Any, tmp_path: Path) -> SimCloud:
    """simcloud selling spot c4s, giving a notice 30 s before it takes one back."""
    cloud: SimCloud = await start_simcloud(
        "--catalog",
        str(spot_pools.catalog_file(tmp_path)),
        "--create-latency",
        "0.2",
        "--spot-notice-seconds",
        str(NOTICE_SECONDS),
    )
    assert cloud.client is not None
    return cloud


async def _spot_pool_running_pods(
    api_client: client.ApiClient,
    pool_name: str,
    namespace: str,
    *,
    pool: dict[str, Any] | None = None,
) -> tuple[str, dict[str, int]]:
    """Three spot nodes (``pool``, else ``spot_pools.spot_pool``) running the 10 pods; the
    node with the most of them (the one to interrupt), and the pods per node."""
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    apps = client.AppsV1Api(api_client)
    body = pool if pool is not None else spot_pools.spot_pool(pool_name)
    await custom.create_cluster_custom_object(*POOLS, body)
    await wait_for(lambda: settled(custom, pool_name, 3), within=90)
    nodes = (await core.list_node(label_selector=f"{wellknown.POOL_LABEL}={pool_name}")).items
    assert {n.metadata.labels[wellknown.CAPACITY_TYPE_LABEL] for n in nodes} == {"spot"}

    # 10 pods of 500m: any two of the three nodes hold them all.
    web = deployment(
        "web", selector={wellknown.POOL_LABEL: pool_name}, replicas=REPLICAS, cpu="500m"
    )
    await apps.create_namespaced_deployment(namespace, web)

    async def all_running() -> list[Any] | None:
        found = await _app_pods(core, namespace)
        running = [p for p in found if p.status.phase == "Running"]
        return running if len(running) == REPLICAS and len(found) == REPLICAS else None

    placed = await wait_for(all_running, within=90)
    per_node: dict[str, int] = {}
    for pod in placed:
        per_node[pod.spec.node_name] = per_node.get(pod.spec.node_name, 0) + 1
    return max(per_node, key=lambda name: per_node[name]), per_node


async def _marked(core: client.CoreV1Api, name: str) -> Any:
    node = await core.read_node(name)
    annotations = node.metadata.annotations or {}
    return node if annotations.get(notice.INTERRUPTION_ANNOTATION) == "spot-interruption" else None


async def _moved(core: client.CoreV1Api, namespace: str, victim: str) -> bool:
    """Every replica Running, none on ``victim``."""
    found = await _app_pods(core, namespace)
    running = [p for p in found if p.status.phase == "Running"]
    return len(running) == REPLICAS and all(p.spec.node_name != victim for p in running)


def _ready(node: Any) -> bool:
    taints = {t.key for t in node.spec.taints or ()}
    return wellknown.UNREGISTERED_TAINT_KEY not in taints and any(
        c.type == "Ready" and c.status == "True" for c in node.status.conditions or ()
    )


async def _node_gone(core: client.CoreV1Api, name: str, uid: str) -> bool:
    found = await core.list_node(field_selector=f"metadata.name={name}")
    return all(n.metadata.uid != uid for n in found.items)


async def test_a_spot_notice_moves_the_pods_before_the_vm_is_gone(
    world: World, spot_cloud: SimCloud
) -> None:
    cloud, start_operator = spot_cloud, world.start_operator
    api_client, pool_name, namespace = world.api_client, world.pool, world.namespace
    assert cloud.client is not None
    operator = start_operator(cloud)
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    victim, per_node = await _spot_pool_running_pods(api_client, pool_name, namespace)
    victim_uid = (await core.read_node(victim)).metadata.uid
    [vm] = [v for v in await cloud.client.list_vms(pool=pool_name) if v.name == victim]

    before = {n.metadata.uid for n in (await core.list_node()).items}
    # Sampled through the whole interruption: Running drops by the pods the drain moves at
    # most, and never below what the other two nodes already ran; and when, first, a new
    # Node of the pool is Ready, every pod Runs off the victim, and the victim's VM is gone
    # (absent from the cloud's listing, or being deleted).
    lowest = REPLICAS
    sampling = True
    first: dict[str, float] = {}

    async def sample() -> None:
        nonlocal lowest
        assert cloud.client is not None
        while sampling:
            found = await _app_pods(core, namespace)
            lowest = min(lowest, sum(1 for p in found if p.status.phase == "Running"))
            now = time.time()
            if "moved" not in first and await _moved(core, namespace, victim):
                first["moved"] = now
            if "replacement" not in first:
                pool_nodes = await core.list_node(
                    label_selector=f"{wellknown.POOL_LABEL}={pool_name}"
                )
                if any(n.metadata.uid not in before and _ready(n) for n in pool_nodes.items):
                    first["replacement"] = now
            live = await cloud.client.list_vms(pool=pool_name)
            if "vm_gone" not in first and not spot_pools.still_up(live, vm):
                first["vm_gone"] = now
            await asyncio.sleep(0.1)

    sampler = asyncio.create_task(sample())
    noticed_at = time.time()
    [given] = await cloud.client.interrupt([victim])
    assert given.name == victim

    node = await wait_for(lambda: _marked(core, victim), within=10, every=0.1)
    marked_after = time.time() - noticed_at
    taints = [(t.key, t.effect) for t in node.spec.taints or ()]
    assert (notice.INTERRUPTED_TAINT_KEY, "NoSchedule") in taints
    assert node.spec.unschedulable is True
    assert node.metadata.annotations[notice.TERMINATE_AT_ANNOTATION]

    await wait_for(lambda: _moved(core, namespace, victim), within=NOTICE_SECONDS, every=0.2)
    moved_after = time.time() - noticed_at
    # Before the cloud takes the VM back: the drain did it, not the VM's end.
    assert moved_after < NOTICE_SECONDS

    await wait_for(lambda: _node_gone(core, victim, victim_uid), within=60)

    # Its VM is gone too: a VM of the name now is the replacement, made after it.
    async def vm_gone() -> bool:
        assert cloud.client is not None
        live = await cloud.client.list_vms(pool=pool_name)
        return not [v for v in live if v.name == victim and v.created_at <= vm.created_at]

    await wait_for(vm_gone, within=60)
    await wait_for(lambda: settled(custom, pool_name, 3), within=90)
    await wait_for(lambda: _moved(core, namespace, victim), within=30)
    sampling = False
    await sampler

    # The first done-when: the replacement Ready and the pods Running elsewhere
    # before the VM is gone; the Node and the VM gone after.
    assert {"replacement", "moved", "vm_gone"} <= set(first), first
    assert first["replacement"] < first["vm_gone"], first
    assert first["moved"] < first["vm_gone"], first
    assert lowest >= REPLICAS - per_node[victim]
    told = await events(core, "default", name=pool_name, reason="DisruptingInterrupted")
    assert len(told) == 1
    assert victim in told[0].message
    for kind, name in (("Node", victim), ("NodePool", pool_name)):
        told = await events(core, "default", name=name, reason="SpotInterrupted")
        assert [e.involved_object.kind for e in told] == [kind], (kind, told)
    logged = operator.output()
    assert f"event=node-interrupted node={victim} kind=spot-interruption" in logged
    assert f"event=interrupted-pods-moved node={victim}" in logged
    assert operator.errors_logged() == []
    print(
        f"marked {marked_after:.1f}s after the notice; replacement Ready after"
        f" {first['replacement'] - noticed_at:.1f}s, pods Running elsewhere after"
        f" {moved_after:.1f}s, VM gone after {first['vm_gone'] - noticed_at:.1f}s of"
        f" {NOTICE_SECONDS}s; {per_node[victim]} pods moved, Running never below {lowest}"
    )


async def test_a_notice_given_while_the_operator_is_down_is_acted_on_once_it_is_back(
    world: World, spot_cloud: SimCloud
) -> None:
    cloud, start_operator = spot_cloud, world.start_operator
    api_client, pool_name, namespace = world.api_client, world.pool, world.namespace
    assert cloud.client is not None
    operator = start_operator(cloud)
    core = client.CoreV1Api(api_client)
    victim, _ = await _spot_pool_running_pods(api_client, pool_name, namespace)
    victim_uid = (await core.read_node(victim)).metadata.uid
    operator.kill()  # SIGKILL: it says nothing, releases nothing

    noticed_at = time.time()
    await cloud.client.interrupt([victim])
    await asyncio.sleep(2)
    assert await _marked(core, victim) is None  # nobody reads the cloud's events now

    operator = start_operator(cloud)  # reads the stream from its start
    await wait_for(lambda: _marked(core, victim), within=20, every=0.2)
    await wait_for(lambda: _moved(core, namespace, victim), within=NOTICE_SECONDS, every=0.2)
    moved_after = time.time() - noticed_at
    assert moved_after < NOTICE_SECONDS
    await wait_for(lambda: _node_gone(core, victim, victim_uid), within=60)
    assert operator.errors_logged() == []
    print(f"pods Running elsewhere {moved_after:.1f}s after a notice given with the operator down")


def _rebalancing_pool(name: str, action: str) -> dict[str, Any]:
    body = spot_pools.spot_pool(name)
    body["spec"].setdefault("disruption", {})["rebalanceRecommendation"] = action
    return body


async def test_an_opted_in_rebalance_recommendation_replaces_ahead_then_a_notice_drains(
    world: World, spot_cloud: SimCloud
) -> None:
    cloud, start_operator = spot_cloud, world.start_operator
    api_client, pool_name, namespace = world.api_client, world.pool, world.namespace
    assert cloud.client is not None
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    # The CRD refuses an action it does not know.
    with pytest.raises(client.exceptions.ApiException) as refused:
        await custom.create_cluster_custom_object(
            *POOLS, _rebalancing_pool(f"{pool_name}-bad", "Drain")
        )
    assert refused.value.status == 422
    assert "rebalanceRecommendation" in str(refused.value.body)

    operator = start_operator(cloud)
    victim, per_node = await _spot_pool_running_pods(
        api_client, pool_name, namespace, pool=_rebalancing_pool(pool_name, "Replace")
    )
    before = {n.metadata.uid for n in (await core.list_node()).items}

    async def on_victim() -> int:
        found = await _app_pods(core, namespace)
        return sum(1 for p in found if p.status.phase == "Running" and p.spec.node_name == victim)

    async def marked(kind: str) -> Any:
        node = await core.read_node(victim)
        annotations = node.metadata.annotations or {}
        return node if annotations.get(notice.INTERRUPTION_ANNOTATION) == kind else None

    async def replacement_ready() -> Any:
        pool_nodes = await core.list_node(label_selector=f"{wellknown.POOL_LABEL}={pool_name}")
        fresh = [n for n in pool_nodes.items if n.metadata.uid not in before and _ready(n)]
        return fresh or None

    recommended_at = time.time()
    await cloud.client.recommend_rebalance([victim])
    node = await wait_for(lambda: marked("rebalance"), within=10, every=0.1)
    assert node.spec.unschedulable is True
    assert (notice.INTERRUPTED_TAINT_KEY, "NoSchedule") in [
        (t.key, t.effect) for t in node.spec.taints or ()
    ]
    [replacement] = await wait_for(replacement_ready, within=NOTICE_SECONDS, every=0.2)
    replaced_after = time.time() - recommended_at
    # Not drained: its pods stay where they ran, and its VM runs on, a while after.
    await asyncio.sleep(5)
    assert await on_victim() == per_node[victim]
    live = {v.name: v for v in await cloud.client.list_vms(pool=pool_name)}
    assert live[victim].state == provider.VmState.RUNNING
    assert len(live) == 4
    pool_nodes = await core.list_node(label_selector=f"{wellknown.POOL_LABEL}={pool_name}")
    assert len(pool_nodes.items) == 4
    for kind, name in (("Node", victim), ("NodePool", pool_name)):
        told = await events(core, "default", name=name, reason="RebalanceRecommended")
        assert [e.involved_object.kind for e in told] == [kind], (kind, told)

    # The notice follows: drained at once as any noticed Node, its replacement already
    # there (no VM launched after the notice).
    noticed_at = time.time()
    await cloud.client.interrupt([victim])
    await wait_for(lambda: marked("spot-interruption"), within=10, every=0.1)
    await wait_for(lambda: _moved(core, namespace, victim), within=NOTICE_SECONDS, every=0.2)
    moved_after = time.time() - noticed_at
    assert moved_after < NOTICE_SECONDS
    await wait_for(lambda: _node_gone(core, victim, node.metadata.uid), within=60)
    await wait_for(lambda: settled(custom, pool_name, 3), within=90)
    listed = await cloud.client.list_vms(pool=pool_name)
    left = [v for v in listed if v.state != provider.VmState.DELETING]  # the victim's goes
    assert len(left) == 3, listed
    assert all(v.created_at < noticed_at for v in left), left
    assert replacement.metadata.name in {v.name for v in left}
    logged = operator.output()
    assert f"event=node-interrupted node={victim} kind=rebalance" in logged
    assert f"event=node-interrupted node={victim} kind=spot-interruption" in logged
    assert operator.errors_logged() == []
    print(
        f"replacement Ready {replaced_after:.1f}s after the rebalance recommendation; pods"
        f" Running elsewhere {moved_after:.1f}s after the notice, no VM launched for it"
    )


# -- EC2: EventBridge messages in SQS (moto) -----------------------------------------------


@pytest.fixture
def moto(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ec2_server.MotoEc2]:
    # The operator's SDK finds these in its environment, SQS's endpoint among them.
    for key, value in ec2_server.ENV.items():
        monkeypatch.setenv(key, value)
    with ec2_server.running(tmp_path / "moto.log") as server:
        monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", server.endpoint)
        yield server


def _spot_warning(instance_id: str) -> str:
    return json.dumps(
        {
            "version": "0",
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2",
            "time": conditions.rfc3339(time.time()),
            "detail": {"instance-id": instance_id, "instance-action": "terminate"},
        }
    )


async def _queue_depth(sqs: Any, url: str) -> int:
    attributes = await sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )
    counts = attributes["Attributes"]
    return int(counts["ApproximateNumberOfMessages"]) + int(
        counts["ApproximateNumberOfMessagesNotVisible"]
    )


async def test_an_ec2_spot_warning_from_sqs_replaces_our_node_and_ignores_another_clusters(
    api_client: client.ApiClient,
    moto: ec2_server.MotoEc2,
    cluster: Cluster,
    tmp_path: Path,
    operator_rbac: None,
    pool_name: str,
    namespace: str,
) -> None:
    session = aiobotocore.session.get_session()
    async with session.create_client("sqs", endpoint_url=moto.endpoint) as sqs:
        url = (await sqs.create_queue(QueueName="e2e-interruptions"))["QueueUrl"]
        # Another cluster's instance in the same account (its queue would hear of ours).
        other = aws.Ec2Provider(cluster_name="other", endpoint_url=moto.endpoint)
        try:
            foreign = await other.create_vm(
                name=provider.VmName(f"{pool_name}-0"),
                pool=pool_name,
                spec=provider.MachineSpec(
                    cpu=ec2_server.CPU,
                    memory=ec2_server.MEMORY,
                    pods=110,
                    zone="us-east-1a",
                    pool_uid="uid-other",
                    launch=launch.ProviderSection(aws=moto.launch_settings()),
                ),
            )
        finally:
            await other.close()
        kubeconfig = (
            cluster.plane.kubeconfig_for("operator") if cluster.plane else cluster.kubeconfig
        )
        cloud = (
            *("--cloud", "aws", "--cloud-endpoint", moto.endpoint, "--cluster-name", "e2e"),
            *("--simulated-nodes", "--interruption-queue", url),
        )
        operator = Operator(
            "operator", [*CLI, *operator_args(kubeconfig, *cloud)], tmp_path / "op.log"
        )
        operator.start()
        try:
            await _ec2_interruption(
                api_client, sqs, url, operator, moto, pool_name, namespace, foreign.provider_id
            )
        finally:
            operator.stop()


async def _ec2_interruption(
    api_client: client.ApiClient,
    sqs: Any,
    url: str,
    operator: Operator,
    moto: ec2_server.MotoEc2,
    pool_name: str,
    namespace: str,
    foreign_provider_id: str,
) -> None:
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    apps = client.AppsV1Api(api_client)
    spec = nodepool_api.NodePoolSpec(
        target_nodes=2,
        max_nodes=4,
        template=nodepool_api.NodeTemplate(
            cpu=ec2_server.CPU,
            memory=ec2_server.MEMORY,
            pods=110,
            zones=("us-east-1a", "us-east-1b"),
            provider=launch.ProviderSection(aws=moto.launch_settings()),
        ),
    )
    await custom.create_cluster_custom_object(*POOLS, nodepool_api.manifest(pool_name, spec))
    await wait_for(lambda: settled(custom, pool_name, 2), within=90)
    body = deployment("web", selector={wellknown.POOL_LABEL: pool_name}, replicas=4, cpu="200m")
    await apps.create_namespaced_deployment(namespace, body)

    async def running(avoiding: str | None = None) -> bool:
        found = await _app_pods(core, namespace)
        up = [p for p in found if p.status.phase == "Running" and p.spec.node_name != avoiding]
        return len(up) == 4 == len(found)

    await wait_for(running, within=60)
    nodes = (await core.list_node(label_selector=f"{wellknown.POOL_LABEL}={pool_name}")).items
    victim = sorted(nodes, key=lambda n: n.metadata.name)[0]

    # Another cluster's instance first: read, deleted, and nothing of ours marked.
    await sqs.send_message(
        QueueUrl=url, MessageBody=_spot_warning(foreign_provider_id.rsplit("/", 1)[1])
    )

    async def drained() -> bool:
        return await _queue_depth(sqs, url) == 0

    await wait_for(drained, within=40)
    for node in (await core.list_node(label_selector=f"{wellknown.POOL_LABEL}={pool_name}")).items:
        assert notice.INTERRUPTION_ANNOTATION not in (node.metadata.annotations or {})
    assert len(moto.running_in_pool(pool_name)) == 3  # ours and the other cluster's

    instance_id = victim.spec.provider_id.rsplit("/", 1)[1]
    await sqs.send_message(QueueUrl=url, MessageBody=_spot_warning(instance_id))

    async def marked() -> Any:
        node = await core.read_node(victim.metadata.name)
        annotations = node.metadata.annotations or {}
        return node if annotations.get(notice.INTERRUPTION_ANNOTATION) else None

    node = await wait_for(marked, within=40, every=0.2)
    assert node.metadata.annotations[notice.INTERRUPTION_ANNOTATION] == "spot-interruption"
    assert node.spec.unschedulable is True
    await wait_for(drained, within=20)  # deleted once the mark was stored
    await wait_for(lambda: running(avoiding=victim.metadata.name), within=60)

    async def node_gone() -> bool:
        found = await core.list_node(field_selector=f"metadata.name={victim.metadata.name}")
        return all(n.metadata.uid != victim.metadata.uid for n in found.items)

    await wait_for(node_gone, within=90)
    assert instance_id not in {i["InstanceId"] for i in moto.running_in_pool(pool_name)}
    assert foreign_provider_id.rsplit("/", 1)[1] in {
        i["InstanceId"] for i in moto.running_in_pool(pool_name)
    }
    told = await events(core, "default", name=victim.metadata.name, reason="SpotInterrupted")
    assert len(told) == 1
    assert operator.errors_logged() == []
