"""A dry-run Autoscaler on the real control plane: it decides and tells, and asks for
nothing until dry run is turned off."""

from __future__ import annotations

import asyncio
from typing import Any

from e2e.autoscaling import (
    autoscaler_status,
    condition,
    deployment,
    events,
    events_of,
    running,
)
from e2e.scenes import World
from harness import AUTOSCALERS, MERGE, POOLS, REQUESTS, wait_for
from nodepool_operator.api import wellknown


async def test_a_dry_run_autoscaler_tells_the_pods_and_requests_only_once_turned_off(
    world: World,
) -> None:
    _, operator = await world.autoscaled(latency=1)
    dry_run = {"spec": {"dryRun": True}}
    await world.custom.patch_cluster_custom_object(
        *AUTOSCALERS, world.autoscaler, dry_run, _content_type=MERGE
    )

    async def dry_run_seen() -> bool:
        status = await autoscaler_status(world.custom, world.autoscaler)
        return bool(condition(status, "DryRun").get("status") == "True")

    await wait_for(dry_run_seen, within=30)  # before any pod: it never acts on them
    await world.apps.create_namespaced_deployment(
        world.namespace, deployment("web", pool=world.pool, replicas=10)
    )

    async def would_request_three() -> dict[str, Any] | None:
        status = await autoscaler_status(world.custom, world.autoscaler)
        would = status.get("wouldRequest") or {}
        return status if would.get("targetNodes") == 3 else None

    status = await wait_for(would_request_three, within=60)
    # How many pods the reason counts depends on how many the scheduler had marked yet.
    assert "pending pods need 3 more nodes" in status["wouldRequest"]["reason"]
    assert condition(status, "DryRun")["status"] == "True"
    assert "lastRequest" not in status
    await asyncio.sleep(3)  # three more scans: still nothing asked

    async def requests() -> list[Any]:
        found = await world.custom.list_cluster_custom_object(
            *REQUESTS, label_selector=wellknown.pool_selector(world.pool)
        )
        return list(found["items"])

    assert await requests() == []
    pool = await world.custom.get_cluster_custom_object(*POOLS, world.pool)
    assert pool["spec"]["targetNodes"] == 0
    pods = (await world.core.list_namespaced_pod(world.namespace)).items
    told = await events_of(world.core, pods, reason="WouldTriggerScaleUp")
    assert told
    assert all("dry run" in event.message for event in told)
    # One Event per pod and reason: a pod told again (the would-be target moved) is counted.
    assert len(told) == len({event.involved_object.name for event in told})
    for pod in pods:
        assert (
            await events(
                world.core, world.namespace, name=pod.metadata.name, reason="TriggeredScaleUp"
            )
            == []
        )
    # One Event per Autoscaler and reason: while the Deployment's pods arrive the plan may
    # first want fewer nodes (a slow machine sees them in more than one batch); each
    # would-be target after the first folds into it (its count; the latest message, the
    # count of later repeats within a minute written at the minute's end).
    [would] = await events(world.core, "default", name=world.autoscaler, reason="WouldScaleUp")
    assert f"would ask for NodePool {world.pool}: 0 -> " in would.message

    await world.custom.patch_cluster_custom_object(
        *AUTOSCALERS, world.autoscaler, {"spec": {"dryRun": False}}, _content_type=MERGE
    )
    await wait_for(lambda: running(world.core, world.namespace, 10), within=120)
    made = await requests()
    assert made, "turning dry run off made the request"
    assert max(r["spec"]["targetNodes"] for r in made) == 3

    async def acting() -> dict[str, Any] | None:
        # The status follows the request it reports; on a loaded machine a moment later.
        status = await autoscaler_status(world.custom, world.autoscaler)
        return status if condition(status, "DryRun").get("status") == "False" else None

    status = await wait_for(acting, within=60)
    assert "wouldRequest" not in status
    assert status["lastRequest"]["targetNodes"] == 3
    assert condition(status, "DryRun")["status"] == "False"
    assert operator.errors_logged() == []
