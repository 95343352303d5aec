"""``plan --dry-run`` and ``explain pod`` on the real control plane with what the operator
reads beside the planner's caches: the cloud's catalog (simcloud's ``GET /v1/catalog``
with its token, or the same catalog from a file) for a pool with requirements, and the
PodDisruptionBudgets that hold a drifted Node's replacement.

With the catalog the dry run names the offering of the pod's new node and the plan's price
per hour, and the operator, started afterwards, asks for that same offering; without it
the pool is said not to grow. A drifted Node running a pod a PodDisruptionBudget allows
no disruption of is shown held by that budget, live and replayed from a saved snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

import catalogs
import workloads
from e2e.autoscaling import make_autoscaler, pod, running
from e2e.consolidating import pinned
from e2e.inspecting import hand_made_node, json_of, run_cli
from harness import POOLS, REQUESTS, Operator, SimCloud, wait_for
from nodepool_devtools.cluster import audit
from nodepool_devtools.cluster.pytest_plugin import Cluster
from nodepool_operator.api import drift, wellknown
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api.disruption import Disruption

ZONES = ("sim-1a", "sim-1b")
#: (name, cores, GiB, price per hour in sim-1a; sim-1b costs 0.01 more)
TYPES = (("c2", 2, 4, 0.10), ("c8", 8, 16, 0.36), ("c32", 32, 64, 1.30))


async def _unschedulable(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    found = await core.read_namespaced_pod(name, namespace)
    return any(
        c.type == "PodScheduled" and c.reason == "Unschedulable"
        for c in found.status.conditions or ()
    )


async def test_the_dry_run_plans_a_pool_with_requirements_with_the_clouds_catalog(
    api_client: client.ApiClient,
    cluster: Cluster,
    start_simcloud: Any,
    start_operator: Any,
    pool_name: str,
    autoscaler_name: str,
    namespace: str,
    tmp_path: Path,
) -> None:
    sold = catalogs.catalog_file(tmp_path / "instance_types.json", TYPES, ZONES)
    cloud: SimCloud = await start_simcloud("--catalog", str(sold), "--create-latency", "0.2")
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    await custom.create_cluster_custom_object(
        *POOLS, catalogs.many_types_pool(pool_name, TYPES, ZONES)
    )
    await make_autoscaler(custom, autoscaler_name, pool=pool_name, namespace=namespace)
    six = pod(
        "six",
        {
            "nodeSelector": {wellknown.POOL_LABEL: pool_name},
            "containers": [workloads.container("6", memory="64Mi")],
        },
    )
    await core.create_namespaced_pod(namespace, six)
    await wait_for(lambda: _unschedulable(core, namespace, "six"), within=60)
    kubeconfig = cluster.kubeconfig_for("operator")
    from_cloud = ("--cloud-endpoint", cloud.endpoint, "--cloud-token-file", str(cloud.token_file))
    log = cluster.audit_log()
    log.mark()

    planned = json_of(
        await asyncio.to_thread(
            run_cli, "plan", "--dry-run", "-o", "json", *from_cloud, kubeconfig=kubeconfig
        )
    )
    explained = json_of(
        await asyncio.to_thread(
            run_cli, "explain", "pod", f"{namespace}/six", "-o", "json", "--catalog", str(sold),
            kubeconfig=kubeconfig,
        )
    )  # fmt: skip
    table = await asyncio.to_thread(
        run_cli, "plan", "--dry-run", *from_cloud, kubeconfig=kubeconfig
    )
    blind = json_of(
        await asyncio.to_thread(run_cli, "plan", "--dry-run", "-o", "json", kubeconfig=kubeconfig)
    )
    no_token = await asyncio.to_thread(
        run_cli, "plan", "--dry-run", "--cloud-endpoint", cloud.endpoint, kubeconfig=kubeconfig
    )
    print(table.stdout)  # what docs/autoscaling.md shows (pytest -s)

    # Read-only: the operator's user wrote nothing.
    assert audit.writes(log.events_since_mark(), user="nodepool-operator") == []
    [mine] = [p for p in planned["offerings"] if p["pool"] == pool_name]
    assert mine["blocked"] is None
    assert len(mine["offerings"]) == len(TYPES) * len(ZONES)
    assert [
        (n["offering"]["instanceType"], n["offering"]["zone"], n["count"]) for n in mine["newNodes"]
    ] == [("c8", "sim-1a", 1)]
    assert abs(mine["newNodesPerHour"] - 0.36) < 1e-9
    assert explained["offering"].startswith("offering c8 in sim-1a (on-demand, 0.36/h)")
    assert "c2 in sim-1a (on-demand, 0.1/h): too small" in explained["offering"]
    assert table.returncode == 0, table.stderr
    assert "1 x c8 in sim-1a (on-demand, 0.36/h)" in table.stdout
    [unread] = [p for p in blind["offerings"] if p["pool"] == pool_name]
    assert unread["blocked"] is not None
    assert unread["newNodes"] == []
    # simcloud refuses a call without its token: said in one line, exit code 2.
    assert no_token.returncode == 2
    [line] = no_token.stderr.strip().splitlines()
    assert "cannot read the catalog" in line
    assert "Unauthorized" in line

    # The operator then asks for the offering the dry run named.
    operator: Operator = start_operator(cloud)

    async def requested() -> list[dict[str, Any]] | None:
        found = await custom.list_cluster_custom_object(*REQUESTS)
        return [r for r in found["items"] if r["spec"]["nodePoolName"] == pool_name] or None

    [request] = await wait_for(requested, within=60)
    assert [
        (o["instanceType"], o["zone"], o["capacityType"], o["count"])
        for o in request["spec"]["newNodeOfferings"]
    ] == [("c8", "sim-1a", "on-demand", 1)]
    assert operator.errors_logged() == []


async def _budget_reports(
    policy: client.PolicyV1Api, namespace: str, name: str, allowed: int
) -> bool:
    found = await policy.read_namespaced_pod_disruption_budget(name, namespace)
    status = found.status
    return (
        status is not None
        and status.observed_generation == found.metadata.generation
        and status.current_healthy == 1
        and status.disruptions_allowed == allowed
    )


async def test_the_dry_run_shows_a_drifted_node_held_by_a_pod_disruption_budget(
    api_client: client.ApiClient,
    cluster: Cluster,
    operator_rbac: None,
    pool_name: str,
    namespace: str,
    tmp_path: Path,
) -> None:
    """Two Nodes of the pool made from an older template (their spec hash records other
    labels): ``guarded`` runs a pod whose PodDisruptionBudget (minAvailable 1) allows no
    disruption, ``free`` runs nothing. Both are drifted and replaced next; ``guarded``
    is held by the budget."""
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    policy = client.PolicyV1Api(api_client)
    template = nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=110, labels={"tier": "b"})
    spec = nodepool_api.NodePoolSpec(
        target_nodes=2, max_nodes=10, template=template, disruption=Disruption(budgets=())
    )
    made = await custom.create_cluster_custom_object(*POOLS, nodepool_api.manifest(pool_name, spec))
    before = nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=110, labels={"tier": "a"})
    older = drift.spec_hash(dataclasses.replace(spec, template=before)).text
    stamped = {wellknown.SPEC_HASH_ANNOTATION: older}
    uid = made["metadata"]["uid"]
    guarded, free = f"{pool_name}-guarded", f"{pool_name}-free"
    nodes = [
        hand_made_node(name, pool=pool_name, owner_uid=uid, annotations=stamped)
        for name in (guarded, free)
    ]
    try:
        for node in nodes:
            await core.create_node(node)
        await core.create_namespaced_pod(namespace, pod("db", pinned(guarded)))
        await wait_for(lambda: running(core, namespace, 1), within=60)
        budget = client.V1PodDisruptionBudget(
            metadata=client.V1ObjectMeta(name="db"),
            spec=client.V1PodDisruptionBudgetSpec(
                min_available=1, selector=client.V1LabelSelector(match_labels={"app": "db"})
            ),
        )
        await policy.create_namespaced_pod_disruption_budget(namespace, budget)
        await wait_for(lambda: _budget_reports(policy, namespace, "db", 0), within=60)
        kubeconfig = cluster.kubeconfig_for("operator")
        saved = tmp_path / "snapshot.json"

        live = json_of(
            await asyncio.to_thread(
                run_cli, "plan", "--dry-run", "-o", "json", "--save-snapshot", str(saved),
                kubeconfig=kubeconfig,
            )
        )  # fmt: skip
        replayed = json_of(
            await asyncio.to_thread(
                run_cli, "plan", "--dry-run", "-o", "json", "--snapshot", str(saved)
            )
        )
        table = await asyncio.to_thread(run_cli, "plan", "--dry-run", kubeconfig=kubeconfig)
        print(table.stdout)  # what docs/operations.md shows (pytest -s)

        listed = {
            d["node"]: (d["reason"], d["state"], d["heldBy"])
            for d in live["disruptions"]
            if d["pool"] == pool_name
        }
        held = f"PodDisruptionBudget {namespace}/db (0 disruptions allowed)"
        assert listed == {
            guarded: ("Drifted", "next", held),
            free: ("Drifted", "next", None),
        }
        assert replayed["disruptions"] == live["disruptions"]
        assert table.returncode == 0, table.stderr
        assert held in table.stdout
    finally:
        for node in nodes:
            with contextlib.suppress(client.exceptions.ApiException):
                await core.delete_node(node["metadata"]["name"])
