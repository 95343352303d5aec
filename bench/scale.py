"""The operator at cluster scale: 1,000 NodePools with Autoscalers, 5,000 Nodes, 50,000 pods.

For each size (a fraction of that full size), a fresh local control plane and a simcloud
with no VM latency; the operator runs as its own user, as shipped, with plain-HTTP metrics.
kwok keeps the Nodes Ready and the pods Running; the bench creates the pods bound to their
Nodes (``spec.nodeName``), 10 of 300m / 1Gi per Node, so that what is measured is the
operator holding them, not kube-scheduler placing them.

Phases, each with the operator's writes from the API server's audit log, its CPU seconds
(``/proc``), reconciles per second and the p99 of the time keys waited in its work queues
(its ``workqueue_queue_duration_seconds`` histograms over the phase):

1. provision: the operator starts with every pool at ``targetNodes: 5`` and no VM; until
   every pool has its 5 Ready Nodes and a settled status, and every Autoscaler a status;
2. pods: the bench creates the pods, until all run (the operator only watches them);
3. restart, empty: the operator restarts with Nodes and no pods; until every pool and
   Autoscaler has been reconciled once and the queues are empty (its RSS then);
4. restart, full: the same once the pods run; the RSS difference divided by the pods is
   what one cached pod costs the whole process (informer, indexes, the Autoscaler's views);
5. quiet: ``--quiet`` seconds with nothing changing: writes must be zero;
6. burst: 1,000 pods nothing has room for (1500m each, 10 per pool on 100 pools, each
   pod's ``nodeSelector`` naming its pool): until every one of those pools has its
   ScaleRequest, then until every burst pod runs. Besides the time from the first pod to
   the last pool's first ScaleRequest, the time from a pool's first pod marked
   unschedulable by kube-scheduler to its first ScaleRequest (the slowest pool): the
   Autoscaler plans only pods the scheduler has judged, and on 2 busy cores kube-scheduler
   takes tens of seconds to judge a thousand pods against hundreds of Nodes, so the first
   figure measures the scheduler as much as the operator. Both by the API server's clock
   (the audit log), as are the writes.

Run:  .venv/bin/python bench/scale.py [--fractions 0.1 0.3 1.0] [--quiet 60]
      [--pools 1000 --nodes-per-pool 5 --pods-per-node 10 --burst 1000] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client, config
from prometheus_client.parser import text_string_to_metric_families

from nodepool_devtools.cluster import audit, controlplane, install
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud import credentials
from nodepool_operator.controllers.resources import AUTOSCALERS, NODEPOOLS, SCALEREQUESTS
from nodepool_operator.runtime import kinds
from nodepool_operator.runtime.client import Client
from peers import cpu_seconds, follow, peak_rss_mib

NAMESPACE = "scale"
OPERATOR_USER = controlplane.IDENTITIES["operator"].user
SCHEDULER_USER = controlplane.IDENTITIES["kube-scheduler"].user
SERVING = re.compile(r"event=serving what=metrics address=\S+:(\d+) scheme=http\b")
CONCURRENCY = 48


# -- the operator process ------------------------------------------------------------------


@dataclass
class Operator:
    """The operator and simcloud processes of one size, and the operator's metrics."""

    work: Path
    kubeconfig: Path
    endpoint: str = ""
    token_file: Path = field(init=False)
    simcloud: asyncio.subprocess.Process | None = None
    process: asyncio.subprocess.Process | None = None
    metrics_url: str = ""
    starts: int = 0

    def __post_init__(self) -> None:
        self.token_file = self.work / "simcloud.token"

    async def start_cloud(self) -> None:
        port_file = self.work / "simcloud.port"
        credentials.write_new_token(self.token_file)
        self.simcloud = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "nodepool_operator.cli", "simcloud"),
            *("--state", str(self.work / "sim.sqlite3"), "--port", "0"),
            *("--port-file", str(port_file), "--token-file", str(self.token_file)),
            *("--create-latency", "0", "--latency-jitter", "0"),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        async with asyncio.timeout(30):
            while not port_file.exists() or not port_file.read_text().strip():  # noqa: ASYNC110 - a process
                await asyncio.sleep(0.05)
        self.endpoint = f"http://127.0.0.1:{port_file.read_text().strip()}"

    async def start(self) -> None:
        self.starts += 1
        log = self.work / f"operator-{self.starts}.log"
        with log.open("wb") as handle:
            self.process = await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "nodepool_operator.cli", "run"),
                *("--kubeconfig", str(self.kubeconfig)),
                *("--cloud-endpoint", self.endpoint, "--cloud-token-file", str(self.token_file)),
                *("--metrics-port", "0", "--metrics-host", "127.0.0.1", "--no-metrics-secure"),
                *("--health-port", "0", "--leader-election-namespace", "nodepool-system"),
                stdout=handle,
                stderr=handle,
            )
        async with asyncio.timeout(60):
            while not (found := SERVING.search(log.read_text(errors="replace"))):
                self.check_alive()
                await asyncio.sleep(0.1)
        self.metrics_url = f"http://127.0.0.1:{found.group(1)}/metrics"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def check_alive(self) -> None:
        if self.process is not None and self.process.returncode is not None:
            log = self.work / f"operator-{self.starts}.log"
            tail = log.read_text(errors="replace").splitlines()[-30:]
            raise SystemExit(f"operator exited ({self.process.returncode}):\n" + "\n".join(tail))

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            await self.process.wait()

    async def close(self) -> None:
        await self.stop()
        if self.simcloud is not None and self.simcloud.returncode is None:
            self.simcloud.terminate()
            await self.simcloud.wait()

    async def metrics(self) -> Metrics:
        try:
            async with aiohttp.ClientSession() as session, session.get(self.metrics_url) as got:
                return Metrics.parse(await got.text())
        except aiohttp.ClientConnectionError:
            await asyncio.sleep(0.5)
            self.check_alive()  # exited: its log's tail says why
            raise


@dataclass
class Metrics:
    """The counters and histograms a phase is judged by, summed over their label sets."""

    reconciles: Counter[str]  # by controller
    queue_buckets: Counter[float]  # workqueue_queue_duration_seconds, cumulative by le
    depth: float

    @classmethod
    def parse(cls, text: str) -> Metrics:
        reconciles: Counter[str] = Counter()
        buckets: Counter[float] = Counter()
        depth = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "controller_runtime_reconcile_total":
                    reconciles[sample.labels["controller"]] += int(sample.value)
                elif sample.name == "workqueue_queue_duration_seconds_bucket":
                    buckets[float(sample.labels["le"])] += int(sample.value)
                elif sample.name == "workqueue_depth":
                    depth += sample.value
        return cls(reconciles, buckets, depth)


def p99_between(before: Metrics, after: Metrics) -> float:
    """The 99th percentile of a histogram's observations between two scrapes (the upper
    bound of the bucket it falls in, as Prometheus' histogram_quantile would bound it)."""
    counts = {le: after.queue_buckets[le] - before.queue_buckets[le] for le in after.queue_buckets}
    total = counts.get(float("inf"), 0)
    if total == 0:
        return 0.0
    for le in sorted(counts):
        if counts[le] >= 0.99 * total:
            return le
    return float("inf")


# -- the cluster's objects -----------------------------------------------------------------


def pool_name(index: int) -> str:
    return f"pool-{index:04d}"


def pool_manifest(index: int, nodes: int) -> dict[str, Any]:
    template = nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=110)
    spec = nodepool_api.NodePoolSpec(
        target_nodes=nodes, min_nodes=0, max_nodes=2 * nodes, template=template
    )
    return nodepool_api.manifest(pool_name(index), spec)


def pod_manifest(name: str, *, cpu: str, memory: str, **placement: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name.rsplit("-", 1)[0]}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ],
            **placement,
        },
    }


async def bounded(jobs: list[Callable[[], Awaitable[Any]]], *, label: str) -> None:
    """Run ``jobs`` CONCURRENCY at a time, printing progress every 10 %."""
    limit = asyncio.Semaphore(CONCURRENCY)
    done = 0
    step = max(1, len(jobs) // 10)

    async def one(job: Callable[[], Awaitable[Any]]) -> None:
        nonlocal done
        async with limit:
            await job()
        done += 1
        if done % step == 0:
            print(f"    {label}: {done}/{len(jobs)}", file=sys.stderr, flush=True)

    await asyncio.gather(*(one(job) for job in jobs))


async def count(api: Client, resource: Any, *, namespace: str | None = None, **query: Any) -> int:
    """How many objects a LIST returns, paged, without keeping them."""
    total, token = 0, None
    while True:
        page = await api.list_page(
            resource, namespace=namespace, limit=5000, continue_token=token, **query
        )
        total += len(page["items"])
        token = page["metadata"].get("continue")
        if not token:
            return total


async def until(
    operator: Operator, check: Callable[[], Awaitable[bool]], *, what: str, within: float
) -> float:
    began = time.monotonic()
    while not await check():
        operator.check_alive()
        if time.monotonic() - began > within:
            raise SystemExit(f"timed out after {within:.0f} s waiting for {what}")
        await asyncio.sleep(1.0)
    return time.monotonic() - began


# -- one size ------------------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    seconds: float
    writes: int
    conflicts: int
    cpu: float
    reconciles_per_second: float
    queue_p99: float
    rss: float
    by_target: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    # Autoscaler name -> its status writes the server accepted in the phase (the burst's
    # bound is per pool).
    autoscaler_status_writes: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class BurstTimings:
    """A burst's milestones by the API server's clock (its audit log): watchers of a loaded
    server hear of objects seconds late, and not equally late for pods and requests."""

    to_last_first_request: float  # first pod created -> the last pool's first ScaleRequest
    to_last_first_mark: float  # first pod created -> the last pool's first pod judged
    judged_to_request_slowest: float  # the largest (pool's first request - its first mark)
    judged_to_request_median: float


def burst_timings(
    events: list[audit.AuditEvent], pool_of_pod: dict[str, str], pool_of_request: dict[str, str]
) -> BurstTimings | None:
    """The burst's milestones from the audit log: pod creates, kube-scheduler's first status
    write per pool (a pod marked unschedulable) and each pool's first ScaleRequest create.
    None when the log lacks any of them (an API server without the timestamps)."""
    created: list[float] = []
    marked: dict[str, float] = {}
    asked: dict[str, float] = {}
    for event in events:
        if not event.received or event.code >= 300:
            continue
        if event.resource == "pods" and event.name in pool_of_pod:
            pool = pool_of_pod[event.name]
            if event.verb == "create" and not event.subresource:
                created.append(event.received)
            elif event.subresource == "status" and event.user == SCHEDULER_USER:
                marked[pool] = min(marked.get(pool, event.received), event.received)
        elif event.resource == "scalerequests" and event.verb == "create":
            pool = pool_of_request.get(event.name, "")
            if pool:
                asked[pool] = min(asked.get(pool, event.received), event.received)
    if not created or not asked or not marked:
        return None
    first = min(created)
    gaps = sorted(asked[pool] - marked[pool] for pool in asked if pool in marked)
    return BurstTimings(
        to_last_first_request=max(asked.values()) - first,
        to_last_first_mark=max(marked.values()) - first,
        judged_to_request_slowest=gaps[-1] if gaps else 0.0,
        judged_to_request_median=statistics.median_high(gaps) if gaps else 0.0,
    )


@dataclass
class SizeResult:
    pools: int
    nodes: int
    pods: int
    phases: list[Phase] = field(default_factory=list)
    bytes_per_pod: float = 0.0
    peak_rss: float = 0.0
    burst_to_running: float = 0.0
    burst_timings: BurstTimings | None = None


class Measured:
    """Audit log, CPU and metrics around one phase."""

    def __init__(self, operator: Operator, log: audit.AuditLog) -> None:
        self.operator, self.log = operator, log

    async def __aenter__(self) -> Measured:
        self.log.mark()
        self.cpu = cpu_seconds(self.operator.pid)
        self.metrics = await self.operator.metrics()
        self.began = time.monotonic()
        return self

    @classmethod
    async def from_start(cls, operator: Operator, log: audit.AuditLog) -> Measured:
        """Measured from before the operator's process starts (its first phase)."""
        measured = cls(operator, log)
        log.mark()
        measured.began = time.monotonic()
        await operator.start()
        measured.cpu = 0.0
        measured.metrics = Metrics(Counter(), Counter(), 0.0)
        return measured

    async def __aexit__(self, *_: object) -> None:
        return None

    async def phase(self, name: str) -> Phase:
        seconds = time.monotonic() - self.began
        after = await self.operator.metrics()
        writes = audit.writes(self.log.events_since_mark(), user=OPERATOR_USER)
        reconciles = sum(after.reconciles.values()) - sum(self.metrics.reconciles.values())
        return Phase(
            name=name,
            seconds=seconds,
            writes=len(writes),
            conflicts=sum(1 for w in writes if w.code == 409),
            cpu=cpu_seconds(self.operator.pid) - self.cpu,
            reconciles_per_second=reconciles / seconds if seconds else 0.0,
            queue_p99=p99_between(self.metrics, after),
            rss=self.operator.rss_mib(),
            by_target=audit.summarize(writes),
            autoscaler_status_writes=Counter(
                w.name
                for w in writes
                if w.target == f"{AUTOSCALERS.plural}/status" and 200 <= w.code < 300
            ),
        )


async def restarted(operator: Operator, log: audit.AuditLog, *, pools: int, name: str) -> Phase:
    """Restart the operator; the phase ends when every pool and Autoscaler has been
    reconciled once and nothing is queued."""
    await operator.stop()
    measured = await Measured.from_start(operator, log)

    async def caught_up() -> bool:
        now = await operator.metrics()
        return (
            now.reconciles["nodepool"] >= pools
            and now.reconciles["autoscaler"] >= pools
            and now.depth == 0
        )

    await until(operator, caught_up, what=f"{name}: every object reconciled", within=1800)
    return await measured.phase(name)


async def run_size(
    work: Path, *, pools: int, nodes_per_pool: int, pods_per_node: int, burst: int, quiet: float
) -> SizeResult:
    nodes, pods = pools * nodes_per_pool, pools * nodes_per_pool * pods_per_node
    print(f"== {pools} pools, {nodes} nodes, {pods} pods", file=sys.stderr, flush=True)
    result = SizeResult(pools=pools, nodes=nodes, pods=pods)
    plane = controlplane.ControlPlane(work / "plane")
    plane.up()
    operator = Operator(work, plane.kubeconfig_for("operator"))
    try:
        configuration = client.Configuration()
        await config.load_kube_config(
            config_file=str(plane.kubeconfig), client_configuration=configuration
        )
        configuration.connection_pool_maxsize = CONCURRENCY
        async with client.ApiClient(configuration) as raw:
            api = Client(raw, field_manager="bench")
            await install.install_crds(raw)
            await install.grant_operator_rbac(raw)
            await api.create(kinds.NAMESPACES, {"metadata": {"name": NAMESPACE}})
            print("  creating pools and Autoscalers", file=sys.stderr, flush=True)
            await bounded(
                [
                    job
                    for i in range(pools)
                    for job in (
                        lambda i=i: api.create(NODEPOOLS, pool_manifest(i, nodes_per_pool)),
                        lambda i=i: api.create(
                            AUTOSCALERS,
                            autoscaler_api.manifest(
                                pool_name(i),
                                autoscaler_api.AutoscalerSpec(
                                    node_pool_name=pool_name(i), namespaces=(NAMESPACE,)
                                ),
                            ),
                        ),
                    )
                ],
                label="pools and Autoscalers",
            )
            await operator.start_cloud()
            log = audit.AuditLog(plane.audit_log)
            await provision(operator, api, log, result, nodes_per_pool=nodes_per_pool)
            empty = await restarted(operator, log, pools=pools, name="restart, no pods")
            result.phases.append(empty)
            await create_bound_pods(operator, api, log, result, pods_per_node=pods_per_node)
            full = await restarted(operator, log, pools=pools, name="restart, all pods")
            result.phases.append(full)
            result.bytes_per_pod = (full.rss - empty.rss) * 1024 * 1024 / pods
            async with Measured(operator, log) as measured:
                print(f"  quiet for {quiet:.0f} s", file=sys.stderr, flush=True)
                await asyncio.sleep(quiet)
                result.phases.append(await measured.phase("quiet"))
            await run_burst(operator, api, log, result, pools=pools, burst=burst)
            result.peak_rss = peak_rss_mib(operator.pid)
    finally:
        await operator.close()
        plane.down()
    return result


async def provision(
    operator: Operator, api: Client, log: audit.AuditLog, result: SizeResult, *, nodes_per_pool: int
) -> None:
    measured = await Measured.from_start(operator, log)

    async def all_settled() -> bool:
        settled, token = 0, None
        while True:
            page = await api.list_page(NODEPOOLS, limit=500, continue_token=token)
            settled += sum(1 for p in page["items"] if nodepool_api.is_settled(p, nodes_per_pool))
            token = page["metadata"].get("continue")
            if not token:
                break
        scalers = await api.list_page(AUTOSCALERS)
        with_status = sum(1 for s in scalers["items"] if s.get("status"))
        print(
            f"    settled pools {settled}/{result.pools}, "
            f"Autoscaler statuses {with_status}/{result.pools}",
            file=sys.stderr,
            flush=True,
        )
        return settled == result.pools and with_status == result.pools

    await until(operator, all_settled, what="every pool settled", within=3600)
    result.phases.append(await measured.phase("provision"))


async def create_bound_pods(
    operator: Operator, api: Client, log: audit.AuditLog, result: SizeResult, *, pods_per_node: int
) -> None:
    node_names = [
        node["metadata"]["name"]
        for node in (await api.list_page(kinds.NODES, label_selector=wellknown.POOL_LABEL))["items"]
    ]
    async with Measured(operator, log) as measured:
        jobs = [
            lambda name=f"{node}-app-{k}", node=node: api.create(
                kinds.PODS,
                pod_manifest(name, cpu="300m", memory="1Gi", nodeName=node),
                namespace=NAMESPACE,
            )
            for node in node_names
            for k in range(pods_per_node)
        ]
        await bounded(jobs, label="pods created")

        async def all_running() -> bool:
            running = await count(
                api, kinds.PODS, namespace=NAMESPACE, field_selector="status.phase=Running"
            )
            print(f"    running {running}/{len(jobs)}", file=sys.stderr, flush=True)
            return running >= len(jobs)

        await until(operator, all_running, what="every pod running", within=3600)
        result.phases.append(await measured.phase("pods"))


async def run_burst(
    operator: Operator,
    api: Client,
    log: audit.AuditLog,
    result: SizeResult,
    *,
    pools: int,
    burst: int,
) -> None:
    targets = [pool_name(i) for i in range(min(100, pools))]
    asked: dict[str, float] = {}
    newest: dict[str, str] = {}  # pool -> the name of its newest ScaleRequest
    running: set[str] = set()

    requested_by: dict[str, str] = {}  # ScaleRequest name -> its pool

    def on_request(kind: str, request: dict[str, Any]) -> None:
        pool = str((request.get("spec") or {}).get("nodePoolName", ""))
        if kind != "DELETED" and pool in targets:
            asked.setdefault(pool, time.monotonic())
            if kind == "ADDED":
                newest[pool] = str(request["metadata"]["name"])
                requested_by[str(request["metadata"]["name"])] = pool

    def on_pod(kind: str, pod: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        status = pod.get("status") or {}
        if status.get("phase") == "Running":
            running.add(pod["metadata"]["name"])

    watchers = [
        asyncio.create_task(follow(api, SCALEREQUESTS, on_event=on_request)),
        asyncio.create_task(follow(api, kinds.PODS, on_event=on_pod, namespace=NAMESPACE)),
    ]
    await asyncio.sleep(1.0)  # the watches are open
    names = [f"burst-{i:05d}" for i in range(burst)]
    try:
        async with Measured(operator, log) as measured:
            began = time.monotonic()
            await bounded(
                [
                    lambda name=name, i=i: api.create(
                        kinds.PODS,
                        pod_manifest(
                            name,
                            cpu="1500m",
                            memory="2Gi",
                            nodeSelector={wellknown.POOL_LABEL: targets[i % len(targets)]},
                        ),
                        namespace=NAMESPACE,
                    )
                    for i, name in enumerate(names)
                ],
                label="burst pods created",
            )

            async def requested() -> bool:
                return len(asked) == len(targets)

            await until(operator, requested, what="a ScaleRequest per burst pool", within=1800)
            pool_of_pod = {name: targets[i % len(targets)] for i, name in enumerate(names)}
            result.burst_timings = burst_timings(log.events_since_mark(), pool_of_pod, requested_by)
            if result.burst_timings is None:
                raise RuntimeError(
                    "the audit log has no pod create, kube-scheduler mark or ScaleRequest "
                    "create of the burst: its milestones cannot be timed"
                )

            async def burst_running() -> bool:
                print(f"    burst running {len(running & set(names))}/{burst}", file=sys.stderr)
                return running >= set(names)

            await until(operator, burst_running, what="every burst pod running", within=3600)
            result.burst_to_running = time.monotonic() - began
            await _statuses_caught_up(api, newest)
            result.phases.append(await measured.phase("burst"))
    finally:
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)


async def _statuses_caught_up(api: Client, newest: dict[str, str], within: float = 180.0) -> None:
    """Wait (at most ``within``) until each burst pool's Autoscaler status shows its newest
    ScaleRequest and no pending pod: the burst's status writes include the ones made once
    it settled, and the final statuses are checked. Says how long that took, on stderr."""
    began = time.monotonic()
    behind: list[str] = list(newest)
    while behind and time.monotonic() - began < within:
        await asyncio.sleep(1.0)
        scalers = {a["metadata"]["name"]: a for a in (await api.list_page(AUTOSCALERS))["items"]}
        behind = []
        for pool, request in newest.items():
            status = (scalers.get(pool) or {}).get("status") or {}
            shown = (status.get("lastRequest") or {}).get("name")
            if shown != request or status.get("pendingPods") != 0:
                behind.append(pool)
    took = time.monotonic() - began
    print(
        f"  burst: Autoscaler statuses caught up {took:.1f} s after the last pod ran; "
        f"{len(behind)} of {len(newest)} still behind: {behind[:5]}",
        file=sys.stderr,
        flush=True,
    )


# -- the report ----------------------------------------------------------------------------


def report(results: list[SizeResult]) -> str:
    lines = [
        "| size | phase | seconds | operator writes | 409s | CPU s | reconciles/s | "
        "queue wait p99 (bucket bound) | RSS MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        size = f"{r.pools} pools / {r.nodes} nodes / {r.pods} pods"
        for p in r.phases:
            lines.append(
                f"| {size} | {p.name} | {p.seconds:.1f} | {p.writes} | {p.conflicts} | "
                f"{p.cpu:.1f} | {p.reconciles_per_second:.1f} | {p.queue_p99:g} s | "
                f"{p.rss:.0f} |"
            )
    lines += [
        "",
        "| size | bytes per cached pod | peak RSS MiB | burst: pods to ScaleRequests | "
        "burst: unschedulable to ScaleRequest (slowest pool) | burst: pods to Running |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        t = r.burst_timings
        to_request = "-" if t is None else f"{t.to_last_first_request:.1f} s"
        slowest = "-" if t is None else f"{t.judged_to_request_slowest:.1f} s"
        lines.append(
            f"| {r.pools} pools / {r.nodes} nodes / {r.pods} pods | {r.bytes_per_pod:.0f} | "
            f"{r.peak_rss:.0f} | {to_request} | {slowest} | {r.burst_to_running:.1f} s |"
        )
    for r in results:
        if r.burst_timings is not None:
            t = r.burst_timings
            lines.append(
                f"\n{r.pools} pools, burst by the API server's clock: the last pool's first "
                f"ScaleRequest {t.to_last_first_request:.1f} s after the first pod; "
                f"kube-scheduler judged the last pool's first pod at {t.to_last_first_mark:.1f} s; "
                f"a pool's first judged pod to its first ScaleRequest: median "
                f"{t.judged_to_request_median:.1f} s, slowest {t.judged_to_request_slowest:.1f} s"
            )
    for r in results:
        for p in r.phases:
            if p.by_target:
                counted = ", ".join(
                    f"{verb} {target} {code}: {n}"
                    for (verb, target, code), n in sorted(p.by_target.items())
                )
                lines.append(f"\n{r.pools} pools, {p.name}: {counted}")
    for r in results:
        for p in r.phases:
            if p.name == "burst":
                lines.append(f"\n{r.pools} pools, burst: {_status_writes_line(p, r.pools)}")
    return "\n".join(lines)


def _status_writes_line(phase: Phase, pools: int) -> str:
    """The burst's Autoscaler status writes, on the burst pools' Autoscalers and the others."""
    targets = {pool_name(i) for i in range(min(100, pools))}
    on_burst = {n: phase.autoscaler_status_writes.get(n, 0) for n in targets}
    others = {n: c for n, c in phase.autoscaler_status_writes.items() if n not in targets}
    spread = sorted(Counter(on_burst.values()).items())
    return (
        f"Autoscaler status writes {sum(on_burst.values())} on the {len(targets)} burst pools' "
        f"Autoscalers (writes: Autoscalers {spread}), {sum(others.values())} on "
        f"{len(others)} others"
    )


async def main(arguments: argparse.Namespace) -> None:
    results: list[SizeResult] = []
    for fraction in arguments.fractions:
        pools = max(1, round(arguments.pools * fraction))
        # Kept when a size fails: the operator's logs and the audit log say why.
        work = Path(tempfile.mkdtemp(prefix="scale-"))
        try:
            results.append(
                await run_size(
                    work,
                    pools=pools,
                    nodes_per_pool=arguments.nodes_per_pool,
                    pods_per_node=arguments.pods_per_node,
                    burst=min(arguments.burst, 10 * min(100, pools)),
                    quiet=arguments.quiet,
                )
            )
        except BaseException:
            print(f"logs kept in {work}", file=sys.stderr, flush=True)
            raise
        if arguments.keep:
            print(f"logs kept in {work}", file=sys.stderr, flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)
        print(report(results), file=sys.stderr, flush=True)
    print(f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}")
    print(report(results))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.1, 0.3, 1.0])
    parser.add_argument("--pools", type=int, default=1000)
    parser.add_argument("--nodes-per-pool", type=int, default=5)
    parser.add_argument("--pods-per-node", type=int, default=10)
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument("--quiet", type=float, default=60.0, help="seconds of the quiet phase")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep each size's work directory (operator logs, the audit log) after it passes",
    )
    return parser


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(_parser().parse_args()))
