"""The demo: the whole system on the local control plane, as one story.

1. The control plane, the simulated cloud and the operator start (the operator as its own
   user, under the ClusterRole of ``deploy/rbac``); the CRDs are installed.
2. A NodePool (min 0, max 10, 4 CPU / 16Gi nodes, no nodes yet) and an Autoscaler for the
   namespace ``demo`` are created.
3. A Deployment of 10 pods requesting 1 CPU each is created: nothing can schedule it.
4. The Autoscaler asks for nodes (a ScaleRequest), the NodePool controller creates VMs and
   registers Nodes, the scheduler binds the pods, kwok runs them. With ``kubelets``
   ``hollow`` each VM boots a real (hollow) kubelet instead, which registers its Node,
   reports 1 CPU / 3840Mi and runs the pods: the pool's nodes are that size, and each pod
   asks for 250m and 512Mi, so four share a node.
5. All the while, a competing writer keeps adding labels to the NodePool.
6. The Deployment is scaled down to 2 pods; nodes left empty are given back.
7. A summary: time until every pod ran, the operator's writes and 409s as the API server
   counted them, and whether any of the competing writer's labels were lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config
from rich.console import Console
from rich.live import Live
from rich.table import Table

from nodepool_devtools.cluster import audit, children, controlplane, install
from nodepool_devtools.demo.view import Snapshot, WriteCounter, render
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud import credentials

__all__ = ["DemoOptions", "run_demo"]

POOL = "demo"
NAMESPACE = "demo"
DEPLOYMENT = "web"
REPLICAS = 10
SCALED_DOWN_REPLICAS = 2
POOLS = ("nodepool.dev", "v1alpha1", "nodepools")
REQUESTS = ("nodepool.dev", "v1alpha1", "scalerequests")
MERGE = "application/merge-patch+json"
WRITER_PREFIX = "writer.demo.nodepool.dev/label-"


@dataclass(frozen=True)
class Shape:
    """The pool's nodes and the Deployment's pods, as the story tells them."""

    node: nodepool_api.NodeTemplate
    pod_cpu: str
    pod_memory: str
    told: str  # how the story names the node shape


#: kwok reports whatever the template says; a hollow kubelet reports 1 CPU and 3840Mi.
SHAPES = {
    "kwok": Shape(
        nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=110), "1", "1Gi", "4 CPU / 16Gi"
    ),
    "hollow": Shape(
        nodepool_api.NodeTemplate(cpu="1", memory="3840Mi", pods=110),
        "250m",
        "512Mi",
        "1 CPU / 3840Mi",
    ),
}


@dataclass(frozen=True)
class DemoOptions:
    directory: Path | None = None
    keep: bool = False
    vm_latency_seconds: float = 3.0
    unneeded_seconds: int = 15
    step_timeout_seconds: float = 240.0
    # "kwok": kwok plays each VM's kubelet; "hollow": each VM boots a hollow kubelet.
    kubelets: str = "kwok"

    @property
    def shape(self) -> Shape:
        return SHAPES[self.kubelets]


@dataclass
class StoryOutcome:
    seconds_to_schedule: float | None = None
    peak_nodes: int = 0
    final_nodes: int = 0
    writer_labels: int = 0
    lost_labels: int = 0
    scale_requests: set[str] = field(default_factory=set)
    scaled_down: bool = False


class Demo:
    def __init__(self, options: DemoOptions, console: Console) -> None:
        self.options = options
        self.console = console
        self.work = options.directory or Path(tempfile.mkdtemp(prefix="nodepool-demo-"))
        self.plane = controlplane.ControlPlane(self.work / "cluster")
        self.processes: list[children.ChildProcess] = []
        self.steps: list[str] = []
        self.snapshot = Snapshot()
        self.counter = WriteCounter(user=install.OPERATOR_USER)
        self.outcome = StoryOutcome()
        self.started = time.monotonic()

    def step(self, message: str) -> None:
        self.steps.append(f"[{time.monotonic() - self.started:6.1f}s] {message}")

    # -- set-up -----------------------------------------------------------------------

    async def start_processes(self) -> str:
        port_file = self.work / "simcloud.port"
        port_file.unlink(missing_ok=True)
        # The cloud and the operator share one random token, as a Secret would give them.
        token_file = self.work / "simcloud.token"
        credentials.write_new_token(token_file)
        simcloud = children.ChildProcess(
            "simcloud",
            [
                *children.CLI,
                "simcloud",
                "--state",
                str(self.work / "simcloud.sqlite3"),
                "--port",
                "0",
                "--port-file",
                str(port_file),
                "--token-file",
                str(token_file),
                "--create-latency",
                str(self.options.vm_latency_seconds),
                "--latency-jitter",
                str(self.options.vm_latency_seconds / 3),
                "--delete-latency",
                "1",
                *self._kubelet_arguments(),
            ],
            self.work / "logs" / "simcloud.log",
        )
        simcloud.start()
        self.processes.append(simcloud)
        async with asyncio.timeout(30):
            while not port_file.exists():  # noqa: ASYNC110 - waiting for another process
                await asyncio.sleep(0.05)
        endpoint = f"http://127.0.0.1:{port_file.read_text().strip()}"
        operator = children.ChildProcess(
            "operator",
            [
                *children.CLI,
                "run",
                "--kubeconfig",
                str(self.plane.kubeconfig_for("operator")),
                "--cloud-endpoint",
                endpoint,
                "--cloud-token-file",
                str(token_file),
                "--metrics-port",
                "0",
                "--metrics-host",
                "127.0.0.1",
                "--health-port",
                "0",
                "--leader-elect",
                "--leader-election-namespace",
                install.OPERATOR_NAMESPACE,
                "--poll-interval",
                "0.5",
            ],
            self.work / "logs" / "operator.log",
        )
        operator.start()
        self.processes.append(operator)
        return endpoint

    def _kubelet_arguments(self) -> tuple[str, ...]:
        if self.options.kubelets != "hollow":
            return ()
        return ("--kubelets", "hollow", "--kubelet-kubeconfig", str(self.plane.kubeconfig))

    def stop_processes(self) -> None:
        for process in reversed(self.processes):
            process.stop()

    # -- the story --------------------------------------------------------------------

    async def run(self, api: client.ApiClient) -> None:
        custom = client.CustomObjectsApi(api)
        await self.create_pool_and_autoscaler(custom)
        created = await self.create_deployment(api)
        writer = asyncio.create_task(self.competing_writer(custom))
        self.step("a competing writer now adds a label to the NodePool every 100 ms")
        try:
            await self.scale_up_then_down(client.AppsV1Api(api), created=created)
        finally:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
        await self.count_lost_labels(custom)

    async def create_pool_and_autoscaler(self, custom: client.CustomObjectsApi) -> None:
        pool_spec = nodepool_api.NodePoolSpec(
            target_nodes=0,
            min_nodes=0,
            max_nodes=10,
            template=self.options.shape.node,
        )
        await custom.create_cluster_custom_object(*POOLS, nodepool_api.manifest(POOL, pool_spec))
        autoscaler_spec = autoscaler_api.AutoscalerSpec(
            node_pool_name=POOL,
            namespaces=(NAMESPACE,),
            scan_interval_seconds=2,
            batch_window_seconds=1.0,
            scale_down=autoscaler_api.ScaleDownPolicy(
                enabled=True, unneeded_seconds=self.options.unneeded_seconds
            ),
        )
        await custom.create_cluster_custom_object(
            autoscaler_api.GROUP,
            autoscaler_api.VERSION,
            autoscaler_api.PLURAL,
            autoscaler_api.manifest(POOL, autoscaler_spec),
        )
        self.step(
            f"created NodePool 'demo' (0..10 nodes of {self.options.shape.told}) and its"
            f" Autoscaler; {self.options.kubelets} runs each node"
        )

    async def create_deployment(self, api: client.ApiClient) -> float:
        """Create the demo's namespace and Deployment; when (monotonic) it was created."""
        namespace: Any = {"metadata": {"name": NAMESPACE}}
        await client.CoreV1Api(api).create_namespace(namespace)
        shape = self.options.shape
        await client.AppsV1Api(api).create_namespaced_deployment(
            NAMESPACE, _deployment(REPLICAS, cpu=shape.pod_cpu, memory=shape.pod_memory)
        )
        created = time.monotonic()
        self.step(
            f"created Deployment '{DEPLOYMENT}': {REPLICAS} pods x {shape.pod_cpu} CPU,"
            " no node to run them"
        )
        return created

    async def scale_up_then_down(self, apps: client.AppsV1Api, *, created: float) -> None:
        await self.until(lambda: self.snapshot.running_pods == REPLICAS, "all pods running")
        self.outcome.seconds_to_schedule = time.monotonic() - created
        self.step(f"all {REPLICAS} pods Running after {self.outcome.seconds_to_schedule:.1f}s")
        self.outcome.peak_nodes = len(self.snapshot.nodes)

        await apps.patch_namespaced_deployment_scale(
            DEPLOYMENT, NAMESPACE, {"spec": {"replicas": SCALED_DOWN_REPLICAS}}
        )
        self.step(
            f"scaled the Deployment down to {SCALED_DOWN_REPLICAS}; empty nodes go after "
            f"{self.options.unneeded_seconds}s"
        )
        await self.until(self.pool_shrunk, "the pool scaled down")
        self.outcome.scaled_down = True
        self.outcome.final_nodes = len(self.snapshot.nodes)
        self.step(f"pool scaled down to {self.outcome.final_nodes} nodes")

    async def count_lost_labels(self, custom: client.CustomObjectsApi) -> None:
        """Every label the competing writer was told was written must still be there."""
        pool = await custom.get_cluster_custom_object(*POOLS, POOL)
        labels = pool["metadata"].get("labels", {}) or {}
        present = {k for k in labels if k.startswith(WRITER_PREFIX)}
        expected = {f"{WRITER_PREFIX}{i}" for i in range(1, self.outcome.writer_labels + 1)}
        self.outcome.lost_labels = len(expected - present)
        self.step(
            f"competing writer: {self.outcome.writer_labels} labels written, "
            f"{self.outcome.lost_labels} lost"
        )

    def pool_shrunk(self) -> bool:
        pools = [p for p in self.snapshot.pools if p["metadata"]["name"] == POOL]
        if not pools:
            return False
        status = pools[0].get("status", {})
        return bool(
            pools[0]["spec"].get("targetNodes", 0) < self.outcome.peak_nodes
            and status.get("scaleOperation") == "inactive"
            and status.get("readyNodes") == pools[0]["spec"].get("targetNodes")
            and self.snapshot.running_pods == SCALED_DOWN_REPLICAS
        )

    async def until(self, predicate: Any, what: str) -> None:
        deadline = time.monotonic() + self.options.step_timeout_seconds
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the demo waited {self.options.step_timeout_seconds:.0f}s "
                    f"for {what}; see the logs in {self.work / 'logs'}"
                )
            await asyncio.sleep(0.2)

    async def competing_writer(self, custom: client.CustomObjectsApi) -> None:
        while True:
            index = self.outcome.writer_labels + 1
            patch = {"metadata": {"labels": {f"{WRITER_PREFIX}{index}": str(index)}}}
            try:
                # The generated signature omits _content_type, accepted through **kwargs.
                await custom.patch_cluster_custom_object(  # type: ignore[call-arg]
                    *POOLS, POOL, patch, _content_type=MERGE
                )
            except client.exceptions.ApiException as error:
                if error.status < 429:
                    raise
                await asyncio.sleep(0.5)  # throttled or unavailable: the same label again
                continue
            self.outcome.writer_labels = index
            await asyncio.sleep(0.1)

    async def watch_cluster(self, api: client.ApiClient, live: Live) -> None:
        custom = client.CustomObjectsApi(api)
        core = client.CoreV1Api(api)
        log = audit.AuditLog(self.plane.audit_log)
        while True:
            try:
                await self.refresh(api, custom, core, log)
            except client.exceptions.ApiException as error:
                if error.status < 429:
                    raise
                # 429 and 5xx pass: the view simply shows the previous state a bit longer.
            live.update(self.view())
            await asyncio.sleep(0.5)

    async def refresh(
        self,
        api: client.ApiClient,
        custom: client.CustomObjectsApi,
        core: client.CoreV1Api,
        log: audit.AuditLog,
    ) -> None:
        pools = await custom.list_cluster_custom_object(*POOLS)
        requests = await custom.list_cluster_custom_object(*REQUESTS)
        nodes = await api.call_api(
            f"/api/v1/nodes?labelSelector={wellknown.POOL_LABEL}%3D{POOL}",
            "GET",
            response_types_map={200: "object"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
        )
        pods = await core.list_namespaced_pod(NAMESPACE)
        self.snapshot = Snapshot(
            pools=pools["items"],
            nodes=nodes["items"],
            pods=[api.sanitize_for_serialization(p) for p in pods.items],
            requests=sorted(requests["items"], key=lambda r: r["metadata"]["creationTimestamp"]),
        )
        self.outcome.scale_requests |= {r["metadata"]["name"] for r in requests["items"]}
        self.counter.add(log.follow())

    def view(self) -> Any:
        return render(
            self.snapshot,
            counter=self.counter,
            steps=self.steps,
            writer_labels=self.outcome.writer_labels,
        )

    def summary(self) -> Table:
        table = Table(title="nodepool-operator demo: summary", show_header=False)
        outcome = self.outcome
        seconds = outcome.seconds_to_schedule
        rows = [
            ("time until every pod ran", f"{seconds:.1f}s" if seconds is not None else "never"),
            ("nodes at peak / at the end", f"{outcome.peak_nodes} / {outcome.final_nodes}"),
            ("ScaleRequests created", str(len(outcome.scale_requests))),
            ("operator API writes (audit log)", str(self.counter.total)),
            (
                "  by verb and resource",
                ", ".join(f"{k}={v}" for k, v in sorted(self.counter.writes.items())),
            ),
            ("409 Conflicts met by the operator", str(self.counter.conflicts)),
            ("competing writer labels written", str(outcome.writer_labels)),
            ("lost updates", str(outcome.lost_labels)),
        ]
        for name, value in rows:
            table.add_row(name, value)
        return table

    @property
    def succeeded(self) -> bool:
        outcome = self.outcome
        return (
            outcome.seconds_to_schedule is not None
            and outcome.scaled_down
            and outcome.lost_labels == 0
        )


def _deployment(replicas: int, *, cpu: str, memory: str) -> Any:
    labels = {"app": DEPLOYMENT}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "web",
                            "image": "registry.example/web:1.0",
                            "resources": {"requests": {"cpu": cpu, "memory": memory}},
                        }
                    ],
                    "terminationGracePeriodSeconds": 0,
                },
            },
        },
    }


async def run_demo(options: DemoOptions, console: Console | None = None) -> int:
    """Run the story; return the exit code (0 when every check of the summary passed)."""
    console = console or Console()
    demo = Demo(options, console)
    console.print(f"[bold]nodepool-operator demo[/] (work directory: {demo.work})")
    try:
        await asyncio.to_thread(demo.plane.up)
        await demo.start_processes()
        configuration = client.Configuration()
        await config.load_kube_config(
            config_file=str(demo.plane.kubeconfig), client_configuration=configuration
        )
        async with client.ApiClient(configuration) as api:
            await install.install_crds(api)
            await install.grant_operator_rbac(api)
            demo.step("control plane, simcloud and operator are up; CRDs installed")
            with Live(demo.view(), console=console, refresh_per_second=4) as live:
                watcher = asyncio.create_task(demo.watch_cluster(api, live))
                try:
                    await demo.run(api)
                    await asyncio.sleep(1)  # one more refresh with the final state
                finally:
                    watcher.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await watcher
            console.print(demo.summary())
    except TimeoutError as error:
        console.print(f"[red]error:[/] {error}")
        console.print(demo.summary())
        return 1
    finally:
        demo.stop_processes()
        if options.keep:
            console.print(f"control plane left running: export KUBECONFIG={demo.plane.kubeconfig}")
        else:
            await asyncio.to_thread(demo.plane.down)
    if demo.succeeded:
        console.print("[green]every pod ran, the pool scaled back down, no update was lost[/]")
        return 0
    console.print("[red]the demo did not reach its goal; see the summary above[/]")
    return 1
