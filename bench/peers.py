"""Pods Running: this operator against Karpenter (its kwok provider), same local control plane.

For each workload and each system, a fresh local control plane (etcd, kube-apiserver with
its audit log, kube-scheduler, kube-controller-manager, kwok) and one controller:

* ``operator``: ``nodepool-operator run`` as the operator user, a simcloud with
  ``--create-latency 0`` (``--vm-latency``), one NodePool of 4 cpu / 16Gi nodes and its
  Autoscaler, both as shipped (1 s batch window, 1 s poll interval);
* ``karpenter``: Karpenter's kwok provider (``sigs.k8s.io/karpenter/kwok``, pinned in
  ``tools/karpenter``, built into the cache on first use), run outside the cluster with the
  admin kubeconfig, one NodePool and one instance type of the same shape, defaults as
  shipped (1 s batch idle, 10 s batch max). It creates its kwok Nodes at once (or after
  the KWOKNodeClass's ``nodeRegistrationDelay``, ``--vm-latency``), annotated
  ``kwok.x-k8s.io/node: fake`` so the control plane's kwok keeps them Ready.

The cluster starts with one Node, tainted ``CriticalAddonsOnly``, that no workload pod
tolerates (a real cluster always has its system nodes). Without it (``--empty-cluster``)
kube-scheduler finds no Node at all, backs every pod off (1 s, 2 s, 4 s...) and retries it
only when that backoff ends: a Node arriving at 2.1 s then waits until about 4.5 s.

Both node shapes are 4 cpu / 16Gi / 110 pods with 100m cpu and 10Mi reserved (Karpenter's
kwok provider reserves that on every instance type; the NodePool template reserves it too),
so both have the same room for pods.

The bench creates the workload's pods (no Deployment: each pod's creation is its own
clock) and follows pods, Nodes and the controller's hand-off objects (ScaleRequests or
NodeClaims) through watches. Measured per run: time from each pod's create call to the
bench seeing it Running (p50, p99, and until the last), Nodes provisioned, API writes by
component, verb and resource with their 409s (from the API server's audit log, from the
first pod created until everything ran and 5 quiet seconds passed), the controller's CPU
seconds over that window and its peak RSS (``/proc``), and a timeline per pod: the median
of when it was marked unschedulable, when the request for its Node was made (ScaleRequest
or NodeClaim), when the VM was created (simcloud) or launched (NodeClaim ``Launched``),
when its Node appeared, turned Ready, when the pod was bound and Running.

Consolidation (``--consolidation REPLICAS:REMAIN:SECONDS``, default 12:3:10): a Deployment
of 900m pods shrinks, and the ReplicaSet leaves its pods spread thinly over the nodes; both
systems may remove a node once it has been underused for SECONDS (the Autoscaler's
``scaleDown.unneededSeconds``, Karpenter's ``WhenEmptyOrUnderutilized`` with
``consolidateAfter``). Measured: the time from the scale call until the cluster has the
nodes the remaining pods need and they all run, the evictions, the controller's writes and
409s (audit log, from the scale call until then plus 5 quiet seconds).

Cost (``--cost``, instead of the tables above): both systems are given one catalog file,
Karpenter kwok's generic ``instance_types.json`` (its ``kwok/tools/gen_instance_types.go``:
c, s, m families of 2, 4, 8 GiB per cpu, 1 to 256 cpu, a price linear in cpu and memory,
spot at 0.7 of on-demand) cut to its amd64 linux types, with on-demand offerings only
(``--catalogs on-demand``) or spot ones too (``spot-allowed``), and the kwok provider's
reserve as each type's ``overhead``: Karpenter's ``--instance-types-file-path`` and
simcloud's ``--catalog``. Karpenter's NodePool allows every type of it; the operator's side
is ``--ours-config``: ``requirements`` is one NodePool and Autoscaler whose
``spec.requirements`` allow the catalog as Karpenter's do (capacity type In the catalog's,
arch amd64, os linux), the Autoscaler choosing each node's offering; ``pool-per-type``
(the operator before it weighed a price) is one NodePool and Autoscaler per type, the types
Karpenter chose on the same workload and catalog, their neighbours in the family and the
cheapest type for any pod these do not hold. Workloads:
``mixed-sizes`` (seeded pods from 250m to 30 cpu, cpu-heavy, standard and memory-heavy)
and ``scale-down`` (three Deployments shrink to a third; the Nodes are settled once they
did not change for 40 s; the operator's ``utilizationThreshold`` is 1 there, every node
not full weighed for removal as Karpenter's ``WhenEmptyOrUnderutilized`` weighs every
node: ``--ours-utilization-threshold``). Each Node is priced by the catalog's offering
its labels name (instance type, zone, capacity type), after every pod ran (and 5 quiet
seconds), or once settled; beside it the LP lower bound of ``cost_bound.py``, time to
Running p50/p99, the controller's writes and 409s (audit log). ``--cost-repeat N`` runs
mixed-sizes N times per system and catalog, each on a fresh control plane: kube-scheduler
binds in an order of its own, so one run is an anecdote; the report then adds the runs
taken together (nodes and $/h by how many runs ended so, the spread of p99 and writes).

The first run of the Karpenter side builds its kwok provider (about 1-3 minutes, once).

Run:  .venv/bin/python bench/peers.py [--quick] [--sizes uniform=40 burst=1000 ...]
          [--systems operator karpenter] [--workloads uniform mixed anti-affinity burst]
          [--consolidation 12:3:10|none] [--vm-latency 0] [--plot peers.png]
      .venv/bin/python bench/peers.py --cost [--catalogs on-demand spot-allowed]
          [--cost-workloads mixed-sizes scale-down] [--ours-config requirements]
          [--mixed-pods 40] [--seed 49] [--cost-repeat 1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import functools
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config

import cost_bound
from nodepool_devtools.cluster import audit, binaries, controlplane, install
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import quantity, wellknown
from nodepool_operator.api import requirements as requirements_api
from nodepool_operator.cloud import catalog as catalog_api
from nodepool_operator.cloud import credentials
from nodepool_operator.cloud.simcloud import client as simcloud_client
from nodepool_operator.controllers.resources import SCALEREQUESTS
from nodepool_operator.runtime import errors, kinds
from nodepool_operator.runtime.client import Client, Resource

NAMESPACE = "peers"
POOL = "peers"
POOLS = ("nodepool.dev", "v1alpha1", "nodepools")
AUTOSCALERS = ("nodepool.dev", "v1alpha1", "autoscalers")
KARPENTER_POOLS = ("karpenter.sh", "v1", "nodepools")
KWOK_NODECLASSES = Resource(
    "karpenter.kwok.sh", "v1alpha1", "kwoknodeclasses", "KWOKNodeClass", namespaced=False
)
NODECLAIMS = Resource("karpenter.sh", "v1", "nodeclaims", "NodeClaim", namespaced=False)
INSTANCE_TYPE = "s-4x-amd64-linux"
NODE_CPU, NODE_MEMORY, NODE_PODS = "4", "16Gi", 110
# Karpenter's kwok provider reserves this on every instance type (kwok/cloudprovider/helpers.go).
RESERVED = {"cpu": "100m", "memory": "10Mi"}
SETTLE_SECONDS = 5.0
SYSTEM_NODE = "system-0"
STAGES = ("unschedulable", "request", "VM", "Node", "Ready", "bound", "Running")


# -- workloads -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PodShape:
    cpu: str
    memory: str


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    shapes: tuple[PodShape, ...]  # cycled over the pods
    pods: int
    anti_affinity: bool = False

    def manifests(self) -> list[dict[str, Any]]:
        return [self._pod(i, self.shapes[i % len(self.shapes)]) for i in range(self.pods)]

    def _pod(self, index: int, shape: PodShape) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": shape.cpu, "memory": shape.memory}},
                }
            ],
        }
        if self.anti_affinity:
            spec["affinity"] = {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"app": self.name}},
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                }
            }
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{self.name}-{index:04d}", "labels": {"app": self.name}},
            "spec": spec,
        }


WORKLOADS: dict[str, Callable[[int], Workload]] = {
    "uniform": lambda n: Workload(
        "uniform", f"{n} pods of 900m / 3Gi (4 per node)", (PodShape("900m", "3Gi"),), n
    ),
    "mixed": lambda n: Workload(
        "mixed",
        f"{n} pods cycling 250m/512Mi, 500m/1Gi, 1/2Gi, 2/4Gi, 3/6Gi",
        tuple(
            PodShape(c, m)
            for c, m in (
                ("250m", "512Mi"),
                ("500m", "1Gi"),
                ("1", "2Gi"),
                ("2", "4Gi"),
                ("3", "6Gi"),
            )
        ),
        n,
    ),
    "anti-affinity": lambda n: Workload(
        "anti-affinity",
        f"{n} pods of 500m / 1Gi, required hostname anti-affinity (1 per node)",
        (PodShape("500m", "1Gi"),),
        n,
        anti_affinity=True,
    ),
    "burst": lambda n: Workload(
        "burst", f"{n} pods of 100m / 256Mi", (PodShape("100m", "256Mi"),), n
    ),
}
DEFAULT_SIZES = {"uniform": 40, "mixed": 40, "anti-affinity": 20, "burst": 1000}
QUICK_SIZES = {"uniform": 20, "mixed": 20, "anti-affinity": 10, "burst": 300}


# -- what the bench sees -------------------------------------------------------------------


@dataclass
class Seen:
    """Wall-clock times (epoch seconds) of what the bench's watches saw first."""

    created: dict[str, float] = field(default_factory=dict)
    unschedulable: dict[str, float] = field(default_factory=dict)
    bound: dict[str, tuple[float, str]] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    node_added: dict[str, float] = field(default_factory=dict)
    node_ready: dict[str, float] = field(default_factory=dict)
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    requests: dict[str, float] = field(default_factory=dict)  # ScaleRequest / NodeClaim
    launched: dict[str, float] = field(default_factory=dict)  # NodeClaim Launched=True

    def on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        now, name = time.time(), pod["metadata"]["name"]
        status, spec = pod.get("status") or {}, pod.get("spec") or {}
        if _condition(status, "PodScheduled", "False", reason="Unschedulable"):
            self.unschedulable.setdefault(name, now)
        if spec.get("nodeName"):
            self.bound.setdefault(name, (now, spec["nodeName"]))
        if status.get("phase") == "Running":
            self.running.setdefault(name, now)

    def on_node(self, kind: str, node: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        now, name = time.time(), node["metadata"]["name"]
        self.node_added.setdefault(name, now)
        self.node_labels[name] = node["metadata"].get("labels") or {}
        if _condition(node.get("status") or {}, "Ready", "True"):
            self.node_ready.setdefault(name, now)

    def on_request(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        now, name = time.time(), obj["metadata"]["name"]
        self.requests.setdefault(name, now)
        if _condition(obj.get("status") or {}, "Launched", "True"):
            self.launched.setdefault(name, now)


def _condition(status: dict[str, Any], kind: str, value: str, *, reason: str | None = None) -> bool:
    return any(
        c.get("type") == kind
        and c.get("status") == value
        and (reason is None or c.get("reason") == reason)
        for c in status.get("conditions") or ()
    )


async def follow(
    api: Client, resource: Resource, *, on_event: Any, namespace: str | None = None
) -> None:
    """LIST, then WATCH for ever: resume after a closed watch, re-LIST after an error."""
    while True:
        page = await api.list_page(resource, namespace=namespace)
        for item in page["items"]:
            on_event("ADDED", item)
        version = page["metadata"]["resourceVersion"]
        try:
            while True:
                with contextlib.suppress(errors.ConnectionFailed):
                    async for event in api.watch(
                        resource, resource_version=version, namespace=namespace
                    ):
                        version = event.object["metadata"].get("resourceVersion", version)
                        if event.type != "BOOKMARK":
                            on_event(event.type, event.object)
        except errors.ApiError as error:
            print(f"  watch of {resource.plural} failed ({error!r}): re-listing", file=sys.stderr)


def system_node() -> dict[str, Any]:
    """A Node no workload pod tolerates, as every real cluster has (its system nodes)."""
    capacity = {"cpu": NODE_CPU, "memory": NODE_MEMORY, "pods": str(NODE_PODS)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": SYSTEM_NODE,
            "labels": {"kubernetes.io/hostname": SYSTEM_NODE},
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {
            "taints": [{"key": "CriticalAddonsOnly", "value": "true", "effect": "NoSchedule"}]
        },
        "status": {"capacity": capacity, "allocatable": capacity},
    }


# -- the controller process ----------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of stat(5); fields[0] here is field 3.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@dataclass
class Controller:
    """A controller process started for one run, and what stops it."""

    name: str
    process: asyncio.subprocess.Process
    log: Path
    helpers: list[asyncio.subprocess.Process] = field(default_factory=list)
    vm_created: Callable[[], Any] | None = None  # async: VM name -> created_at (simcloud)

    async def stop(self) -> None:
        for process in (self.process, *self.helpers):
            if process.returncode is None:
                process.terminate()
                await process.wait()

    def check_alive(self) -> None:
        if self.process.returncode is not None:
            tail = self.log.read_text(errors="replace").splitlines()[-30:]
            raise SystemExit(f"{self.name} exited ({self.process.returncode}):\n" + "\n".join(tail))


async def start_operator(
    api: client.ApiClient,
    plane: controlplane.ControlPlane,
    work: Path,
    *,
    vm_latency: float,
    consolidate_after: int | None = None,
    pools: Sequence[OurPool] | None = None,
    catalog_file: Path | None = None,
    utilization_threshold: float | None = None,
) -> Controller:
    """The operator and a simcloud; ``pools`` (default: one 4 cpu / 16Gi pool) each with
    its Autoscaler; ``catalog_file``: what simcloud sells (``--catalog``)."""
    await install.install_crds(api)
    await install.grant_operator_rbac(api)
    port_file, token_file = work / "simcloud.port", work / "simcloud.token"
    token = credentials.write_new_token(token_file)
    simcloud = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "nodepool_operator.cli", "simcloud"),
        *("--state", str(work / "sim.sqlite3"), "--port", "0", "--port-file", str(port_file)),
        *("--token-file", str(token_file), "--latency-jitter", "0"),
        *("--create-latency", str(vm_latency)),
        *(("--catalog", str(catalog_file)) if catalog_file is not None else ()),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    async with asyncio.timeout(30):
        while not port_file.exists() or not port_file.read_text().strip():  # noqa: ASYNC110 - a process
            await asyncio.sleep(0.05)
    endpoint = f"http://127.0.0.1:{port_file.read_text().strip()}"
    log = work / "operator.log"
    with log.open("wb") as handle:
        operator = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "nodepool_operator.cli", "run"),
            *("--kubeconfig", str(plane.kubeconfig_for("operator"))),
            *("--cloud-endpoint", endpoint, "--cloud-token-file", str(token_file)),
            *("--metrics-port", "0", "--metrics-host", "127.0.0.1", "--health-port", "0"),
            *("--leader-election-namespace", "nodepool-system"),
            stdout=handle,
            stderr=handle,
        )
    custom = client.CustomObjectsApi(api)
    if pools is None:
        template = nodepool_api.NodeTemplate(
            cpu=NODE_CPU, memory=NODE_MEMORY, pods=NODE_PODS, reserved=RESERVED
        )
        pools = [OurPool(POOL, OurPool.spec_of(template))]
    scale_down = autoscaler_api.ScaleDownPolicy()
    if consolidate_after is not None:
        scale_down = replace(scale_down, unneeded_seconds=consolidate_after)
    if utilization_threshold is not None:
        scale_down = replace(scale_down, utilization_threshold=utilization_threshold)
    for pool in pools:
        await custom.create_cluster_custom_object(
            *POOLS, nodepool_api.manifest(pool.name, pool.spec)
        )
        scaler = autoscaler_api.AutoscalerSpec(
            node_pool_name=pool.name, namespaces=(NAMESPACE,), scale_down=scale_down
        )
        await custom.create_cluster_custom_object(
            *AUTOSCALERS, autoscaler_api.manifest(pool.name, scaler)
        )
    controller = Controller("operator", operator, log, helpers=[simcloud])
    async with asyncio.timeout(60):
        for pool in pools:
            while not (await custom.get_cluster_custom_object(*AUTOSCALERS, pool.name)).get(
                "status"
            ):
                controller.check_alive()
                await asyncio.sleep(0.1)

    async def vm_created() -> dict[str, float]:
        cloud = simcloud_client.SimCloudClient(endpoint, token=token)
        try:
            return {
                vm.name: vm.created_at
                for pool in pools
                for vm in await cloud.list_vms(pool=pool.name)
            }
        finally:
            await cloud.close()

    controller.vm_created = vm_created
    return controller


def karpenter_source() -> Path:
    """Karpenter's module source (CRDs), from the Go module cache the build filled."""
    module = binaries.tools_directory() / "karpenter"
    found = subprocess.run(
        ["go", "mod", "download", "-json", "sigs.k8s.io/karpenter"],
        cwd=module,
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(json.loads(found.stdout)["Dir"])


def instance_types() -> list[dict[str, Any]]:
    """One instance type, the shape of the operator's pool, in kwok's instance_types.json form."""
    return [
        {
            "name": INSTANCE_TYPE,
            "offerings": [
                {
                    "Price": 0.117,
                    "Available": True,
                    "Requirements": [
                        {
                            "key": "karpenter.sh/capacity-type",
                            "operator": "In",
                            "values": ["on-demand"],
                        },
                        {
                            "key": "topology.kubernetes.io/zone",
                            "operator": "In",
                            "values": ["test-zone-a"],
                        },
                    ],
                }
            ],
            "architecture": "amd64",
            "operatingSystems": ["linux"],
            "resources": {
                "cpu": NODE_CPU,
                "memory": NODE_MEMORY,
                "ephemeral-storage": "20Gi",
                "pods": str(NODE_PODS),
            },
        }
    ]


def karpenter_pool(
    consolidate_after: int | None = None, *, requirements: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Karpenter's NodePool: ``requirements`` (default: the one 4 cpu / 16Gi type, on-demand)."""
    if requirements is None:
        requirements = [
            {
                "key": "node.kubernetes.io/instance-type",
                "operator": "In",
                "values": [INSTANCE_TYPE],
            },
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        ]
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": POOL},
        "spec": {
            "template": {
                "spec": {
                    "requirements": requirements,
                    "nodeClassRef": {
                        "group": "karpenter.kwok.sh",
                        "kind": "KWOKNodeClass",
                        "name": "default",
                    },
                    "expireAfter": "Never",
                }
            },
            "limits": {"cpu": "4000"},
            # Nothing is taken away while the bench measures (the operator's pool waits
            # 10 minutes before scaling down), except in the consolidation workload.
            "disruption": (
                {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}
                if consolidate_after is None
                else {
                    "consolidationPolicy": "WhenEmptyOrUnderutilized",
                    "consolidateAfter": f"{consolidate_after}s",
                }
            ),
        },
    }


def install_karpenter_crds(plane: controlplane.ControlPlane, crds: list[Path]) -> None:
    kubectl = [str(binaries.ensure_binaries()["kubectl"]), "--kubeconfig", str(plane.kubeconfig)]
    files = [arg for crd in crds for arg in ("-f", str(crd))]
    subprocess.run([*kubectl, "apply", "--server-side", *files], check=True, capture_output=True)
    names = (
        "nodepools.karpenter.sh",
        "nodeclaims.karpenter.sh",
        "kwoknodeclasses.karpenter.kwok.sh",
    )
    wait = [*kubectl, "wait", "--for=condition=Established", "--timeout=60s"]
    subprocess.run([*wait, *(f"crd/{n}" for n in names)], check=True, capture_output=True)


async def start_karpenter(
    api: client.ApiClient,
    plane: controlplane.ControlPlane,
    work: Path,
    *,
    vm_latency: float,
    consolidate_after: int | None = None,
    catalog_file: Path | None = None,
    requirements: list[dict[str, Any]] | None = None,
) -> Controller:
    """Karpenter's kwok provider; ``catalog_file``: its ``--instance-types-file-path``
    (default: the one 4 cpu / 16Gi type), ``requirements``: its NodePool's."""
    binary = binaries.ensure_karpenter_kwok()
    source = karpenter_source()
    crds = sorted((source / "kwok" / "charts" / "crds").glob("*.yaml"))
    crds += sorted((source / "kwok" / "apis" / "crds").glob("*.yaml"))
    await asyncio.to_thread(install_karpenter_crds, plane, crds)
    custom = client.CustomObjectsApi(api)
    node_class = {
        "apiVersion": "karpenter.kwok.sh/v1alpha1",
        "kind": "KWOKNodeClass",
        "metadata": {"name": "default"},
        # The kwok provider's VM latency: it creates the Node this long after the NodeClaim.
        "spec": {"nodeRegistrationDelay": f"{vm_latency:g}s"},
    }
    raw = Client(api, field_manager="bench")
    created = await raw.create(KWOK_NODECLASSES, node_class)
    # Nothing in the kwok provider marks its node class Ready, and a NodePool whose class
    # is not Ready provisions nothing: the bench plays the node-class controller's part.
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "Ready",
        "message": "",
        "lastTransitionTime": now,
        "observedGeneration": created["metadata"].get("generation", 1),
    }
    await raw.patch(
        KWOK_NODECLASSES, "default", {"status": {"conditions": [ready]}}, subresource="status"
    )
    await custom.create_cluster_custom_object(
        *KARPENTER_POOLS, karpenter_pool(consolidate_after, requirements=requirements)
    )
    types_file = catalog_file
    if types_file is None:
        types_file = work / "instance_types.json"
        types_file.write_text(json.dumps(instance_types(), indent=1))
    log = work / "karpenter.log"
    environment = {**os.environ, "KUBECONFIG": str(plane.kubeconfig)}
    with log.open("wb") as handle:
        process = await asyncio.create_subprocess_exec(
            str(binary),
            "--disable-leader-election",
            f"--metrics-port={controlplane.free_port()}",
            f"--health-probe-port={controlplane.free_port()}",
            f"--instance-types-file-path={types_file}",
            "--log-level=info",
            env=environment,
            stdout=handle,
            stderr=handle,
            cwd=work,
        )
    controller = Controller("karpenter", process, log)
    async with asyncio.timeout(90):
        while True:
            controller.check_alive()
            pool = await custom.get_cluster_custom_object(*KARPENTER_POOLS, POOL)
            if _condition(pool.get("status") or {}, "Ready", "True"):
                break
            await asyncio.sleep(0.2)
    return controller


# -- one run -------------------------------------------------------------------------------


@dataclass
class Result:
    workload: str
    system: str
    pods: int
    nodes: int
    latencies: list[float]
    makespan: float
    writes: Counter[tuple[str, str, str, int]]  # (component, verb, resource, code)
    cpu: float
    rss: float
    timeline: dict[str, float]  # stage -> median seconds after creation
    # The labels of the Nodes there once every pod ran and the window closed (the system
    # Node and Nodes being deleted aside): what the cost table prices.
    final_nodes: dict[str, dict[str, str]] = field(default_factory=dict)

    def component_writes(self, component: str) -> int:
        return sum(n for (c, *_), n in self.writes.items() if c == component)

    def events(self, component: str) -> int:
        return sum(
            n for (c, verb, res, _), n in self.writes.items() if c == component and res == "events"
        )

    def conflicts(self, component: str) -> int:
        return sum(
            n for (c, _, _, code), n in self.writes.items() if c == component and code == 409
        )

    def quantile(self, q: int) -> float:
        if len(self.latencies) < 2:
            return self.latencies[0] if self.latencies else float("nan")
        return statistics.quantiles(self.latencies, n=100, method="inclusive")[q - 1]


def component(event: audit.AuditEvent) -> str:
    if event.user == controlplane.IDENTITIES["operator"].user:
        return "operator"
    if event.user_agent.startswith("karpenter/"):
        return "karpenter"
    if event.user == controlplane.IDENTITIES["admin"].user:
        return "bench"
    for key, identity in controlplane.IDENTITIES.items():
        if event.user == identity.user:
            return key
    return event.user or "?"


async def create_pods(api: Client, pods: list[dict[str, Any]], seen: Seen) -> None:
    limit = asyncio.Semaphore(16)

    async def one(pod: dict[str, Any]) -> None:
        async with limit:
            seen.created[pod["metadata"]["name"]] = time.time()
            await api.create(kinds.PODS, pod, namespace=NAMESPACE)

    await asyncio.gather(*(one(pod) for pod in pods))


Starter = Callable[..., Awaitable[Controller]]


async def live_nodes(raw: Client) -> dict[str, dict[str, str]]:
    """The labels of the cluster's Nodes, the system Node and Nodes being deleted aside."""
    return {
        n["metadata"]["name"]: n["metadata"].get("labels") or {}
        for n in (await raw.list_page(kinds.NODES))["items"]
        if n["metadata"]["name"] != SYSTEM_NODE and not n["metadata"].get("deletionTimestamp")
    }


async def run_one(
    workload: Workload,
    system: str,
    work: Path,
    *,
    vm_latency: float,
    empty_cluster: bool,
    start: Starter | None = None,
) -> Result:
    """One workload on a fresh control plane; ``start`` starts the controller (default:
    ``system``'s, as the peers table configures it)."""
    print(f"== {workload.name} / {system}: {workload.description}", file=sys.stderr, flush=True)
    plane = controlplane.ControlPlane(work / "plane")
    plane.up()
    controller: Controller | None = None
    try:
        configuration = client.Configuration()
        await config.load_kube_config(
            config_file=str(plane.kubeconfig), client_configuration=configuration
        )
        async with client.ApiClient(configuration) as api:
            raw = Client(api, field_manager="bench")
            await raw.create(kinds.NAMESPACES, {"metadata": {"name": NAMESPACE}})
            if not empty_cluster:
                await raw.create(kinds.NODES, system_node())
            if start is None:
                start = start_operator if system == "operator" else start_karpenter
            controller = await start(api, plane, work, vm_latency=vm_latency)
            seen = Seen()
            hand_off = SCALEREQUESTS if system == "operator" else NODECLAIMS
            watchers = [
                asyncio.create_task(
                    follow(raw, kinds.PODS, on_event=seen.on_pod, namespace=NAMESPACE)
                ),
                asyncio.create_task(follow(raw, kinds.NODES, on_event=seen.on_node)),
                asyncio.create_task(follow(raw, hand_off, on_event=seen.on_request)),
            ]
            await asyncio.sleep(0.5)  # the watches are open
            log = audit.AuditLog(plane.audit_log)
            log.mark()
            cpu_before = cpu_seconds(controller.process.pid)
            pods = workload.manifests()
            began = time.time()
            try:
                await create_pods(raw, pods, seen)
                deadline = time.monotonic() + 180 + workload.pods * 0.3
                while len(seen.running) < len(pods):
                    controller.check_alive()
                    if time.monotonic() > deadline:
                        raise SystemExit(
                            f"{workload.name}/{system}: timed out with {len(seen.running)}/"
                            f"{len(pods)} pods Running; logs in {work}"
                        )
                    await asyncio.sleep(0.1)
                makespan = max(seen.running.values()) - began
                await asyncio.sleep(SETTLE_SECONDS)
                cpu = cpu_seconds(controller.process.pid) - cpu_before
                rss = peak_rss_mib(controller.process.pid)
                final_nodes = await live_nodes(raw)
                vms = await controller.vm_created() if controller.vm_created else {}
            finally:
                for task in watchers:
                    task.cancel()
                await asyncio.gather(*watchers, return_exceptions=True)
            events = log.events_since_mark()
    finally:
        if controller is not None:
            await controller.stop()
        plane.down()
    writes = Counter((component(e), e.verb, e.target, e.code) for e in events if e.is_write)
    latencies = sorted(seen.running[name] - seen.created[name] for name in seen.created)
    return Result(
        workload=workload.name,
        system=system,
        pods=len(latencies),
        nodes=len(set(seen.node_added) - {SYSTEM_NODE}),
        latencies=latencies,
        makespan=makespan,
        writes=writes,
        cpu=cpu,
        rss=rss,
        timeline=timeline(seen, system=system, vms=vms),
        final_nodes=final_nodes,
    )


def timeline(seen: Seen, *, system: str, vms: dict[str, float]) -> dict[str, float]:
    """Per stage, the median over pods of seconds from the pod's creation to that stage.

    The request and VM of a pod are those of the Node it ended on: for the operator, the
    last ScaleRequest created before that Node's VM was, and the VM's creation in the
    simcloud; for Karpenter, the Node's NodeClaim (its hostname label) and its ``Launched``.
    """
    requests = sorted(seen.requests.values())
    stages: dict[str, list[float]] = {stage: [] for stage in STAGES}
    for pod, created in seen.created.items():
        node = seen.bound[pod][1]
        if system == "operator":
            vm = vms.get(node)
            request = max((t for t in requests if vm is not None and t <= vm), default=None)
        else:
            claim = seen.node_labels.get(node, {}).get("kubernetes.io/hostname", "")
            vm, request = seen.launched.get(claim), seen.requests.get(claim)
        at = {
            "unschedulable": seen.unschedulable.get(pod),
            "request": request,
            "VM": vm,
            "Node": seen.node_added.get(node),
            "Ready": seen.node_ready.get(node),
            "bound": seen.bound[pod][0],
            "Running": seen.running.get(pod),
        }
        for stage, when in at.items():
            if when is not None:
                stages[stage].append(when - created)
    return {s: statistics.median(v) if v else float("nan") for s, v in stages.items()}


# -- consolidation -------------------------------------------------------------------------

DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", namespaced=True)
SHRINK_CPU = "900m"  # 4 per node
PER_NODE = 4


@dataclass(frozen=True)
class Shrink:
    """The consolidation workload: a Deployment shrinks and leaves its pods spread thinly."""

    replicas: int
    remain: int
    after: int  # seconds a node must be underused first (unneededSeconds, consolidateAfter)

    @property
    def needed(self) -> int:
        return -(-self.remain // PER_NODE)

    @property
    def description(self) -> str:
        return (
            f"consolidation: a Deployment of {self.replicas} pods of {SHRINK_CPU} shrinks to "
            f"{self.remain} ({self.needed} node); {self.after} s underused before removal"
        )


@dataclass
class ShrinkResult:
    system: str
    shrink: Shrink
    nodes_before: int
    seconds: float  # from the scale call until the pool had the nodes the pods need
    writes: Counter[tuple[str, str, str, int]]
    cpu: float

    def evictions(self) -> int:
        return sum(
            n
            for (c, _, res, code), n in self.writes.items()
            if res == "pods/eviction" and code < 300
        )


async def _live(raw: Client) -> tuple[int, int]:
    """(pool Nodes not being deleted, Running pods not being deleted)."""
    nodes = (await raw.list_page(kinds.NODES))["items"]
    pods = (await raw.list_page(kinds.PODS, namespace=NAMESPACE))["items"]
    live_nodes = [
        n
        for n in nodes
        if n["metadata"]["name"] != SYSTEM_NODE and not n["metadata"].get("deletionTimestamp")
    ]
    running = [
        p
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    ]
    return len(live_nodes), len(running)


async def run_consolidation(
    shrink: Shrink, system: str, work: Path, *, vm_latency: float, empty_cluster: bool
) -> ShrinkResult:
    print(f"== consolidation / {system}: {shrink.description}", file=sys.stderr, flush=True)
    plane = controlplane.ControlPlane(work / "plane")
    plane.up()
    controller: Controller | None = None
    try:
        configuration = client.Configuration()
        await config.load_kube_config(
            config_file=str(plane.kubeconfig), client_configuration=configuration
        )
        async with client.ApiClient(configuration) as api:
            raw = Client(api, field_manager="bench")
            await raw.create(kinds.NAMESPACES, {"metadata": {"name": NAMESPACE}})
            if not empty_cluster:
                await raw.create(kinds.NODES, system_node())
            start = start_operator if system == "operator" else start_karpenter
            controller = await start(
                api, plane, work, vm_latency=vm_latency, consolidate_after=shrink.after
            )
            pod = Workload("shrink", "", (PodShape(SHRINK_CPU, "1Gi"),), 1).manifests()[0]
            labels = {"app": "shrink"}
            deployment = {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "shrink"},
                "spec": {
                    "replicas": shrink.replicas,
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": pod["spec"]},
                },
            }
            await raw.create(DEPLOYMENTS, deployment, namespace=NAMESPACE)
            async with asyncio.timeout(300):
                while (await _live(raw))[1] < shrink.replicas:
                    controller.check_alive()
                    await asyncio.sleep(0.2)
            await asyncio.sleep(SETTLE_SECONDS)
            nodes_before = (await _live(raw))[0]
            log = audit.AuditLog(plane.audit_log)
            log.mark()
            cpu_before = cpu_seconds(controller.process.pid)
            began = time.monotonic()
            scale = {"spec": {"replicas": shrink.remain}}
            await raw.patch(DEPLOYMENTS, "shrink", scale, namespace=NAMESPACE)
            async with asyncio.timeout(shrink.after + 300):
                while (await _live(raw)) != (shrink.needed, shrink.remain):
                    controller.check_alive()
                    await asyncio.sleep(0.2)
            seconds = time.monotonic() - began
            await asyncio.sleep(SETTLE_SECONDS)
            cpu = cpu_seconds(controller.process.pid) - cpu_before
            events = log.events_since_mark()
    finally:
        if controller is not None:
            await controller.stop()
        plane.down()
    writes = Counter((component(e), e.verb, e.target, e.code) for e in events if e.is_write)
    return ShrinkResult(system, shrink, nodes_before, seconds, writes, cpu)


def consolidation_report(results: list[ShrinkResult]) -> str:
    lines = [
        "| workload | system | nodes before | nodes after | time to the nodes needed | "
        "evictions | controller writes (Events) | 409s | controller CPU |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        mine = {k: n for k, n in r.writes.items() if k[0] == r.system}
        events = sum(n for (_, _, res, _), n in mine.items() if res == "events")
        conflicts = sum(n for (*_, code), n in mine.items() if code == 409)
        lines.append(
            f"| consolidation | {r.system} | {r.nodes_before} | {r.shrink.needed} "
            f"| {r.seconds:.1f} s | {r.evictions()} | {sum(mine.values())} ({events}) "
            f"| {conflicts} | {r.cpu:.2f} s |"
        )
    return "\n".join(lines)


# -- cost ----------------------------------------------------------------------------------

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
#: What each catalog file offers: Karpenter kwok's generic catalog, amd64 linux types only,
#: with only these capacity types' offerings.
CATALOGS: dict[str, tuple[str, ...]] = {
    "on-demand": (catalog_api.ON_DEMAND,),
    "spot-allowed": (catalog_api.ON_DEMAND, catalog_api.SPOT),
}
COST_WORKLOADS = ("mixed-sizes", "scale-down")
# mixed-sizes: cpu per pod (millicores) and how often each is drawn; memory per cpu by kind.
MIXED_CPU_MILLIS = (250, 500, 1000, 2000, 4000, 8000, 16000, 30000)
MIXED_WEIGHTS = (6, 6, 5, 4, 3, 2, 1, 1)
GIB_PER_CPU = {"cpu-heavy": 1, "standard": 4, "memory-heavy": 7}
#: A generic kwok type's name: family (c, s, m: 2, 4, 8 GiB per cpu), cpus, arch and os.
GENERIC_TYPE = re.compile(r"^([a-z])-(\d+)x-(.+)$")


def mixed_sizes(pods: int, seed: int) -> Workload:
    """``pods`` pods drawn with ``seed``: cpu from 250m to 30 (small ones likelier; the first
    pod is always 30 cpu), memory 1, 4 or 7 GiB per cpu (cpu-heavy, standard, memory-heavy)."""
    draw = random.Random(seed)
    shapes = []
    for index in range(pods):
        cpu = 30000 if index == 0 else draw.choices(MIXED_CPU_MILLIS, MIXED_WEIGHTS)[0]
        kind = draw.choice(sorted(GIB_PER_CPU))
        shapes.append(PodShape(f"{cpu}m", f"{cpu * GIB_PER_CPU[kind] * 1024 // 1000}Mi"))
    return Workload(
        "mixed-sizes",
        f"{pods} pods (seed {seed}) of 250m to 30 cpu, 1, 4 or 7 GiB per cpu",
        tuple(shapes),
        pods,
    )


@dataclass(frozen=True)
class Deployed:
    """One Deployment of the scale-down workload: its pods' shape, replicas before and after."""

    name: str
    shape: PodShape
    replicas: int
    remain: int


#: scale-down: three Deployments (cpu-heavy, memory-heavy, small) each shrink to a third.
SCALE_DOWN = (
    Deployed("cpu", PodShape("3", "2Gi"), 6, 2),
    Deployed("mem", PodShape("500m", "12Gi"), 6, 2),
    Deployed("small", PodShape("250m", "512Mi"), 12, 4),
)
SCALE_DOWN_AFTER = 10  # seconds underused before removal (unneededSeconds, consolidateAfter)
#: The Nodes are settled once their set has not changed for this long (Karpenter's
#: consolidation waits consolidateAfter, then validates a decision for 15 s).
SCALE_DOWN_QUIET = 40.0


def scale_down_description() -> str:
    parts = ", ".join(
        f"{d.name} {d.replicas}->{d.remain} of {d.shape.cpu}/{d.shape.memory}" for d in SCALE_DOWN
    )
    return (
        f"scale-down: Deployments {parts}; {SCALE_DOWN_AFTER} s underused before removal; "
        f"settled once the Nodes did not change for {SCALE_DOWN_QUIET:g} s"
    )


def pod_request(shape: PodShape) -> cost_bound.PodRequest:
    return cost_bound.PodRequest(
        quantity.parse_cpu_millicores(shape.cpu), quantity.parse_memory_bytes(shape.memory)
    )


def generic_catalog(capacity_types: Sequence[str]) -> list[dict[str, Any]]:
    """Karpenter kwok's generic catalog (``kwok/cloudprovider/instance_types.json`` of the
    pinned module, made by its ``kwok/tools/gen_instance_types.go``): the amd64 linux types,
    with only the offerings of ``capacity_types`` and the provider's reserve as their
    ``overhead``; the file both systems are given."""
    source = karpenter_source() / "kwok" / "cloudprovider" / "instance_types.json"
    kept = []
    for entry in json.loads(source.read_text()):
        if entry["architecture"] != "amd64" or entry["operatingSystems"] != ["linux"]:
            continue
        offerings = [
            offering
            for offering in entry["offerings"]
            if any(
                r["key"] == catalog_api.CAPACITY_TYPE_LABEL
                and set(r["values"]) <= {*capacity_types}
                for r in offering["Requirements"]
            )
        ]
        # The kwok provider reserves this on every type in code (its file has no overhead);
        # said in the file, the bound and the operator's pools see the same allocatable.
        # Karpenter ignores the field.
        kept.append({**entry, "offerings": offerings, "overhead": dict(RESERVED)})
    return kept


def pool_types(
    chosen: Iterable[str], sold: catalog_api.Catalog, pods: Iterable[cost_bound.PodRequest]
) -> list[str]:
    """The types a user gives a pool each: those Karpenter chose and their neighbours in
    the same family (the next size down and up), and for any pod none of these holds, the
    cheapest type that does; smallest first."""
    prices = cost_bound.cheapest_prices(sold)
    parsed = {n: m.groups() for n in prices if (m := GENERIC_TYPE.match(n))}
    sizes = sorted({int(size) for _, size, _ in parsed.values()})
    wanted = {name for name in chosen if name in prices}
    for name in list(wanted):
        if name in parsed:
            family, size, rest = parsed[name]
            at = sizes.index(int(size))
            around = (sizes[i] for i in (at - 1, at + 1) if 0 <= i < len(sizes))
            wanted |= {f"{family}-{other}x-{rest}" for other in around} & set(prices)
    for pod in sorted(set(pods)):
        if not any(cost_bound.holds(sold.types[n], pod) for n in wanted):
            holders = [n for n in prices if cost_bound.holds(sold.types[n], pod)]
            if holders:
                wanted.add(min(holders, key=lambda n: (prices[n], n)))
    return sorted(wanted, key=lambda n: (sold.types[n].cpu_millis, sold.types[n].memory_bytes))


@dataclass(frozen=True)
class OurPool:
    """One NodePool of the operator's side (and its Autoscaler, of the same name)."""

    name: str
    spec: nodepool_api.NodePoolSpec

    @staticmethod
    def spec_of(template: nodepool_api.NodeTemplate) -> nodepool_api.NodePoolSpec:
        """A pool of that template starting empty, up to 1,000 nodes."""
        return nodepool_api.NodePoolSpec(
            target_nodes=0, min_nodes=0, max_nodes=1000, template=template
        )


def _size_text(size: int) -> str:
    return f"{size // 2**30}Gi" if size % 2**30 == 0 else f"{size // 2**20}Mi"


def pool_per_type(sold: catalog_api.Catalog, types: Sequence[str]) -> list[OurPool]:
    """The operator as a user set it up before pools of many types: one pool per instance
    type, its template that type's shape with the kwok provider's reserve, every zone of the
    catalog, and the type's and capacity type's labels (on-demand: the operator names no
    offering, so it buys none other). Template pools weigh no price: among those that could
    host a pod, the least waste wins."""
    pools = []
    for name in types:
        found = sold.types[name]
        template = nodepool_api.NodeTemplate(
            cpu=f"{found.cpu_millis}m",
            memory=_size_text(found.memory_bytes),
            pods=found.pods,
            reserved=RESERVED,
            zones=sold.zones(),
            labels={
                INSTANCE_TYPE_LABEL: name,
                catalog_api.CAPACITY_TYPE_LABEL: catalog_api.ON_DEMAND,
            },
        )
        pool_name = f"{POOL}-{name.removesuffix('-amd64-linux')}"
        pools.append(OurPool(pool_name, OurPool.spec_of(template)))
    return pools


def one_pool_requirements(sold: catalog_api.Catalog, types: Sequence[str]) -> list[OurPool]:
    """The operator as issue 49 intends it: one NodePool whose ``requirements`` allow every
    type of the catalog (amd64, linux, the capacity types it sells: on-demand, or on-demand
    and spot), as Karpenter's NodePool does; ``types`` is not used. The Autoscaler chooses
    each new node's offering. The template carries no ``reserved``: a node of an offering
    keeps the template's reserve plus the type's ``overhead``, and the catalog file already
    says the kwok provider's reserve there (``generic_catalog``), so the nodes have the
    allocatable of the pool-per-type ones and of Karpenter's."""
    del types  # the whole catalog, whatever Karpenter chose
    sold_kinds = {offering.capacity_type for offering in sold.offerings}
    allowed: dict[str, list[str]] = {
        wellknown.CAPACITY_TYPE_LABEL: [k for k in catalog_api.CAPACITY_TYPES if k in sold_kinds],
        wellknown.ARCH_LABEL: ["amd64"],
        wellknown.OS_LABEL: ["linux"],
    }
    spec = replace(
        OurPool.spec_of(nodepool_api.NodeTemplate()),
        requirements=requirements_api.Requirements(
            requirements_api.Requirement(key=key, operator="In", values=tuple(values))
            for key, values in allowed.items()
        ),
    )
    return [OurPool(POOL, spec)]


def pool_text(pool: OurPool) -> str:
    """A pool as the report's header names it: its name and requirements."""
    said = "; ".join(
        f"{r.key} {r.operator} {', '.join(r.values)}".rstrip() for r in pool.spec.requirements
    )
    return f"{pool.name} ({said})" if said else pool.name


@dataclass(frozen=True)
class OursConfig:
    """How the operator's side is configured for a catalog: the table's label for it, its
    pools from the catalog and the types to cover, and whether it has a pool per type
    (the label then counts them) or pools that allow the catalog by requirements."""

    label: str
    pools: Callable[[catalog_api.Catalog, Sequence[str]], list[OurPool]]
    per_type: bool = True


#: The operator's configurations the cost table can run (``--ours-config``). Another is one
#: more entry: a label and a function from the catalog and the types to cover to the pools
#: (each an ``OurPool`` with its whole NodePool spec).
OURS_CONFIGS: dict[str, OursConfig] = {
    "pool-per-type": OursConfig("ours: pool per type, no price", pool_per_type),
    "requirements": OursConfig(
        "ours: one pool, requirements", one_pool_requirements, per_type=False
    ),
}


@dataclass(frozen=True)
class Priced:
    """What a set of Nodes costs by the catalog, and of which types they are."""

    dollars_per_hour: float
    types: Counter[str]  # "<type> <capacity type>" -> Nodes
    unpriced: int  # Nodes whose type, zone and capacity type the catalog does not sell

    @property
    def nodes(self) -> int:
        return sum(self.types.values()) + self.unpriced

    def type_list(self) -> str:
        return ", ".join(
            f"{n} {t.replace('-amd64-linux', '')}" for t, n in sorted(self.types.items())
        )


def price_nodes(nodes: Mapping[str, Mapping[str, str]], sold: catalog_api.Catalog) -> Priced:
    """Each Node priced by the offering its labels name (instance type, zone, capacity
    type), as Karpenter's Nodes and the operator's pools alike carry them."""
    total, types, unpriced = 0.0, Counter[str](), 0
    for labels in nodes.values():
        name = labels.get(INSTANCE_TYPE_LABEL, "")
        kind = labels.get(catalog_api.CAPACITY_TYPE_LABEL, "")
        offering = sold.offering(
            instance_type=name, zone=labels.get(ZONE_LABEL, ""), capacity_type=kind
        )
        if offering is None:
            unpriced += 1
            continue
        total += offering.price_per_hour
        types[f"{name} {kind}"] += 1
    return Priced(total, types, unpriced)


@dataclass
class CostRow:
    catalog: str
    label: str
    result: Result
    priced: Priced
    bound: float


@dataclass
class ScaleDownRow:
    catalog: str
    label: str
    before: Priced
    after: Priced
    bound: float
    seconds: float  # from the scale call to the last change of the Nodes
    writes: Counter[tuple[str, str, str, int]]
    system: str

    def evictions(self) -> int:
        return sum(
            n
            for (_, _, res, code), n in self.writes.items()
            if res == "pods/eviction" and code < 300
        )


async def run_scale_down(
    system: str, work: Path, *, start: Starter, vm_latency: float, empty_cluster: bool
) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]], float, Counter[Any]]:
    """The scale-down workload: (Nodes once every pod ran, Nodes once settled after the
    shrink, seconds from the scale calls to the last change of the Nodes, writes)."""
    print(f"== scale-down / {system}: {scale_down_description()}", file=sys.stderr, flush=True)
    plane = controlplane.ControlPlane(work / "plane")
    plane.up()
    controller: Controller | None = None
    try:
        configuration = client.Configuration()
        await config.load_kube_config(
            config_file=str(plane.kubeconfig), client_configuration=configuration
        )
        async with client.ApiClient(configuration) as api:
            raw = Client(api, field_manager="bench")
            await raw.create(kinds.NAMESPACES, {"metadata": {"name": NAMESPACE}})
            if not empty_cluster:
                await raw.create(kinds.NODES, system_node())
            controller = await start(
                api, plane, work, vm_latency=vm_latency, consolidate_after=SCALE_DOWN_AFTER
            )
            for deployed in SCALE_DOWN:
                pod = Workload(deployed.name, "", (deployed.shape,), 1).manifests()[0]
                labels = {"app": deployed.name}
                deployment = {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": deployed.name},
                    "spec": {
                        "replicas": deployed.replicas,
                        "selector": {"matchLabels": labels},
                        "template": {"metadata": {"labels": labels}, "spec": pod["spec"]},
                    },
                }
                await raw.create(DEPLOYMENTS, deployment, namespace=NAMESPACE)
            async with asyncio.timeout(300):
                while (await _live(raw))[1] < sum(d.replicas for d in SCALE_DOWN):
                    controller.check_alive()
                    await asyncio.sleep(0.2)
            await asyncio.sleep(SETTLE_SECONDS)
            before = await live_nodes(raw)
            log = audit.AuditLog(plane.audit_log)
            log.mark()
            began = time.monotonic()
            for deployed in SCALE_DOWN:
                scale = {"spec": {"replicas": deployed.remain}}
                await raw.patch(DEPLOYMENTS, deployed.name, scale, namespace=NAMESPACE)
            remain = sum(d.remain for d in SCALE_DOWN)
            shape, changed = set(before), began
            async with asyncio.timeout(SCALE_DOWN_AFTER + 300):
                while True:
                    controller.check_alive()
                    now_nodes = await live_nodes(raw)
                    if set(now_nodes) != shape:
                        shape, changed = set(now_nodes), time.monotonic()
                    running = (await _live(raw))[1]
                    if running == remain and time.monotonic() - changed >= SCALE_DOWN_QUIET:
                        break
                    await asyncio.sleep(0.5)
            after = await live_nodes(raw)
            events = log.events_since_mark()
    finally:
        if controller is not None:
            await controller.stop()
        plane.down()
    writes = Counter((component(e), e.verb, e.target, e.code) for e in events if e.is_write)
    return before, after, changed - began, writes


def karpenter_requirements(capacity_types: Sequence[str]) -> list[dict[str, Any]]:
    """Karpenter's NodePool for the catalog: any of its types, of these capacity types."""
    return [
        {"key": catalog_api.CAPACITY_TYPE_LABEL, "operator": "In", "values": list(capacity_types)},
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
    ]


async def cost_main(arguments: argparse.Namespace) -> None:
    """The cost table: each catalog, each cost workload, Karpenter first (our pools cover
    the types it chose), then the operator as ``--ours-config`` sets it up."""
    systems = sorted(arguments.systems, key=lambda s: s != "karpenter")
    if "karpenter" in systems:
        binaries.ensure_karpenter_kwok()  # before any clock starts: the first build takes minutes
    ours = OURS_CONFIGS[arguments.ours_config]
    commit = _commit()  # the code that runs: read before edits made while it runs
    mixed = mixed_sizes(arguments.mixed_pods, arguments.seed)
    rows: list[CostRow] = []
    shrinks: list[ScaleDownRow] = []
    pools_used: list[str] = []
    with contextlib.ExitStack() as stack:
        if arguments.keep:
            work = Path(arguments.keep)
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-peers-")))
        for catalog_name in arguments.catalogs:
            capacity_types = CATALOGS[catalog_name]
            catalog_file = work / f"catalog-{catalog_name}.json"
            catalog_file.parent.mkdir(parents=True, exist_ok=True)
            catalog_file.write_text(json.dumps(generic_catalog(capacity_types), indent=1))
            sold = catalog_api.load(catalog_file)
            for name in arguments.cost_workloads:
                if name == "mixed-sizes":
                    requests = [pod_request(s) for s in mixed.shapes]
                else:
                    requests = [pod_request(d.shape) for d in SCALE_DOWN for _ in range(d.remain)]
                bound = cost_bound.lp_bound(requests, sold, capacity_types=capacity_types)
                chosen: set[str] = set()
                for system in systems:
                    here = work / f"{catalog_name}-{name}-{system}"
                    if system == "karpenter":
                        start: Starter = functools.partial(
                            start_karpenter,
                            catalog_file=catalog_file,
                            requirements=karpenter_requirements(capacity_types),
                        )
                        label = "karpenter"
                    else:
                        types = pool_types(chosen, sold, requests)
                        pools = ours.pools(sold, types)
                        if ours.per_type:
                            pools_used.append(
                                f"{catalog_name} / {name}: {len(pools)} pools: "
                                + ", ".join(t.replace("-amd64-linux", "") for t in types)
                            )
                            label = f"{ours.label} ({len(pools)} types)"
                        else:
                            pools_used.append(
                                f"{catalog_name} / {name}: "
                                + ", ".join(pool_text(pool) for pool in pools)
                            )
                            label = ours.label
                        start = functools.partial(
                            start_operator,
                            catalog_file=catalog_file,
                            pools=pools,
                            utilization_threshold=arguments.ours_utilization_threshold,
                        )
                    if name == "mixed-sizes":
                        for run in range(arguments.cost_repeat):
                            result = await run_one(
                                mixed,
                                system,
                                here if arguments.cost_repeat == 1 else here / f"run-{run + 1}",
                                vm_latency=arguments.vm_latency,
                                empty_cluster=arguments.empty_cluster,
                                start=start,
                            )
                            priced = price_nodes(result.final_nodes, sold)
                            chosen |= {t.rsplit(" ", 1)[0] for t in priced.types}
                            rows.append(
                                CostRow(catalog_name, label, result, priced, bound.dollars_per_hour)
                            )
                            print(
                                f"   run {run + 1} of {arguments.cost_repeat}: "
                                f"${priced.dollars_per_hour:.3f}/h on {priced.nodes} nodes "
                                f"(bound ${bound.dollars_per_hour:.3f}/h), p99 "
                                f"{result.quantile(99):.2f} s",
                                file=sys.stderr,
                                flush=True,
                            )
                    else:
                        before, after, seconds, writes = await run_scale_down(
                            system,
                            here,
                            start=start,
                            vm_latency=arguments.vm_latency,
                            empty_cluster=arguments.empty_cluster,
                        )
                        row = ScaleDownRow(
                            catalog_name,
                            label,
                            price_nodes(before, sold),
                            price_nodes(after, sold),
                            bound.dollars_per_hour,
                            seconds,
                            writes,
                            system,
                        )
                        chosen |= {t.rsplit(" ", 1)[0] for t in row.before.types}
                        chosen |= {t.rsplit(" ", 1)[0] for t in row.after.types}
                        shrinks.append(row)
                        print(
                            f"   ${row.before.dollars_per_hour:.3f}/h -> "
                            f"${row.after.dollars_per_hour:.3f}/h after {seconds:.1f} s",
                            file=sys.stderr,
                            flush=True,
                        )
    print(" ".join(["command:", ".venv/bin/python", "bench/peers.py", *sys.argv[1:]]))
    print(f"commit: {commit}")
    print(
        "catalog: Karpenter kwok's generic instance_types.json (sigs.k8s.io/karpenter "
        f"{binaries.KARPENTER.version(binaries.tools_directory())}), amd64 linux types "
        f"({len(sold.types)}); "
        + "; ".join(f"{c}: {', '.join(CATALOGS[c])} offerings" for c in arguments.catalogs)
    )
    if "mixed-sizes" in arguments.cost_workloads:
        print(f"workloads: {mixed.description}")
    if "scale-down" in arguments.cost_workloads:
        print(scale_down_description())
    print(f"VM latency: {arguments.vm_latency:g} s")
    print(
        "operator's scale-down: utilizationThreshold "
        f"{arguments.ours_utilization_threshold:g}"
        + (
            " (every node not full may go when its pods fit elsewhere, as Karpenter's "
            "WhenEmptyOrUnderutilized)"
            if arguments.ours_utilization_threshold >= 1
            else ""
        )
    )
    for line in pools_used:
        print(f"operator's pools, {line}")
    print()
    print(cost_report(rows, shrinks))


def _commit() -> str:
    found = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    )
    return found.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def cost_report(rows: Sequence[CostRow], shrinks: Sequence[ScaleDownRow]) -> str:
    lines: list[str] = []
    if rows:
        lines += [
            "| catalog | workload | system | pods | nodes | $/h | lower bound (LP) | "
            "$/h ÷ bound | p50 to Running | p99 | controller writes | 409s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in rows:
            r, p = row.result, row.priced
            unpriced = f" (+{p.unpriced} unpriced)" if p.unpriced else ""
            lines.append(
                f"| {row.catalog} | {r.workload} | {row.label} | {r.pods} | {p.nodes}{unpriced} "
                f"| {p.dollars_per_hour:.3f} | {row.bound:.3f} "
                f"| {p.dollars_per_hour / row.bound:.2f} | {r.quantile(50):.2f} s "
                f"| {r.quantile(99):.2f} s | {r.component_writes(r.system)} "
                f"| {r.conflicts(r.system)} |"
            )
        lines += ["", "Nodes by type (once every pod ran):", "", "| catalog | system | nodes |"]
        lines += ["|---|---|---|"]
        lines += [f"| {row.catalog} | {row.label} | {row.priced.type_list()} |" for row in rows]
        lines += repeat_summary(rows)
    if shrinks:
        lines += [""] if lines else []
        lines += [
            "| catalog | workload | system | nodes before | $/h before | nodes after | $/h after "
            "| lower bound (LP) | $/h ÷ bound | settled after | evictions | controller writes | "
            "409s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for s in shrinks:
            mine = {k: n for k, n in s.writes.items() if k[0] == s.system}
            conflicts = sum(n for (*_, code), n in mine.items() if code == 409)
            lines.append(
                f"| {s.catalog} | scale-down | {s.label} | {s.before.nodes} "
                f"| {s.before.dollars_per_hour:.3f} | {s.after.nodes} "
                f"| {s.after.dollars_per_hour:.3f} | {s.bound:.3f} "
                f"| {s.after.dollars_per_hour / s.bound:.2f} | {s.seconds:.1f} s "
                f"| {s.evictions()} | {sum(mine.values())} | {conflicts} |"
            )
        lines += ["", "Nodes by type, before and after the scale-down:", ""]
        lines += ["| catalog | system | before | after |", "|---|---|---|---|"]
        lines += [
            f"| {s.catalog} | {s.label} | {s.before.type_list()} | {s.after.type_list()} |"
            for s in shrinks
        ]
    return "\n".join(lines)


def repeat_summary(rows: Sequence[CostRow]) -> list[str]:
    """The burst's runs of each system on each catalog taken together, for the systems run
    more than once (``--cost-repeat``): how many runs ended on how many nodes at what $/h,
    and the spread of p99 and writes. Nothing when every system ran once."""
    runs: dict[tuple[str, str], list[CostRow]] = {}
    for row in rows:
        runs.setdefault((row.catalog, row.label), []).append(row)
    repeated = {key: found for key, found in runs.items() if len(found) > 1}
    if not repeated:
        return []

    def tally(values: Sequence[str]) -> str:
        counted = Counter(values)
        return ", ".join(f"{value} in {n}" for value, n in sorted(counted.items()))

    lines = [
        "",
        "The runs taken together:",
        "",
        "| catalog | system | runs | nodes (in how many runs) | $/h (in how many runs) "
        "| p99 | controller writes |",
        "|---|---|---|---|---|---|---|",
    ]
    for (catalog_name, label), found in repeated.items():
        p99 = [row.result.quantile(99) for row in found]
        writes = [row.result.component_writes(row.result.system) for row in found]
        lines.append(
            f"| {catalog_name} | {label} | {len(found)} "
            f"| {tally([str(row.priced.nodes) for row in found])} "
            f"| {tally([f'{row.priced.dollars_per_hour:.3f}' for row in found])} "
            f"| {min(p99):.2f} to {max(p99):.2f} s | {min(writes)} to {max(writes)} |"
        )
    return lines


# -- report --------------------------------------------------------------------------------


def report(results: list[Result]) -> str:
    lines = [
        "| workload | system | pods | nodes | p50 to Running | p99 | last Running | "
        "controller writes (Events) | 409s | all writes | controller CPU | peak RSS |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        every = sum(r.writes.values())
        lines.append(
            f"| {r.workload} | {r.system} | {r.pods} | {r.nodes} | {r.quantile(50):.2f} s "
            f"| {r.quantile(99):.2f} s | {r.makespan:.2f} s | {r.component_writes(r.system)} "
            f"({r.events(r.system)}) "
            f"| {r.conflicts(r.system)} | {every} | {r.cpu:.2f} s | {r.rss:.0f} MiB |"
        )
    lines += [
        "",
        "Timeline per pod (median seconds after its create call; request and VM are those "
        "of the Node it ran on):",
        "",
        "| workload | system | " + " | ".join(STAGES) + " |",
        "|---|---|" + "---|" * len(STAGES),
    ]
    for r in results:
        cells = " | ".join(f"{r.timeline[s]:.2f}" for s in STAGES)
        lines.append(f"| {r.workload} | {r.system} | {cells} |")
    lines += [
        "",
        "Controller writes by verb and resource (code: count, all runs of the workload):",
        "",
        "| workload | system | writes |",
        "|---|---|---|",
    ]
    for r in results:
        by: Counter[str] = Counter()
        for (comp, verb, resource, code), n in r.writes.items():
            if comp == r.system:
                by[f"{verb} {resource}" + (f" ({code})" if code >= 300 else "")] += n
        cells = ", ".join(f"{key} {n}" for key, n in sorted(by.items(), key=lambda kv: -kv[1]))
        lines.append(f"| {r.workload} | {r.system} | {cells} |")
    others: Counter[tuple[str, str, str]] = Counter()
    for r in results:
        for (comp, *_), n in r.writes.items():
            others[(r.workload, r.system, comp)] += n
    lines += ["", "Writes by the other components (same control plane, same pods):", ""]
    lines += [
        "| workload | system | " + " | ".join(_OTHERS) + " |",
        "|---|---|" + "---|" * len(_OTHERS),
    ]
    for r in results:
        cells = " | ".join(str(others[(r.workload, r.system, c)]) for c in _OTHERS)
        lines.append(f"| {r.workload} | {r.system} | {cells} |")
    return "\n".join(lines)


_OTHERS = ("bench", "kube-scheduler", "kube-controller-manager", "kwok")


def plot(results: list[Result], path: Path) -> bool:
    try:
        import matplotlib  # optional: the bench extra

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    workloads = list(dict.fromkeys(r.workload for r in results))
    systems = list(dict.fromkeys(r.system for r in results))
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    width = 0.8 / max(1, len(systems))
    for offset, system in enumerate(systems):
        mine = {r.workload: r for r in results if r.system == system}
        xs = [i + offset * width for i in range(len(workloads))]
        for axis, values, title in (
            (
                axes[0],
                [mine[w].quantile(50) if w in mine else 0 for w in workloads],
                "p50 to Running (s)",
            ),
            (
                axes[1],
                [mine[w].quantile(99) if w in mine else 0 for w in workloads],
                "p99 to Running (s)",
            ),
            (
                axes[2],
                [mine[w].component_writes(system) if w in mine else 0 for w in workloads],
                "controller API writes",
            ),
        ):
            axis.bar(xs, values, width, label=system)
            axis.set_title(title)
            axis.set_xticks([i + width * (len(systems) - 1) / 2 for i in range(len(workloads))])
            axis.set_xticklabels(workloads)
    axes[0].legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    return True


def sizes_from(arguments: argparse.Namespace) -> dict[str, int]:
    sizes = dict(QUICK_SIZES if arguments.quick else DEFAULT_SIZES)
    for item in arguments.sizes or ():
        name, _, count = item.partition("=")
        if name not in WORKLOADS or not count.isdigit():
            raise SystemExit(f"--sizes takes NAME=COUNT with NAME in {', '.join(WORKLOADS)}")
        sizes[name] = int(count)
    return sizes


async def main(arguments: argparse.Namespace) -> None:
    if arguments.cost:
        await cost_main(arguments)
        return
    sizes = sizes_from(arguments)
    if "karpenter" in arguments.systems:
        binaries.ensure_karpenter_kwok()  # before any clock starts: the first build takes minutes
    results = []
    shrinks: list[ShrinkResult] = []
    with contextlib.ExitStack() as stack:
        if arguments.keep:
            work = arguments.keep
        else:
            work = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-peers-"))
        for system in arguments.systems if arguments.consolidation else ():
            shrunk = await run_consolidation(
                arguments.consolidation,
                system,
                Path(work) / f"consolidation-{system}",
                vm_latency=arguments.vm_latency,
                empty_cluster=arguments.empty_cluster,
            )
            print(f"   {shrunk.seconds:.1f} s, {shrunk.evictions()} evictions", file=sys.stderr)
            shrinks.append(shrunk)
        for name in arguments.workloads:
            workload = WORKLOADS[name](sizes[name])
            for system in arguments.systems:
                result = await run_one(
                    workload,
                    system,
                    Path(work) / f"{name}-{system}",
                    vm_latency=arguments.vm_latency,
                    empty_cluster=arguments.empty_cluster,
                )
                print(
                    f"   p50 {result.quantile(50):.2f} s, p99 {result.quantile(99):.2f} s, "
                    f"{result.nodes} nodes, {result.component_writes(system)} writes",
                    file=sys.stderr,
                    flush=True,
                )
                results.append(result)
    print(" ".join(["command:", ".venv/bin/python", "bench/peers.py", *sys.argv[1:]]))
    if arguments.workloads:
        described = (WORKLOADS[n](sizes[n]).description for n in arguments.workloads)
        print("workloads: " + "; ".join(described))
    if arguments.consolidation:
        print(arguments.consolidation.description)
    print(f"VM latency: {arguments.vm_latency:g} s")
    if arguments.empty_cluster:
        print("empty cluster: no system Node")
    print()
    if shrinks:
        print(consolidation_report(shrinks))
        print()
    if results:
        print(report(results))
    if arguments.plot and plot(results, Path(arguments.plot)):
        print(f"\nplot: {arguments.plot}", file=sys.stderr)
    elif arguments.plot:
        print("\nno plot: matplotlib is not installed (pip install -e '.[bench]')", file=sys.stderr)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"smaller sizes: {QUICK_SIZES}")
    parser.add_argument("--sizes", nargs="+", metavar="NAME=PODS", help=f"default {DEFAULT_SIZES}")
    parser.add_argument(
        "--systems", nargs="+", default=["operator", "karpenter"], choices=["operator", "karpenter"]
    )
    parser.add_argument(
        "--workloads",
        nargs="*",
        default=list(WORKLOADS),
        choices=list(WORKLOADS),
        help="the pods-Running workloads (none: only the consolidation one)",
    )
    parser.add_argument(
        "--vm-latency",
        type=float,
        default=0.0,
        help="seconds from VM create to running: simcloud --create-latency, "
        "KWOKNodeClass nodeRegistrationDelay (default 0)",
    )
    parser.add_argument(
        "--empty-cluster",
        action="store_true",
        help="no tainted system Node: pods then fail with 'no nodes registered' and "
        "kube-scheduler retries them only on its backoff (1 s, 2 s, 4 s...)",
    )
    parser.add_argument(
        "--consolidation",
        type=_shrink,
        default=_shrink("12:3:10"),
        metavar="REPLICAS:REMAIN:SECONDS",
        help="the consolidation workload: a Deployment of REPLICAS pods shrinks to REMAIN, "
        "nodes underused for SECONDS go (default 12:3:10; 'none' to skip)",
    )
    cost = parser.add_argument_group(
        "cost table (--cost)", "$/h of the Nodes each system made from one priced catalog"
    )
    cost.add_argument(
        "--cost",
        action="store_true",
        help="run the cost table (its own workloads) instead of the pods-Running one",
    )
    cost.add_argument(
        "--catalogs",
        nargs="+",
        default=list(CATALOGS),
        choices=list(CATALOGS),
        help="Karpenter kwok's generic catalog, amd64 linux, with on-demand offerings only "
        "and/or spot ones too",
    )
    cost.add_argument(
        "--cost-workloads", nargs="+", default=list(COST_WORKLOADS), choices=COST_WORKLOADS
    )
    cost.add_argument(
        "--ours-config",
        default="requirements",
        choices=list(OURS_CONFIGS),
        help="how the operator's side is configured for the catalog: one pool whose "
        "requirements allow it, or a pool per type (default %(default)s)",
    )
    cost.add_argument(
        "--ours-utilization-threshold",
        type=float,
        default=1.0,
        help="the operator's scaleDown.utilizationThreshold in the cost table (default "
        "%(default)s: every node not full is weighed for removal, as Karpenter's "
        "WhenEmptyOrUnderutilized weighs every node; the Autoscaler's default is 0.5)",
    )
    cost.add_argument(
        "--cost-repeat",
        type=_positive,
        default=1,
        help="runs of mixed-sizes per system and catalog, each on a fresh control plane "
        "(kube-scheduler's races make runs differ; with more than one the report adds "
        "the runs taken together)",
    )
    cost.add_argument("--mixed-pods", type=int, default=40, help="pods of mixed-sizes")
    cost.add_argument("--seed", type=int, default=49, help="mixed-sizes' draw")
    parser.add_argument("--keep", help="work in this directory and keep it (logs, audit logs)")
    parser.add_argument("--plot", default="peers.png", help="PNG path ('' for none)")
    return parser


def _shrink(text: str) -> Shrink | None:
    if text == "none":
        return None
    try:
        replicas, remain, after = (int(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError("REPLICAS:REMAIN:SECONDS, e.g. 12:3:10") from None
    return Shrink(replicas, remain, after)


if __name__ == "__main__":
    asyncio.run(main(_parser().parse_args()))
