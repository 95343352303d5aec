"""The article's claim measured: this operator, the naive one and a kopf one, under contention.

For each operator a fresh local control plane (etcd, kube-apiserver with its audit log,
kube-scheduler, kube-controller-manager, kwok), a fresh simcloud with VM latency and
jitter, and one scenario, the same for all three:

* ``--pools`` NodePools of 4 cpu / 16Gi Nodes, each with an Autoscaler for its own
  namespace (scan every ``--scan-interval`` s, scale-down off, so nothing is meant to
  lower ``targetNodes`` but the user);
* ``--bursts`` bursts per pool of ``--burst-pods`` pods (900m / 3Gi, 4 per Node, node
  selector on the pool), ``--burst-gap`` s apart, pools started 1 s apart;
* between bursts, a user edit per pool: ``targetNodes`` raised by one, as
  ``kubectl patch`` does it (read, then a merge patch without resourceVersion);
* a third-party writer labelling every pool every ``--label-interval`` s.

Operators (all run as the same user, ``nodepool-operator``, so the audit log tells their
requests apart from everyone else's):

* ``operator``: ``nodepool-operator run`` as shipped, under its deployed ClusterRole;
* ``naive``: ``bench/naive/run.py`` (no status subresource in its CRDs);
* ``kopf``: ``bench/kopf_operator/handlers.py`` on kopf (pinned in the ``bench`` extra).
  The two baselines run as cluster-admin: RBAC is not what is measured.

Measured from the first burst until every pod ran (or ``--timeout``) and ``--settle``
quiet seconds more: the operator's API requests by verb and resource and their codes
(409, 422) from the API server's audit log; reconciles or handler runs (this operator's
``controller_runtime_reconcile_total``, the baselines' ``pass`` log lines: the audit log
has no such thing); lost updates, from a watch on the NodePools: every time
``spec.targetNodes`` went down by a write that was not the user's (nothing else may lower
it here), the value it replaced was a user edit or an autoscaler decision that did not
survive (a stale raise that swallows a user's +1 without lowering the value is not
seen, so the count is a lower bound); at the end, VMs beyond ``targetNodes``, VMs
without a Node and Nodes without a VM; pods deleted by anyone but the bench; time from
each pod's create call to Running (p50, p99); the operator process's CPU seconds and
peak RSS (``/proc``).

Output: ``bench/results/contention.md`` (table, detail, command, machine) and
``contention.png`` / ``contention-targets.png``; progress on stderr.

Run:  .venv/bin/python bench/contention.py [--operators operator naive kopf] [--pools 3]
          [--bursts 3] [--burst-pods 8] [--vm-latency 2 --vm-jitter 1] [--repeat 1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client, config
from prometheus_client.parser import text_string_to_metric_families

import peers
from naive import crds as baseline_crds
from nodepool_devtools.cluster import audit, binaries, controlplane, install
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud import credentials
from nodepool_operator.cloud.simcloud.client import SimCloudClient
from nodepool_operator.controllers.resources import AUTOSCALERS, NODEPOOLS
from nodepool_operator.runtime import kinds
from nodepool_operator.runtime.client import Client

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
OPERATORS = ("operator", "naive", "kopf")
POOL_NAMES = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta")
OPERATOR_USER = controlplane.IDENTITIES["operator"].user
LABEL = "thirdparty.example/seen"
UPDATES = frozenset({"update", "patch"})
CREATES = frozenset({"create"})
EVENT_WRITE = ("create", "events")
COLORS = {"operator": "tab:green", "naive": "tab:red", "kopf": "tab:blue"}


# -- what the bench sees -------------------------------------------------------------------


@dataclass
class PoolHistory:
    """Every version of each NodePool the bench's watch saw: (resourceVersion, target, when)."""

    versions: dict[str, dict[int, tuple[int, float]]] = field(default_factory=dict)
    user_versions: set[int] = field(default_factory=set)

    def on_pool(self, kind: str, pool: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        meta = pool["metadata"]
        seen = self.versions.setdefault(meta["name"], {})
        seen.setdefault(int(meta["resourceVersion"]), (pool["spec"]["targetNodes"], time.time()))

    def lost(self) -> tuple[int, int]:
        """(user edits, autoscaler decisions) overwritten by a lower targetNodes."""
        users = decisions = 0
        for versions in self.versions.values():
            current: int | None = None
            set_by_user = False
            for version in sorted(versions):
                target = versions[version][0]
                by_user = version in self.user_versions
                if current is not None and target < current and not by_user:
                    users += set_by_user
                    decisions += not set_by_user
                if target != current:
                    current, set_by_user = target, by_user
        return users, decisions


@dataclass
class PodsSeen(peers.Seen):
    deleted: set[str] = field(default_factory=set)

    def on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.deleted.add(pod["metadata"]["name"])
        super().on_pod(kind, pod)


# -- scenario ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    pools: int
    bursts: int
    burst_pods: int
    burst_gap: float
    label_interval: float
    scan_interval: int
    vm_latency: float
    vm_jitter: float
    settle: float
    timeout: float

    @property
    def names(self) -> tuple[str, ...]:
        return POOL_NAMES[: self.pools]

    def describe(self) -> str:
        return (
            f"{self.pools} NodePools (4 cpu / 16Gi Nodes) with an Autoscaler each (scan "
            f"{self.scan_interval} s, no scale-down); per pool {self.bursts} bursts of "
            f"{self.burst_pods} pods (900m / 3Gi) {self.burst_gap:g} s apart and "
            f"{self.bursts - 1} user edits (targetNodes +1); a third-party writer labels "
            f"every pool every {self.label_interval:g} s; VM latency {self.vm_latency:g} s "
            f"± {self.vm_jitter:g} s"
        )


def namespace_of(pool: str) -> str:
    return f"work-{pool}"


def pod_manifest(pool: str, burst: int, index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{pool}-b{burst}-{index:02d}"},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {wellknown.POOL_LABEL: pool},
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "900m", "memory": "3Gi"}},
                }
            ],
        },
    }


async def drive_pool(
    raw: Client, pool: str, scenario: Scenario, seen: PodsSeen, history: PoolHistory
) -> None:
    """The bursts of one pool, with a user edit after each but the last."""
    for burst in range(scenario.bursts):
        pods = [pod_manifest(pool, burst, i) for i in range(scenario.burst_pods)]
        for pod in pods:
            seen.created[pod["metadata"]["name"]] = time.time()
        await asyncio.gather(
            *(raw.create(kinds.PODS, pod, namespace=namespace_of(pool)) for pod in pods)
        )
        print(f"  {pool}: burst {burst + 1} ({len(pods)} pods)", file=sys.stderr, flush=True)
        await asyncio.sleep(scenario.burst_gap / 2)
        if burst < scenario.bursts - 1:
            current = await raw.get(NODEPOOLS, pool)
            wanted = current["spec"]["targetNodes"] + 1
            edited = await raw.patch(NODEPOOLS, pool, {"spec": {"targetNodes": wanted}})
            history.user_versions.add(int(edited["metadata"]["resourceVersion"]))
            print(f"  {pool}: user sets targetNodes={wanted}", file=sys.stderr, flush=True)
        await asyncio.sleep(scenario.burst_gap / 2)


async def label_pools(raw: Client, pools: tuple[str, ...], interval: float) -> None:
    """A third party (a GitOps tool, a cost tracker) labelling the pools, for ever."""
    for tick in itertools.count():
        for pool in pools:
            await raw.patch(NODEPOOLS, pool, {"metadata": {"labels": {LABEL: str(tick)}}})
        await asyncio.sleep(interval)


# -- the operators -------------------------------------------------------------------------


@dataclass
class Running:
    """An operator process started for one run, its simcloud, and how to count its passes."""

    name: str
    process: asyncio.subprocess.Process
    simcloud: asyncio.subprocess.Process
    log: Path
    cloud: SimCloudClient
    metrics_url: str | None = None

    async def passes(self) -> int:
        if self.metrics_url is None:
            return sum(
                " pass " in line for line in self.log.read_text(errors="replace").splitlines()
            )
        async with aiohttp.ClientSession() as session, session.get(self.metrics_url) as answer:
            text = await answer.text()
        return int(
            sum(
                sample.value
                for family in text_string_to_metric_families(text)
                if family.name == "controller_runtime_reconcile"
                for sample in family.samples
                if sample.name == "controller_runtime_reconcile_total"
            )
        )

    def check_alive(self) -> None:
        if self.process.returncode is not None:
            tail = self.log.read_text(errors="replace").splitlines()[-30:]
            raise SystemExit(f"{self.name} exited ({self.process.returncode}):\n" + "\n".join(tail))

    async def stop(self) -> None:
        await self.cloud.close()
        for process in (self.process, self.simcloud):
            if process.returncode is None:
                process.terminate()
                await process.wait()


async def start_simcloud(
    work: Path, scenario: Scenario
) -> tuple[asyncio.subprocess.Process, str, Path]:
    port_file, token_file = work / "simcloud.port", work / "simcloud.token"
    credentials.write_new_token(token_file)
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "nodepool_operator.cli", "simcloud"),
        *("--state", str(work / "sim.sqlite3"), "--port", "0", "--port-file", str(port_file)),
        *("--token-file", str(token_file)),
        *("--create-latency", str(scenario.vm_latency)),
        *("--latency-jitter", str(scenario.vm_jitter)),
        *("--delete-latency", "0.5"),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    async with asyncio.timeout(30):
        while not port_file.exists() or not port_file.read_text().strip():  # noqa: ASYNC110 - a process
            await asyncio.sleep(0.05)
    return process, f"http://127.0.0.1:{port_file.read_text().strip()}", token_file


async def grant_cluster_admin(api: client.ApiClient) -> None:
    """The baselines run as the operator's user, with every right (RBAC is not measured)."""
    binding: Any = {  # the generated API takes plain dicts; its annotations say models
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "bench-baseline-admin"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": OPERATOR_USER}
        ],
    }
    await client.RbacAuthorizationV1Api(api).create_cluster_role_binding(binding)


async def start(
    name: str,
    api: client.ApiClient,
    plane: controlplane.ControlPlane,
    work: Path,
    scenario: Scenario,
) -> Running:
    kubeconfig = str(plane.kubeconfig_for("operator"))
    simcloud, endpoint, token_file = await start_simcloud(work, scenario)
    metrics_url = None
    environment = dict(os.environ)
    if name == "operator":
        await install.install_crds(api)
        await install.grant_operator_rbac(api)
        port = controlplane.free_port()
        metrics_url = f"http://127.0.0.1:{port}/metrics"
        command = [
            *(sys.executable, "-m", "nodepool_operator.cli", "run", "--kubeconfig", kubeconfig),
            *("--cloud-endpoint", endpoint, "--cloud-token-file", str(token_file)),
            *("--metrics-port", str(port), "--metrics-host", "127.0.0.1", "--no-metrics-secure"),
            *("--health-port", "0", "--leader-election-namespace", "nodepool-system"),
        ]
    elif name == "naive":
        await baseline_crds.install(api, baseline_crds.variant(status_subresource=False))
        await grant_cluster_admin(api)
        command = [
            *(sys.executable, str(BENCH / "naive" / "run.py"), "--kubeconfig", kubeconfig),
            *("--cloud-endpoint", endpoint, "--cloud-token-file", str(token_file)),
        ]
    else:
        await baseline_crds.install(api, baseline_crds.variant(status_subresource=True))
        await grant_cluster_admin(api)
        environment |= {
            "KUBECONFIG": kubeconfig,
            "CLOUD_ENDPOINT": endpoint,
            "CLOUD_TOKEN_FILE": str(token_file),
            "SCAN_SECONDS": str(scenario.scan_interval),
        }
        command = [
            *(sys.executable, "-m", "kopf", "run", "--standalone", "--all-namespaces"),
            str(BENCH / "kopf_operator" / "handlers.py"),
        ]
    log = work / f"{name}.log"
    with log.open("wb") as handle:
        process = await asyncio.create_subprocess_exec(
            *command, stdout=handle, stderr=handle, env=environment, cwd=work
        )
    cloud = SimCloudClient(endpoint, token=credentials.TokenFile(token_file))
    return Running(name, process, simcloud, log, cloud, metrics_url)


async def create_pools(raw: Client, scenario: Scenario) -> None:
    template = nodepool_api.NodeTemplate(
        cpu=peers.NODE_CPU, memory=peers.NODE_MEMORY, pods=peers.NODE_PODS, reserved=peers.RESERVED
    )
    for pool in scenario.names:
        await raw.create(kinds.NAMESPACES, {"metadata": {"name": namespace_of(pool)}})
        spec = nodepool_api.NodePoolSpec(
            target_nodes=0, min_nodes=0, max_nodes=60, template=template
        )
        await raw.create(NODEPOOLS, nodepool_api.manifest(pool, spec))
        scaler = autoscaler_api.AutoscalerSpec(
            node_pool_name=pool,
            namespaces=(namespace_of(pool),),
            scan_interval_seconds=scenario.scan_interval,
            scale_down=autoscaler_api.ScaleDownPolicy(enabled=False),
        )
        await raw.create(AUTOSCALERS, autoscaler_api.manifest(pool, scaler))


async def wait_ready(raw: Client, running: Running, pools: tuple[str, ...]) -> None:
    """Every pool has a status from the operator: it is up and has seen them."""
    async with asyncio.timeout(90):
        while True:
            running.check_alive()
            found = [(await raw.get(NODEPOOLS, pool)).get("status") or {} for pool in pools]
            if all(status.get("scaleOperation") for status in found):
                return
            await asyncio.sleep(0.3)


# -- one run -------------------------------------------------------------------------------


@dataclass
class Result:
    operator: str
    pods: int
    running: int
    latencies: list[float]
    requests: Counter[tuple[str, str, int]]  # (verb, resource/subresource, code)
    passes: int
    lost_user: int
    lost_decisions: int
    excess_vms: int
    orphan_vms: int
    nodes_without_vm: int
    pods_deleted: int
    final: dict[str, tuple[int, int, int]]  # pool -> (targetNodes, VMs, Nodes)
    cpu: float
    rss: float
    targets: dict[str, list[tuple[float, int]]]  # pool -> (seconds since start, target)
    label: str = ""  # the operator, and the run's number when there are several

    def writes(self) -> int:
        return sum(n for (verb, _, _), n in self.requests.items() if verb in audit.WRITE_VERBS)

    def events(self) -> int:
        return sum(n for (verb, res, _), n in self.requests.items() if (verb, res) == EVENT_WRITE)

    def code(self, code: int, *, verbs: frozenset[str] = audit.WRITE_VERBS) -> int:
        return sum(n for (verb, _, c), n in self.requests.items() if c == code and verb in verbs)

    def conflicts(self) -> int:
        """409s of updates and patches: a stale resourceVersion (a create's 409 is
        AlreadyExists, counted apart)."""
        return self.code(409, verbs=UPDATES)

    def quantile(self, q: int) -> float:
        if len(self.latencies) < 2:
            return self.latencies[0] if self.latencies else float("nan")
        return statistics.quantiles(self.latencies, n=100, method="inclusive")[q - 1]


def start_plane(work: Path, *, attempts: int = 3) -> controlplane.ControlPlane:
    """A fresh control plane in ``work/plane-N`` (which makes ``work`` too). On a machine
    shared with other runs a free port can be taken before etcd binds it: try again."""
    for attempt in range(1, attempts + 1):
        plane = controlplane.ControlPlane(work / f"plane-{attempt}")
        try:
            plane.up()
            return plane
        except controlplane.ControlPlaneError as error:
            plane.down()
            if attempt == attempts:
                raise
            print(f"  control plane failed to start ({error}); again", file=sys.stderr)
    raise AssertionError("unreachable")


async def run_one(name: str, scenario: Scenario, work: Path) -> Result:
    print(f"== {name}: starting a control plane", file=sys.stderr, flush=True)
    plane = start_plane(work)
    running: Running | None = None
    try:
        configuration = client.Configuration()
        await config.load_kube_config(
            config_file=str(plane.kubeconfig), client_configuration=configuration
        )
        async with client.ApiClient(configuration) as api:
            raw = Client(api, field_manager="bench")
            running = await start(name, api, plane, work, scenario)
            await create_pools(raw, scenario)
            await wait_ready(raw, running, scenario.names)
            print(f"== {name}: up; scenario starts", file=sys.stderr, flush=True)
            return await measure(raw, running, plane, scenario)
    finally:
        if running is not None:
            await running.stop()
        plane.down()


async def measure(
    raw: Client, running: Running, plane: controlplane.ControlPlane, scenario: Scenario
) -> Result:
    seen, history = PodsSeen(), PoolHistory()
    watchers = [
        asyncio.create_task(peers.follow(raw, kinds.PODS, on_event=seen.on_pod)),
        asyncio.create_task(peers.follow(raw, NODEPOOLS, on_event=history.on_pool)),
    ]
    await asyncio.sleep(0.5)  # the watches are open
    log = audit.AuditLog(plane.audit_log)
    log.mark()
    pid = running.process.pid
    cpu_before, passes_before = peers.cpu_seconds(pid), await running.passes()
    began = time.time()
    labeller = asyncio.create_task(label_pools(raw, scenario.names, scenario.label_interval))
    try:
        drivers = []
        for pool in scenario.names:
            drivers.append(asyncio.create_task(drive_pool(raw, pool, scenario, seen, history)))
            await asyncio.sleep(1)
        await asyncio.gather(*drivers)
        deadline = time.monotonic() + scenario.timeout
        while len(seen.running) < len(seen.created) and time.monotonic() < deadline:
            running.check_alive()
            await asyncio.sleep(0.2)
        print(
            f"  {len(seen.running)}/{len(seen.created)} pods Running; settling "
            f"{scenario.settle:g} s",
            file=sys.stderr,
            flush=True,
        )
        await asyncio.sleep(scenario.settle)
    finally:
        labeller.cancel()
        for task in watchers:
            task.cancel()
        await asyncio.gather(labeller, *watchers, return_exceptions=True)
    cpu = peers.cpu_seconds(pid) - cpu_before
    rss = peers.peak_rss_mib(pid)
    passes = await running.passes() - passes_before
    events = [e for e in log.events_since_mark() if e.user == OPERATOR_USER]
    final, excess, orphans, strays = await final_state(raw, running.cloud, scenario.names)
    lost_user, lost_decisions = history.lost()
    latencies = sorted(seen.running[p] - seen.created[p] for p in seen.running if p in seen.created)
    return Result(
        operator=running.name,
        pods=len(seen.created),
        running=len(seen.running),
        latencies=latencies,
        requests=Counter((e.verb, e.target, e.code) for e in events),
        passes=passes,
        lost_user=lost_user,
        lost_decisions=lost_decisions,
        excess_vms=excess,
        orphan_vms=orphans,
        nodes_without_vm=strays,
        pods_deleted=len(seen.deleted),
        final=final,
        cpu=cpu,
        rss=rss,
        targets={
            pool: [(when - began, target) for _, (target, when) in sorted(versions.items())]
            for pool, versions in history.versions.items()
        },
    )


async def final_state(
    raw: Client, cloud: SimCloudClient, pools: tuple[str, ...]
) -> tuple[dict[str, tuple[int, int, int]], int, int, int]:
    """Per pool (targetNodes, VMs, Nodes); VMs beyond the target, VMs without a Node and
    Nodes without a VM, summed over the pools."""
    final: dict[str, tuple[int, int, int]] = {}
    excess = orphans = strays = 0
    for pool in pools:
        target = (await raw.get(NODEPOOLS, pool))["spec"]["targetNodes"]
        vms = {vm.name for vm in await cloud.list_vms(pool=pool)}
        page = await raw.list_page(kinds.NODES, label_selector=wellknown.pool_selector(pool))
        nodes = {node["metadata"]["name"] for node in page["items"]}
        final[pool] = (target, len(vms), len(nodes))
        excess += max(0, len(vms) - target)
        orphans += len(vms - nodes)
        strays += len(nodes - vms)
    return final, excess, orphans, strays


# -- report --------------------------------------------------------------------------------


def ratio(ours: int, theirs: int) -> str:
    if theirs == 0:
        return f"no ratio ({ours} against 0)"
    return f"{ours / theirs:.2f}"


def report(results: list[Result], scenario: Scenario) -> str:
    lines = [
        "| operator | pods Running | p50 to Running | p99 | API writes (of which Events) "
        "| 409 Conflict (update, patch) | 409 AlreadyExists (create) | 422s "
        "| reconciles / handler runs | lost user edits | lost autoscaler decisions "
        "| excess VMs | VMs without Node | Nodes without VM | pods deleted | CPU | peak RSS |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.label} | {r.running}/{r.pods} | {r.quantile(50):.2f} s "
            f"| {r.quantile(99):.2f} s | {r.writes()} ({r.events()}) | {r.conflicts()} "
            f"| {r.code(409, verbs=CREATES)} | {r.code(422)} "
            f"| {r.passes} | {r.lost_user} | {r.lost_decisions} | {r.excess_vms} "
            f"| {r.orphan_vms} | {r.nodes_without_vm} | {r.pods_deleted} | {r.cpu:.1f} s "
            f"| {r.rss:.0f} MiB |"
        )
    totals: dict[str, tuple[int, int]] = {}
    for r in results:
        so_far, conflicts_so_far = totals.get(r.operator, (0, 0))
        totals[r.operator] = (so_far + r.writes(), conflicts_so_far + r.conflicts())
    if "operator" in totals:
        ours = totals["operator"]
        runs = len(results) // len(totals)
        lines += [
            "",
            f"This operator as a fraction of the others (API writes, 409 Conflicts; totals "
            f"over {runs} run{'s' if runs > 1 else ''} each):",
            "",
        ]
        for name, (their_writes, their_conflicts) in totals.items():
            if name != "operator":
                lines.append(
                    f"- of {name}: writes {ratio(ours[0], their_writes)} "
                    f"({ours[0]} / {their_writes}), 409 Conflicts "
                    f"{ratio(ours[1], their_conflicts)} ({ours[1]} / {their_conflicts})"
                )
    lines += [
        "",
        "Requests by verb and resource (code when not 2xx), as the API server's audit log "
        "counted them:",
        "",
        "| operator | writes | reads |",
        "|---|---|---|",
    ]
    for r in results:
        writes: Counter[str] = Counter()
        reads: Counter[str] = Counter()
        for (verb, target, code), n in r.requests.items():
            key = f"{verb} {target}" + (f" ({code})" if code >= 300 else "")
            (writes if verb in audit.WRITE_VERBS else reads)[key] += n
        lines.append(f"| {r.label} | {_listed(writes)} | {_listed(reads)} |")
    lines += ["", "Final state per pool (targetNodes / VMs / Nodes):", ""]
    lines += ["| operator | " + " | ".join(scenario.names) + " |"]
    lines += ["|---|" + "---|" * len(scenario.names)]
    for r in results:
        cells = " | ".join(" / ".join(map(str, r.final[p])) for p in scenario.names)
        lines.append(f"| {r.label} | {cells} |")
    return "\n".join(lines)


def _listed(counted: Counter[str]) -> str:
    return ", ".join(f"{key} {n}" for key, n in sorted(counted.items(), key=lambda kv: -kv[1]))


def plot(results: list[Result], directory: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r.label for r in results]
    colors = [COLORS[r.operator] for r in results]
    panels = (
        ("API writes", [r.writes() for r in results]),
        ("409 Conflict (update, patch)", [r.conflicts() for r in results]),
        ("lost updates", [r.lost_user + r.lost_decisions for r in results]),
        ("reconciles / handler runs", [r.passes for r in results]),
        ("p50 / p99 to Running (s)", None),
        ("operator CPU (s)", [r.cpu for r in results]),
    )
    figure, axes = plt.subplots(2, 3, figsize=(14 + len(results) // 2, 7))
    for axis, (title, values) in zip(axes.flat, panels, strict=True):
        axis.tick_params(axis="x", labelrotation=30 if len(names) > 3 else 0)
        if values is None:
            xs = range(len(results))
            axis.bar([x - 0.2 for x in xs], [r.quantile(50) for r in results], 0.4, label="p50")
            axis.bar([x + 0.2 for x in xs], [r.quantile(99) for r in results], 0.4, label="p99")
            axis.set_xticks(list(xs))
            axis.set_xticklabels(names, rotation=30 if len(names) > 3 else 0)
            axis.legend()
        else:
            bars = axis.bar(names, values, color=colors)
            axis.bar_label(bars, fmt="%g")
        axis.set_title(title)
    figure.tight_layout()
    summary = directory / "contention.png"
    figure.savefig(summary, dpi=100)
    first = list({r.operator: r for r in reversed(results)}.values())[::-1]  # run 1 of each
    figure, axes = plt.subplots(1, len(first), figsize=(5 * len(first), 4), squeeze=False)
    for axis, r in zip(axes[0], first, strict=True):
        for pool, points in r.targets.items():
            axis.step([t for t, _ in points], [v for _, v in points], where="post", label=pool)
        axis.set_title(f"{r.label}: spec.targetNodes")
        axis.set_xlabel("seconds since the first burst")
        axis.legend()
    figure.tight_layout()
    targets = directory / "contention-targets.png"
    figure.savefig(targets, dpi=100)
    return [summary, targets]


def machine() -> str:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return (
        f"{os.cpu_count()} cores ({model}), Python {platform.python_version()}, {platform.system()}"
    )


async def main(arguments: argparse.Namespace) -> None:
    scenario = Scenario(
        pools=arguments.pools,
        bursts=arguments.bursts,
        burst_pods=arguments.burst_pods,
        burst_gap=arguments.burst_gap,
        label_interval=arguments.label_interval,
        scan_interval=arguments.scan_interval,
        vm_latency=arguments.vm_latency,
        vm_jitter=arguments.vm_jitter,
        settle=arguments.settle,
        timeout=arguments.timeout,
    )
    binaries.ensure_binaries()
    print(f"scenario: {scenario.describe()}", file=sys.stderr, flush=True)
    results = []
    with contextlib.ExitStack() as stack:
        work = arguments.keep or stack.enter_context(
            tempfile.TemporaryDirectory(prefix="bench-contention-")
        )
        # Runs interleaved, so a machine that slows down hurts every operator alike.
        for run, name in itertools.product(range(1, arguments.repeat + 1), arguments.operators):
            result = await run_one(name, scenario, Path(work) / f"{name}-{run}")
            result.label = name if arguments.repeat == 1 else f"{name} #{run}"
            print(
                f"   {result.label}: {result.running}/{result.pods} pods Running, p50 "
                f"{result.quantile(50):.2f} s, {result.writes()} writes, "
                f"{result.conflicts()} 409 Conflicts, "
                f"{result.lost_user + result.lost_decisions} lost updates",
                file=sys.stderr,
                flush=True,
            )
            results.append(result)
    results.sort(key=lambda r: OPERATORS.index(r.operator))  # stable: runs stay in order
    command = " ".join([".venv/bin/python", "bench/contention.py", *sys.argv[1:]])
    text = "\n".join(
        [
            f"command: `{command}`",
            f"machine: {machine()}",
            f"scenario: {scenario.describe()}",
            "",
            report(results, scenario),
            "",
            "Plots: `contention.png` (the figures above), `contention-targets.png` "
            "(`spec.targetNodes` of each pool over time, as the bench's watch saw it).",
        ]
    )
    print(text)
    arguments.results.mkdir(parents=True, exist_ok=True)
    (arguments.results / "contention.md").write_text(text + "\n")
    for path in plot(results, arguments.results):
        print(f"plot: {path}", file=sys.stderr)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--operators", nargs="+", default=list(OPERATORS), choices=OPERATORS)
    parser.add_argument("--pools", type=int, default=3, choices=range(1, len(POOL_NAMES) + 1))
    parser.add_argument("--bursts", type=int, default=3)
    parser.add_argument("--burst-pods", type=int, default=8)
    parser.add_argument("--burst-gap", type=float, default=12.0)
    parser.add_argument("--label-interval", type=float, default=0.5)
    parser.add_argument("--scan-interval", type=int, default=2)
    parser.add_argument("--vm-latency", type=float, default=2.0)
    parser.add_argument("--vm-jitter", type=float, default=1.0)
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument(
        "--timeout", type=float, default=180.0, help="most seconds to wait for pods"
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs per operator, interleaved")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--keep", help="work in this directory and keep it (logs, audit logs)")
    return parser


if __name__ == "__main__":
    asyncio.run(main(_parser().parse_args()))
