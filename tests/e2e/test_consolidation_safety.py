"""Consolidation never strands a node, end to end: it marks only the pool's own Nodes,
removes any number of empty Nodes without a refused request, and takes its marks off
when dry run is turned on. Control plane, scheduler, kwok, simcloud and operator
processes."""

from __future__ import annotations

import time
from typing import Any

from kubernetes_asyncio import client

from e2e.autoscaling import create_autoscaler, create_pool, running
from e2e.consolidating import (
    autoscaler_events,
    deployment,
    pool_nodes,
    pool_settled,
    preferring,
    two_nodes,
)
from harness import AUTOSCALERS, MERGE, POOLS, REQUESTS, Operator, SimCloud, wait_for
from nodepool_operator.api import wellknown

CONSOLIDATING = wellknown.CONSOLIDATING_TAINT_KEY
STAMP = wellknown.UNNEEDED_SINCE_ANNOTATION


def marks_of(node: client.V1Node) -> tuple[bool, bool]:
    """(tainted for consolidation, stamped unneeded)."""
    tainted = any(t.key == CONSOLIDATING for t in node.spec.taints or ())
    return tainted, STAMP in (node.metadata.annotations or {})


async def test_a_node_labelled_with_the_pool_but_not_owned_by_it_is_never_marked(
    api_client: client.ApiClient,
    start_simcloud: Any,
    start_operator: Any,
    pool_name: str,
    autoscaler_name: str,
    namespace: str,
) -> None:
    cloud: SimCloud = await start_simcloud("--create-latency", "0", "--latency-jitter", "0")
    operator: Operator = start_operator(cloud)
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    await create_pool(custom, pool_name)
    await custom.patch_cluster_custom_object(
        *POOLS, pool_name, {"spec": {"targetNodes": 1}}, _content_type=MERGE
    )
    await wait_for(lambda: pool_settled(custom, pool_name, 1), within=60)
    stranger = f"{pool_name}-stranger"
    # Someone labelled a Node of theirs with the pool: kwok keeps it Ready, it is empty.
    await core.create_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": stranger,
                "labels": {wellknown.POOL_LABEL: pool_name},
                "annotations": {"kwok.x-k8s.io/node": "fake"},
            },
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}},
        }
    )
    try:
        await create_autoscaler(
            custom, autoscaler_name, pool=pool_name, namespace=namespace, unneeded_seconds=3
        )
        started = time.monotonic()
        seen_marks: list[tuple[bool, bool]] = []

        async def own_node_gone() -> bool:
            node = await core.read_node(stranger)
            seen_marks.append(marks_of(node))
            return await pool_settled(custom, pool_name, 0)

        # The pool's own empty node goes; the stranger is never stamped or tainted.
        await wait_for(own_node_gone, within=60, every=0.2)
        while time.monotonic() - started < 15:
            seen_marks.append(marks_of(await core.read_node(stranger)))
        assert set(seen_marks) == {(False, False)}
        requests = await custom.list_cluster_custom_object(
            *REQUESTS, label_selector=wellknown.pool_selector(pool_name)
        )
        named = [n for r in requests["items"] for n in r["spec"].get("removeNodes", [])]
        assert stranger not in named
        assert [n.metadata.name for n in await pool_nodes(core, pool_name)] == [stranger]
    finally:
        await core.delete_node(stranger)
    assert operator.errors_logged() == []


async def test_dry_run_turned_on_takes_the_marks_off_and_previews_the_scale_down(
    api_client: client.ApiClient,
    start_simcloud: Any,
    start_operator: Any,
    pool_name: str,
    autoscaler_name: str,
    namespace: str,
) -> None:
    cloud: SimCloud = await start_simcloud("--create-latency", "0", "--latency-jitter", "0")
    operator: Operator = start_operator(cloud)
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    await create_pool(custom, pool_name)
    await custom.patch_cluster_custom_object(
        *POOLS, pool_name, {"spec": {"targetNodes": 2}}, _content_type=MERGE
    )
    await wait_for(lambda: pool_settled(custom, pool_name, 2), within=60)
    await create_autoscaler(
        custom, autoscaler_name, pool=pool_name, namespace=namespace, unneeded_seconds=600
    )

    async def stamped() -> bool:
        nodes = await pool_nodes(core, pool_name)
        return len(nodes) == 2 and all(marks_of(n)[1] for n in nodes)

    await wait_for(stamped, within=30, every=0.2)
    await custom.patch_cluster_custom_object(
        *AUTOSCALERS, autoscaler_name, {"spec": {"dryRun": True}}, _content_type=MERGE
    )

    async def unmarked() -> bool:
        return all(marks_of(n) == (False, False) for n in await pool_nodes(core, pool_name))

    await wait_for(unmarked, within=10, every=0.2)

    async def previewed() -> list[str] | None:
        return await autoscaler_events(core, autoscaler_name, "WouldScaleDown") or None

    [would] = await wait_for(previewed, within=30)
    assert "2 -> 0 nodes" in would, would
    autoscaler = await custom.get_cluster_custom_object(*AUTOSCALERS, autoscaler_name)
    assert autoscaler["status"]["wouldRequest"]["targetNodes"] == 0
    pool = await custom.get_cluster_custom_object(*POOLS, pool_name)
    assert pool["spec"]["targetNodes"] == 2  # a preview, nothing removed
    assert operator.errors_logged() == []


async def test_a_hundred_and_twenty_empty_nodes_go_to_min_nodes_in_requests_the_api_takes(
    api_client: client.ApiClient,
    start_simcloud: Any,
    start_operator: Any,
    pool_name: str,
    autoscaler_name: str,
    namespace: str,
) -> None:
    cloud: SimCloud = await start_simcloud("--create-latency", "0", "--latency-jitter", "0")
    operator: Operator = start_operator(cloud)
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    await create_pool(custom, pool_name, min_nodes=2, max_nodes=200)
    await custom.patch_cluster_custom_object(
        *POOLS, pool_name, {"spec": {"targetNodes": 120}}, _content_type=MERGE
    )
    await wait_for(lambda: pool_settled(custom, pool_name, 120), within=240, every=1)
    await create_autoscaler(
        custom, autoscaler_name, pool=pool_name, namespace=namespace, unneeded_seconds=5
    )
    started = time.monotonic()
    await wait_for(lambda: pool_settled(custom, pool_name, 2), within=180, every=1)
    took = time.monotonic() - started
    assert took < 180
    print(f"120 empty nodes to minNodes=2 in {took:.1f} s")
    requests = await custom.list_cluster_custom_object(
        *REQUESTS, label_selector=wellknown.pool_selector(pool_name)
    )
    phases = [r.get("status", {}).get("phase") for r in requests["items"]]
    assert "Rejected" not in phases, phases
    nodes = await pool_nodes(core, pool_name)
    assert len(nodes) == 2
    # Left at minNodes, still unneeded (stamped) but never tainted.
    assert [marks_of(n)[0] for n in nodes] == [False, False]
    assert operator.errors_logged() == []


HOLD = "e2e.nodepool.dev/hold"


async def test_a_victim_a_scale_up_brings_back_loses_its_taint_and_takes_the_pods(
    api_client: client.ApiClient,
    start_simcloud: Any,
    start_operator: Any,
    pool_name: str,
    autoscaler_name: str,
    namespace: str,
) -> None:
    cloud: SimCloud = await start_simcloud("--create-latency", "1", "--latency-jitter", "0")
    operator: Operator = start_operator(cloud)
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    apps = client.AppsV1Api(api_client)
    first, second = await two_nodes(custom, core, apps, pool=pool_name, namespace=namespace)
    # Its pod keeps the drain going: evicted, it stays Terminating until the test lets go.
    solo = deployment("solo", pool=pool_name, replicas=1, **preferring(second))
    solo["spec"]["template"]["metadata"]["finalizers"] = [HOLD]
    await apps.create_namespaced_deployment(namespace, solo)
    await wait_for(lambda: running(core, namespace, 3), within=60)
    try:
        await create_autoscaler(
            custom, autoscaler_name, pool=pool_name, namespace=namespace, unneeded_seconds=3
        )

        async def draining() -> bool:
            node = await core.read_node(second)
            return bool(node.spec.unschedulable)

        await wait_for(draining, within=60, every=0.2)
        # Pods that need more room than the first node has: the pool grows back to 2,
        # which the NodePool controller serves by calling off the drain of the second.
        more = deployment("more", pool=pool_name, replicas=2)
        await apps.create_namespaced_deployment(namespace, more)

        async def brought_back() -> bool:
            node = await core.read_node(second)
            pods = (await core.list_namespaced_pod(namespace, label_selector="app=more")).items
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
        names = sorted(n.metadata.name for n in await pool_nodes(core, pool_name))
        assert names == [first, second]  # its room served the pods: no third node
    finally:
        for pod in (await core.list_namespaced_pod(namespace, label_selector="app=solo")).items:
            if pod.metadata.finalizers:
                await core.patch_namespaced_pod(
                    pod.metadata.name, namespace, {"metadata": {"finalizers": None}}
                )
    assert operator.errors_logged() == []
