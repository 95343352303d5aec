"""The cloud token leaks nowhere: after a scale-up and a cloud error, it is in no log, no
Event, no status of any NodePool, ScaleRequest or Autoscaler, and not in /metrics."""

from __future__ import annotations

import json
import uuid
from typing import Any

import aiohttp

from e2e.scenes import World
from harness import POOLS, Operator, pool_body, settled, wait_for
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.cloud.simcloud import wire

REQUESTS = (scalerequest_api.GROUP, scalerequest_api.VERSION, scalerequest_api.PLURAL)
AUTOSCALERS = (autoscaler_api.GROUP, autoscaler_api.VERSION, autoscaler_api.PLURAL)


async def test_the_cloud_token_appears_in_no_log_event_status_or_metric(world: World) -> None:
    cloud = await world.cloud(latency=0.5)
    token = cloud.token_file.read_text().strip()
    operator: Operator = world.start_operator(cloud, "--no-metrics-secure")
    assert cloud.client is not None

    # A scale-up, with an Autoscaler watching the pool (so it has a status of its own).
    pool = await world.custom.create_cluster_custom_object(*POOLS, pool_body(world.pool, target=2))
    autoscaler = autoscaler_api.AutoscalerSpec(
        node_pool_name=world.pool,
        namespaces=(f"none-{uuid.uuid4().hex[:6]}",),
        scale_down=autoscaler_api.ScaleDownPolicy(enabled=False),
    )
    await world.custom.create_cluster_custom_object(
        *AUTOSCALERS, autoscaler_api.manifest(world.autoscaler, autoscaler)
    )
    await wait_for(lambda: settled(world.custom, world.pool, 2), within=60)

    # A cloud error: the quota is full when a ScaleRequest asks for more.
    await cloud.client.set_faults(wire.Faults(quota_max_vms=2))
    request = f"req-{uuid.uuid4().hex[:6]}"
    spec = scalerequest_api.ScaleRequestSpec(
        node_pool_name=world.pool, target_nodes=4, reason="secret search", requester="e2e"
    )
    await world.custom.create_cluster_custom_object(
        *REQUESTS, scalerequest_api.manifest(request, spec, pool_uid=pool["metadata"]["uid"])
    )
    statuses: list[Any] = []

    async def request_answered() -> bool:
        obj = await world.custom.get_cluster_custom_object(*REQUESTS, request)
        statuses.append(obj)
        return bool(obj.get("status", {}).get("phase"))

    await wait_for(request_answered, within=30)

    async def degraded_by_quota() -> bool:
        obj = await world.custom.get_cluster_custom_object(*POOLS, world.pool)
        conditions = obj.get("status", {}).get("conditions", [])
        return any(
            c["type"] == "Degraded" and c.get("reason") == "QuotaExceeded" for c in conditions
        )

    await wait_for(degraded_by_quota, within=30)

    async def autoscaler_reported() -> bool:
        obj = await world.custom.get_cluster_custom_object(*AUTOSCALERS, world.autoscaler)
        return bool(obj.get("status"))

    await wait_for(autoscaler_reported, within=30)

    metrics_url = await operator.served("metrics")
    async with aiohttp.ClientSession() as session, session.get(f"{metrics_url}/metrics") as got:
        assert got.status == 200
        metrics = await got.text()

    events = await world.core.list_event_for_all_namespaces()
    found: dict[str, str] = {
        "operator log": operator.output(),
        "simcloud log": cloud.process.output(),
        "events": json.dumps(world.api_client.sanitize_for_serialization(events.items)),
        "nodepools": json.dumps(await world.custom.list_cluster_custom_object(*POOLS)),
        "scalerequests": json.dumps(
            [*statuses, await world.custom.list_cluster_custom_object(*REQUESTS)]
        ),
        "autoscalers": json.dumps(await world.custom.list_cluster_custom_object(*AUTOSCALERS)),
        "metrics": metrics,
    }

    # Each place was searched with something in it: the scale-up and the error are there.
    assert "QuotaExceeded" in found["operator log"] or "quota" in found["operator log"].lower()
    assert "status=401" not in found["simcloud log"]  # the operator always sent the token
    assert "status=201" in found["simcloud log"]
    assert "quota" in found["events"].lower()
    assert "QuotaExceeded" in found["nodepools"]
    assert request in found["scalerequests"]
    assert world.autoscaler in found["autoscalers"]
    assert "controller_runtime_reconcile_total" in found["metrics"]
    leaked = [where for where, text in found.items() if token in text]
    assert leaked == []
