"""Consolidation never strands a node, end to end: it marks only the pool's own Nodes,
removes any number of empty Nodes without a refused request, and takes its marks off
when dry run is turned on. Control plane, scheduler, kwok, simcloud and operator
processes."""

from __future__ import annotations

import time

from kubernetes_asyncio import client

from e2e.autoscaling import running
from e2e.consolidating import (
    autoscaler_events,
    deployment,
    pool_nodes,
    pool_of,
    pool_settled,
    preferring,
    two_nodes,
)
from e2e.scenes import World
from harness import AUTOSCALERS, MERGE, POOLS, REQUESTS, wait_for
from nodepool_operator.api import wellknown

CONSOLIDATING = wellknown.CONSOLIDATING_TAINT_KEY
STAMP = wellknown.UNNEEDED_SINCE_ANNOTATION


def marks_of(node: client.V1Node) -> tuple[bool, bool]:
    """(tainted for consolidation, stamped unneeded)."""
    tainted = any(t.key == CONSOLIDATING for t in node.spec.taints or ())
    return tainted, STAMP in (node.metadata.annotations or {})


async def test_a_node_labelled_with_the_pool_but_not_owned_by_it_is_never_marked(
    world: World,
) -> None:
    _, operator = await world.operated(latency=0)
    await pool_of(world, 1)
    stranger = f"{world.pool}-stranger"
    # Someone labelled a Node of theirs with the pool: kwok keeps it Ready, it is empty.
    await world.core.create_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": stranger,
                "labels": {wellknown.POOL_LABEL: world.pool},
                "annotations": {"kwok.x-k8s.io/node": "fake"},
            },
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}},
        }
    )
    try:
        await world.create_autoscaler(unneeded_seconds=3)
        started = time.monotonic()
        seen_marks: list[tuple[bool, bool]] = []

        async def own_node_gone() -> bool:
            node = await world.core.read_node(stranger)
            seen_marks.append(marks_of(node))
            return await pool_settled(world.custom, world.pool, 0)

        # The pool's own empty node goes; the stranger is never stamped or tainted.
        await wait_for(own_node_gone, within=60, every=0.2)
        while time.monotonic() - started < 15:
            seen_marks.append(marks_of(await world.core.read_node(stranger)))
        assert set(seen_marks) == {(False, False)}
        requests = await world.custom.list_cluster_custom_object(
            *REQUESTS, label_selector=wellknown.pool_selector(world.pool)
        )
        named = [n for r in requests["items"] for n in r["spec"].get("removeNodes", [])]
        assert stranger not in named
        assert [n.metadata.name for n in await pool_nodes(world.core, world.pool)] == [stranger]
    finally:
        await world.core.delete_node(stranger)
    assert operator.errors_logged() == []


async def test_dry_run_turned_on_takes_the_marks_off_and_previews_the_scale_down(
    world: World,
) -> None:
    _, operator = await world.operated(latency=0)
    await pool_of(world, 2)
    await world.create_autoscaler(unneeded_seconds=600)

    async def stamped() -> bool:
        nodes = await pool_nodes(world.core, world.pool)
        return len(nodes) == 2 and all(marks_of(n)[1] for n in nodes)

    await wait_for(stamped, within=30, every=0.2)
    await world.custom.patch_cluster_custom_object(
        *AUTOSCALERS, world.autoscaler, {"spec": {"dryRun": True}}, _content_type=MERGE
    )

    async def unmarked() -> bool:
        return all(marks_of(n) == (False, False) for n in await pool_nodes(world.core, world.pool))

    await wait_for(unmarked, within=10, every=0.2)

    async def previewed() -> list[str] | None:
        return await autoscaler_events(world.core, world.autoscaler, "WouldScaleDown") or None

    [would] = await wait_for(previewed, within=30)
    # Both nodes are unneeded, but the pool's default disruption budget (10 %, one node of
    # two) lets one go at a time: the preview is the request the Autoscaler would make now.
    assert "2 -> 1 nodes" in would, would
    autoscaler = await world.custom.get_cluster_custom_object(*AUTOSCALERS, world.autoscaler)
    assert autoscaler["status"]["wouldRequest"]["targetNodes"] == 1
    pool = await world.custom.get_cluster_custom_object(*POOLS, world.pool)
    assert pool["spec"]["targetNodes"] == 2  # a preview, nothing removed
    assert operator.errors_logged() == []


async def test_a_hundred_and_twenty_empty_nodes_go_to_min_nodes_in_requests_the_api_takes(
    world: World,
) -> None:
    _, operator = await world.operated(latency=0)
    await world.create_pool(min_nodes=2, max_nodes=200)
    await world.custom.patch_cluster_custom_object(
        *POOLS,
        world.pool,
        # No disruption budget (the default 10% would take them 12 at a time): this is
        # about the requests' size.
        {"spec": {"targetNodes": 120, "disruption": {"budgets": []}}},
        _content_type=MERGE,
    )
    await wait_for(lambda: pool_settled(world.custom, world.pool, 120), within=240, every=1)
    await world.create_autoscaler(unneeded_seconds=5)
    started = time.monotonic()
    await wait_for(lambda: pool_settled(world.custom, world.pool, 2), within=180, every=1)
    took = time.monotonic() - started
    assert took < 180
    print(f"120 empty nodes to minNodes=2 in {took:.1f} s")
    requests = await world.custom.list_cluster_custom_object(
        *REQUESTS, label_selector=wellknown.pool_selector(world.pool)
    )
    phases = [r.get("status", {}).get("phase") for r in requests["items"]]
    assert "Rejected" not in phases, phases
    nodes = await pool_nodes(world.core, world.pool)
    assert len(nodes) == 2
    # Left at minNodes, still unneeded (stamped) but never tainted.
    assert [marks_of(n)[0] for n in nodes] == [False, False]
    assert operator.errors_logged() == []


HOLD = "e2e.nodepool.dev/hold"


async def test_a_victim_a_scale_up_brings_back_loses_its_taint_and_takes_the_pods(
    world: World,
) -> None:
    _, operator = await world.operated(latency=1)
    first, second = await two_nodes(world)
    # Its pod keeps the drain going: evicted, it stays Terminating until the test lets go.
    solo = deployment("solo", pool=world.pool, replicas=1, **preferring(second))
    solo["spec"]["template"]["metadata"]["finalizers"] = [HOLD]
    await world.apps.create_namespaced_deployment(world.namespace, solo)
    await wait_for(lambda: running(world.core, world.namespace, 3), within=60)
    try:
        await world.create_autoscaler(unneeded_seconds=3)

        async def draining() -> bool:
            node = await world.core.read_node(second)
            return bool(node.spec.unschedulable)

        await wait_for(draining, within=60, every=0.2)
        # Pods that need more room than the first node has: the pool grows back to 2,
        # which the NodePool controller serves by calling off the drain of the second.
        more = deployment("more", pool=world.pool, replicas=2)
        await world.apps.create_namespaced_deployment(world.namespace, more)

        async def brought_back() -> bool:
            node = await world.core.read_node(second)
            pods = (
                await world.core.list_namespaced_pod(world.namespace, label_selector="app=more")
            ).items
            return (
                not node.spec.unschedulable
                and marks_of(node)[0] is False
                and len(pods) == 2
                and all(p.status.phase == "Running" for p in pods)
            )

        # Promptly: not once the request that named it is cleaned up (60 s after it).
        asked = time.monotonic()
        await wait_for(brought_back, within=45, every=0.5)
        print(f"victim brought back and untainted {time.monotonic() - asked:.1f} s after")
        names = sorted(n.metadata.name for n in await pool_nodes(world.core, world.pool))
        assert names == [first, second]  # its room served the pods: no third node
    finally:
        for pod in (
            await world.core.list_namespaced_pod(world.namespace, label_selector="app=solo")
        ).items:
            if pod.metadata.finalizers:
                await world.core.patch_namespaced_pod(
                    pod.metadata.name, world.namespace, {"metadata": {"finalizers": None}}
                )
    assert operator.errors_logged() == []
