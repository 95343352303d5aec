"""Drift, expiry and disruption budgets on the real control plane: a pool's Nodes follow
its spec, replaced no faster than its budgets allow, through the Eviction API, so a
workload's PodDisruptionBudget is never broken and no pod is lost."""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

import workloads
from e2e import scenes
from harness import MERGE, POOLS, pool_body, settled, wait_for
from nodepool_operator.api import wellknown

REPLICAS = 6


def disrupted(node: client.V1Node) -> bool:
    return any(t.key == wellknown.DISRUPTED_TAINT_KEY for t in node.spec.taints or ())


async def pool_nodes(core: client.CoreV1Api, pool: str) -> list[client.V1Node]:
    return list((await core.list_node(label_selector=wellknown.pool_selector(pool))).items)


async def serve(api_client: client.ApiClient, namespace: str, pool: str) -> None:
    """A Deployment of ``REPLICAS`` pods spread over the pool, guarded by a budget of
    ``maxUnavailable: 1``, once every pod runs and the budget is observed."""
    apps = client.AppsV1Api(api_client)
    policy = client.PolicyV1Api(api_client)
    spread = {
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": wellknown.HOSTNAME_LABEL,
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": "web"}},
            }
        ]
    }
    web = workloads.deployment(
        "web", selector={wellknown.POOL_LABEL: pool}, replicas=REPLICAS, cpu="500m", **spread
    )
    await apps.create_namespaced_deployment(namespace, web)
    budget = {
        "metadata": {"name": "web"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    }
    await policy.create_namespaced_pod_disruption_budget(namespace, budget)

    async def ready() -> bool:
        found = await policy.read_namespaced_pod_disruption_budget("web", namespace)
        status = found.status
        return bool(status and status.observed_generation and status.current_healthy == REPLICAS)

    await wait_for(ready, within=60)


class Watch:
    """Samples the pool and the workload every 0.2 s while a roll runs."""

    def __init__(self, api_client: client.ApiClient, namespace: str, pool: str) -> None:
        self.core = client.CoreV1Api(api_client)
        self.policy = client.PolicyV1Api(api_client)
        self.namespace = namespace
        self.pool = pool
        self.most_disrupted = 0
        self.least_healthy = REPLICAS
        self.negative_allowed = 0
        self.samples = 0

    async def run(self) -> None:
        while True:
            nodes = await pool_nodes(self.core, self.pool)
            self.most_disrupted = max(self.most_disrupted, sum(1 for n in nodes if disrupted(n)))
            found = await self.policy.read_namespaced_pod_disruption_budget("web", self.namespace)
            healthy = found.status.current_healthy
            self.least_healthy = min(self.least_healthy, healthy)
            if found.status.disruptions_allowed < 0:
                self.negative_allowed += 1
            self.samples += 1
            await asyncio.sleep(0.2)


async def rolled(core: client.CoreV1Api, pool: str, old: set[str], label: str) -> bool:
    nodes = await pool_nodes(core, pool)
    return (
        len(nodes) == REPLICAS
        and not old & {n.metadata.uid for n in nodes}
        and all((n.metadata.labels or {}).get("release") == label for n in nodes)
        and not any(disrupted(n) for n in nodes)
    )


async def served_pool(world: scenes.World) -> scenes.Scene:
    """A pool of ``REPLICAS`` nodes labelled ``release=a`` under a budget of one node at a
    time, serving the guarded Deployment (``serve``)."""
    scene = await scenes.settled_pool(
        world,
        target=REPLICAS,
        disruption={"budgets": [{"nodes": "1"}]},
        template={"cpu": "4", "memory": "16Gi", "pods": 110, "labels": {"release": "a"}},
    )
    await serve(world.api_client, world.namespace, world.pool)
    return scene


async def test_a_label_change_replaces_every_node_one_at_a_time_without_breaking_the_budget(
    world: scenes.World,
) -> None:
    api_client, pool_name, namespace = world.api_client, world.pool, world.namespace
    scene = await served_pool(world)
    operator, custom = scene.operator, scene.custom
    core = client.CoreV1Api(api_client)
    old = {n.metadata.uid for n in await pool_nodes(core, pool_name)}
    pods_before = REPLICAS

    watch = Watch(api_client, namespace, pool_name)
    watching = asyncio.create_task(watch.run())
    started = time.monotonic()
    await custom.patch_cluster_custom_object(
        *POOLS, pool_name, {"spec": {"template": {"labels": {"release": "b"}}}}, _content_type=MERGE
    )
    try:
        await wait_for(lambda: rolled(core, pool_name, old, "b"), within=300)
    finally:
        watching.cancel()
    print(f"rolled {REPLICAS} nodes in {time.monotonic() - started:.1f} s, {watch.samples} samples")

    assert watch.most_disrupted == 1
    assert watch.least_healthy >= REPLICAS - 1  # maxUnavailable: 1, all along
    assert watch.negative_allowed == 0
    await wait_for(lambda: settled(custom, pool_name, REPLICAS), within=60)
    pods = await core.list_namespaced_pod(namespace, label_selector="app=web")
    running = [p for p in pods.items if p.status.phase == "Running"]
    assert len(running) == pods_before  # no pod lost
    new_nodes = {n.metadata.name for n in await pool_nodes(core, pool_name)}
    assert {p.spec.node_name for p in running} <= new_nodes
    events = await core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={pool_name},reason=DisruptingDrifted"
    )
    assert any("changed: labels" in e.message for e in events.items)
    assert operator.errors_logged() == []


async def test_an_operator_restarted_mid_roll_finishes_it_within_the_budget(
    world: scenes.World,
) -> None:
    api_client, pool_name, namespace = world.api_client, world.pool, world.namespace
    scene = await served_pool(world)
    cloud, operator, custom = scene
    core = client.CoreV1Api(api_client)
    old = {n.metadata.uid for n in await pool_nodes(core, pool_name)}
    watch = Watch(api_client, namespace, pool_name)
    watching = asyncio.create_task(watch.run())
    await custom.patch_cluster_custom_object(
        *POOLS, pool_name, {"spec": {"template": {"labels": {"release": "b"}}}}, _content_type=MERGE
    )

    async def second_node_tainted() -> bool:
        nodes = await pool_nodes(core, pool_name)
        gone = len(old - {n.metadata.uid for n in nodes})
        return gone >= 1 and any(disrupted(n) for n in nodes)

    try:
        await wait_for(second_node_tainted, within=120)
        operator.stop()  # mid-roll: one node tainted, its replacement on its way or up
        operator = world.start_operator(cloud)
        await wait_for(lambda: rolled(core, pool_name, old, "b"), within=300)
    finally:
        watching.cancel()

    assert watch.most_disrupted == 1
    assert watch.least_healthy >= REPLICAS - 1
    assert watch.negative_allowed == 0
    await wait_for(lambda: settled(custom, pool_name, REPLICAS), within=60)
    assert operator.errors_logged() == []


async def test_a_zero_budget_in_its_window_holds_the_roll_until_the_window_ends(
    world: scenes.World,
) -> None:
    api_client, pool_name = world.api_client, world.pool
    _, operator, custom = await scenes.settled_pool(
        world,
        target=2,
        template={"cpu": "4", "memory": "16Gi", "pods": 110, "labels": {"release": "a"}},
    )
    core = client.CoreV1Api(api_client)
    old = {n.metadata.uid for n in await pool_nodes(core, pool_name)}
    # A window opened at the start of this minute, for 90 s: it ends 30 to 90 s from now.
    now = datetime.datetime.now(datetime.UTC)
    if now.second > 50:  # too close to the next minute: wait for it
        await asyncio.sleep(61 - now.second)
        now = datetime.datetime.now(datetime.UTC)
    window_end = now.replace(second=0, microsecond=0) + datetime.timedelta(seconds=90)
    budgets = [
        {"nodes": "0", "schedule": f"{now.minute} {now.hour} * * *", "duration": "1m30s"},
        {"nodes": "1"},
    ]
    await custom.patch_cluster_custom_object(
        *POOLS,
        pool_name,
        {"spec": {"disruption": {"budgets": budgets}, "template": {"labels": {"release": "b"}}}},
        _content_type=MERGE,
    )
    while datetime.datetime.now(datetime.UTC) < window_end - datetime.timedelta(seconds=3):
        nodes = await pool_nodes(core, pool_name)
        assert not any(disrupted(n) for n in nodes)
        assert {n.metadata.uid for n in nodes} == old
        await asyncio.sleep(1)
    held = await core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={pool_name},reason=DisruptionBlocked"
    )
    assert any("budget nodes=0" in e.message for e in held.items)

    async def rolled_two() -> bool:
        nodes = await pool_nodes(core, pool_name)
        return len(nodes) == 2 and not old & {n.metadata.uid for n in nodes}

    await wait_for(rolled_two, within=120)
    assert operator.errors_logged() == []


async def test_nodes_expire_after_expire_after(world: scenes.World) -> None:
    api_client, pool_name = world.api_client, world.pool
    _, operator, _ = await scenes.settled_pool(
        world,
        target=2,
        expireAfter="60s",
        disruption={"budgets": [{"nodes": "1"}]},
    )
    core = client.CoreV1Api(api_client)
    first = await pool_nodes(core, pool_name)
    old = {n.metadata.uid for n in first}
    born = min(n.metadata.creation_timestamp for n in first)

    async def replaced() -> bool:
        nodes = await pool_nodes(core, pool_name)
        return len(nodes) == 2 and not old & {n.metadata.uid for n in nodes}

    # Not before a minute: 50 s after the oldest Node was made, both are still there.
    young = born + datetime.timedelta(seconds=50) - datetime.datetime.now(datetime.UTC)
    await asyncio.sleep(max(0.0, young.total_seconds()))
    assert {n.metadata.uid for n in await pool_nodes(core, pool_name)} == old
    await wait_for(replaced, within=180)
    events = await core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={pool_name},reason=DisruptingExpired"
    )
    assert events.items
    assert operator.errors_logged() == []


@pytest.mark.parametrize(
    "spec",
    [
        {"disruption": {"budgets": [{"nodes": "ten"}]}},
        {"disruption": {"budgets": [{"nodes": "1", "schedule": "0 9 * * *"}]}},
        {"disruption": {"budgets": [{"nodes": "1", "reasons": ["Bored"]}]}},
        {"expireAfter": "1d"},
    ],
)
async def test_the_api_server_refuses_a_wrong_budget_or_expiry(
    api_client: client.ApiClient, crds_installed: None, pool_name: str, spec: dict[str, Any]
) -> None:
    body = pool_body(pool_name)
    body["spec"].update(spec)
    with pytest.raises(ApiException) as refused:
        await client.CustomObjectsApi(api_client).create_cluster_custom_object(*POOLS, body)
    assert refused.value.status == 422
