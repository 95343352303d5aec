"""Consolidation end to end: underused nodes go when their pods fit elsewhere, and stay,
told why, when a pod cannot move. Control plane, scheduler, kwok, simcloud and operator
processes; the pods are pause containers (kwok runs them)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from kubernetes_asyncio import client

import workloads
from e2e.autoscaling import running
from e2e.consolidating import (
    UNNEEDED,
    autoscaler_events,
    consolidating,
    deployment,
    pinned,
    pool_nodes,
    pool_settled,
    preferring,
    two_nodes,
)
from e2e.scenes import World
from harness import POOLS, REQUESTS, Operator, wait_for
from nodepool_operator.api import wellknown

TARGET_LABEL = "e2e.nodepool.dev/target"


async def tainted(core: client.CoreV1Api, pool: str) -> list[str]:
    return [n.metadata.name for n in await pool_nodes(core, pool) if consolidating(n)]


async def second_tainted(world: World) -> tuple[str, str]:
    """Two nodes, the second with one replica that fits on the first; returns once the
    Autoscaler has tainted the second (its decision made, its request maybe not yet)."""
    first, second = await two_nodes(world)
    solo = deployment("solo", pool=world.pool, replicas=1, **preferring(second))
    await world.apps.create_namespaced_deployment(world.namespace, solo)
    await wait_for(lambda: running(world.core, world.namespace, 3), within=60)
    await world.create_autoscaler(unneeded_seconds=UNNEEDED)

    async def is_tainted() -> bool:
        return await tainted(world.core, world.pool) == [second]

    await wait_for(is_tainted, within=UNNEEDED + 30, every=0.05)
    return first, second


async def test_a_shrunk_deployment_ends_on_one_node_within_the_delay_and_a_minute(
    world: World,
) -> None:
    _, operator = await world.autoscaled(latency=1, unneeded_seconds=UNNEEDED)
    await world.apps.create_namespaced_deployment(
        world.namespace, deployment("web", pool=world.pool, replicas=9)
    )
    await wait_for(lambda: running(world.core, world.namespace, 9), within=90)
    await wait_for(lambda: pool_settled(world.custom, world.pool, 3), within=60)

    await world.apps.patch_namespaced_deployment_scale(
        "web", world.namespace, {"spec": {"replicas": 3}}
    )
    shrunk = time.monotonic()
    await wait_for(lambda: pool_settled(world.custom, world.pool, 1), within=UNNEEDED + 60)
    assert time.monotonic() - shrunk >= UNNEEDED  # not before the configured delay
    await wait_for(lambda: running(world.core, world.namespace, 3), within=30)
    [node] = await pool_nodes(world.core, world.pool)
    assert not consolidating(node)
    pods = (await world.core.list_namespaced_pod(world.namespace)).items
    assert {p.spec.node_name for p in pods} == {node.metadata.name}
    requests = await world.custom.list_cluster_custom_object(
        *REQUESTS, label_selector=wellknown.pool_selector(world.pool)
    )
    named = [n for r in requests["items"] for n in r["spec"].get("removeNodes", [])]
    assert named  # the nodes that went were named, not counted
    assert node.metadata.name not in named
    assert operator.errors_logged() == []


def _bare(pool: str, node: str) -> tuple[str, dict[str, Any]]:
    return "not-replicated", {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "lonely"},
        "spec": {
            **pinned(node),
            "terminationGracePeriodSeconds": 0,
            "containers": [workloads.container("1")],
        },
    }


def _kept_deployment(pool: str, node: str, rule: str, **spec: Any) -> tuple[str, dict[str, Any]]:
    body = deployment("kept", pool=pool, replicas=1, **preferring(node), **spec)
    return rule, body


def _empty_dir(pool: str, node: str) -> tuple[str, dict[str, Any]]:
    return _kept_deployment(
        pool, node, "local-storage", volumes=[{"name": "scratch", "emptyDir": {}}]
    )


def _do_not_disrupt(pool: str, node: str) -> tuple[str, dict[str, Any]]:
    rule, body = _kept_deployment(pool, node, "do-not-disrupt")
    body["spec"]["template"]["metadata"]["annotations"] = {
        wellknown.DO_NOT_DISRUPT_ANNOTATION: "true"
    }
    return rule, body


def _guarded(pool: str, node: str) -> tuple[str, dict[str, Any]]:
    return _kept_deployment(pool, node, "pod-disruption-budget")


@pytest.mark.parametrize(
    "make",
    [_bare, _empty_dir, _do_not_disrupt, _guarded],
    ids=["bare-pod", "empty-dir", "do-not-disrupt", "pdb-allows-none"],
)
async def test_a_pod_that_cannot_move_keeps_its_node_and_the_event_names_it(
    world: World, make: Any
) -> None:
    _, operator = await world.operated(latency=1)
    apps, policy = world.apps, client.PolicyV1Api(world.api_client)
    first, second = await two_nodes(world)
    rule, body = make(world.pool, second)
    if body["kind"] == "Pod":
        await world.core.create_namespaced_pod(world.namespace, body)
    else:
        await apps.create_namespaced_deployment(world.namespace, body)
    if rule == "pod-disruption-budget":
        budget = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "kept"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "kept"}}},
        }
        await policy.create_namespaced_pod_disruption_budget(world.namespace, budget)
    await wait_for(lambda: running(world.core, world.namespace, 3), within=60)
    on_second = [
        p
        for p in (await world.core.list_namespaced_pod(world.namespace)).items
        if p.spec.node_name == second
    ]
    assert len(on_second) == 1  # the scheduler put it where it was preferred
    await world.create_autoscaler(unneeded_seconds=UNNEEDED)

    async def told() -> list[str] | None:
        found = await autoscaler_events(world.core, world.autoscaler, "ConsolidationKept")
        return found or None

    [message] = await wait_for(told, within=UNNEEDED + 30)
    assert f"({rule})" in message
    assert f"{world.namespace}/{on_second[0].metadata.name}" in message
    assert second in message
    await asyncio.sleep(UNNEEDED + 2)  # and it stays so: no request, no taint left
    assert sorted(n.metadata.name for n in await pool_nodes(world.core, world.pool)) == [
        first,
        second,
    ]
    assert await tainted(world.core, world.pool) == []
    pool = await world.custom.get_cluster_custom_object(*POOLS, world.pool)
    assert pool["spec"]["targetNodes"] == 2
    node_told = await world.core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={second},reason=ConsolidationKept"
    )
    assert [e.message for e in node_told.items] == [message]
    assert operator.errors_logged() == []


async def test_pods_arriving_after_the_decision_are_never_evicted_by_it(world: World) -> None:
    _, operator = await world.operated(latency=1)
    first, second = await second_tainted(
        world,
    )
    # The decision is made: one pod for the scheduler to send anywhere (the neighbour is
    # the only untainted node), one that asks for the tainted node itself (by a label of
    # its own: a node that replaced it would have its name, never this label).
    late = deployment("late", pool=world.pool, replicas=1)
    await world.apps.create_namespaced_deployment(world.namespace, late)
    await world.core.patch_node(second, {"metadata": {"labels": {TARGET_LABEL: "yes"}}})
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "wants-second"},
        "spec": {
            "nodeSelector": {TARGET_LABEL: "yes"},
            "terminationGracePeriodSeconds": 0,
            "containers": [workloads.container("100m")],
        },
    }
    await world.core.create_namespaced_pod(world.namespace, body)

    async def wants_second() -> client.V1Pod:
        return await world.core.read_namespaced_pod("wants-second", world.namespace)

    async def settled() -> bool:
        # Either the node went (named before the pod came: the pod waits, unbound), or
        # the Autoscaler saw the pod wait for its room first: the taint came off, the
        # pod runs there and the node stays (a bare pod now holds it).
        if await pool_settled(world.custom, world.pool, 1):
            return True
        pod = await wants_second()
        return pod.spec.node_name == second and pod.status.phase == "Running"

    await wait_for(settled, within=60)
    pods = {
        p.metadata.name: p for p in (await world.core.list_namespaced_pod(world.namespace)).items
    }
    [late_pod] = [p for name, p in pods.items() if name.startswith("late-")]
    assert late_pod.status.phase == "Running"
    assert late_pod.metadata.deletion_timestamp is None
    # Never evicted: it waits for a node the decision removed, or runs on the node kept.
    waiting = pods["wants-second"]
    assert waiting.metadata.deletion_timestamp is None
    if waiting.spec.node_name is None:
        assert late_pod.spec.node_name == first
        assert [n.metadata.name for n in await pool_nodes(world.core, world.pool)] == [first]
    else:
        assert waiting.spec.node_name == second
        assert await tainted(world.core, world.pool) == []
    assert operator.errors_logged() == []


async def test_an_operator_killed_mid_consolidation_loses_no_pod_and_leaves_no_taint(
    world: World,
) -> None:
    cloud, operator = await world.operated(latency=1)
    first, _ = await second_tainted(
        world,
    )
    operator.kill()  # between the taint and the request, or just after it
    restarted: Operator = world.start_operator(cloud)
    await wait_for(lambda: pool_settled(world.custom, world.pool, 1), within=60)
    await wait_for(lambda: running(world.core, world.namespace, 3), within=30)
    [node] = await pool_nodes(world.core, world.pool)
    assert node.metadata.name == first
    assert not consolidating(node)
    assert restarted.errors_logged() == []
