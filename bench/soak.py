"""An hour of a living cluster: the operator as shipped under a workload that keeps changing.

One fresh local control plane (etcd, kube-apiserver with its audit log, kube-scheduler,
kube-controller-manager, kwok), one simcloud answering a small fraction of its calls with
a 5xx (``--fault-rate``), two operator replicas (``nodepool-operator run --leader-elect``,
as shipped, under its deployed ClusterRole) and ``--pools`` NodePools (4 cpu / 16Gi Nodes,
1 to ``--max-nodes``) each with an Autoscaler for its own namespace (scan 5 s, scale-down
after 60 s unneeded). The run is cut in cycles of ten minutes (one cycle, compressed, when
``--minutes`` is under ten); each cycle, with choices drawn from ``--seed``:

* a burst: every pool's Deployment scaled from 2 replicas to 6..22 (900m / 3Gi, four per
  Node; past 20 the pool is at its maximum and the rest waits, as it should); three
  minutes later back to 2, which the Autoscaler's consolidation gives back;
* a Job (2..4 pods) that comes and ends: kwok never completes a pod, so each Job ends by
  its ``activeDeadlineSeconds`` and the TTL controller removes it;
* a NodePool's template edited (a label) with a user's label on the pool (it must
  survive), a StatefulSet (3 replicas) rolled by a pod-template edit;
* a node failing: its VM deleted in the cloud, or (the next cycle) its heartbeat stopped:
  the Node taken out of kwok's hands and its Ready condition set False, as a kubelet cut
  off would leave it (the pool's ``notReadyTimeoutSeconds`` is 30);
* in the first three cycles, one operator event each: the follower restarted (SIGTERM,
  started again), the leader killed (SIGKILL: the follower takes over when the Lease
  expires; the killed one is started again as the new follower), the new leader
  restarted (SIGTERM: it releases the Lease);
* then nothing until the cycle ends: the quiet stretch.

Checked every ``--check-every`` seconds, each violation printed with its time and object
(the run exits 1 on any): no pod Pending longer than ``--pending-bound`` s while its pool
has fewer Nodes than ``maxNodes``; no VM without its Node, no Node without its VM and no
more live VMs than ``targetNodes``, each for longer than ``--mismatch-bound`` s; no
``nodepool.dev/unregistered`` taint on a Node Ready for more than 60 s, no
``nodepool.dev/consolidating`` taint held longer than 300 s; every ScaleRequest answered
within 120 s of its creation; the user's label and template edits on each pool still there;
no operator process exiting but the ones the bench stopped. At the end, as the chaos
suite does: every pool settled on its ``targetNodes`` with its VMs and Nodes equal,
``observedGeneration`` current, no VM of a pool the bench did not make.

Every minute a row: the leader's RSS and CPU seconds (``/proc``), its work queues' depth
and adds (``workqueue_depth``, ``workqueue_adds_total`` from its ``/metrics``), the objects
each of its informers holds (``nodepool_operator_informer_objects``) beside the number of
the same objects in the API server (the whole resource, listed by the bench: every Node,
every Pod of every namespace, every NodePool, ScaleRequest, ...), the operator's API
writes by verb and resource and its 409s (the API server's audit log; Lease renewals
counted apart; in a quiet minute each write is listed with its object and user agent),
pods Pending, Nodes, VMs, cloud calls (simcloud's ``/v1`` counter less the bench's own),
and the machine's load average (the cores are shared). At the end a Markdown table, a PNG
and the judgements of issue 52: among them, for each burst, whether at the first quiet
minute after its calm every informer's count equals the API server's count of its
resource (read again up to ``CACHE_RECHECKS`` times, 5 s apart, when a watch event is
still on its way).

Run:  .venv/bin/python bench/soak.py [--minutes 60] [--seed 1] [--pools 3]
          [--results bench/results] [--name soak] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
# The chaos suite's fleet (cloud, replicas, leader) and harness are reused, not copied;
# bench/ itself for ``peers`` when this file is loaded as a module (the unit tests).
sys.path.insert(0, str(BENCH.parent / "tests"))
sys.path.insert(0, str(BENCH))

import aiohttp  # noqa: E402
from kubernetes_asyncio import client, config  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from chaos import fleet as chaos_fleet  # noqa: E402
from harness import MERGE, POOLS  # noqa: E402
from nodepool_devtools.cluster import audit, controlplane, install  # noqa: E402
from nodepool_devtools.cluster.pytest_plugin import Cluster  # noqa: E402
from nodepool_operator.api import autoscaler as autoscaler_api  # noqa: E402
from nodepool_operator.api import nodepool as nodepool_api  # noqa: E402
from nodepool_operator.api import scalerequest as scalerequest_api  # noqa: E402
from nodepool_operator.api import wellknown  # noqa: E402
from nodepool_operator.cloud import provider  # noqa: E402
from peers import cpu_seconds  # noqa: E402

RESULTS = BENCH / "results"
OPERATOR_USER = controlplane.IDENTITIES["operator"].user
POOL_NAMES = ("soak-a", "soak-b", "soak-c", "soak-d")
CYCLE = 600.0  # seconds of one cycle at full length
BASE_REPLICAS = 2
#: The label the bench sets on a pool's template (drift, once the operator has it, would
#: replace the Nodes built from the older template; today new Nodes only get the new label).
TEMPLATE_LABEL = "soak.nodepool.dev/revision"
USER_LABEL = chaos_fleet.USER_LABEL
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
IDENTITY_LOGGED = re.compile(r"identity=(\S+) event=candidate")
UNREGISTERED_READY_BOUND = 60.0
CONSOLIDATING_BOUND = 300.0
REQUEST_ANSWER_BOUND = 120.0
#: The API group and version of each resource the operator informs on outside the core
#: group, for the bench's count of the same objects (core ones: ``count_resources``).
GROUPS = {
    "daemonsets": ("apps", "v1"),
    "storageclasses": ("storage.k8s.io", "v1"),
    "poddisruptionbudgets": ("policy", "v1"),
    nodepool_api.PLURAL: (nodepool_api.GROUP, nodepool_api.VERSION),
    autoscaler_api.PLURAL: (autoscaler_api.GROUP, autoscaler_api.VERSION),
    scalerequest_api.PLURAL: (scalerequest_api.GROUP, scalerequest_api.VERSION),
}
CACHE_RECHECKS = 3  # more reads of cache and world, 5 s apart, before a difference counts
CACHE_RECHECK_SECONDS = 5.0
INFORMER_OBJECTS = "nodepool_operator_informer_objects"


def now() -> float:
    return time.time()


def stamp(seconds: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(seconds))


def parse_time(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


# -- the schedule --------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    """One change the bench makes, ``at`` seconds after the workload starts."""

    at: float
    kind: str  # burst, calm, job, template, roll, vm-delete, heartbeat, restart-follower,
    # kill-leader, restart-leader
    pool: str = ""
    value: int = 0

    def describe(self) -> str:
        what = f"{self.kind} {self.pool}".strip()
        return f"{what}={self.value}" if self.value else what


def schedule(*, minutes: float, pools: tuple[str, ...], seed: int) -> list[Action]:
    """The seeded workload: whole cycles of ``CYCLE`` s, or one compressed cycle."""
    rng = random.Random(seed)
    total = minutes * 60
    cycles = max(1, int(total // CYCLE))
    scale = min(1.0, total / CYCLE)
    actions: list[Action] = []
    for k in range(cycles):
        start = k * CYCLE

        def at(offset: float, start: float = start) -> float:
            return start + offset * scale + rng.uniform(0, 5) * scale

        actions += [Action(at(0), "burst", pool, rng.randint(6, 22)) for pool in pools]
        actions.append(Action(at(20), "job", rng.choice(pools), rng.randint(2, 4)))
        actions.append(Action(at(60), "template", rng.choice(pools), k + 1))
        actions.append(Action(at(90), "vm-delete", rng.choice(pools)))
        actions.append(Action(at(140), "heartbeat", rng.choice(pools)))
        actions.append(Action(at(120), "roll", pools[0], k + 1))
        actions += [Action(at(200), "calm", pool, BASE_REPLICAS) for pool in pools]
    operator_events = ("restart-follower", "kill-leader", "restart-leader")
    if cycles >= len(operator_events):
        times = [k * CYCLE + 150 for k in range(len(operator_events))]
    else:  # short runs: all three inside the one cycle's busy part
        times = [total * f for f in (0.12, 0.25, 0.37)]
    actions += [Action(t, kind) for t, kind in zip(times, operator_events, strict=True)]
    return sorted(actions, key=lambda a: a.at)


# -- the cluster's objects -----------------------------------------------------------------


def pod_template(pool: str, app: str, *, cpu: str, memory: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {wellknown.POOL_LABEL: pool},
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ],
        },
    }


def deployment(pool: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": BASE_REPLICAS,
            "selector": {"matchLabels": {"app": "web"}},
            "template": pod_template(pool, "web", cpu="900m", memory="3Gi"),
        },
    }


def statefulset(pool: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db"},
        "spec": {
            "replicas": 3,
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": pod_template(pool, "db", cpu="500m", memory="1Gi"),
        },
    }


def job(pool: str, name: str, pods: int, deadline: int) -> dict[str, Any]:
    template = pod_template(pool, "batch", cpu="500m", memory="1Gi")
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline,
            "ttlSecondsAfterFinished": 15,
            "template": template,
        },
    }


def pool_manifest(name: str, max_nodes: int) -> dict[str, Any]:
    spec = nodepool_api.NodePoolSpec(
        target_nodes=1,
        min_nodes=1,
        max_nodes=max_nodes,
        not_ready_timeout_seconds=30,
        template=nodepool_api.NodeTemplate(
            cpu="4", memory="16Gi", pods=110, labels={TEMPLATE_LABEL: "0"}
        ),
    )
    return nodepool_api.manifest(name, spec)


def autoscaler_manifest(pool: str) -> dict[str, Any]:
    spec = autoscaler_api.AutoscalerSpec(
        node_pool_name=pool,
        namespaces=(pool,),
        scan_interval_seconds=5,
        scale_down=autoscaler_api.ScaleDownPolicy(enabled=True, unneeded_seconds=60),
    )
    return autoscaler_api.manifest(pool, spec)


# -- the operator replicas -----------------------------------------------------------------


@dataclass
class Replica:
    """One operator process, with what the bench knows of it."""

    process: chaos_fleet.Operator
    index: int
    metrics_url: str = ""
    identity: str = ""
    stopped_by_bench: bool = False
    exit_reported: bool = False

    @property
    def pid(self) -> int:
        assert self.process.popen is not None
        return self.process.popen.pid

    def rss_mib(self) -> float:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def cpu(self) -> float:
        try:
            return cpu_seconds(self.pid)
        except OSError:
            return float("nan")


@dataclass
class Scrape:
    depth: float = 0.0
    adds: float = 0.0
    # resource -> objects held by the informer of the whole resource
    informers: dict[str, float] = field(default_factory=dict)


async def scrape(url: str) -> Scrape | None:
    try:
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as got:
            text = await got.text()
    except (aiohttp.ClientError, TimeoutError):
        return None
    found = Scrape()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "workqueue_depth":
                found.depth += sample.value
            elif sample.name == "workqueue_adds_total":
                found.adds += sample.value
            elif sample.name == INFORMER_OBJECTS and not sample.labels.get("selector"):
                found.informers[sample.labels["resource"]] = sample.value
    return found


# -- the figures -----------------------------------------------------------------------------


@dataclass
class Row:
    minute: int
    actions: list[str]
    leader: int  # the replica's index, 0 when none
    rss: float
    follower_rss: float
    cpu: float  # the leader's CPU seconds in the minute
    depth: float
    adds: float
    writes: int  # the operator's, Lease renewals excepted
    lease_writes: int
    conflicts: int
    by_target: Counter[str]
    pending: int
    pods: int
    nodes: int
    vms: int
    cloud_calls: int
    settled: bool
    quiet: bool = False
    load: float = float("nan")  # the machine's 1-minute load average at the sample
    cached: dict[str, float] = field(default_factory=dict)  # the leader's informers
    world: dict[str, int] = field(default_factory=dict)  # the API server's counts
    cache_waited: float | None = 0.0  # s until cached == world; None: not equal by then
    write_lines: list[str] = field(default_factory=list)  # the minute's writes, each

    def cache_differences(self) -> list[str]:
        return [
            f"{resource} {self.cached[resource]:g} cached, {self.world[resource]} in the server"
            for resource in sorted(self.cached)
            if resource in self.world and self.cached[resource] != self.world[resource]
        ]


@dataclass
class Violation:
    at: float
    subject: str
    text: str

    def line(self, began: float) -> str:
        return f"[{stamp(self.at)} +{self.at - began:.0f}s] {self.subject}: {self.text}"


# -- the run ---------------------------------------------------------------------------------


class Soak:
    def __init__(self, arguments: argparse.Namespace, work: Path) -> None:
        self.arguments = arguments
        self.work = work
        self.pools = POOL_NAMES[: arguments.pools]
        self.plane = controlplane.ControlPlane(work / "plane")
        self.replicas: list[Replica] = []
        self.rows: list[Row] = []
        self.violations: list[Violation] = []
        self._reported: set[str] = set()
        self.began = 0.0
        self.actions_done: list[tuple[float, Action]] = []
        self.user_labels: dict[str, str] = {}
        self.template_labels: dict[str, str] = dict.fromkeys(self.pools, "0")
        self.bench_cloud_calls = 0
        # What the checker has seen and since when (its own observations: it judges the
        # operator's timers, it keeps none of them).
        self._first_seen: dict[str, float] = {}
        self.stopped_nodes: set[str] = set()
        self.errors_logged = 0
        self.end_state: list[str] = []
        self.commit = ""

    # -- plumbing ---------------------------------------------------------------------------

    def violation(self, key: str, subject: str, text: str) -> None:
        if key in self._reported:
            return
        self._reported.add(key)
        found = Violation(now(), subject, text)
        self.violations.append(found)
        print(f"VIOLATION {found.line(self.began)}", file=sys.stderr, flush=True)

    def say(self, text: str) -> None:
        print(f"[{stamp(now())} +{now() - self.began:.0f}s] {text}", file=sys.stderr, flush=True)

    def held(self, key: str, present: bool, at: float) -> float:
        """How long the checker has seen ``key`` hold (0 when it does not hold now)."""
        if not present:
            self._first_seen.pop(key, None)
            return 0.0
        return at - self._first_seen.setdefault(key, at)

    def held_set(self, prefix: str, present: set[str], at: float) -> dict[str, float]:
        """``held`` for each member of ``present`` under ``prefix``; the members seen before
        and absent now are forgotten."""
        for key in [k for k in self._first_seen if k.startswith(f"{prefix}/")]:
            if key.removeprefix(f"{prefix}/") not in present:
                del self._first_seen[key]
        return {item: self.held(f"{prefix}/{item}", True, at) for item in sorted(present)}

    async def cloud(self, call: Callable[[], Awaitable[Any]]) -> Any:
        """A bench call to the cloud: the cloud's injected 5xx are retried, and counted."""
        for attempt in range(10):
            self.bench_cloud_calls += 1
            try:
                return await call()
            except provider.TransientCloudError:
                if attempt == 9:
                    raise
                await asyncio.sleep(0.5)
        return None

    # -- setup ------------------------------------------------------------------------------

    async def run(self) -> int:
        self.plane.up()
        configuration = client.Configuration()
        await config.load_kube_config(
            config_file=str(self.plane.kubeconfig), client_configuration=configuration
        )
        async with client.ApiClient(configuration) as api:
            self.core = client.CoreV1Api(api)
            self.apps = client.AppsV1Api(api)
            self.batch = client.BatchV1Api(api)
            self.custom = client.CustomObjectsApi(api)
            self.coordination = client.CoordinationV1Api(api)
            self.fleet = chaos_fleet.Fleet(
                cluster=Cluster(kubeconfig=self.plane.kubeconfig, plane=self.plane),
                api=api,
                directory=self.work,
            )
            try:
                await self.setup()
                await self.drive()
                await self.finish()
            finally:
                for replica in self.replicas:
                    replica.stopped_by_bench = True
                if self.fleet.cloud is not None and self.fleet.cloud.client is not None:
                    await self.fleet.cloud.client.close()
                self.fleet.stop_all()
        return 1 if self.violations else 0

    async def setup(self) -> None:
        await install.install_crds(self.core.api_client)
        await install.grant_operator_rbac(self.core.api_client)
        faults = ["--transient-error-rate", str(self.arguments.fault_rate)]
        await self.fleet.start_cloud(*faults, "--seed", str(self.arguments.seed))
        for pool in self.pools:
            await self.core.create_namespace({"metadata": {"name": pool}})
            await self.custom.create_cluster_custom_object(
                *POOLS, pool_manifest(pool, self.arguments.max_nodes)
            )
            await self.custom.create_cluster_custom_object(
                autoscaler_api.GROUP,
                autoscaler_api.VERSION,
                autoscaler_api.PLURAL,
                autoscaler_manifest(pool),
            )
            await self.apps.create_namespaced_deployment(pool, deployment(pool))
        await self.apps.create_namespaced_stateful_set(self.pools[0], statefulset(self.pools[0]))
        for _ in range(2):
            await self.start_replica()
        self.audit = audit.AuditLog(self.plane.audit_log)
        self.audit.mark()

    async def start_replica(self) -> Replica:
        process = self.fleet.start_operator("--leader-elect", "--no-metrics-secure")
        replica = Replica(process, index=len(self.replicas) + 1)
        self.replicas.append(replica)
        await self.fleet.started(process, marker="event=candidate")
        replica.metrics_url = f"{await process.served('metrics')}/metrics"
        found = IDENTITY_LOGGED.search(process.output())
        replica.identity = found.group(1) if found else ""
        return replica

    def live_replicas(self) -> list[Replica]:
        return [r for r in self.replicas if r.process.running]

    async def leader(self) -> Replica | None:
        try:
            lease = await self.coordination.read_namespaced_lease(
                chaos_fleet.LEASE, "nodepool-system"
            )
        except client.exceptions.ApiException:
            return None
        holder = lease.spec.holder_identity
        for replica in self.live_replicas():
            if holder and replica.identity == holder:
                return replica
        return None

    async def leader_within(self, within: float) -> Replica:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            found = await self.leader()
            if found is not None:
                return found
            await asyncio.sleep(0.5)
        raise RuntimeError(f"no replica holds the Lease after {within:.0f} s")

    # -- the workload -------------------------------------------------------------------------

    async def drive(self) -> None:
        await self.leader_within(120)
        self.began = now()
        plan = schedule(minutes=self.arguments.minutes, pools=self.pools, seed=self.arguments.seed)
        self.say(f"workload: {len(plan)} actions over {self.arguments.minutes:g} min")
        ends = self.began + self.arguments.minutes * 60
        tasks = [
            asyncio.create_task(self.act_on(plan)),
            asyncio.create_task(self.check_loop(ends)),
            asyncio.create_task(self.sample_loop(ends)),
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def act_on(self, plan: list[Action]) -> None:
        rng = random.Random(self.arguments.seed + 1)
        for action in plan:
            delay = self.began + action.at - now()
            if delay > 0:
                await asyncio.sleep(delay)
            self.say(f"action {action.describe()}")
            try:
                await self.act(action, rng)
            except client.exceptions.ApiException as error:
                # The bench's own write refused: said, not counted against the operator.
                self.say(f"action {action.describe()} refused: {error.status} {error.reason}")
            except provider.CloudError as error:
                # A delete whose first answer was a 500 after effect: the VM is gone anyway.
                self.say(f"action {action.describe()}: the cloud answered {error}")
            self.actions_done.append((now(), action))

    async def act(self, action: Action, rng: random.Random) -> None:
        pool = action.pool
        if action.kind in ("burst", "calm"):
            await self.apps.patch_namespaced_deployment_scale(
                "web", pool, {"spec": {"replicas": action.value}}, _content_type=MERGE
            )
        elif action.kind == "job":
            deadline = max(45, round(90 * min(1.0, self.arguments.minutes * 60 / CYCLE)))
            name = f"batch-{int(action.at)}"
            await self.batch.create_namespaced_job(pool, job(pool, name, action.value, deadline))
        elif action.kind == "template":
            value = str(action.value)
            patch = {
                "metadata": {"labels": {USER_LABEL: value}},
                "spec": {"template": {"labels": {TEMPLATE_LABEL: value}}},
            }
            await self.custom.patch_cluster_custom_object(*POOLS, pool, patch, _content_type=MERGE)
            self.user_labels[pool] = value
            self.template_labels[pool] = value
        elif action.kind == "roll":
            patch = {
                "spec": {"template": {"metadata": {"annotations": {"rev": str(action.value)}}}}
            }
            await self.apps.patch_namespaced_stateful_set("db", pool, patch, _content_type=MERGE)
        elif action.kind in ("vm-delete", "heartbeat"):
            await self.fail_node(action, rng)
        else:
            await self.operator_event(action.kind)

    async def fail_node(self, action: Action, rng: random.Random) -> None:
        nodes = await self.core.list_node(label_selector=f"{wellknown.POOL_LABEL}={action.pool}")
        candidates = sorted(
            n.metadata.name
            for n in nodes.items
            if n.metadata.deletion_timestamp is None and n.metadata.name not in self.stopped_nodes
        )
        if not candidates:
            self.say(f"{action.kind}: {action.pool} has no Node to fail")
            return
        victim = rng.choice(candidates)
        if action.kind == "vm-delete":
            await self.cloud(lambda: self.fleet.cloud_client.delete_vm(provider.VmName(victim)))
            self.say(f"VM {victim} deleted in the cloud")
            return
        self.stopped_nodes.add(victim)
        await self.core.patch_node(
            victim, {"metadata": {"annotations": {KWOK_ANNOTATION: None}}}, _content_type=MERGE
        )
        moment = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {
            "type": "Ready",
            "status": "False",
            "reason": "NodeStatusUnknown",
            "message": "soak: the kubelet stopped posting node status",
            "lastHeartbeatTime": moment,
            "lastTransitionTime": moment,
        }
        await self.core.patch_node_status(victim, {"status": {"conditions": [condition]}})
        self.say(f"Node {victim}: heartbeat stopped")

    async def operator_event(self, kind: str) -> None:
        leader = await self.leader_within(120)
        if kind == "restart-follower":
            followers = [r for r in self.live_replicas() if r is not leader]
            target = followers[0]
            await self.stop_replica(target, kill=False)
        elif kind == "kill-leader":
            await self.stop_replica(leader, kill=True)
            self.fleet.crashes += 1
        else:
            await self.stop_replica(leader, kill=False)
        await self.start_replica()
        self.say(f"{kind}: done; leader now replica {(await self.leader_within(120)).index}")

    async def stop_replica(self, replica: Replica, *, kill: bool) -> None:
        replica.stopped_by_bench = True
        if kill:
            replica.process.kill()
        else:
            await asyncio.to_thread(replica.process.stop, 30)
        self.say(f"replica {replica.index} {'killed' if kill else 'stopped'}")

    # -- the checks -----------------------------------------------------------------------------

    async def check_loop(self, ends: float) -> None:
        while now() < ends:
            try:
                await self.check()
            except (client.exceptions.ApiException, aiohttp.ClientError) as error:
                # The bench's own read failed: the next pass looks again.
                self.say(f"check skipped: {error}")
            await asyncio.sleep(self.arguments.check_every)

    async def check(self) -> None:
        at = now()
        for replica in self.replicas:
            crashed = not replica.process.running and not replica.stopped_by_bench
            if crashed and not replica.exit_reported:
                replica.exit_reported = True
                code = replica.process.popen.returncode if replica.process.popen else None
                tail = "\n".join(replica.process.output().splitlines()[-15:])
                self.violation(
                    f"exit-{replica.index}",
                    f"operator replica {replica.index}",
                    f"exited on its own (code {code}):\n{tail}",
                )
        pools = {
            p["metadata"]["name"]: p
            for p in (await self.custom.list_cluster_custom_object(*POOLS))["items"]
        }
        nodes = (await self.core.list_node()).items
        for name in self.pools:
            await self.check_pool(name, pools.get(name), nodes, at)
        self.check_nodes(nodes, at)
        await self.check_pods(pools, nodes, at)
        await self.check_requests(at)

    async def check_pool(
        self, name: str, pool: dict[str, Any] | None, nodes: list[Any], at: float
    ) -> None:
        if pool is None:
            self.violation(f"gone-{name}", f"NodePool {name}", "gone")
            return
        labels = pool["metadata"].get("labels") or {}
        if name in self.user_labels and labels.get(USER_LABEL) != self.user_labels[name]:
            self.violation(
                f"label-{name}-{self.user_labels[name]}",
                f"NodePool {name}",
                f"user's label {USER_LABEL}={self.user_labels[name]} lost "
                f"({labels.get(USER_LABEL)})",
            )
        template = (pool["spec"].get("template") or {}).get("labels") or {}
        if template.get(TEMPLATE_LABEL) != self.template_labels[name]:
            self.violation(
                f"template-{name}-{self.template_labels[name]}",
                f"NodePool {name}",
                f"user's template label {TEMPLATE_LABEL}={self.template_labels[name]} lost",
            )
        vms = await self.cloud(lambda: self.fleet.cloud_client.list_vms(pool=name))
        own = {
            n.metadata.name
            for n in nodes
            if (n.metadata.labels or {}).get(wellknown.POOL_LABEL) == name
            and n.metadata.deletion_timestamp is None
        }
        live = {vm.name for vm in vms if vm.state != provider.VmState.DELETING}
        bound = self.arguments.mismatch_bound
        listed = {vm.name for vm in vms}
        for vm, held in self.held_set(f"vm-without-node/{name}", live - own, at).items():
            if held > bound:
                self.violation(f"orphan-{vm}", f"VM {vm}", f"no Node for {bound:.0f} s")
        for node, held in self.held_set(f"node-without-vm/{name}", own - listed, at).items():
            if held > bound:
                self.violation(f"nodeless-{node}", f"Node {node}", f"no VM for {bound:.0f} s")
        target = int(pool["spec"].get("targetNodes", 0))
        excess = len(live) > target
        if self.held(f"excess/{name}", excess, at) > bound:
            self.violation(
                f"excess-{name}-{len(live)}-{target}",
                f"NodePool {name}",
                f"{len(live)} live VMs above targetNodes {target} for {bound:.0f} s",
            )

    def check_nodes(self, nodes: list[Any], at: float) -> None:
        for node in nodes:
            name = node.metadata.name
            taints = {t.key for t in (node.spec.taints or [])}
            ready_since = None
            for condition in (node.status.conditions if node.status else None) or []:
                if condition.type == "Ready" and condition.status == "True":
                    ready_since = condition.last_transition_time.timestamp()
            unregistered = wellknown.UNREGISTERED_TAINT_KEY in taints
            ready_for = at - ready_since if ready_since is not None else 0.0
            if unregistered and ready_for > UNREGISTERED_READY_BOUND:
                self.violation(
                    f"unregistered-{node.metadata.uid}",
                    f"Node {name}",
                    f"{wellknown.UNREGISTERED_TAINT_KEY} still on a Node Ready for "
                    f"{ready_for:.0f} s",
                )
            consolidating = wellknown.CONSOLIDATING_TAINT_KEY in taints
            held = self.held(f"consolidating/{node.metadata.uid}", consolidating, at)
            if held > CONSOLIDATING_BOUND:
                self.violation(
                    f"consolidating-{node.metadata.uid}",
                    f"Node {name}",
                    f"{wellknown.CONSOLIDATING_TAINT_KEY} held over {CONSOLIDATING_BOUND:.0f} s",
                )

    async def check_pods(
        self, pools: dict[str, dict[str, Any]], nodes: list[Any], at: float
    ) -> None:
        count = Counter(
            (n.metadata.labels or {}).get(wellknown.POOL_LABEL)
            for n in nodes
            if n.metadata.deletion_timestamp is None
        )
        for name in self.pools:
            pods = (await self.core.list_namespaced_pod(name)).items
            pool = pools.get(name) or {"spec": {}}
            room = count[name] < int(pool["spec"].get("maxNodes", 0))
            for pod in pods:
                if pod.spec.node_name or pod.metadata.deletion_timestamp is not None:
                    continue
                waited = at - pod.metadata.creation_timestamp.timestamp()
                if room and waited > self.arguments.pending_bound:
                    self.violation(
                        f"pending-{pod.metadata.uid}",
                        f"Pod {name}/{pod.metadata.name}",
                        f"Pending {waited:.0f} s while {name} has {count[name]} of "
                        f"{pool['spec'].get('maxNodes')} Nodes",
                    )

    async def check_requests(self, at: float) -> None:
        found = await self.custom.list_cluster_custom_object(
            autoscaler_api.GROUP, autoscaler_api.VERSION, "scalerequests"
        )
        for request in found["items"]:
            phase = (request.get("status") or {}).get("phase") or "Pending"
            created = parse_time(request["metadata"].get("creationTimestamp")) or at
            if phase == "Pending" and at - created > REQUEST_ANSWER_BOUND:
                name = request["metadata"]["name"]
                self.violation(
                    f"request-{request['metadata']['uid']}",
                    f"ScaleRequest {name}",
                    f"unanswered {at - created:.0f} s after its creation",
                )

    # -- the figures ----------------------------------------------------------------------------

    async def sample_loop(self, ends: float) -> None:
        minute = 0
        previous_cpu: dict[int, float] = {}
        previous_adds: dict[int, float] = {}
        calls_before = (await self.fleet.cloud_client.stats()).calls_total
        bench_before = self.bench_cloud_calls
        while now() < ends:
            minute += 1
            await asyncio.sleep(max(0.0, self.began + minute * 60 - now()))
            leader = await self.leader()
            events = [e for e in self.audit.follow() if e.user == OPERATOR_USER and e.is_write]
            leases = [e for e in events if e.resource == "leases"]
            others = [e for e in events if e.resource != "leases"]
            stats = await self.fleet.cloud_client.stats()
            calls = stats.calls_total - calls_before - (self.bench_cloud_calls - bench_before)
            calls_before, bench_before = stats.calls_total, self.bench_cloud_calls
            scraped = await scrape(leader.metrics_url) if leader else None
            load = os.getloadavg()[0]
            cpu = leader.cpu() if leader else float("nan")
            adds = scraped.adds if scraped else float("nan")
            row = Row(
                minute=minute,
                actions=[
                    a.describe()
                    for t, a in self.actions_done
                    if self.began + (minute - 1) * 60 <= t < self.began + minute * 60
                ],
                leader=leader.index if leader else 0,
                rss=leader.rss_mib() if leader else float("nan"),
                follower_rss=max(
                    (r.rss_mib() for r in self.live_replicas() if r is not leader),
                    default=float("nan"),
                ),
                cpu=cpu - previous_cpu.get(leader.index, 0.0) if leader else float("nan"),
                depth=scraped.depth if scraped else float("nan"),
                adds=adds - previous_adds.get(leader.index, 0.0) if leader else float("nan"),
                writes=len(others),
                lease_writes=len(leases),
                conflicts=sum(1 for e in events if e.code == 409),
                by_target=Counter(
                    f"{e.verb} {e.target}{'' if e.code < 300 else f' ({e.code})'}" for e in others
                ),
                write_lines=[describe_write(e) for e in others],
                load=load,
                pending=0,
                pods=0,
                nodes=0,
                vms=0,
                cloud_calls=calls,
                settled=await self.all_settled(),
            )
            await self.count_world(row)
            row.settled = row.settled and row.pending == 0
            if leader and scraped:
                await self.compare_caches(row, leader, scraped)
            if leader:
                previous_cpu[leader.index] = cpu
                previous_adds[leader.index] = adds
            self.rows.append(row)
            self.say(
                f"minute {minute}: leader {row.leader} RSS {row.rss:.0f} MiB, CPU {row.cpu:.1f} s, "
                f"writes {row.writes} (+{row.lease_writes} Lease), 409s {row.conflicts}, "
                f"pending {row.pending}/{row.pods} pods, {row.nodes} Nodes, {row.vms} VMs, "
                f"cloud calls {row.cloud_calls}, settled {row.settled}, "
                f"violations {len(self.violations)}"
            )

    async def compare_caches(self, row: Row, leader: Replica, scraped: Scrape) -> None:
        """The leader's informer counts against the API server's, read again a few times
        while they differ (a watch event may be on its way); the last reading is kept."""
        started = now()
        for attempt in range(CACHE_RECHECKS + 1):
            if attempt:
                await asyncio.sleep(CACHE_RECHECK_SECONDS)
                again = await scrape(leader.metrics_url)
                if again is None:
                    break
                scraped = again
            row.cached = dict(scraped.informers)
            row.world = await self.count_resources(sorted(row.cached))
            if not row.cache_differences():
                row.cache_waited = now() - started if attempt else 0.0
                return
        row.cache_waited = None

    async def count_resources(self, resources: list[str]) -> dict[str, int]:
        """How many objects of each resource the API server holds, across all namespaces
        (as the operator's informers of the whole resource see them)."""
        core = {
            "nodes": self.core.list_node,
            "pods": self.core.list_pod_for_all_namespaces,
            "persistentvolumes": self.core.list_persistent_volume,
            "persistentvolumeclaims": self.core.list_persistent_volume_claim_for_all_namespaces,
        }
        counts: dict[str, int] = {}
        for resource in resources:
            if resource in core:
                counts[resource] = len((await core[resource]()).items)
            elif resource in GROUPS:
                group, version = GROUPS[resource]
                found = await self.custom.list_cluster_custom_object(group, version, resource)
                counts[resource] = len(found["items"])
        return counts

    async def count_world(self, row: Row) -> None:
        for name in self.pools:
            pods = (await self.core.list_namespaced_pod(name)).items
            row.pods += len(pods)
            row.pending += sum(1 for p in pods if not p.spec.node_name)
            vms = await self.cloud(lambda name=name: self.fleet.cloud_client.list_vms(pool=name))
            row.vms += len(vms)
        nodes = await self.core.list_node(label_selector=wellknown.POOL_LABEL)
        row.nodes = len(nodes.items)

    async def all_settled(self) -> bool:
        pools = (await self.custom.list_cluster_custom_object(*POOLS))["items"]
        return all(
            nodepool_api.is_settled(p, int(p["spec"].get("targetNodes", 0)))
            for p in pools
            if p["metadata"]["name"] in self.pools
        )

    # -- the end --------------------------------------------------------------------------------

    async def finish(self) -> None:
        """The chaos suite's end check: every pool settled, VMs equal to Nodes."""
        self.say("settling")
        deadline = time.monotonic() + self.arguments.settle
        while time.monotonic() < deadline and not await self.all_settled():  # noqa: ASYNC110 - polls the API
            await asyncio.sleep(2)
        await self.check()
        pools = (await self.custom.list_cluster_custom_object(*POOLS))["items"]
        for pool in pools:
            name = pool["metadata"]["name"]
            target = int(pool["spec"].get("targetNodes", 0))
            if not nodepool_api.is_settled(pool, target):
                self.violation(
                    f"unsettled-{name}",
                    f"NodePool {name}",
                    f"not settled on targetNodes {target} {self.arguments.settle:.0f} s after "
                    f"the workload ended: status {pool.get('status')}",
                )
            vms = await self.cloud(lambda name=name: self.fleet.cloud_client.list_vms(pool=name))
            nodes = await self.fleet.node_names(name)
            if sorted(vm.name for vm in vms) != sorted(nodes):
                self.violation(
                    f"end-mismatch-{name}",
                    f"NodePool {name}",
                    f"at the end VMs {sorted(v.name for v in vms)} but Nodes {sorted(nodes)}",
                )
            self.end_state.append(
                f"{name}: targetNodes {target}, {len(vms)} VMs, {len(nodes)} Nodes"
            )
        creations = (await self.fleet.cloud_client.stats()).creations_by_name
        strays = {vm for vm in creations if not vm.startswith(self.pools)}
        if strays:
            self.violation(
                "strays", "cloud", f"VMs of pools the bench never made: {sorted(strays)}"
            )
        self.errors_logged = sum(len(r.process.errors_logged()) for r in self.replicas)


# -- the report ------------------------------------------------------------------------------


def describe_write(event: audit.AuditEvent) -> str:
    where = f"{event.namespace}/{event.name}" if event.namespace else event.name
    return f"{event.verb} {event.target} {where} {event.code} ({event.user_agent})"


QUIET_AFTER = 2  # minutes after the bench's last action before a minute may count as quiet


def mark_quiet(rows: list[Row]) -> None:
    """A quiet minute: the bench changed nothing in it nor in the ``QUIET_AFTER`` minutes
    before, and every pool was settled at its start and end (the previous row's and its
    own sample)."""
    last_action = -(10**9)
    for i, row in enumerate(rows):
        if row.actions:
            last_action = row.minute
        row.quiet = (
            not row.actions
            and row.minute - last_action > QUIET_AFTER
            and i > 0
            and rows[i - 1].settled
            and row.settled
        )


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """The least-squares slope of (minute, MiB), in MiB per hour."""
    if len(points) < 2:
        return float("nan")
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    var = sum((x - mx) ** 2 for x, _ in points)
    if var == 0:
        return float("nan")
    return 60 * sum((x - mx) * (y - my) for x, y in points) / var


def rss_judgement(rows: list[Row]) -> str:
    """The last leader's RSS at the end against its RSS at the same cluster size (Nodes and
    pods) at least 10 minutes into its tenure: the process the hour ends with, through the
    churn it served. Its slope over those minutes, per hour."""
    final = rows[-1].leader if rows else 0
    start = next((i for i in range(len(rows)) if all(r.leader == final for r in rows[i:])), 0)
    tenure = rows[start:]
    end = tenure[-1] if tenure else None
    base = next((r for r in tenure[9:] if end and (r.nodes, r.pods) == (end.nodes, end.pods)), None)
    if end is None or base is None or base is end:
        return (
            f"- RSS: the last leader led {len(tenure)} minutes without a minute at the end's "
            "cluster size 10 minutes or more into its tenure (a short run): not judged."
        )
    growth = (end.rss - base.rss) / base.rss
    slope = slope_per_hour([(r.minute, r.rss) for r in tenure[9:]])
    verdict = "within 10 %" if abs(growth) <= 0.10 else "NOT within 10 %"
    at_rest = [r for r in tenure if r.quiet]
    rest = ", ".join(f"{r.rss:.1f} (min {r.minute})" for r in at_rest)
    return (
        f"- RSS of the last leader (replica {final}, leader from minute {tenure[0].minute}): "
        f"{base.rss:.1f} MiB at minute {base.minute} ({base.nodes} Nodes, {base.pods} pods), "
        f"{end.rss:.1f} MiB at the end (minute {end.minute}, the same size): "
        f"{growth * 100:+.1f} %, {verdict}; slope {slope:+.1f} MiB/hour from its 10th minute. "
        f"In its quiet minutes (MiB): {rest or 'none'}."
    )


def judgements(soak: Soak) -> list[str]:
    rows = soak.rows
    lines = [rss_judgement(rows)]
    quiet = [r for r in rows if r.quiet]
    if quiet:
        writes = sum(r.writes for r in quiet)
        noisy = [f"minute {r.minute}: {dict(r.by_target)}" for r in quiet if r.writes]
        verdict = "as required" if writes == 0 else f"NOT 0: {'; '.join(noisy)}"
        lines.append(
            f"- Writes in the quiet minutes ({len(quiet)}: "
            f"{', '.join(str(r.minute) for r in quiet)}; Lease renewals apart): {writes}, "
            f"{verdict}."
        )
    else:
        lines.append(
            "- Quiet minutes: none in this run (it needs a settled cluster and "
            f"{QUIET_AFTER} minutes without an action): not judged."
        )
    depth = [r for r in quiet if r.depth == r.depth]
    if depth:
        lines.append(
            f"- Work queues in the quiet minutes: depth {max(r.depth for r in depth):g} at most."
        )
    lines += cache_judgements(rows)
    return lines


def cache_judgements(rows: list[Row]) -> list[str]:
    """For each burst: the leader's informer counts at their peak during it, and at the
    first quiet minute after its calm against the API server's counts of the same
    resources."""
    bursts = [i for i, r in enumerate(rows) if any(a.startswith("burst") for a in r.actions)]
    if not any(r.cached for r in rows):
        return ["- Informer object counts: none scraped from the leader, not judged."]
    lines = [
        "- Informer object counts after each burst (the leader's "
        f"`{INFORMER_OBJECTS}` of each whole resource against the number of the same objects "
        "the API server lists: every Node, every Pod of every namespace, every NodePool, "
        "Autoscaler, ScaleRequest, DaemonSet, PDB, PV, PVC, StorageClass):"
    ]
    for k, start in enumerate(bursts):
        end = bursts[k + 1] if k + 1 < len(bursts) else len(rows)
        cycle = rows[start:end]
        calm = next(
            (j for j, r in enumerate(cycle) if any(a.startswith("calm") for a in r.actions)), None
        )
        # Up to the calm: a minute's counts may be read again seconds into the next burst.
        busy = cycle if calm is None else cycle[: calm + 1]
        peak = max(busy, key=lambda r: r.cached.get("pods", 0))
        head = (
            f"  - burst at minute {rows[start].minute}: peak {peak.cached.get('pods', 0):g} "
            f"Pods, {peak.cached.get('nodes', 0):g} Nodes cached (minute {peak.minute})"
        )
        judged = next((r for r in cycle[calm or 0 :] if r.quiet and r.cached), None)
        if calm is None or judged is None:
            lines.append(f"{head}; no quiet minute after its calm in this run: not judged.")
            continue
        counts = ", ".join(
            f"{resource} {judged.cached[resource]:g}/{judged.world.get(resource, '?')}"
            for resource in sorted(judged.cached)
        )
        if judged.cache_waited is None:
            verdict = "NOT equal: " + "; ".join(judged.cache_differences())
        else:
            verdict = "all equal" + (
                f" (after {judged.cache_waited:.0f} s of re-reads)" if judged.cache_waited else ""
            )
        lines.append(
            f"{head}; at minute {judged.minute}, the first quiet minute after the calm "
            f"(minute {cycle[calm].minute}), cached/server: {counts}: {verdict}."
        )
    return lines


def quiet_writes(rows: list[Row]) -> list[str]:
    """Each write the operator made in a quiet minute: verb, object, code, user agent."""
    return [f"- minute {r.minute}: {line}" for r in rows if r.quiet for line in r.write_lines]


def table(rows: list[Row]) -> str:
    lines = [
        "| min | actions | leader | RSS MiB | follower RSS | CPU s | queue depth | queue adds | "
        "writes | Lease writes | 409s | pods Pending / all | Nodes | VMs | cloud calls | "
        "cached Pods / Nodes | cache = server | settled | quiet | load 1m |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---|---|---|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.minute} | {', '.join(r.actions)} | {r.leader} | {r.rss:.1f} | "
            f"{r.follower_rss:.1f} | {r.cpu:.1f} | {r.depth:g} | {r.adds:g} | {r.writes} | "
            f"{r.lease_writes} | {r.conflicts} | {r.pending} / {r.pods} | {r.nodes} | {r.vms} | "
            f"{r.cloud_calls} | {cached_cell(r)} | {cache_cell(r)} | "
            f"{'yes' if r.settled else 'no'} | {'yes' if r.quiet else ''} | {r.load:.2f} |"
        )
    return "\n".join(lines)


def cached_cell(row: Row) -> str:
    if not row.cached:
        return ""
    return f"{row.cached.get('pods', 0):g} / {row.cached.get('nodes', 0):g}"


def cache_cell(row: Row) -> str:
    """Whether every informer's count equalled the server's at the sample ('yes'), after
    re-reads ('yes, 5 s'), or not even then (the differences)."""
    if not row.cached:
        return ""
    if row.cache_waited is None:
        return "no: " + "; ".join(row.cache_differences())
    return "yes" if not row.cache_waited else f"yes, {row.cache_waited:.0f} s"


def writes_detail(rows: list[Row]) -> str:
    total: Counter[str] = Counter()
    for r in rows:
        total += r.by_target
    return ", ".join(f"{k} {n}" for k, n in total.most_common())


def plot(rows: list[Row], path: Path) -> bool:
    try:
        import matplotlib  # the bench extra

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    minutes = [r.minute for r in rows]
    nan = float("nan")
    figure, axes = plt.subplots(4, 2, figsize=(13, 13), sharex=True)
    panels = [
        (
            "RSS MiB",
            [("leader", [r.rss for r in rows]), ("follower", [r.follower_rss for r in rows])],
        ),
        ("leader CPU s / min", [("CPU", [r.cpu for r in rows])]),
        (
            "API writes / min",
            [("writes", [r.writes for r in rows]), ("409s", [r.conflicts for r in rows])],
        ),
        ("pods", [("Pending", [r.pending for r in rows]), ("all", [r.pods for r in rows])]),
        (
            "Nodes, VMs, queue depth",
            [
                ("Nodes", [r.nodes for r in rows]),
                ("VMs", [r.vms for r in rows]),
                ("queue depth", [r.depth for r in rows]),
            ],
        ),
        ("cloud calls / min", [("calls", [r.cloud_calls for r in rows])]),
        (
            "informer objects (leader) vs API server",
            [
                *(
                    (f"cached {resource}", [r.cached.get(resource, nan) for r in rows])
                    for resource in ("pods", "nodes", "scalerequests")
                ),
                ("server pods", [r.world.get("pods", nan) for r in rows]),
                ("server nodes", [r.world.get("nodes", nan) for r in rows]),
            ],
        ),
        ("machine load average (1 min, 2 cores shared)", [("load", [r.load for r in rows])]),
    ]
    for axis, (title, series) in zip(axes.flat, panels, strict=True):
        for label, values in series:
            style = ":" if label.startswith("server") else "-"
            axis.plot(minutes, values, marker=".", linestyle=style, label=label)
        for r in rows:
            if r.quiet:
                axis.axvspan(r.minute - 1, r.minute, color="green", alpha=0.08)
            if any(
                a.split()[0] in ("kill-leader", "restart-leader", "restart-follower")
                for a in r.actions
            ):
                axis.axvline(r.minute - 0.5, color="red", alpha=0.4, linestyle="--")
        axis.set_title(title)
        axis.legend(loc="upper right", fontsize="small")
    for axis in axes[-1]:
        axis.set_xlabel("minute (green: quiet minutes; red: operator restarts, hand-over)")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return True


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=BENCH,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def report(soak: Soak, *, started: str, png: str) -> str:
    arguments = soak.arguments
    command = "python bench/soak.py " + " ".join(sys.argv[1:])
    lines = [
        f"commit: {soak.commit} (at the start); command: `{command}`",
        f"machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}; load before: {started}; load after: "
        f"{os.getloadavg()[0]:.2f}, {os.getloadavg()[1]:.2f}, {os.getloadavg()[2]:.2f} "
        "(the cores are shared with other sessions)",
        f"scenario: {arguments.minutes:g} min, seed {arguments.seed}, {arguments.pools} pools "
        f"(1..{arguments.max_nodes} Nodes of 4 cpu / 16Gi), cloud 5xx rate {arguments.fault_rate}, "
        f"two replicas with --leader-elect",
        "",
        f"**Invariant violations: {len(soak.violations)}**" + ("" if not soak.violations else ":"),
    ]
    lines += [f"- {v.line(soak.began)}" for v in soak.violations]
    lines += ["", "Judgements (issue 52):", *judgements(soak), ""]
    noisy = quiet_writes(soak.rows)
    if noisy:
        lines += ["Writes in the quiet minutes, each (verb, object, code, user agent):", *noisy, ""]
    lines += [
        f"Operator ERROR log lines (both replicas, all starts): {soak.errors_logged}. "
        f"Operator crashes the bench caused: {soak.fleet.crashes}.",
        "",
        "At the end: " + "; ".join(soak.end_state),
        "",
        table(soak.rows),
        "",
        "Operator writes by verb and resource over the run (Lease renewals apart): "
        + writes_detail(soak.rows),
    ]
    if png:
        lines += ["", f"Plot: `{png}`."]
    return "\n".join(lines)


def write_results(soak: Soak, results: Path, *, started: str) -> str:
    """``NAME.md`` and ``NAME.png`` under ``results``; the Markdown's text."""
    results.mkdir(parents=True, exist_ok=True)
    png = results / f"{soak.arguments.name}.png"
    drawn = plot(soak.rows, png)
    text = report(soak, started=started, png=png.name if drawn else "")
    (results / f"{soak.arguments.name}.md").write_text(text + "\n")
    return text


def write_or_say(soak: Soak, results: Path, *, started: str, stopped_on: str) -> str:
    """``write_results``, with the error the run stopped on (its traceback) first when it
    did; when too little ran to report on, the error alone is the report."""
    try:
        text = write_results(soak, results, started=started)
    except Exception:
        if not stopped_on:
            raise
        stopped_on += "\nwriting the report failed too:\n" + traceback.format_exc()
        results.mkdir(parents=True, exist_ok=True)
        text = ""
    if stopped_on:
        text = f"**The run stopped on an error** (exit 1):\n\n```\n{stopped_on}```\n\n{text}"
        (results / f"{soak.arguments.name}.md").write_text(text + "\n")
    return text


async def main(arguments: argparse.Namespace) -> int:
    load_before = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    work = Path(arguments.work) if arguments.work else Path(tempfile.mkdtemp(prefix="soak-"))
    work.mkdir(parents=True, exist_ok=True)
    soak = Soak(arguments, work)
    soak.commit = commit()  # the code that runs, whatever is committed meanwhile
    stopped_on = ""
    try:
        code = await soak.run()
    except Exception:  # the bench itself failed: said in the results, never lost
        stopped_on = traceback.format_exc()
        print(stopped_on, file=sys.stderr)
        code = 1
    finally:
        soak.plane.down()
    mark_quiet(soak.rows)
    text = write_or_say(soak, Path(arguments.results), started=load_before, stopped_on=stopped_on)
    print(text)
    if arguments.keep or code:
        print(f"logs kept in {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pools", type=int, default=3, choices=range(1, len(POOL_NAMES) + 1))
    parser.add_argument("--max-nodes", type=int, default=5)
    parser.add_argument("--fault-rate", type=float, default=0.02, help="simcloud 5xx fraction")
    parser.add_argument("--pending-bound", type=float, default=180.0)
    parser.add_argument("--mismatch-bound", type=float, default=180.0)
    parser.add_argument("--check-every", type=float, default=10.0)
    parser.add_argument("--settle", type=float, default=120.0, help="s to settle at the end")
    parser.add_argument("--results", default=str(RESULTS))
    parser.add_argument("--name", default="soak", help="results file names: NAME.md, NAME.png")
    parser.add_argument("--work", default="", help="work directory (default: a new temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    return parser


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(asyncio.run(main(_parser().parse_args())))
