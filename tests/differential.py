"""The Autoscaler's simulation against the real kube-scheduler, on seeded random workloads.

Each seed builds its own namespace, up to three NodePools (one spread over three zones
whose nodes start with a startup taint that an agent, played here, removes; one tainted
and weighted; one arm64 where arm64 pods ask for it) with an Autoscaler each, a system
node of no pool (in zone-a, with room of its own), sometimes a DaemonSet, and a few
Deployments that mix the constraints the simulation models: cpu and memory, required pod
anti-affinity over hostname, topology spread over zone or hostname, host ports, a zone
pinned by nodeSelector, a toleration, and now and then a pod no node can ever hold;
sometimes also pods on a static PersistentVolume that only zone-c can reach (pre-bound:
the local control plane runs no PV controller), and pods asking for arm64.
Everything of a seed selects its own pools by a seed label, so seeds run side by side on
one control plane without touching each other.

The operator says what it decided through events: a pod that gets ``NotTriggerScaleUp``
was judged unplaceable; any other pod was placed on a node the simulation counted on.
Once the seed settles, each pod is one of:

* ``agreed``: Running, or Pending with a NotTriggerScaleUp;
* ``misplaced``: Pending without one: the simulation counted on room the real scheduler
  did not or could not use (the differential test requires none);
* ``missed``: Running although it was judged unplaceable (reported).

The nodes provisioned are compared with a lower bound computed offline from the
workload alone (total cpu over a node's room, one node per anti-affine or host-port
replica, one per zone a spread needs).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio import client

import harness
import workloads
from harness import AUTOSCALERS, POOLS, lift_taint
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown

SEED_LABEL = "differential.nodepool.dev/seed"
ZONES = ("zone-a", "zone-b", "zone-c")
NODE_CPU = 4000
DAEMON_CPU = 250
TAINT = {"key": "dedicated", "value": "batch", "effect": "NoSchedule"}
STARTUP_TAINT = nodepool_api.Taint(key="example.com/agent-not-ready", effect="NoSchedule")
SYSTEM_CPU = 2000
VOLUME_ZONE = ZONES[2]
ARM = {wellknown.ARCH_LABEL: "arm64"}


@dataclass
class Workload:
    seed: int
    namespace: str
    pools: tuple[str, str, str]  # zonal, tainted, arm64
    daemon: bool
    deployments: list[dict[str, Any]] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)  # deployment -> constraint kind
    replicas: dict[str, int] = field(default_factory=dict)
    cpu: dict[str, int] = field(default_factory=dict)  # millicores per pod


@dataclass
class SeedResult:
    seed: int
    pods: int
    agreed: int
    misplaced: list[str]
    missed: list[str]
    nodes: int
    lower_bound: int
    seconds: float
    kinds: dict[str, str]


def _deployment(name: str, *, seed: int, kind: str, replicas: int, cpu: int) -> dict[str, Any]:
    spec = workloads.constrain(
        kind, {"app": name}, zone=ZONES[1], toleration={**TAINT, "operator": "Equal"}
    )
    return workloads.deployment(
        name,
        selector={SEED_LABEL: str(seed)},
        replicas=replicas,
        cpu=f"{cpu}m",
        memory="128Mi",
        host_port=8000 + seed if kind == "host-port" else None,
        **spec,
    )


def workload(seed: int, *, prefix: str = "diff") -> Workload:
    """The seed's random workload; equal seeds give equal workloads."""
    rng = random.Random(seed)
    found = Workload(
        seed=seed,
        namespace=f"{prefix}-{seed}",
        pools=(f"{prefix}-{seed}-zonal", f"{prefix}-{seed}-tainted", f"{prefix}-{seed}-arm"),
        daemon=rng.random() < 0.5,
    )
    for index in range(rng.randint(3, 5)):
        kind = rng.choice(workloads.KINDS)
        name = f"w{index}-{kind}"
        replicas = rng.randint(1, 6)
        cpu = rng.choice([100, 250, 500, 1000, 1500, 2500])
        if rng.random() < 0.1:
            cpu = NODE_CPU + 500  # never fits: the simulation must say so
        found.deployments.append(
            _deployment(name, seed=seed, kind=kind, replicas=replicas, cpu=cpu)
        )
        found.kinds[name] = kind
        found.replicas[name] = replicas
        found.cpu[name] = cpu
    # Drawn from a generator of their own, so the workloads above stay what they were.
    extra = random.Random(seed * 7919 + 1)
    for kind, spec in (("volume", {"volumes": [_CLAIM_VOLUME]}), ("arm", {"nodeSelector": ARM})):
        if extra.random() < 0.5:
            continue
        name = f"x-{kind}"
        replicas, cpu = extra.randint(1, 3), extra.choice([250, 500, 1000])
        found.deployments.append(
            workloads.deployment(
                name, selector={SEED_LABEL: str(seed)}, replicas=replicas, cpu=f"{cpu}m", **spec
            )
        )
        found.kinds[name] = kind
        found.replicas[name] = replicas
        found.cpu[name] = cpu
    return found


CLAIM = "data"
_CLAIM_VOLUME = {"name": "data", "persistentVolumeClaim": {"claimName": CLAIM}}


def system_node(work: Workload) -> dict[str, Any]:
    """The seed's node of no pool (kwok keeps it Ready), where its pods may go too."""
    name = f"{work.namespace}-system"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                SEED_LABEL: str(work.seed),
                wellknown.HOSTNAME_LABEL: name,
                wellknown.ZONE_LABEL: ZONES[0],
            },
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {},
        "status": {
            "capacity": {"cpu": f"{SYSTEM_CPU}m", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": f"{SYSTEM_CPU}m", "memory": "8Gi", "pods": "110"},
        },
    }


def volume_pair(work: Workload) -> tuple[dict[str, Any], dict[str, Any]]:
    """A static PersistentVolume only zone-c reaches, and its claim, pre-bound."""
    volume_name = f"{work.namespace}-{CLAIM}"
    zone_only = {"key": wellknown.ZONE_LABEL, "operator": "In", "values": [VOLUME_ZONE]}
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume_name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "hostPath": {"path": f"/tmp/{volume_name}"},
            "claimRef": {"namespace": work.namespace, "name": CLAIM},
            "nodeAffinity": {
                "required": {"nodeSelectorTerms": [{"matchExpressions": [zone_only]}]}
            },
        },
    }
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM, "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": volume_name,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    return volume, claim


def lower_bound(work: Workload) -> int:
    """Fewest pool nodes any scheduler could run the hostable pods on (the system node
    takes what it has room for)."""
    room = NODE_CPU - (DAEMON_CPU if work.daemon else 0)
    system_room = SYSTEM_CPU - (DAEMON_CPU if work.daemon else 0)
    hostable = {name: cpu for name, cpu in work.cpu.items() if cpu <= room}
    arm = sum(work.replicas[n] * cpu for n, cpu in hostable.items() if work.kinds[n] == "arm")
    total = sum(work.replicas[name] * cpu for name, cpu in hostable.items())
    # arm64 pods never go to the system node; the others may share an arm64 node.
    bound = max(math.ceil(max(0, total - system_room) / room), math.ceil(arm / room))
    for name in hostable:
        kind, replicas = work.kinds[name], work.replicas[name]
        if kind in ("anti-host", "host-port"):
            bound = max(bound, replicas - 1)
        elif kind == "spread-zone":
            bound = max(bound, min(replicas, len(ZONES)) - 1)
    return bound


async def create(api: client.ApiClient, work: Workload) -> None:
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    apps = client.AppsV1Api(api)
    await core.create_namespace({"metadata": {"name": work.namespace}})
    await core.create_node(system_node(work))
    if "volume" in work.kinds.values():
        volume, claim = volume_pair(work)
        await core.create_persistent_volume(volume)
        await core.create_namespaced_persistent_volume_claim(work.namespace, claim)
    seed_labels = {SEED_LABEL: str(work.seed)}
    zonal, tainted, arm = work.pools
    for name, template, weight in (
        (
            zonal,
            nodepool_api.NodeTemplate(
                cpu="4",
                memory="16Gi",
                labels=seed_labels,
                zones=ZONES,
                startup_taints=(STARTUP_TAINT,),
            ),
            0,
        ),
        (arm, nodepool_api.NodeTemplate(cpu="4", memory="16Gi", labels={**seed_labels, **ARM}), 0),
        (
            tainted,
            nodepool_api.NodeTemplate(
                cpu="4",
                memory="16Gi",
                labels=seed_labels,
                taints=(nodepool_api.Taint(key="dedicated", value="batch", effect="NoSchedule"),),
            ),
            10,
        ),
    ):
        if name == arm and "arm" not in work.kinds.values():
            continue  # an arm64 pool only where arm64 pods ask for one: fewer nodes to run
        spec = nodepool_api.NodePoolSpec(
            target_nodes=0, max_nodes=30, weight=weight, template=template
        )
        await custom.create_cluster_custom_object(*POOLS, nodepool_api.manifest(name, spec))
        autoscaler = autoscaler_api.AutoscalerSpec(
            node_pool_name=name,
            namespaces=(work.namespace,),
            scan_interval_seconds=2,
            batch_window_seconds=1,
            scale_down=autoscaler_api.ScaleDownPolicy(enabled=False, unneeded_seconds=600),
        )
        await custom.create_cluster_custom_object(
            *AUTOSCALERS, autoscaler_api.manifest(name, autoscaler)
        )
    if work.daemon:
        labels = {"app": "agent"}
        await apps.create_namespaced_daemon_set(
            work.namespace,
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "agent"},
                "spec": {
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "nodeSelector": seed_labels,
                            "tolerations": [{"operator": "Exists"}],
                            "containers": [workloads.container(f"{DAEMON_CPU}m", memory="128Mi")],
                        },
                    },
                },
            },
        )
    for manifest in work.deployments:
        await apps.create_namespaced_deployment(work.namespace, manifest)


async def _warned(core: client.CoreV1Api, namespace: str) -> set[str]:
    found = await core.list_namespaced_event(namespace, field_selector="reason=NotTriggerScaleUp")
    return {e.involved_object.name for e in found.items}


async def _app_pods(core: client.CoreV1Api, namespace: str) -> list[Any]:
    pods = await core.list_namespaced_pod(namespace)
    return [
        p
        for p in pods.items
        if p.metadata.deletion_timestamp is None
        and not any(ref.kind == "DaemonSet" for ref in p.metadata.owner_references or ())
    ]


async def _settled(api: client.ApiClient, work: Workload) -> bool:
    core = client.CoreV1Api(api)
    pods = await _app_pods(core, work.namespace)
    expected = sum(work.replicas.values())
    if len(pods) < expected:
        return False
    warned = await _warned(core, work.namespace)
    return all(p.status.phase == "Running" or p.metadata.name in warned for p in pods)


async def _play_startup_agents(core: client.CoreV1Api, work: Workload) -> None:
    """What an agent on each node does: once the node is registered (the operator's
    unregistered taint gone), it removes the startup taint."""
    selector = f"{wellknown.POOL_LABEL}={work.pools[0]}"
    while True:
        found = await core.list_node(label_selector=selector)
        for node in found.items:
            taints = node.spec.taints or []
            keys = {t.key for t in taints}
            if STARTUP_TAINT.key in keys and wellknown.UNREGISTERED_TAINT_KEY not in keys:
                await lift_taint(core, node, STARTUP_TAINT.key)
        await asyncio.sleep(0.5)


async def run_seed(api: client.ApiClient, seed: int, *, within: float = 120.0) -> SeedResult:
    """Create the seed's workload, wait for it to settle (or ``within``), judge each pod."""
    work = workload(seed)
    started = time.monotonic()
    agents = asyncio.create_task(_play_startup_agents(client.CoreV1Api(api), work))
    try:
        return await _run_seed(api, work, started=started, within=within)
    finally:
        agents.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await agents


async def _run_seed(
    api: client.ApiClient, work: Workload, *, started: float, within: float
) -> SeedResult:
    seed = work.seed
    await create(api, work)
    deadline = started + within
    quiet_since: float | None = None
    while time.monotonic() < deadline:
        if await _settled(api, work):
            # Settled and staying so for a few scans: no late scale-up moves anything.
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since >= 4:
                break
        else:
            quiet_since = None
        await asyncio.sleep(0.5)
    core = client.CoreV1Api(api)
    pods = await _app_pods(core, work.namespace)
    warned = await _warned(core, work.namespace)
    misplaced = [
        p.metadata.name
        for p in pods
        if p.status.phase != "Running" and p.metadata.name not in warned
    ]
    missed = [
        p.metadata.name for p in pods if p.status.phase == "Running" and p.metadata.name in warned
    ]
    nodes = await core.list_node(label_selector=f"{SEED_LABEL}={seed},{wellknown.POOL_LABEL}")
    return SeedResult(
        seed=seed,
        pods=len(pods),
        agreed=len(pods) - len(misplaced) - len(missed),
        misplaced=misplaced,
        missed=missed,
        nodes=len(nodes.items),
        lower_bound=lower_bound(work),
        seconds=time.monotonic() - started,
        kinds=dict(work.kinds),
    )


async def clean_up(api: client.ApiClient, seed: int) -> None:
    """Delete the seed's objects; the pools' finalizers take their nodes and VMs away."""
    work = workload(seed)
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    for name in work.pools:
        with contextlib.suppress(client.exceptions.ApiException):
            await custom.delete_cluster_custom_object(*AUTOSCALERS, name)
    # The pools go first, drained while their pods' namespace still exists.
    await asyncio.gather(*(harness.remove_pool(custom, name, within=60) for name in work.pools))
    with contextlib.suppress(client.exceptions.ApiException):
        await core.delete_namespace(work.namespace)
    with contextlib.suppress(client.exceptions.ApiException):
        await core.delete_node(system_node(work)["metadata"]["name"])
    with contextlib.suppress(client.exceptions.ApiException):
        await core.delete_persistent_volume(volume_pair(work)[0]["metadata"]["name"])


async def run_seeds(
    api: client.ApiClient, seeds: list[int], *, parallel: int = 4
) -> list[SeedResult]:
    limit = asyncio.Semaphore(parallel)

    async def one(seed: int) -> SeedResult:
        async with limit:
            try:
                return await run_seed(api, seed)
            finally:
                await clean_up(api, seed)

    return list(await asyncio.gather(*(one(seed) for seed in seeds)))


def table(results: list[SeedResult]) -> str:
    rows = [
        "| seeds | pods | agreed | misplaced | missed | nodes | lower bound | nodes / bound |",
        "|---|---|---|---|---|---|---|---|",
    ]
    pods = sum(r.pods for r in results)
    nodes = sum(r.nodes for r in results)
    bound = sum(r.lower_bound for r in results)
    rows.append(
        f"| {len(results)} | {pods} | {sum(r.agreed for r in results)} "
        f"| {sum(len(r.misplaced) for r in results)} | {sum(len(r.missed) for r in results)} "
        f"| {nodes} | {bound} | {nodes / max(1, bound):.2f} |"
    )
    return "\n".join(rows)
