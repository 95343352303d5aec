"""The Autoscaler against the real kube-scheduler, one constraint class per test.

Each test creates a workload whose pods the scheduler refuses for a reason other than
plain cpu and memory (DaemonSet overhead, a reserve, pod anti-affinity, a zone spread, a
host port, a taint on an existing node, two pools that could both host the pods), then
checks that every pod a template node can host reaches Running, that the pool's target
went to its final value in one step, and that it did not overshoot.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import workloads
from e2e.autoscaling import History, events, make_autoscaler, make_pool, phases, scale_up
from e2e.scenes import World
from harness import AUTOSCALERS, MERGE, POOLS, Operator, remove_pool, wait_for
from nodepool_operator.api import wellknown

ZONE = wellknown.ZONE_LABEL
HOSTNAME = wellknown.HOSTNAME_LABEL


async def grown_for(world: World, *deployments: dict[str, Any], running_pods: int) -> History:
    """An Autoscaler of the world's pool that never scales down, then ``deployments``; the
    pool's history once ``running_pods`` pods run (``World.scale_up``)."""
    await world.create_autoscaler(scale_down=False)
    return await world.scale_up(deployments=deployments, running_pods=running_pods, within=180)


async def test_daemonset_overhead_is_counted_so_the_pool_grows_once_to_what_fits(
    world: World, operator: Operator
) -> None:
    await make_pool(world.custom, world.pool)
    await world.create_autoscaler(scale_down=False)
    selector = {wellknown.POOL_LABEL: world.pool}
    daemon = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"nodeSelector": selector, "containers": [workloads.container("500m")]},
            },
        },
    }
    await world.apps.create_namespaced_daemon_set(world.namespace, daemon)
    # Two 2-cpu pods fill a 4-cpu node, but not after the agent's 500m: one pod per node.
    history = await world.scale_up(
        deployments=[workloads.deployment("web", selector=selector, replicas=3, cpu="2")],
        running_pods=3 + 3,  # the three pods and an agent on each of the three nodes
        within=180,
    )
    assert history.values == [0, 3]
    # A pod of the template's full size never fits beside the agent: a warning, no node.
    huge = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "huge"}}
    spec = {"nodeSelector": selector, "containers": [workloads.container("4")]}
    await world.core.create_namespaced_pod(world.namespace, {**huge, "spec": spec})
    [warning] = await wait_for(
        lambda: events(world.core, world.namespace, name="huge", reason="NotTriggerScaleUp"),
        within=30,
    )
    assert "cpu" in warning.message
    await asyncio.sleep(3)
    pool = await world.custom.get_cluster_custom_object(*POOLS, world.pool)
    assert pool["spec"]["targetNodes"] == 3
    assert operator.errors_logged() == []


async def test_a_template_reserve_is_taken_off_each_new_node(
    world: World, operator: Operator
) -> None:
    await make_pool(world.custom, world.pool, reserved={"cpu": "500m"})
    history = await grown_for(
        world,
        workloads.deployment("web", selector=world.on_pool, replicas=4, cpu="2"),
        running_pods=4,
    )
    assert history.values == [0, 4]
    nodes = await world.core.list_node(label_selector=wellknown.pool_selector(world.pool))
    assert {n.status.allocatable["cpu"] for n in nodes.items} == {"3500m"}
    assert operator.errors_logged() == []


@pytest.mark.parametrize(
    ("app", "cpu", "constraint"),
    [
        pytest.param(
            "db",
            "250m",
            {"affinity": workloads.pod_terms("podAntiAffinity", {"app": "db"}, HOSTNAME)},
            id="hostname-anti-affinity",
        ),
        pytest.param("lb", "100m", {"host_port": 8443}, id="host-port"),
    ],
)
async def test_one_node_per_replica_comes_in_one_step(
    world: World, operator: Operator, app: str, cpu: str, constraint: dict[str, Any]
) -> None:
    """Replicas that may not share a node (hostname anti-affinity, a host port) get one
    node each, asked for in one step."""
    await make_pool(world.custom, world.pool)
    history = await grown_for(
        world,
        workloads.deployment(app, selector=world.on_pool, replicas=3, cpu=cpu, **constraint),
        running_pods=3,
    )
    assert history.values == [0, 3]
    assert operator.errors_logged() == []


async def test_a_zone_spread_gets_a_node_in_each_zone(world: World, operator: Operator) -> None:
    await make_pool(world.custom, world.pool, zones=("zone-a", "zone-b", "zone-c"))
    spread = workloads.spread({"app": "api"}, ZONE, minDomains=3)
    api = workloads.deployment(
        "api", selector=world.on_pool, replicas=6, cpu="250m", topologySpreadConstraints=spread
    )
    # Six small pods fit on one node; spread over three zones they need three.
    history = await grown_for(world, api, running_pods=6)
    assert history.values == [0, 3]
    nodes = await world.core.list_node(label_selector=wellknown.pool_selector(world.pool))
    assert sorted(n.metadata.labels[ZONE] for n in nodes.items) == ["zone-a", "zone-b", "zone-c"]
    assert operator.errors_logged() == []


async def test_a_taint_on_an_existing_node_is_judged_on_that_node(
    world: World, operator: Operator
) -> None:
    await make_pool(world.custom, world.pool)
    await world.custom.patch_cluster_custom_object(
        *POOLS, world.pool, {"spec": {"targetNodes": 1}}, _content_type=MERGE
    )

    async def one_node() -> list[Any]:
        found = await world.core.list_node(label_selector=wellknown.pool_selector(world.pool))
        return [n for n in found.items if n.status.allocatable]

    [node] = await wait_for(one_node, within=30)
    # Someone taints the only node by hand: the template has no such taint, the node does.
    taint = {"key": "dedicated", "value": "ops", "effect": "NoSchedule"}
    await world.core.patch_node(
        node.metadata.name,
        {"spec": {"taints": [taint]}},
        _content_type="application/strategic-merge-patch+json",
    )
    history = await grown_for(
        world,
        workloads.deployment("web", selector=world.on_pool, replicas=2, cpu="500m"),
        running_pods=2,
    )
    assert history.values == [1, 2]
    assert await phases(world.core, world.namespace) == {"Running": 2}
    assert operator.errors_logged() == []


async def test_two_pools_that_both_fit_only_the_heavier_one_grows(
    world: World, operator: Operator
) -> None:
    light, heavy = world.pool, f"{world.pool}-heavy"
    await make_pool(world.custom, light, labels=world.tier)
    await make_pool(world.custom, heavy, labels=world.tier, weight=50)
    await make_autoscaler(world.custom, world.autoscaler, pool=light, namespace=world.namespace)
    await make_autoscaler(
        world.custom, f"{world.autoscaler}-heavy", pool=heavy, namespace=world.namespace
    )
    try:
        light_history = History(world.custom, light)
        light_history.start()
        try:
            heavy_history = await scale_up(
                world.api_client,
                pool=heavy,
                namespace=world.namespace,
                deployments=[workloads.deployment("web", selector=world.tier, replicas=6, cpu="1")],
                running_pods=6,
                within=180,
            )
        finally:
            await light_history.stop()
        assert heavy_history.values == [0, 2]
        assert light_history.values == [0]
        assert light_history.requests == {}
    finally:
        await world.custom.delete_cluster_custom_object(*AUTOSCALERS, f"{world.autoscaler}-heavy")
        await remove_pool(world.custom, heavy)
    assert operator.errors_logged() == []


async def test_a_second_autoscaler_on_the_same_pool_is_reported_as_conflicting(
    world: World, operator: Operator
) -> None:
    await make_pool(world.custom, world.pool)
    await world.create_autoscaler(scale_down=False)
    await asyncio.sleep(1.1)  # creationTimestamp has whole seconds: the first is older
    second = f"{world.autoscaler}-second"
    await make_autoscaler(world.custom, second, pool=world.pool, namespace=world.namespace)
    try:

        async def conflicting() -> dict[str, Any] | None:
            obj = await world.custom.get_cluster_custom_object(*AUTOSCALERS, second)
            ready = [c for c in obj.get("status", {}).get("conditions", []) if c["type"] == "Ready"]
            return ready[0] if ready and ready[0]["reason"] == "ConflictingAutoscaler" else None

        ready = await wait_for(conflicting, within=30)
        assert ready["status"] == "False"
        assert world.autoscaler in ready["message"]
        first = await world.custom.get_cluster_custom_object(*AUTOSCALERS, world.autoscaler)
        [own] = [c for c in first["status"]["conditions"] if c["type"] == "Ready"]
        assert own["status"] == "True"
    finally:
        await world.custom.delete_cluster_custom_object(*AUTOSCALERS, second)
    assert operator.errors_logged() == []


async def test_pods_affine_to_a_pending_pod_share_its_node_and_the_one_left_over_is_told(
    world: World, operator: Operator
) -> None:
    await make_pool(world.custom, world.pool)
    near_cache = workloads.pod_terms("podAffinity", {"app": "cache"}, HOSTNAME)
    cache = workloads.deployment("cache", selector=world.on_pool, replicas=1, cpu="250m")
    web = workloads.deployment(
        "web", selector=world.on_pool, replicas=3, cpu="1500m", affinity=near_cache
    )
    # The cache and two 1.5-cpu web pods fill one node; the third web pod must be on the
    # cache's node too, so no new node can ever host it: one node, and it is told why.
    history = await grown_for(world, cache, web, running_pods=3)
    assert history.values == [0, 1]
    assert await phases(world.core, world.namespace) == {"Running": 3, "Pending": 1}
    [pending] = [
        p
        for p in (await world.core.list_namespaced_pod(world.namespace)).items
        if p.status.phase == "Pending"
    ]
    [warning] = await wait_for(
        lambda: events(
            world.core, world.namespace, name=pending.metadata.name, reason="NotTriggerScaleUp"
        ),
        within=30,
    )
    assert "pod affinity" in warning.message
    assert operator.errors_logged() == []
