"""A dry-run Autoscaler on the real control plane: it decides and tells, and asks for
nothing until dry run is turned off."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio import client

from e2e.autoscaling import (
    autoscaler_status,
    condition,
    create_autoscaler,
    create_pool,
    deployment,
    events,
    running,
)
from harness import AUTOSCALERS, MERGE, POOLS, REQUESTS, Operator, SimCloud, wait_for
from nodepool_operator.api import wellknown


async def test_a_dry_run_autoscaler_tells_the_pods_and_requests_only_once_turned_off(
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
    await create_pool(custom, pool_name)
    await create_autoscaler(custom, autoscaler_name, pool=pool_name, namespace=namespace)
    dry_run = {"spec": {"dryRun": True}}
    await custom.patch_cluster_custom_object(
        *AUTOSCALERS, autoscaler_name, dry_run, _content_type=MERGE
    )

    async def dry_run_seen() -> bool:
        status = await autoscaler_status(custom, autoscaler_name)
        return bool(condition(status, "DryRun").get("status") == "True")

    await wait_for(dry_run_seen, within=30)  # before any pod: it never acts on them
    await apps.create_namespaced_deployment(
        namespace, deployment("web", pool=pool_name, replicas=10)
    )

    async def would_request_three() -> dict[str, Any] | None:
        status = await autoscaler_status(custom, autoscaler_name)
        would = status.get("wouldRequest") or {}
        return status if would.get("targetNodes") == 3 else None

    status = await wait_for(would_request_three, within=60)
    # How many pods the reason counts depends on how many the scheduler had marked yet.
    assert "pending pods need 3 more nodes" in status["wouldRequest"]["reason"]
    assert condition(status, "DryRun")["status"] == "True"
    assert "lastRequest" not in status
    await asyncio.sleep(3)  # three more scans: still nothing asked

    async def requests() -> list[Any]:
        found = await custom.list_cluster_custom_object(
            *REQUESTS, label_selector=wellknown.pool_selector(pool_name)
        )
        return list(found["items"])

    assert await requests() == []
    pool = await custom.get_cluster_custom_object(*POOLS, pool_name)
    assert pool["spec"]["targetNodes"] == 0
    pods = (await core.list_namespaced_pod(namespace)).items
    told = [
        event
        for pod in pods
        for event in await events(
            core, namespace, name=pod.metadata.name, reason="WouldTriggerScaleUp"
        )
    ]
    assert told
    assert all("dry run" in event.message for event in told)
    # One Event per pod and reason: a pod told again (the would-be target moved) is counted.
    assert len(told) == len({event.involved_object.name for event in told})
    for pod in pods:
        assert (
            await events(core, namespace, name=pod.metadata.name, reason="TriggeredScaleUp") == []
        )
    # One Event per Autoscaler and reason: while the Deployment's pods arrive the plan may
    # first want fewer nodes (a slow machine sees them in more than one batch); each
    # would-be target after the first folds into it (its count; the latest message, the
    # count of later repeats within a minute written at the minute's end).
    [would] = await events(core, "default", name=autoscaler_name, reason="WouldScaleUp")
    assert f"would ask for NodePool {pool_name}: 0 -> " in would.message

    await custom.patch_cluster_custom_object(
        *AUTOSCALERS, autoscaler_name, {"spec": {"dryRun": False}}, _content_type=MERGE
    )
    await wait_for(lambda: running(core, namespace, 10), within=120)
    made = await requests()
    assert made, "turning dry run off made the request"
    assert max(r["spec"]["targetNodes"] for r in made) == 3

    async def acting() -> dict[str, Any] | None:
        # The status follows the request it reports; on a loaded machine a moment later.
        status = await autoscaler_status(custom, autoscaler_name)
        return status if condition(status, "DryRun").get("status") == "False" else None

    status = await wait_for(acting, within=60)
    assert "wouldRequest" not in status
    assert status["lastRequest"]["targetNodes"] == 3
    assert condition(status, "DryRun")["status"] == "False"
    assert operator.errors_logged() == []
