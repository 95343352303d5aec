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
from kubernetes_asyncio import client

import workloads
from e2e.autoscaling import History, events, make_autoscaler, make_pool, phases, running
from harness import AUTOSCALERS, MERGE, POOLS, Operator, SimCloud, remove_pool, wait_for
from nodepool_operator.api import wellknown

ZONE = wellknown.ZONE_LABEL
HOSTNAME = wellknown.HOSTNAME_LABEL


@pytest.fixture
async def operator(start_simcloud: Any, start_operator: Any) -> Operator:
    """The operator, against a simcloud whose VMs boot in one second."""
    cloud: SimCloud = await start_simcloud("--create-latency", "1", "--latency-jitter", "0")
    started: Operator = start_operator(cloud)
    return started


async def scale_up_for(
    api_client: client.ApiClient,
    *,
    pool: str,
    namespace: str,
    deployments: list[dict[str, Any]],
    running_pods: int,
) -> History:
    """Create the deployments, wait for ``running_pods`` Running; the pool's history."""
    custom = client.CustomObjectsApi(api_client)
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    history = History(custom, pool)
    history.start()
    try:
        for manifest in deployments:
            await apps.create_namespaced_deployment(namespace, manifest)
        await wait_for(lambda: running(core, namespace, running_pods), within=180)
        await asyncio.sleep(3)  # three more scans with everything settled: no late request
    finally:
        await history.stop()
    return history


async def test_daemonset_overhead_is_counted_so_the_pool_grows_once_to_what_fits(
    api_client: client.ApiClient,
    operator: Operator,
    pool_name: str,
    autoscaler_name: str,
    namespace: str,
) -> None:
    custom, apps = client.CustomObjectsApi(api_client), client.AppsV1Api(api_client)
    core = client.CoreV1Api(api_client)
    await make_pool(custom, pool_name)
    await make_autoscaler(custom, autoscaler_name, pool=pool_name, namespace=namespace)
    selector = {wellknown.POOL_LABEL: pool_name}
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
    await apps.create_namespaced_daemon_set(namespace, daemon)
    # Two 2-cpu pods fill a 4-cpu node, but not after the agent's 500m: one pod per node.
    history = await scale_up_for(
        api_client,
        pool=pool_name,
        namespace=namespace,
        deployments=[workloads.deployment("web", selector=selector, replicas=3, cpu="2")],
        running_pods=3 + 3,  # the three pods and an agent on each of the three nodes
    )
    assert history.values == [0, 3]
    # A pod of the template's full size never fits beside the agent: a warning, no node.
    huge = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "huge"}}
    spec = {"nodeSelector": selector, "containers": [workloads.container("4")]}
    await core.create_namespaced_pod(namespace, {**huge, "spec": spec})
    [warning] = await wait_for(
        lambda: events(core, namespace, name="huge", reason="NotTriggerScaleUp"), within=30
    )
    assert "cpu" in warning.message
    await asyncio.sleep(3)
    pool = await custom.get_cluster_custom_object(*POOLS, pool_name)
    assert pool["spec"]["targetNodes"] == 3
    assert operator.errors_logged() == []


async def test_a_template_reserve_is_taken_off_each_new_node(
    api_client: client.ApiClient,
    operator: Operator,
    pool_name: str,
    autoscaler_name: str,
    namespace: str,
) -> None:
    custom = client.CustomObjectsApi(api_client)
    await make_pool(custom, pool_name, reserved={"cpu": "500m"})
    await make_autoscaler(custom, autoscaler_name, pool=pool_name, namespace=namespace)
    selector = {wellknown.POOL_LABEL: pool_name}
    history = await scale_up_for(
        api_client,
        pool=pool_name,
        namespace=namespace,
        deployments=[workloads.deployment("web", selector=selector, replicas=4, cpu="2")],
        running_pods=4,
    )
    assert history.values == [0, 4]
    core = client.CoreV1Api(api_client)
    nodes = await core.list_node(label_selector=wellknown.pool_selector(pool_name))
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
    api_client: client.ApiClient,
    operator: Operator,
    pool_name: str,
    autoscaler_name: str,
    namespace: str,
    app: str,
    cpu: str,
    constraint: dict[str, Any],
) -> None:
    """Replicas that may not share a node (hostname anti-affinity, a host port) get one
    node each, asked for in one step."""
    custom = client.CustomObjectsApi(api_client)
    await make_pool(custom, pool_name)
    await make_autoscaler(custom, autoscaler_name, pool=pool_name, namespace=namespace)
    selector = {wellknown.POOL_LABEL: pool_name}
    history = await scale_up_for(
        api_client,
        pool=pool_name,
        namespace=namespace,
        deployments=[
            workloads.deployment(app, selector=selector, replicas=3, cpu=cpu, **constraint)
        ],
        running_pods=3,
    )
    assert history.values == [0, 3]
    assert operator.errors_logged() == []


async def test_a_zone_spread_gets_a_node_in_each_zone(
    api_client: client.ApiClient,
    operator: Operator,
    pool_name: str,
    autoscaler_name: str,
    namespace: str,
) -> None:
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    await make_pool(custom, pool_name, zones=("zone-a", "zone-b", "zone-c"))
    await make_autoscaler(custom, autoscaler_name, pool=pool_name, namespace=namespace)
    selector = {wellknown.POOL_LABEL: pool_name}
    spread = workloads.spread({"app": "api"}, ZONE, minDomains=3)
    # Six small pods fit on one node; spread over three zones they need three.
    history = await scale_up_for(
        api_client,
        pool=pool_name,
        namespace=namespace,
        deployments=[
            workloads.deployment(
                "api", selector=selector, replicas=6, cpu="250m", topologySpreadConstraints=spread
            )
        ],
        running_pods=6,
    )
    assert history.values == [0, 3]
    nodes = await core.list_node(label_selector=wellknown.pool_selector(pool_name))
    assert sorted(n.metadata.labels[ZONE] for n in nodes.items) == ["zone-a", "zone-b", "zone-c"]
    assert operator.errors_logged() == []


async def test_a_taint_on_an_existing_node_is_judged_on_that_node(
    api_client: client.ApiClient,
    operator: Operator,
    pool_name: str,
    autoscaler_name: str,
    namespace: str,
) -> None:
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    await make_pool(custom, pool_name)
    await custom.patch_cluster_custom_object(
        *POOLS, pool_name, {"spec": {"targetNodes": 1}}, _content_type=MERGE
    )

    async def one_node() -> list[Any]:
        found = await core.list_node(label_selector=wellknown.pool_selector(pool_name))
        return [n for n in found.items if n.status.allocatable]

    [node] = await wait_for(one_node, within=30)
    # Someone taints the only node by hand: the template has no such taint, the node does.
    taint = {"key": "dedicated", "value": "ops", "effect": "NoSchedule"}
    await core.patch_node(
        node.metadata.name,
        {"spec": {"taints": [taint]}},
        _content_type="application/strategic-merge-patch+json",
    )
    await make_autoscaler(custom, autoscaler_name, pool=pool_name, namespace=namespace)
    selector = {wellknown.POOL_LABEL: pool_name}
    history = await scale_up_for(
        api_client,
        pool=pool_name,
        namespace=namespace,
        deployments=[workloads.deployment("web", selector=selector, replicas=2, cpu="500m")],
        running_pods=2,
    )
    assert history.values == [1, 2]
    assert await phases(core, namespace) == {"Running": 2}
    assert operator.errors_logged() == []


async def test_two_pools_that_both_fit_only_the_heavier_one_grows(
    api_client: client.ApiClient,
    operator: Operator,
    pool_name: str,
    autoscaler_name: str,
    namespace: str,
) -> None:
    custom = client.CustomObjectsApi(api_client)
    light, heavy = pool_name, f"{pool_name}-heavy"
    shared = {"example.com/tier": pool_name}
    await make_pool(custom, light, labels=shared)
    await make_pool(custom, heavy, labels=shared, weight=50)
    await make_autoscaler(custom, autoscaler_name, pool=light, namespace=namespace)
    await make_autoscaler(custom, f"{autoscaler_name}-heavy", pool=heavy, namespace=namespace)
    try:
        light_history = History(custom, light)
        light_history.start()
        try:
            heavy_history = await scale_up_for(
                api_client,
                pool=heavy,
                namespace=namespace,
                deployments=[workloads.deployment("web", selector=shared, replicas=6, cpu="1")],
                running_pods=6,
            )
        finally:
            await light_history.stop()
        assert heavy_history.values == [0, 2]
        assert light_history.values == [0]
        assert light_history.requests == {}
    finally:
        await custom.delete_cluster_custom_object(*AUTOSCALERS, f"{autoscaler_name}-heavy")
        await remove_pool(custom, heavy)
    assert operator.errors_logged() == []


async def test_a_second_autoscaler_on_the_same_pool_is_reported_as_conflicting(
    api_client: client.ApiClient,
    operator: Operator,
    pool_name: str,
    autoscaler_name: str,
    namespace: str,
) -> None:
    custom = client.CustomObjectsApi(api_client)
    await make_pool(custom, pool_name)
    await make_autoscaler(custom, autoscaler_name, pool=pool_name, namespace=namespace)
    await asyncio.sleep(1.1)  # creationTimestamp has whole seconds: the first is older
    second = f"{autoscaler_name}-second"
    await make_autoscaler(custom, second, pool=pool_name, namespace=namespace)
    try:

        async def conflicting() -> dict[str, Any] | None:
            obj = await custom.get_cluster_custom_object(*AUTOSCALERS, second)
            ready = [c for c in obj.get("status", {}).get("conditions", []) if c["type"] == "Ready"]
            return ready[0] if ready and ready[0]["reason"] == "ConflictingAutoscaler" else None

        ready = await wait_for(conflicting, within=30)
        assert ready["status"] == "False"
        assert autoscaler_name in ready["message"]
        first = await custom.get_cluster_custom_object(*AUTOSCALERS, autoscaler_name)
        [own] = [c for c in first["status"]["conditions"] if c["type"] == "Ready"]
        assert own["status"] == "True"
    finally:
        await custom.delete_cluster_custom_object(*AUTOSCALERS, second)
    assert operator.errors_logged() == []


async def test_pods_affine_to_a_pending_pod_share_its_node_and_the_one_left_over_is_told(
    api_client: client.ApiClient,
    operator: Operator,
    pool_name: str,
    autoscaler_name: str,
    namespace: str,
) -> None:
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    await make_pool(custom, pool_name)
    await make_autoscaler(custom, autoscaler_name, pool=pool_name, namespace=namespace)
    selector = {wellknown.POOL_LABEL: pool_name}
    near_cache = workloads.pod_terms("podAffinity", {"app": "cache"}, HOSTNAME)
    # The cache and two 1.5-cpu web pods fill one node; the third web pod must be on the
    # cache's node too, so no new node can ever host it: one node, and it is told why.
    history = await scale_up_for(
        api_client,
        pool=pool_name,
        namespace=namespace,
        deployments=[
            workloads.deployment("cache", selector=selector, replicas=1, cpu="250m"),
            workloads.deployment(
                "web", selector=selector, replicas=3, cpu="1500m", affinity=near_cache
            ),
        ],
        running_pods=3,
    )
    assert history.values == [0, 1]
    assert await phases(core, namespace) == {"Running": 3, "Pending": 1}
    [pending] = [
        p for p in (await core.list_namespaced_pod(namespace)).items if p.status.phase == "Pending"
    ]
    [warning] = await wait_for(
        lambda: events(core, namespace, name=pending.metadata.name, reason="NotTriggerScaleUp"),
        within=30,
    )
    assert "pod affinity" in warning.message
    assert operator.errors_logged() == []
