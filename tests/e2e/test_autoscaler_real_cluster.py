"""The Autoscaler on a cluster as users have them, against the real kube-scheduler: a
system node outside every pool (and holding a name the pool would use), startup taints an
agent removes, an arm64 pool beside an amd64 one, and pods with PersistentVolumes.

Each pod some pool can host reaches Running with the pool's target moving once; a pod no
pool can host gets ``NotTriggerScaleUp`` saying why, and no pool grows for it. The local
control plane runs no PersistentVolume controller, so the volumes are static and pre-bound
(the claim names its volume and carries the bind-completed mark, the volume its claim).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from kubernetes_asyncio import client

import workloads
from e2e.autoscaling import (
    History,
    bound_pair,
    events,
    kwok_node,
    make_autoscaler,
    make_pool,
    phases,
    pod,
    running,
    scale_up,
)
from e2e.scenes import World
from harness import AUTOSCALERS, POOLS, Operator, lift_taint, remove_pool, wait_for
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown

ZONE = wellknown.ZONE_LABEL
STRATEGIC = "application/strategic-merge-patch+json"
AGENT_TAINT = {"key": "example.com/agent-not-ready", "effect": "NoSchedule"}


def system_node(name: str, *, zone: str) -> dict[str, Any]:
    """A Node of no pool (kwok keeps it Ready): where a cluster's own services run."""
    return kwok_node(
        name,
        labels={"kubernetes.io/hostname": name, ZONE: zone, "role": "system"},
        room={"cpu": "2", "memory": "8Gi", "pods": "110"},
    )


async def warned(core: client.CoreV1Api, namespace: str, name: str) -> str:
    [event] = await wait_for(
        lambda: events(core, namespace, name=name, reason="NotTriggerScaleUp"), within=30
    )
    return str(event.message)


async def test_a_system_node_counts_for_affinity_and_its_name_is_skipped(
    world: World, operator: Operator
) -> None:
    # The system node holds the pool's first name, <pool>-0: the pool's first node is
    # <pool>-1, opened in zone-b, which is where the database runs.
    system = f"{world.pool}-0"
    await world.core.create_node(system_node(system, zone="zone-b"))
    try:
        await make_pool(world.custom, world.pool, zones=("zone-a", "zone-b"))
        await world.create_autoscaler(scale_down=False)
        database = pod("db", {"nodeName": system})
        await world.core.create_namespaced_pod(world.namespace, database)
        await wait_for(lambda: running(world.core, world.namespace, 1), within=30)
        selector = {wellknown.POOL_LABEL: world.pool}
        near = workloads.pod_terms("podAffinity", {"app": "db"}, ZONE)
        away = workloads.pod_terms("podAntiAffinity", {"app": "db"}, ZONE)
        history = await world.scale_up(
            pods=[pod("web", {"nodeSelector": selector, "affinity": near})],
            running_pods=2,
        )
        assert history.values == [0, 1]
        web = await world.core.read_namespaced_pod("web", world.namespace)
        assert web.spec.node_name == f"{world.pool}-1"
        # Away from the database but only in its zone: no pool node can ever host it.
        stuck = pod(
            "stuck",
            {"nodeSelector": {**selector, ZONE: "zone-b"}, "affinity": away},
        )
        await world.core.create_namespaced_pod(world.namespace, stuck)
        # (The reason names the first refusal of the pool's next node, here its zone.)
        assert world.pool in await warned(world.core, world.namespace, "stuck")
        await asyncio.sleep(3)
        found = await world.custom.get_cluster_custom_object(*POOLS, world.pool)
        assert found["spec"]["targetNodes"] == 1
        node = await world.core.read_node(system)
        assert wellknown.POOL_LABEL not in (node.metadata.labels or {})
        assert operator.errors_logged() == []
    finally:
        with contextlib.suppress(client.exceptions.ApiException):
            await world.core.delete_namespaced_pod("db", world.namespace, grace_period_seconds=0)
        await world.core.delete_node(system)


async def test_startup_taints_cost_no_extra_node(world: World, operator: Operator) -> None:
    agent = nodepool_api.Taint(key=AGENT_TAINT["key"], effect="NoSchedule")
    await make_pool(world.custom, world.pool, startup_taints=(agent,))
    await world.create_autoscaler(scale_down=False)
    seen_taint: set[str] = set()

    async def remove_startup_taints() -> None:
        """The agent on each node: once the node is up, it removes its taint."""
        while True:
            found = await world.core.list_node(label_selector=wellknown.pool_selector(world.pool))
            for node in found.items:
                taints = node.spec.taints or []
                if any(t.key == AGENT_TAINT["key"] for t in taints):
                    seen_taint.add(node.metadata.name)
                    if node.status.allocatable:
                        await lift_taint(world.core, node, AGENT_TAINT["key"])
            await asyncio.sleep(0.5)

    agents = asyncio.create_task(remove_startup_taints())
    try:
        selector = {wellknown.POOL_LABEL: world.pool}
        history = await world.scale_up(
            pods=[pod(f"web-{i}", {"nodeSelector": selector}) for i in range(3)],
            running_pods=3,
        )
    finally:
        agents.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await agents
    assert history.values == [0, 1]
    assert seen_taint == {f"{world.pool}-0"}  # registered with it, as the template says
    assert operator.errors_logged() == []


async def test_an_arm64_pool_grows_for_arm64_pods_only(world: World, operator: Operator) -> None:
    arm = f"{world.pool}-arm"
    await make_pool(world.custom, world.pool, labels=world.tier)
    await make_pool(world.custom, arm, labels={**world.tier, wellknown.ARCH_LABEL: "arm64"})
    await world.create_autoscaler(scale_down=False)
    await make_autoscaler(
        world.custom, f"{world.autoscaler}-arm", pool=arm, namespace=world.namespace
    )
    try:
        amd_history = History(world.custom, world.pool)
        amd_history.start()
        try:
            arm_only = {**world.tier, wellknown.ARCH_LABEL: "arm64"}
            arm_history = await scale_up(
                world.api_client,
                pool=arm,
                namespace=world.namespace,
                pods=[pod(f"arm-{i}", {"nodeSelector": arm_only}) for i in range(2)],
                running_pods=2,
            )
        finally:
            await amd_history.stop()
        assert arm_history.values == [0, 1]
        assert amd_history.values == [0]
        [node] = (await world.core.list_node(label_selector=wellknown.pool_selector(arm))).items
        assert node.metadata.labels[wellknown.ARCH_LABEL] == "arm64"
        assert node.metadata.labels[wellknown.OS_LABEL] == "linux"
        # The operator's own labels are refused in a template, by the server.
        bad = nodepool_api.manifest(
            f"{world.pool}-bad",
            nodepool_api.NodePoolSpec(
                template=nodepool_api.NodeTemplate(labels={wellknown.POOL_LABEL: "x"})
            ),
        )
        with pytest.raises(client.exceptions.ApiException) as refused:
            await world.custom.create_cluster_custom_object(*POOLS, bad)
        assert refused.value.status == 422
        assert "labels may not set nodepool.dev/pool" in refused.value.body
        assert operator.errors_logged() == []
    finally:
        await world.custom.delete_cluster_custom_object(*AUTOSCALERS, f"{world.autoscaler}-arm")
        await remove_pool(world.custom, arm)


def pre_bound(name: str, namespace: str, *, zone: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A static PersistentVolume usable only in ``zone`` (node affinity and zone label),
    and its claim, bound to each other as the PV controller would leave them."""
    return bound_pair(
        namespace,
        name,
        volume=f"{namespace}-{name}",
        storage_class="",
        key=ZONE,
        value=zone,
        labels={ZONE: zone},
        hostPath={"path": f"/tmp/{name}"},
    )


def using(claim: str) -> dict[str, Any]:
    return {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}


async def test_pods_with_volumes_go_where_their_volumes_are_or_are_told_why_not(
    world: World, operator: Operator
) -> None:
    await make_pool(world.custom, world.pool, zones=("zone-b",))
    await world.create_autoscaler(scale_down=False)
    volumes = []
    for claim, zone in (("here", "zone-b"), ("elsewhere", "zone-c")):
        volume, body = pre_bound(claim, world.namespace, zone=zone)
        await world.core.create_persistent_volume(volume)
        volumes.append(volume["metadata"]["name"])
        await world.core.create_namespaced_persistent_volume_claim(world.namespace, body)
    try:
        selector = {wellknown.POOL_LABEL: world.pool}
        history = await world.scale_up(
            pods=[pod("db", {"nodeSelector": selector, **using("here")})],
            running_pods=1,
        )
        assert history.values == [0, 1]
        for name, claim in (("far", "elsewhere"), ("lost", "missing")):
            await world.core.create_namespaced_pod(
                world.namespace, pod(name, {"nodeSelector": selector, **using(claim)})
            )
        told = await warned(world.core, world.namespace, "far")
        assert f'is bound to persistentvolume "{world.namespace}-elsewhere"' in told
        assert 'persistentvolumeclaim "missing" not found' in await warned(
            world.core, world.namespace, "lost"
        )
        await asyncio.sleep(3)
        found = await world.custom.get_cluster_custom_object(*POOLS, world.pool)
        assert found["spec"]["targetNodes"] == 1
        assert await phases(world.core, world.namespace) == {"Running": 1, "Pending": 2}
        assert operator.errors_logged() == []
    finally:
        for name in ("db", "far", "lost"):
            with contextlib.suppress(client.exceptions.ApiException):
                await world.core.delete_namespaced_pod(
                    name, world.namespace, grace_period_seconds=0
                )
        for volume_name in volumes:
            with contextlib.suppress(client.exceptions.ApiException):
                await world.core.delete_persistent_volume(volume_name)
