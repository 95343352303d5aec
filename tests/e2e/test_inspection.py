"""``explain`` and ``plan --dry-run`` on the real control plane: the controller's own planner,
read-only, with the operator's own (read-only) permissions.

Two pools, one plain and one tainted, each with an Autoscaler, and pods the real
kube-scheduler marked Unschedulable: one that fits the plain pool, one too large for any
node, one that only the tainted pool could host but does not tolerate. ``plan`` must
say which pool grows by how much and why the others wait, write nothing (audit log),
replay the same plan from a saved snapshot without the cluster, and match the decision
the operator then makes; ``explain`` must name each pool's refusing filter and, once the
operator asked for a node, the ScaleRequest.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

import workloads
from e2e.autoscaling import make_autoscaler, make_pool, running
from e2e.consolidating import pinned, preferring
from e2e.inspecting import hand_made_node, json_of, run_cli
from e2e.scenes import World
from harness import AUTOSCALERS, MERGE, POOLS, REQUESTS, remove_pool, wait_for
from nodepool_devtools.cluster import audit
from nodepool_devtools.cluster.pytest_plugin import Cluster
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.api.disruption import Disruption


async def _unschedulable(core: client.CoreV1Api, namespace: str, names: set[str]) -> bool:
    pods = (await core.list_namespaced_pod(namespace)).items
    marked = set()
    for pod in pods:
        for condition in pod.status.conditions or ():
            if condition.type == "PodScheduled" and condition.reason == "Unschedulable":
                marked.add(pod.metadata.labels["app"])
    return names <= marked


async def _pod_named(core: client.CoreV1Api, namespace: str, app: str) -> str:
    pods = (await core.list_namespaced_pod(namespace, label_selector=f"app={app}")).items
    return f"{namespace}/{pods[0].metadata.name}"


async def test_plan_and_explain_read_only_replayable_and_as_the_operator_decides(
    world: World, tmp_path: Path
) -> None:
    plain, tainted = world.pool, f"{world.pool}-gpu"
    await make_pool(world.custom, plain, labels=world.tier)
    gpu = nodepool_api.manifest(
        tainted,
        nodepool_api.NodePoolSpec(
            target_nodes=0,
            min_nodes=0,
            max_nodes=10,
            template=nodepool_api.NodeTemplate(
                cpu="16", memory="64Gi", pods=110, labels=world.tier
            ),
        ),
    )
    gpu["spec"]["template"]["taints"] = [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]
    await world.custom.create_cluster_custom_object(*POOLS, gpu)
    await make_autoscaler(world.custom, world.autoscaler, pool=plain, namespace=world.namespace)
    await make_autoscaler(
        world.custom, f"{world.autoscaler}-gpu", pool=tainted, namespace=world.namespace
    )
    try:
        await world.apps.create_namespaced_deployment(
            world.namespace, workloads.deployment("web", selector=world.tier, replicas=3, cpu="1")
        )
        await world.apps.create_namespaced_deployment(
            world.namespace, workloads.deployment("huge", selector=world.tier, replicas=1, cpu="9")
        )
        await wait_for(
            lambda: _unschedulable(world.core, world.namespace, {"web", "huge"}), within=60
        )
        kubeconfig = world.cluster.kubeconfig_for("operator")
        log = world.cluster.audit_log()
        log.mark()

        live = json_of(run_cli("plan", "--dry-run", "-o", "json", kubeconfig=kubeconfig))
        saved = tmp_path / "snapshot.json.gz"
        saving = run_cli("plan", "--dry-run", "--save-snapshot", str(saved), kubeconfig=kubeconfig)
        assert saving.returncode == 0, saving.stderr
        huge = await _pod_named(world.core, world.namespace, "huge")
        explained = json_of(run_cli("explain", "pod", huge, "-o", "json", kubeconfig=kubeconfig))
        table = run_cli("explain", "pod", huge, kubeconfig=kubeconfig)
        plan_table = run_cli("plan", "--dry-run", kubeconfig=kubeconfig)
        print(table.stdout, plan_table.stdout)  # what docs/autoscaling.md shows (pytest -s)

        # Read-only: the operator's user wrote nothing while the three commands ran.
        assert audit.writes(log.events_since_mark(), user="nodepool-operator") == []

        growth = {g["pool"]: g for g in live["growth"]}
        assert set(growth) == {plain}
        assert growth[plain]["targetNodes"] == 0
        assert growth[plain]["newNodes"] == 1  # three 1-cpu pods on one 4-cpu node
        assert len(growth[plain]["pods"]) == 3
        assert [u["pod"] for u in live["unfit"]] == [huge]
        assert "cpu" in live["unfit"][0]["reason"]

        pools = {p["name"]: p for p in explained["pools"]}
        assert "cpu" in pools[plain]["problem"]
        assert "taint" in pools[tainted]["problem"]
        assert "gpu" in pools[tainted]["problem"]
        assert explained["planned"].startswith("no pool can host it")
        assert table.returncode == 0
        assert "first filter that refuses" in table.stdout

        # The snapshot replays to the same plan with no cluster to read from at all.
        replayed = run_cli(
            "plan", "--dry-run", "--snapshot", str(saved), "-o", "json",
            kubeconfig=tmp_path / "no-such-kubeconfig",
        )  # fmt: skip
        assert json_of(replayed) == live

        # The operator then decides what plan said: one request, targetNodes 0 -> 1.
        _, operator = await world.operated(latency=20)
        web = await _pod_named(world.core, world.namespace, "web")

        async def requested() -> list[dict[str, Any]] | None:
            found = await world.custom.list_cluster_custom_object(*REQUESTS)
            mine = [r for r in found["items"] if r["spec"]["nodePoolName"] in (plain, tainted)]
            return mine or None

        requests = await wait_for(requested, within=60)
        assert [(r["spec"]["nodePoolName"], r["spec"]["targetNodes"]) for r in requests] == [
            (plain, 1)
        ]

        # While its VM boots, explain names the request the pod waits for.
        async def waiting_on_request() -> dict[str, Any] | None:
            seen = json_of(run_cli("explain", "pod", web, "-o", "json", kubeconfig=kubeconfig))
            return seen if seen["decision"] else None

        waiting = await wait_for(waiting_on_request, within=60)
        assert waiting["decision"]["name"] == requests[0]["metadata"]["name"]
        assert waiting["decision"]["pool"] == plain
        assert waiting["plannedPool"] == plain
        assert operator.errors_logged() == []
    finally:
        await world.custom.delete_cluster_custom_object(*AUTOSCALERS, f"{world.autoscaler}-gpu")
        await remove_pool(world.custom, tainted)


async def test_explain_says_which_pod_it_cannot_find_and_exits_1(
    cluster: Cluster, crds_installed: None
) -> None:
    kubeconfig = cluster.kubeconfig_for("operator")

    done = await asyncio.to_thread(
        run_cli, "explain", "pod", "nowhere/nothing", kubeconfig=kubeconfig
    )

    assert done.returncode == 1
    assert "no pod nowhere/nothing" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_pod_named_without_its_namespace_is_a_usage_error() -> None:
    done = run_cli("explain", "pod", "just-a-name")

    assert done.returncode == 2
    assert "NAMESPACE/NAME" in done.stderr


async def test_plan_previews_scale_down_by_consolidations_rules_within_min_nodes(
    world: World, operator_rbac: None
) -> None:
    """Four Nodes of the pool and one that only carries its label: ``busy`` (a 3-cpu pod
    pinned there), ``light`` (a 500m replica free to move), ``kept`` (empty, annotated
    karpenter.sh/do-not-disrupt) and ``empty``. With minNodes 2 ``plan`` previews
    ``empty`` then ``light`` (its pod fits on ``busy``); with minNodes 3 only ``empty``.
    The labelled Node the pool does not own is never the pool's."""
    spec = nodepool_api.NodePoolSpec(
        target_nodes=4,
        min_nodes=2,
        max_nodes=10,
        template=nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=110),
        # No disruption budget (the default 10% would preview one node of four).
        disruption=Disruption(budgets=()),
    )
    made = await world.custom.create_cluster_custom_object(
        *POOLS, nodepool_api.manifest(world.pool, spec)
    )
    policy = autoscaler_api.ScaleDownPolicy(enabled=True, unneeded_seconds=600)
    autoscaler = autoscaler_api.AutoscalerSpec(
        node_pool_name=world.pool, namespaces=(world.namespace,), scale_down=policy
    )
    await world.custom.create_cluster_custom_object(
        *AUTOSCALERS, autoscaler_api.manifest(world.autoscaler, autoscaler)
    )
    uid = made["metadata"]["uid"]
    names = {role: f"{world.pool}-{role}" for role in ("busy", "light", "kept", "empty")}
    karpenter = {wellknown.KARPENTER_DO_NOT_DISRUPT_ANNOTATION: "true"}
    nodes = [
        hand_made_node(names["busy"], pool=world.pool, owner_uid=uid, annotations={}),
        hand_made_node(names["light"], pool=world.pool, owner_uid=uid, annotations={}),
        hand_made_node(names["kept"], pool=world.pool, owner_uid=uid, annotations=karpenter),
        hand_made_node(names["empty"], pool=world.pool, owner_uid=uid, annotations={}),
        hand_made_node(f"{world.pool}-foreign", pool=world.pool, owner_uid=None, annotations={}),
    ]
    try:
        for node in nodes:
            await world.core.create_node(node)
        on_pool = {wellknown.POOL_LABEL: world.pool}
        big = workloads.deployment(
            "big", selector=on_pool, replicas=1, cpu="3", **pinned(names["busy"])
        )
        await world.apps.create_namespaced_deployment(world.namespace, big)
        await wait_for(lambda: running(world.core, world.namespace, 1), within=60)
        small = workloads.deployment(
            "small", selector=on_pool, replicas=1, cpu="500m", **preferring(names["light"])
        )
        await world.apps.create_namespaced_deployment(world.namespace, small)
        await wait_for(lambda: running(world.core, world.namespace, 2), within=60)
        pods = (await world.core.list_namespaced_pod(world.namespace)).items
        where = {p.metadata.labels["app"]: p.spec.node_name for p in pods}
        assert where == {"big": names["busy"], "small": names["light"]}
        small_pod = next(p.metadata.name for p in pods if p.metadata.labels["app"] == "small")
        kubeconfig = world.cluster.kubeconfig_for("operator")

        planned = json_of(run_cli("plan", "--dry-run", "-o", "json", kubeconfig=kubeconfig))
        table = run_cli("plan", "--dry-run", kubeconfig=kubeconfig)
        print(table.stdout)  # what docs/autoscaling.md shows (pytest -s)

        mine = [r for r in planned["removable"] if r["pool"] == world.pool]
        assert [(r["node"], r["empty"]) for r in mine] == [
            (names["empty"], True),
            (names["light"], False),
        ]
        assert mine[1]["pods"] == [f"{world.namespace}/{small_pod}"]
        assert "fit on other nodes" in mine[1]["reason"]
        kept = {k["node"]: k for k in planned["kept"] if k["pool"] == world.pool}
        assert set(kept) == {names["busy"], names["kept"]}  # never the foreign Node
        assert kept[names["busy"]]["rule"] == "busy"
        assert kept[names["kept"]]["rule"] == "do-not-disrupt"
        assert wellknown.KARPENTER_DO_NOT_DISRUPT_ANNOTATION in kept[names["kept"]]["message"]
        assert table.returncode == 0
        assert "Nodes scale-down keeps" in table.stdout

        await world.custom.patch_cluster_custom_object(
            *POOLS, world.pool, {"spec": {"minNodes": 3}}, _content_type=MERGE
        )
        capped = json_of(run_cli("plan", "--dry-run", "-o", "json", kubeconfig=kubeconfig))
        assert [r["node"] for r in capped["removable"] if r["pool"] == world.pool] == [
            names["empty"]
        ]
        kept = {k["node"]: k["rule"] for k in capped["kept"] if k["pool"] == world.pool}
        assert kept[names["light"]] == "min-nodes"
    finally:
        await world.custom.delete_cluster_custom_object(*AUTOSCALERS, world.autoscaler)
        for node in nodes:
            with contextlib.suppress(client.exceptions.ApiException):
                await world.core.delete_node(node["metadata"]["name"])
