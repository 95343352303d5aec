"""``explain`` and ``plan --dry-run`` for each constraint class the planner knows, on the
real control plane, checked against what the operator and kube-scheduler then do.

One scene serves the whole module. Three pools: *plain* (zone za), *gpu* (zone zb, tainted,
two ``example.com/gpu`` per node) and *capped* (tainted, already at maxNodes). A DaemonSet holds
host port 9100 on every node of the scene. An anchor pod nearly fills the plain pool's
only node; it carries the labels the affinity and spread cases look for and a
required anti-affinity of its own. The Autoscalers start in dry run, so the pods wait and
nothing acts while ``plan`` and ``explain`` look.

Per class, one pod that no pool can host: ``explain`` (the CLI, as a user runs it) must
name the refusing filter on the pool concerned. Where the class allows it, one pod only
one pool can host: ``explain`` and ``plan`` must give it that pool. Then dry run is
turned off: the operator must ask for exactly what ``plan`` said, ``explain`` must name the
ScaleRequest while the nodes boot, and kube-scheduler must put each fitting pod on a node
of the pool ``plan`` gave it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest
from kubernetes_asyncio import client

import harness
import workloads
from e2e.autoscaling import autoscaler_status, condition, make_autoscaler
from e2e.inspecting import json_of, run_cli
from harness import AUTOSCALERS, REQUESTS
from nodepool_devtools.cluster.pytest_plugin import Cluster
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud import credentials

ZONE: Final = wellknown.ZONE_LABEL
HOSTNAME: Final = wellknown.HOSTNAME_LABEL
SUITE: Final = "example.com/suite"
RACK: Final = "example.com/rack"  # a topology key no node carries
HDD: Final = {"disk": "hdd"}  # only the plain pool's nodes
ANCHOR: Final = {"anchor": "yes"}  # the anchor pod, in zone za
SPREAD: Final = {"spread": "yes"}  # the anchor and the pod that spreads with it
TOLERATE_GPU: Final = [{"key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}]
# The capped pool's taint keeps every other case off it: only the at-max case may use it.
TOLERATE_CAPPED: Final = [{"key": "capped", "operator": "Exists", "effect": "NoSchedule"}]
TAKEN_PORT: Final = 9100  # the DaemonSet's, on every node
BOOT_SECONDS: Final = 10  # simcloud's create latency: long enough to explain a booting node


def _node_affinity(key: str, value: str) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


def _affinity_in_labelled_namespaces() -> dict[str, Any]:
    term = {
        "labelSelector": {"matchLabels": ANCHOR},
        "topologyKey": ZONE,
        "namespaceSelector": {"matchLabels": {"team": "nobody"}},
    }
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


@dataclass(frozen=True)
class Case:
    """One pod of one constraint class: the pool whose verdict matters, and for a pod no
    pool can host, words of the filter that refuses it there."""

    name: str
    pool: str  # plain | gpu | capped
    says: str = ""
    pod: dict[str, Any] = field(default_factory=dict)  # ``_pod`` keywords

    def __str__(self) -> str:
        return self.name


UNFIT: Final = [
    Case("cpu", "plain", "requests 9000 of cpu, a node offers", {"cpu": "9"}),
    Case("memory", "plain", "of memory, a node offers", {"memory": "40Gi"}),
    Case(
        "extended-resource",
        "gpu",
        "requests 4 of example.com/gpu, a node offers 2",
        {"extended": {"example.com/gpu": "4"}, "tolerations": TOLERATE_GPU},
    ),
    Case(
        "node-selector",
        "plain",
        "nodeSelector disk=ssd does not match",
        {"selector": {"disk": "ssd"}},
    ),
    Case(
        "node-affinity",
        "plain",
        "required node affinity does not match",
        {"affinity": _node_affinity("disk", "nvme")},
    ),
    Case(
        "taint", "gpu", "taint gpu=yes:NoSchedule is not tolerated", {"selector": {"accel": "gpu"}}
    ),
    Case(
        "pod-affinity",
        "plain",
        f"pod affinity over {HOSTNAME}: no matching pod in",
        {"affinity": workloads.pod_terms("podAffinity", {"app": "absent"}, HOSTNAME)},
    ),
    Case(
        "pod-anti-affinity",
        "plain",
        f"pod anti-affinity over {ZONE}: a matching pod in za",
        {"selector": HDD, "affinity": workloads.pod_terms("podAntiAffinity", ANCHOR, ZONE)},
    ),
    Case(
        "another-pods-anti-affinity",
        "plain",
        f"another pod's anti-affinity over {ZONE} in za",
        {"selector": HDD, "labels": {"app": "shy"}},
    ),
    Case(
        "spread-skew",
        "plain",
        f"topology spread over {ZONE} (maxSkew 1) in za",
        {
            "selector": HDD,
            "labels": SPREAD,
            "topologySpreadConstraints": workloads.spread(SPREAD, ZONE, minDomains=2),
        },
    ),
    Case(
        "spread-without-domain",
        "plain",
        f"topology spread: node has no {RACK} label",
        {"selector": HDD, "topologySpreadConstraints": workloads.spread({"app": "racked"}, RACK)},
    ),
    Case("host-port", "plain", f"host port {TAKEN_PORT}/TCP is taken", {"host_port": TAKEN_PORT}),
    Case(
        "namespace-selector",
        "plain",
        "namespaceSelector with labels",
        {"affinity": _affinity_in_labelled_namespaces()},
    ),
]

#: Each one fits a new node of one pool only (``capped`` is full and at maxNodes).
FITTING: Final = [
    Case("fits-cpu", "plain", pod={"cpu": "3"}),
    Case("fits-memory", "plain", pod={"memory": "12Gi"}),
    Case(
        "fits-extended-resource",
        "gpu",
        pod={"extended": {"example.com/gpu": "1"}, "tolerations": TOLERATE_GPU},
    ),
    Case("fits-node-selector", "plain", pod={"selector": HDD}),
    Case(
        "fits-node-affinity",
        "gpu",
        pod={"affinity": _node_affinity("accel", "gpu"), "tolerations": TOLERATE_GPU},
    ),
    Case("fits-toleration", "gpu", pod={"selector": {"accel": "gpu"}, "tolerations": TOLERATE_GPU}),
    Case(
        "fits-pod-affinity",
        "plain",
        pod={
            "affinity": workloads.pod_terms("podAffinity", ANCHOR, ZONE),
            "tolerations": TOLERATE_GPU,
        },
    ),
    Case(
        "fits-pod-anti-affinity",
        "gpu",
        pod={
            "affinity": workloads.pod_terms("podAntiAffinity", ANCHOR, ZONE),
            "tolerations": TOLERATE_GPU,
        },
    ),
    Case(
        "fits-spread",
        "plain",
        pod={
            "selector": HDD,
            "labels": {"app": "spreads"},
            "topologySpreadConstraints": workloads.spread({"app": "spreads"}, ZONE),
        },
    ),
    Case("fits-host-port", "plain", pod={"host_port": TAKEN_PORT + 100}),
]
#: Its pool could host it, but is at maxNodes.
AT_MAX: Final = Case(
    "at-max-nodes",
    "capped",
    pod={"selector": {"capped": "yes"}, "cpu": "2", "tolerations": TOLERATE_CAPPED},
)
#: In a namespace no Autoscaler watches.
UNWATCHED: Final = Case("unwatched-namespace", "plain")


def _pod(
    case: Case,
    suite: str,
    *,
    cpu: str = "500m",
    memory: str = "256Mi",
    labels: dict[str, str] | None = None,
    selector: dict[str, str] | None = None,
    extended: dict[str, str] | None = None,
    host_port: int | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pause pod of at least 500m: more than the anchored nodes have left."""
    container = workloads.container(cpu, memory=memory, host_port=host_port)
    if extended:
        # Extended resources are requested through limits (requests must equal them).
        container["resources"]["requests"].update(extended)
        container["resources"]["limits"] = dict(extended)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": case.name, "labels": {"case": case.name, **(labels or {})}},
        "spec": {
            "nodeSelector": {SUITE: suite, **(selector or {})},
            "terminationGracePeriodSeconds": 0,
            "containers": [container],
            **spec,
        },
    }


@dataclass
class Scene:
    suite: str
    pools: dict[str, str]  # short name (plain, gpu, capped) -> NodePool name
    autoscalers: list[str]
    namespace: str
    other_namespace: str
    kubeconfig: Path
    operator: harness.Operator | None = None
    snapshot: Path | None = None  # what the plan was made from
    plan: dict[str, Any] = field(default_factory=dict)
    explained: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)

    def pod(self, case: Case) -> str:
        namespace = self.other_namespace if case is UNWATCHED else self.namespace
        return f"{namespace}/{case.name}"


async def _start_cloud_and_operator(
    tmp: Path, kubeconfig: Path
) -> tuple[harness.SimCloud, harness.Operator]:
    token_file = tmp / "simcloud.token"
    credentials.write_new_token(token_file)
    port_file = tmp / "simcloud.port"
    cloud = harness.SimCloud(
        harness.Process(
            "simcloud",
            [*harness.CLI, "simcloud", "--state", str(tmp / "simcloud.sqlite3"), "--port", "0",
             "--port-file", str(port_file), "--token-file", str(token_file),
             "--create-latency", str(BOOT_SECONDS), "--latency-jitter", "0"],
            tmp / "simcloud.log",
        ),
        port_file,
        token_file,
    )  # fmt: skip
    await cloud.start()
    reach = ("--cloud-endpoint", cloud.endpoint, "--cloud-token-file", str(token_file))
    operator = harness.Operator(
        "operator", [*harness.CLI, *harness.operator_args(kubeconfig, *reach)], tmp / "operator.log"
    )
    operator.start()
    return cloud, operator


def _pool(
    name: str,
    suite: str,
    *,
    target: int = 0,
    max_nodes: int = 10,
    cpu: str = "4",
    memory: str = "16Gi",
    labels: dict[str, str],
    **template: Any,
) -> dict[str, Any]:
    spec = nodepool_api.NodePoolSpec(
        target_nodes=target,
        min_nodes=0,
        max_nodes=max_nodes,
        template=nodepool_api.NodeTemplate(
            cpu=cpu, memory=memory, pods=110, labels={SUITE: suite, **labels}, **template
        ),
    )
    return nodepool_api.manifest(name, spec)


def _daemon_set(suite: str) -> dict[str, Any]:
    """An agent on every node of the scene, tainted or not, holding ``TAKEN_PORT``."""
    agent = workloads.deployment(
        "agent",
        selector={SUITE: suite},
        replicas=0,
        cpu="10m",
        memory="16Mi",
        host_port=TAKEN_PORT,
        tolerations=[{"operator": "Exists"}],
    )
    del agent["spec"]["replicas"]
    return {**agent, "kind": "DaemonSet"}


def _held(suite: str, name: str, cpu: str, **spec: Any) -> dict[str, Any]:
    """A pod that nearly fills an existing node, so the cases need new ones."""
    return _pod(Case(name, ""), suite, cpu=cpu, **spec)


async def _phase_of(core: client.CoreV1Api, namespace: str, names: set[str]) -> dict[str, str]:
    pods = (await core.list_namespaced_pod(namespace)).items
    return {p.metadata.name: p.status.phase for p in pods if p.metadata.name in names}


async def _marked_unschedulable(core: client.CoreV1Api, namespace: str, names: set[str]) -> bool:
    marked = set()
    for pod in (await core.list_namespaced_pod(namespace)).items:
        for said in pod.status.conditions or ():
            if said.type == "PodScheduled" and said.reason == "Unschedulable":
                marked.add(pod.metadata.name)
    return names <= marked


async def _explain_all(scene: Scene, cases: list[Case]) -> None:
    """``explain pod`` for every case, a few at a time (each is a process of its own)."""
    at_once = asyncio.Semaphore(3)

    async def one(case: Case) -> None:
        async with at_once:
            scene.explained[case.name] = await asyncio.to_thread(
                run_cli,
                "explain",
                "pod",
                scene.pod(case),
                "-o",
                "json",
                kubeconfig=scene.kubeconfig,
            )

    await asyncio.gather(*(one(case) for case in cases))


async def _requests(custom: client.CustomObjectsApi, pools: dict[str, str]) -> list[dict[str, Any]]:
    found = await custom.list_cluster_custom_object(*REQUESTS)
    return [r for r in found["items"] if r["spec"]["nodePoolName"] in pools.values()]


@pytest.fixture(scope="module")
async def scene(
    api_client: client.ApiClient,
    cluster: Cluster,
    crds_installed: None,
    operator_rbac: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Scene]:
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    apps = client.AppsV1Api(api_client)
    suite = f"insp-{uuid.uuid4().hex[:6]}"
    kubeconfig = cluster.kubeconfig_for("operator")
    scene = Scene(
        suite=suite,
        pools={short: f"{suite}-{short}" for short in ("plain", "gpu", "capped")},
        autoscalers=[],
        namespace=f"{suite}-pods",
        other_namespace=f"{suite}-elsewhere",
        kubeconfig=kubeconfig,
    )
    tmp = tmp_path_factory.mktemp(suite)
    cloud, operator = await _start_cloud_and_operator(tmp, kubeconfig)
    scene.operator = operator
    try:
        for namespace in (scene.namespace, scene.other_namespace):
            await core.create_namespace({"metadata": {"name": namespace}})
        await apps.create_namespaced_daemon_set(scene.namespace, _daemon_set(suite))
        gpu_taint = nodepool_api.Taint(key="gpu", value="yes", effect="NoSchedule")
        for manifest in (
            _pool(scene.pools["plain"], suite, target=1, zones=("za",), labels=HDD),
            _pool(
                scene.pools["gpu"], suite, cpu="8", memory="32Gi", zones=("zb",),
                labels={"accel": "gpu"}, taints=(gpu_taint,),
                extended_resources={"example.com/gpu": "2"},
            ),
            _pool(
                scene.pools["capped"], suite, target=1, max_nodes=1, labels={"capped": "yes"},
                taints=(nodepool_api.Taint(key="capped", value="yes", effect="NoSchedule"),),
            ),
        ):  # fmt: skip
            await custom.create_cluster_custom_object(*harness.POOLS, manifest)
        # The anchor is anti-affine to app=shy: the symmetric anti-affinity case.
        anchor = _held(
            suite, "anchor", "3500m", selector=HDD, labels={**ANCHOR, **SPREAD},
            affinity=workloads.pod_terms("podAntiAffinity", {"app": "shy"}, ZONE),
        )  # fmt: skip
        filler = _held(
            suite, "filler", "3900m", selector={"capped": "yes"}, tolerations=TOLERATE_CAPPED
        )
        for pod in (anchor, filler):
            await core.create_namespaced_pod(scene.namespace, pod)
        held = {"anchor", "filler"}

        async def anchored() -> bool:
            phases = await _phase_of(core, scene.namespace, held)
            return set(phases) == held and set(phases.values()) == {"Running"}

        await harness.wait_for(anchored, within=90)
        for short, pool in scene.pools.items():
            name = f"{suite}-{short}"
            await make_autoscaler(custom, name, pool=pool, namespace=scene.namespace)
            scene.autoscalers.append(name)
            await custom.patch_cluster_custom_object(
                *AUTOSCALERS, name, {"spec": {"dryRun": True}}, _content_type=harness.MERGE
            )

        async def all_dry_run() -> bool:
            for name in scene.autoscalers:
                status = await autoscaler_status(custom, name)
                if condition(status, "DryRun").get("status") != "True":
                    return False
            return True

        await harness.wait_for(all_dry_run, within=30)  # before any case's pod: nothing is asked
        cases = [*UNFIT, *FITTING, AT_MAX]
        for case in cases:
            await core.create_namespaced_pod(scene.namespace, _pod(case, suite, **case.pod))
        await core.create_namespaced_pod(scene.other_namespace, _pod(UNWATCHED, suite))
        names = {case.name for case in cases}
        await harness.wait_for(
            lambda: _marked_unschedulable(core, scene.namespace, names), within=90
        )
        await harness.wait_for(
            lambda: _marked_unschedulable(core, scene.other_namespace, {UNWATCHED.name}), within=30
        )
        # What the plan was made from: replayed below, and to see why a case failed.
        scene.snapshot = tmp / "plan-snapshot.json.gz"
        planned = run_cli(
            "plan", "--dry-run", "-o", "json", "--save-snapshot", str(scene.snapshot),
            kubeconfig=kubeconfig,
        )  # fmt: skip
        scene.plan = json_of(planned)
        await _explain_all(scene, [*cases, UNWATCHED])
        yield scene
    finally:
        for name in scene.autoscalers:
            with contextlib.suppress(client.exceptions.ApiException):
                await custom.delete_cluster_custom_object(*AUTOSCALERS, name)
        for namespace in (scene.namespace, scene.other_namespace):
            with contextlib.suppress(client.exceptions.ApiException):
                await core.delete_namespace(namespace)
        for pool in scene.pools.values():
            await harness.remove_pool(custom, pool)
        operator.stop()
        if cloud.client is not None:
            await cloud.client.close()
        cloud.process.stop()


def _explained(scene: Scene, case: Case) -> dict[str, Any]:
    result: dict[str, Any] = json_of(scene.explained[case.name])
    return result


def _growth(scene: Scene) -> dict[str, dict[str, Any]]:
    short = {pool: name for name, pool in scene.pools.items()}
    return {short[g["pool"]]: g for g in scene.plan["growth"] if g["pool"] in short}


@pytest.mark.parametrize("case", UNFIT, ids=str)
def test_explain_names_the_filter_that_refuses_the_pod_on_the_pool(
    scene: Scene, case: Case
) -> None:
    explained = _explained(scene, case)
    pools = {p["name"]: p for p in explained["pools"]}

    assert case.says in (pools[scene.pools[case.pool]]["problem"] or "")
    # No pool can host it: every pool names why, and the plan says so.
    assert all(p["problem"] for p in pools.values()), pools
    assert explained["planned"].startswith("no pool can host it:")
    assert case.says in explained["planned"]
    assert explained["plannedPool"] is None
    assert scene.pod(case) in {u["pod"] for u in scene.plan["unfit"]}
    # Every Autoscaler of its namespace looks again; in dry run none of them will ask.
    watchers = {w["autoscaler"]: w["dryRun"] for w in explained["watchers"]}
    assert watchers == dict.fromkeys(scene.autoscalers, True)


@pytest.mark.parametrize("case", FITTING, ids=str)
def test_explain_and_plan_give_a_fitting_pod_the_one_pool_that_can_host_it(
    scene: Scene, case: Case
) -> None:
    explained = _explained(scene, case)
    pools = {p["name"]: p["problem"] for p in explained["pools"]}
    pool = scene.pools[case.pool]

    assert pools[pool] is None
    assert explained["plannedPool"] == pool
    assert explained["planned"].startswith(f"needs a new node of pool {pool}")
    assert scene.pod(case) in _growth(scene)[case.pool]["pods"]
    assert [(w["pool"], w["dryRun"]) for w in explained["watchers"]] == [(pool, True)]


@dataclass(frozen=True)
class TwoRefusals:
    """An existing node that two filters refuse a case's pod: the one kube-scheduler
    runs first (its default order: TaintToleration before NodeAffinity, NodePorts before
    NodeResourcesFit) is the one it reports, in its own words, and the one explain
    should name."""

    case: str
    node_of: str  # the pool whose only node it is
    scheduler_says: str
    explain_says: str

    def __str__(self) -> str:
        return self.case


TWO_REFUSALS: Final = [
    # The other node, plain's, has no taint and lacks the label: the one taint counted is
    # the capped node's.
    TwoRefusals(
        "taint", "capped", "1 node(s) had untolerated taint", "taint capped=yes:NoSchedule"
    ),
    TwoRefusals(
        "host-port",
        "plain",
        "1 node(s) didn't have free ports for the requested pod ports",
        f"host port {TAKEN_PORT}/TCP is taken",
    ),
]


@pytest.mark.parametrize("refused", TWO_REFUSALS, ids=str)
def test_kube_scheduler_reports_the_filter_it_runs_first(
    scene: Scene, refused: TwoRefusals
) -> None:
    explained = _explained(scene, next(c for c in UNFIT if c.name == refused.case))

    assert refused.scheduler_says in explained["schedulerSays"]


@pytest.mark.parametrize("refused", TWO_REFUSALS, ids=str)
def test_explain_names_on_an_existing_node_the_filter_kube_scheduler_runs_first(
    scene: Scene, refused: TwoRefusals
) -> None:
    explained = _explained(scene, next(c for c in UNFIT if c.name == refused.case))
    nodes = {n["name"]: n["problem"] for n in explained["nodes"]}

    assert (nodes[f"{scene.pools[refused.node_of]}-0"] or "").startswith(refused.explain_says)


def test_a_pod_its_pool_could_host_past_max_nodes_is_told_the_limit(scene: Scene) -> None:
    explained = _explained(scene, AT_MAX)
    pools = {p["name"]: p for p in explained["pools"]}
    capped = scene.pools["capped"]

    assert pools[capped]["problem"] is None
    assert pools[capped]["headroom"] == 0
    assert explained["planned"] == f"needs a new node of pool {capped}, which is at maxNodes"
    assert explained["plannedPool"] == capped
    limited = _growth(scene)["capped"]
    assert (limited["newNodes"], limited["limitedTo"]) == (0, 1)
    assert (limited["pods"], limited["beyondMax"]) == ([], [scene.pod(AT_MAX)])


def test_a_pod_no_autoscaler_watches_is_told_so_by_every_pool(scene: Scene) -> None:
    explained = _explained(scene, UNWATCHED)

    says = f"its Autoscaler does not watch namespace {scene.other_namespace}"
    assert {p["problem"] for p in explained["pools"]} == {says}
    assert explained["planned"].startswith("not planned")
    assert explained["watchers"] == []
    planned = {
        *(u["pod"] for u in scene.plan["unfit"]),
        *(p for g in scene.plan["growth"] for p in (*g["pods"], *g["beyondMax"])),
    }
    assert scene.pod(UNWATCHED) not in planned


async def test_the_dry_run_autoscalers_would_request_what_plan_says_and_request_nothing(
    scene: Scene, api_client: client.ApiClient
) -> None:
    custom = client.CustomObjectsApi(api_client)
    growth = _growth(scene)
    expected = {
        short: growth[short]["targetNodes"] + growth[short]["newNodes"]
        for short in scene.pools
        if short in growth and growth[short]["newNodes"]
    }
    assert set(expected) == {"plain", "gpu"}

    async def would() -> dict[str, int] | None:
        found = {}
        for short in scene.pools:
            status = await autoscaler_status(custom, f"{scene.suite}-{short}")
            if "wouldRequest" in status:
                found[short] = status["wouldRequest"]["targetNodes"]
        return found if found == expected else None

    await harness.wait_for(would, within=60)
    assert await _requests(custom, scene.pools) == []


@dataclass
class Acted:
    requests: list[dict[str, Any]]
    waiting: dict[str, Any]  # explain of a fitting pod while its node boots
    nodes: dict[str, str]  # fitting pod -> the pool of the node it runs on


@pytest.fixture(scope="module")
async def acted(scene: Scene, api_client: client.ApiClient) -> Acted:
    """Dry run off: what the operator asks for, and where the scheduler puts the pods."""
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    for name in scene.autoscalers:
        await custom.patch_cluster_custom_object(
            *AUTOSCALERS, name, {"spec": {"dryRun": False}}, _content_type=harness.MERGE
        )
    await harness.wait_for(lambda: _requests(custom, scene.pools), within=60)

    async def waiting_on_request() -> dict[str, Any] | None:
        found = await asyncio.to_thread(
            run_cli,
            "explain",
            "pod",
            scene.pod(FITTING[0]),
            "-o",
            "json",
            kubeconfig=scene.kubeconfig,
        )
        seen: dict[str, Any] = json_of(found)
        return seen if seen["decision"] else None

    waiting = await harness.wait_for(waiting_on_request, within=BOOT_SECONDS * 6)
    fitting = {case.name for case in FITTING}

    async def all_running() -> bool:
        phases = await _phase_of(core, scene.namespace, fitting)
        return set(phases.values()) == {"Running"}

    await harness.wait_for(all_running, within=120)
    await asyncio.sleep(3)  # three more scans with every fitting pod running: no late request
    nodes = {}
    for pod in (await core.list_namespaced_pod(scene.namespace)).items:
        if pod.metadata.name in fitting:
            node = await core.read_node(pod.spec.node_name)
            nodes[pod.metadata.name] = node.metadata.labels[wellknown.POOL_LABEL]
    return Acted(await _requests(custom, scene.pools), waiting, nodes)


def test_the_operator_then_asks_for_what_plan_said_in_one_request_per_pool(
    scene: Scene, acted: Acted
) -> None:
    growth = _growth(scene)
    planned = sorted(
        (scene.pools[short], g["targetNodes"] + g["newNodes"])
        for short, g in growth.items()
        if g["newNodes"]
    )

    made = sorted((r["spec"]["nodePoolName"], r["spec"]["targetNodes"]) for r in acted.requests)
    assert made == planned


def test_explain_names_the_request_a_pod_waits_for_while_its_node_boots(
    scene: Scene, acted: Acted
) -> None:
    pool = scene.pools[FITTING[0].pool]
    [request] = [r for r in acted.requests if r["spec"]["nodePoolName"] == pool]

    assert acted.waiting["decision"]["name"] == request["metadata"]["name"]
    assert acted.waiting["decision"]["pool"] == pool
    assert acted.waiting["plannedPool"] == pool
    assert [(w["pool"], w["dryRun"]) for w in acted.waiting["watchers"]] == [(pool, False)]


@pytest.mark.parametrize("case", FITTING, ids=str)
def test_kube_scheduler_puts_a_fitting_pod_on_the_pool_plan_gave_it(
    scene: Scene, acted: Acted, case: Case
) -> None:
    assert acted.nodes[case.name] == scene.pools[case.pool]


async def test_the_pods_no_pool_can_host_still_wait_and_the_full_pool_stayed_put(
    scene: Scene, acted: Acted, api_client: client.ApiClient
) -> None:
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    # Not the host-port case: on a new node it races the DaemonSet's pod for the port, and
    # now and then wins it before the agent is bound (the plan rightly counts the agent).
    waiting = {case.name for case in [*UNFIT, AT_MAX] if case.name != "host-port"}

    phases = await _phase_of(core, scene.namespace, waiting)
    assert phases == dict.fromkeys(waiting, "Pending")
    capped = await custom.get_cluster_custom_object(*harness.POOLS, scene.pools["capped"])
    assert capped["spec"]["targetNodes"] == 1


def test_the_operator_logged_no_error(scene: Scene, acted: Acted) -> None:
    assert scene.operator is not None
    assert scene.operator.errors_logged() == []


def test_the_saved_snapshot_replays_to_the_same_plan_elsewhere_once_the_cluster_moved_on(
    scene: Scene, acted: Acted, tmp_path: Path
) -> None:
    """Elsewhere: a copy of the file, a home without a kubeconfig, no KUBECONFIG; and by
    now the cluster has grown and the fitting pods run, so only the file can say this."""
    assert scene.snapshot is not None
    attached = tmp_path / "attached-to-a-bug-report.json.gz"
    attached.write_bytes(scene.snapshot.read_bytes())
    bare = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    elsewhere = {**bare, "HOME": str(tmp_path), "COLUMNS": "160"}

    replayed = subprocess.run(
        [*harness.CLI, "plan", "--dry-run", "--snapshot", str(attached), "-o", "json"],
        capture_output=True, text=True, timeout=180, check=False, env=elsewhere, cwd=tmp_path,
    )  # fmt: skip

    assert json_of(replayed) == scene.plan
