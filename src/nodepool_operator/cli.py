"""The ``nodepool-operator`` command line: the local control plane, the simulated cloud,
the operator itself, the CRDs, the demo, and read-only looks at the planner (explain, plan)."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import importlib.util
import json
import os
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from kubernetes_asyncio import config as k8s_config

from nodepool_operator import operator
from nodepool_operator.api import crds as api_crds
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.cloud import credentials as cloud_credentials
from nodepool_operator.cloud import selection
from nodepool_operator.cloud.catalog import Catalog
from nodepool_operator.cloud.simcloud import kubelets as simcloud_kubelets
from nodepool_operator.cloud.simcloud import server as simcloud_server
from nodepool_operator.controllers.autoscaler.config import AutoscalerConfig
from nodepool_operator.controllers.autoscaler.setup import planner_reads
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.inspection import cloud_catalog as inspection_catalog
from nodepool_operator.inspection import planning as inspection_planning
from nodepool_operator.inspection import report as inspection_report
from nodepool_operator.inspection import snapshot as inspection_snapshot
from nodepool_operator.runtime import logformat
from nodepool_operator.runtime.client import Client
from nodepool_operator.runtime.clock import RealWallClock
from nodepool_operator.runtime.informer import InformerCache

__all__ = ["app", "main"]

app = typer.Typer(
    help="A Kubernetes operator that provisions node pools and autoscales them, "
    "with disciplined API writes.",
    no_args_is_help=True,
    add_completion=False,
)
cluster_app = typer.Typer(
    help="The local control plane: etcd, kube-apiserver, kube-scheduler, "
    "kube-controller-manager and kwok, built from Go modules and run on loopback.",
    no_args_is_help=True,
)
app.add_typer(cluster_app, name="cluster")

#: The package of the development tools (the local control plane and its binaries, the
#: demo): beside this one in a source checkout, absent from the wheel. The commands that
#: need it import it when they run, never at import time, so the installed operator runs
#: without it; ``pyproject.toml``'s import-linter contracts allow exactly these imports.
DEVTOOLS_PACKAGE = "nodepool_devtools"


def _require_devtools(command: str) -> None:
    """Stop with one line saying what to do when the development tools are not installed."""
    if importlib.util.find_spec(DEVTOOLS_PACKAGE) is None:
        typer.secho(
            f"error: '{command}' is a development tool, not in the installed package: run it "
            "from a source checkout ('source scripts/setup-env.sh', docs/development.md)",
            fg=typer.colors.RED,
            err=True,
        )
        raise typer.Exit(1)


@cluster_app.callback()
def cluster_needs_devtools() -> None:
    _require_devtools("cluster")


DirOption = Annotated[
    Path,
    typer.Option(
        "--dir",
        envvar="NODEPOOL_CLUSTER_DIR",
        help="Directory holding the control plane's state, logs, audit log and kubeconfig.",
    ),
]
DEFAULT_DIR = Path(".cluster")


@cluster_app.command("up")
def cluster_up(
    directory: DirOption = DEFAULT_DIR,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for /readyz.")] = 120.0,
) -> None:
    """Build (or reuse) the binaries, start the control plane and wait until it is ready;
    print KUBECONFIG and a PATH with the project's kubectl and helm (for eval)."""
    from nodepool_devtools.cluster import binaries, controlplane

    plane = controlplane.ControlPlane(directory)
    try:
        plane.up(timeout=timeout)
    except (controlplane.ControlPlaneError, binaries.BuildError) as error:
        typer.secho(f"error: {error}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from error
    for line in plane.shell_setup():
        typer.echo(line)


@cluster_app.command("down")
def cluster_down(directory: DirOption = DEFAULT_DIR) -> None:
    """Stop every process that ``cluster up`` started in DIR (state and logs stay)."""
    from nodepool_devtools.cluster import controlplane

    plane = controlplane.ControlPlane(directory)
    plane.down()
    left = [p for p in plane.status() if p.running]
    if left:
        typer.secho(f"error: still running: {left}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1)
    typer.echo("control plane stopped")


@cluster_app.command("status")
def cluster_status(directory: DirOption = DEFAULT_DIR) -> None:
    """Show each component's pid and whether it runs; exit 1 unless all run."""
    from nodepool_devtools.cluster import controlplane

    plane = controlplane.ControlPlane(directory)
    processes = plane.status()
    if not processes:
        typer.echo(f"no control plane recorded in {directory}")
        raise typer.Exit(1)
    for process in processes:
        typer.echo(
            f"{process.name:<24} pid {process.pid:<8} {'running' if process.running else 'stopped'}"
        )
    typer.echo(f"kubeconfig: {plane.kubeconfig}")
    if not all(p.running for p in processes):
        raise typer.Exit(1)


@cluster_app.command("build")
def cluster_build() -> None:
    """Build the control-plane binaries, helm and kubemark (the hollow kubelet) into the cache
    (a no-op when they are there)."""
    from nodepool_devtools.cluster import binaries

    try:
        found = binaries.ensure_binaries()
        found["helm"] = binaries.ensure_helm()
        found["kubemark"] = binaries.ensure_kubemark()
    except binaries.BuildError as error:
        typer.secho(f"error: {error}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from error
    for name, path in sorted(found.items()):
        typer.echo(f"{name:<24} {path}")


class KubeletMode(enum.StrEnum):
    """What each simcloud VM boots: nothing (kwok plays its kubelet) or a hollow kubelet."""

    KWOK = "kwok"
    HOLLOW = "hollow"


@app.command("demo")
def demo(
    directory: Annotated[
        Path | None,
        typer.Option(
            "--dir", help="Work directory (control plane, logs); default: a new temporary one."
        ),
    ] = None,
    keep: Annotated[
        bool, typer.Option("--keep", help="Leave the control plane running at the end.")
    ] = False,
    vm_latency: Annotated[
        float, typer.Option(help="Seconds the simulated cloud takes to boot a VM.")
    ] = 3.0,
    unneeded_seconds: Annotated[
        int, typer.Option(help="Seconds a node must be empty before it is given back.")
    ] = 15,
    kubelets: Annotated[
        KubeletMode,
        typer.Option(
            help="What runs each node: kwok, or a hollow kubelet per VM (real kubelet code; "
            "nodes of 1 CPU / 3840Mi, as it reports, and pods of 250m)."
        ),
    ] = KubeletMode.KWOK,
) -> None:
    """Run the whole story on the local control plane: scale-up, competing writer, scale-down."""
    _require_devtools("demo")
    from nodepool_devtools.cluster import binaries, controlplane
    from nodepool_devtools.demo import story

    options = story.DemoOptions(
        directory=directory,
        keep=keep,
        vm_latency_seconds=vm_latency,
        unneeded_seconds=unneeded_seconds,
        kubelets=kubelets.value,
    )
    try:
        code = asyncio.run(story.run_demo(options))
    except KeyboardInterrupt:
        typer.echo("interrupted; everything the demo started has been stopped", err=True)
        raise typer.Exit(130) from None
    except (controlplane.ControlPlaneError, binaries.BuildError) as error:
        typer.secho(f"error: {error}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from error
    raise typer.Exit(code)


@app.command("crds")
def crds() -> None:
    """Print the CustomResourceDefinitions of NodePool, ScaleRequest and Autoscaler (YAML)."""
    typer.echo(api_crds.render_yaml(), nl=False)


@app.command("simcloud")
def simcloud(
    state: Annotated[
        Path, typer.Option(help="SQLite file holding the VMs; survives restarts.")
    ] = Path("simcloud.sqlite3"),
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0: a free one).")] = 8787,
    port_file: Annotated[
        Path | None, typer.Option(help="Write the bound port here (useful with --port 0).")
    ] = None,
    create_latency: Annotated[
        float, typer.Option(help="Mean seconds from create to RUNNING.")
    ] = 5.0,
    latency_jitter: Annotated[
        float, typer.Option(help="Uniform jitter (+/- seconds) around the create latency.")
    ] = 2.0,
    delete_latency: Annotated[float, typer.Option(help="Seconds from delete to gone.")] = 2.0,
    transient_error_rate: Annotated[
        float, typer.Option(help="Fraction of calls answered with a 5xx (0..1).")
    ] = 0.0,
    quota: Annotated[
        int | None, typer.Option(help="Most VMs the account may hold (403 QuotaExceeded beyond).")
    ] = None,
    slow_calls: Annotated[float, typer.Option(help="Seconds added to every call.")] = 0.0,
    faults: Annotated[
        str | None,
        typer.Option(
            help="Initial faults as JSON, the body PUT /admin/faults takes, over the flags "
            'above; e.g. \'{"capacity": [{"zone": "sim-1a", "maxVms": 0}]}\'.'
        ),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Random seed for latencies and faults.")] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            help="File holding the bearer token every call must carry (re-read when it "
            "changes). Required unless --insecure-no-auth."
        ),
    ] = None,
    insecure_no_auth: Annotated[
        bool,
        typer.Option(
            "--insecure-no-auth", help="Serve anyone, without a token: local experiments only."
        ),
    ] = False,
    kubelets: Annotated[
        KubeletMode,
        typer.Option(
            help="What runs on each VM: kwok (nothing; kwok on the control plane plays the "
            "kubelets of the Nodes the operator creates) or hollow (a real, hollow kubelet "
            "per VM, kubemark, built by 'cluster build'; needs --kubelet-kubeconfig)."
        ),
    ] = KubeletMode.KWOK,
    kubelet_kubeconfig: Annotated[
        Path | None,
        typer.Option(help="The kubeconfig the hollow kubelets reach the API server with."),
    ] = None,
    catalog: Annotated[
        Path | None,
        typer.Option(
            help="The instance types and priced offerings it sells, in Karpenter kwok's "
            "instance_types.json form (served at GET /v1/catalog). Without it, it makes any "
            "cpu and memory asked for."
        ),
    ] = None,
    spot_notice_seconds: Annotated[
        float,
        typer.Option(
            help="How long a spot VM runs after its interruption notice (EC2: two minutes)."
        ),
    ] = 120.0,
) -> None:
    """Run the simulated cloud: an HTTP API for VMs, with latency and fault injection."""
    hollow = _hollow_kubelets(kubelets, kubelet_kubeconfig, state=state)
    try:
        config = _simcloud_config(
            state=state,
            host=host,
            port=port,
            port_file=port_file,
            create_latency=create_latency,
            latency_jitter=latency_jitter,
            delete_latency=delete_latency,
            transient_error_rate=transient_error_rate,
            quota=quota,
            slow_calls=slow_calls,
            seed=seed,
            token_file=token_file,
            insecure_no_auth=insecure_no_auth,
        )
        if faults is not None:
            config = config.with_faults(json.loads(faults))
        config = dataclasses.replace(
            config,
            kubelets=hollow,
            catalog_path=None if catalog is None else str(catalog),
            spot_notice_seconds=spot_notice_seconds,
        )
    except ValueError as error:
        typer.secho(f"error: {error}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from error
    try:
        simcloud_server.run(config)
    except cloud_credentials.CredentialError as error:
        typer.secho(f"error: {error}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from error


def _hollow_kubelets(
    mode: KubeletMode, kubeconfig: Path | None, *, state: Path
) -> simcloud_kubelets.KubeletConfig | None:
    """What simcloud boots on its VMs: None for kwok; raises ``typer.BadParameter`` for
    hollow without a kubeconfig, and exits when kubemark cannot be had: it is built from
    the checkout's ``tools/`` by the development tools (``cluster build``)."""
    if mode == KubeletMode.KWOK:
        if kubeconfig is not None:
            raise typer.BadParameter(
                "only with --kubelets hollow", param_hint="--kubelet-kubeconfig"
            )
        return None
    if kubeconfig is None or not kubeconfig.is_file():
        raise typer.BadParameter(
            "--kubelets hollow needs the kubeconfig of an existing file",
            param_hint="--kubelet-kubeconfig",
        )
    _require_devtools("simcloud --kubelets hollow")
    from nodepool_devtools.cluster import binaries

    try:
        kubemark = binaries.ensure_kubemark()
    except binaries.BuildError as error:
        typer.secho(f"error: {error}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from error
    return simcloud_kubelets.KubeletConfig(
        kubemark=str(kubemark),
        kubeconfig=str(kubeconfig.resolve()),
        log_directory=str(state.resolve().parent / f"{state.name}.kubelets"),
    )


def _simcloud_config(
    *,
    state: Path,
    host: str,
    port: int,
    port_file: Path | None,
    create_latency: float,
    latency_jitter: float,
    delete_latency: float,
    transient_error_rate: float,
    quota: int | None,
    slow_calls: float,
    seed: int | None,
    token_file: Path | None,
    insecure_no_auth: bool,
) -> simcloud_server.SimCloudConfig:
    return simcloud_server.SimCloudConfig(
        state_path=str(state),
        host=host,
        port=port,
        port_file=str(port_file) if port_file else None,
        create_latency_seconds=create_latency,
        latency_jitter_seconds=latency_jitter,
        delete_latency_seconds=delete_latency,
        transient_error_rate=transient_error_rate,
        quota_max_vms=quota,
        slow_call_seconds=slow_calls,
        seed=seed,
        token_file=str(token_file) if token_file else None,
        insecure_no_auth=insecure_no_auth,
    )


def _in_a_pod() -> bool:
    """Does the environment carry what the in-cluster config is read from (the kubelet
    sets both in every container)?"""
    return bool(
        os.environ.get("KUBERNETES_SERVICE_HOST") and os.environ.get("KUBERNETES_SERVICE_PORT")
    )


@app.command("run")
def run(
    kubeconfig: Annotated[
        Path | None,
        typer.Option(help="kubeconfig to use; default $KUBECONFIG, then in-cluster config."),
    ] = None,
    cloud: Annotated[
        str,
        typer.Option(
            help="The cloud provider: simcloud, aws (EC2; credentials and region from the "
            "AWS SDK's standard chain), or one installed under the entry-point group "
            f"{selection.ENTRY_POINT_GROUP}."
        ),
    ] = "simcloud",
    cluster_name: Annotated[
        str | None,
        typer.Option(
            help="This cluster's name: every VM is tagged with it and every cloud lookup "
            "filters on it, so clusters can share an account. Required with --cloud aws; "
            "default for simcloud: the kubeconfig's current cluster."
        ),
    ] = None,
    cloud_endpoint: Annotated[
        str | None,
        typer.Option(
            help="URL of the cloud API; default: the simcloud at "
            f"{selection.DEFAULT_SIMCLOUD_ENDPOINT}, EC2's regional endpoint for aws."
        ),
    ] = None,
    cloud_token_file: Annotated[
        Path | None,
        typer.Option(
            help="File holding the cloud API's bearer token (e.g. a mounted Secret); "
            "re-read when it changes. Without it, calls carry no credential."
        ),
    ] = None,
    interruption_queue: Annotated[
        str | None,
        typer.Option(
            help="--cloud aws: URL of the SQS queue EventBridge sends EC2's interruption "
            "messages to (spot interruption warnings, scheduled changes, instances "
            "stopping; deploy/aws/): a noticed node is tainted, cordoned and replaced at "
            "once. The simcloud tells its own notices without it."
        ),
    ] = None,
    leader_elect: Annotated[
        bool, typer.Option(help="Run controllers only while holding the Lease.")
    ] = False,
    leader_election_namespace: Annotated[
        str, typer.Option(help="Namespace of the leader-election Lease.")
    ] = "nodepool-system",
    metrics_port: Annotated[int, typer.Option(help="Port of /metrics (0: a free one).")] = 8443,
    metrics_host: Annotated[
        str, typer.Option(help="Address of the metrics and probe endpoints.")
    ] = "0.0.0.0",
    metrics_secure: Annotated[
        bool,
        typer.Option(
            help="Serve /metrics over HTTPS to callers the API server authenticates "
            "(TokenReview) and lets `get` /metrics (SubjectAccessReview); "
            "--no-metrics-secure: plain HTTP open to anyone, for local runs."
        ),
    ] = True,
    metrics_cert_dir: Annotated[
        Path | None,
        typer.Option(
            help="Directory with tls.crt and tls.key for /metrics; default: a self-signed "
            "certificate made at start."
        ),
    ] = None,
    health_port: Annotated[
        int, typer.Option(help="Port of /healthz and /readyz, plain HTTP (0: a free one).")
    ] = 8081,
    poll_interval: Annotated[
        float, typer.Option(help="Seconds between looks at a pool while it is scaling.")
    ] = 1.0,
    create_parallelism: Annotated[
        int, typer.Option(help="Most VM creations in flight per pool.")
    ] = 10,
    cloud_resync_interval: Annotated[
        float,
        typer.Option(
            help="Seconds between listings of each pool's VMs when nothing else asks "
            "(spread 0.75x-1.25x per pool): how soon a VM deleted out of band is noticed."
        ),
    ] = 300.0,
    scale_request_retention: Annotated[
        float,
        typer.Option(
            help="A finished ScaleRequest (accepted, rejected or superseded) is deleted "
            "this many seconds after its creation; until then its answer can be read."
        ),
    ] = 60.0,
    simulated_nodes: Annotated[
        bool | None,
        typer.Option(
            "--simulated-nodes/--no-simulated-nodes",
            help="Annotate registered Nodes kwok.x-k8s.io/node=fake, so kwok runs them. "
            "Default: on with --cloud simcloud, off with any other cloud (a real kubelet "
            "joins each VM there, and kwok must not claim it).",
        ),
    ] = None,
    expendable_pods_priority_cutoff: Annotated[
        int,
        typer.Option(
            help="Pods with a lower priority never trigger a scale-up; they only use room "
            "that exists (as cluster-autoscaler's flag of the same name)."
        ),
    ] = -10,
    await_nominations_seconds: Annotated[
        int,
        typer.Option(
            help="A scale-up's new Nodes stay tainted until the Autoscaler has nominated "
            "the pending pods it planned there (status.nominatedNodeName), at most this "
            "long after each Node turns Ready, so kube-scheduler puts each pod where the "
            "plan did. 0 to 300; 0: no nominations.",
        ),
    ] = 20,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING or ERROR.")] = "INFO",
    log_format: Annotated[
        logformat.LogFormat,
        typer.Option(
            help="text: key=value lines for people; json: one object per line for log "
            "pipelines, with the message's key=value pairs as fields."
        ),
    ] = logformat.LogFormat.TEXT,
) -> None:
    """Run the operator: the NodePool and Autoscaler controllers."""
    if not 0 <= await_nominations_seconds <= scalerequest_api.MAX_AWAIT_NOMINATIONS_SECONDS:
        raise typer.BadParameter(
            f"must be 0 to {scalerequest_api.MAX_AWAIT_NOMINATIONS_SECONDS}",
            param_hint="--await-nominations-seconds",
        )
    if kubeconfig is None and not os.environ.get("KUBECONFIG") and not _in_a_pod():
        # Said here in one line: the in-cluster loader would fail deep inside with
        # "Service host/port is not set" and a traceback that never names the flag.
        typer.secho(
            "error: no cluster to run against: pass --kubeconfig FILE or set KUBECONFIG "
            "(in a Pod, the in-cluster config is used)",
            fg=typer.colors.RED,
            err=True,
        )
        raise typer.Exit(1)
    operator.configure_logging(log_level.upper(), log_format)
    options = operator.OperatorOptions(
        kubeconfig=kubeconfig,
        cloud_endpoint=cloud_endpoint,
        cloud_token_file=cloud_token_file,
        cloud=cloud,
        cluster_name=cluster_name,
        interruption_queue=interruption_queue,
        leader_elect=leader_elect,
        leader_election_namespace=leader_election_namespace,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        metrics_secure=metrics_secure,
        metrics_cert_dir=metrics_cert_dir,
        health_port=health_port,
        nodepool=NodePoolConfig(
            poll_interval=poll_interval,
            create_parallelism=create_parallelism,
            cloud_resync_interval=cloud_resync_interval,
            request_retention=scale_request_retention,
            simulated_nodes=cloud == "simcloud" if simulated_nodes is None else simulated_nodes,
        ),
        autoscaler=AutoscalerConfig(
            expendable_pods_priority_cutoff=expendable_pods_priority_cutoff,
            await_nominations_seconds=await_nominations_seconds,
        ),
    )
    try:
        asyncio.run(operator.run_operator(options))
    except (
        cloud_credentials.CredentialError,
        selection.UnknownProvider,
        selection.InvalidProviderOptions,
    ) as error:
        typer.secho(f"error: {error}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from error


# -- read-only looks at the planner -------------------------------------------------------

explain_app = typer.Typer(
    help="Why a pod waits and what the Autoscaler will do about it (reads only).",
    no_args_is_help=True,
)
app.add_typer(explain_app, name="explain")

KubeconfigOption = Annotated[
    Path | None,
    typer.Option(help="kubeconfig to read with; default $KUBECONFIG, then in-cluster config."),
]
SnapshotOption = Annotated[
    Path | None,
    typer.Option(
        "--snapshot",
        help="Replay a snapshot file (from plan --save-snapshot) instead of the live cluster.",
    ),
]
OutputOption = Annotated[
    inspection_report.Output,
    typer.Option("--output", "-o", help="table for people, json for scripts."),
]
CatalogFileOption = Annotated[
    Path | None,
    typer.Option(
        "--catalog",
        help="The cloud's catalog from a file, in the form simcloud's --catalog takes "
        "(Karpenter kwok's instance_types.json): pools with requirements are planned with "
        "its offerings. Without it or --cloud-endpoint they are planned as not growing.",
    ),
]
CatalogEndpointOption = Annotated[
    str | None,
    typer.Option(
        "--cloud-endpoint",
        help="Read the cloud's catalog from the simcloud at this URL (GET /v1/catalog), "
        "as the operator does.",
    ),
]
CatalogTokenOption = Annotated[
    Path | None,
    typer.Option(
        "--cloud-token-file",
        help="File holding the bearer token of --cloud-endpoint (as for run).",
    ),
]


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


async def _snapshot_of(
    kubeconfig: Path | None, snapshot_file: Path | None
) -> inspection_snapshot.CacheRecording:
    if snapshot_file is not None:
        return inspection_snapshot.load(snapshot_file)
    api = await operator.api_client(kubeconfig)
    try:
        cache = InformerCache(Client(api, field_manager="nodepool-operator-inspect"))
        planner_reads(cache, config=AutoscalerConfig(), wall_clock=RealWallClock())
        inspection_snapshot.record_budgets(cache)
        source = str(api.configuration.host)
        return await inspection_snapshot.capture(cache, source=source)
    finally:
        await api.close()


def _read(
    kubeconfig: Path | None, snapshot_file: Path | None
) -> inspection_snapshot.CacheRecording:
    try:
        return asyncio.run(_snapshot_of(kubeconfig, snapshot_file))
    except inspection_snapshot.SnapshotError as error:
        _fail(str(error))
    except (OSError, k8s_config.ConfigException) as error:
        _fail(f"cannot reach the cluster: {error}")


def _catalog(
    catalog_file: Path | None, cloud_endpoint: str | None, token_file: Path | None
) -> Catalog | None:
    """The cloud's catalog asked for, read before the cluster: a wrong flag is said at once."""
    try:
        return asyncio.run(
            inspection_catalog.read(
                catalog_file=catalog_file, cloud_endpoint=cloud_endpoint, token_file=token_file
            )
        )
    except inspection_catalog.CatalogUnreadable as error:
        _fail(str(error), code=2)


@explain_app.command("pod")
def explain_pod(
    pod: Annotated[str, typer.Argument(help="NAMESPACE/NAME of the pod.")],
    kubeconfig: KubeconfigOption = None,
    snapshot_file: SnapshotOption = None,
    output: OutputOption = inspection_report.Output.TABLE,
    catalog_file: CatalogFileOption = None,
    cloud_endpoint: CatalogEndpointOption = None,
    cloud_token_file: CatalogTokenOption = None,
) -> None:
    """For one pod: each pool and existing node, whether it could host the pod and the
    first filter that refuses; what the plan does for it (with the cloud's catalog, the
    offering of its new node and the cheaper ones refused); the latest ScaleRequest."""
    namespace, slash, name = pod.partition("/")
    if not slash or not namespace or not name:
        _fail(f"name the pod as NAMESPACE/NAME, not {pod!r}", code=2)
    sold = _catalog(catalog_file, cloud_endpoint, cloud_token_file)
    snapshot = _read(kubeconfig, snapshot_file)

    async def explain() -> inspection_report.PodExplanation:
        return await inspection_planning.explain_pod(
            inspection_planning.reads_of(snapshot, offerings_catalog=sold), namespace, name
        )

    try:
        explanation = asyncio.run(explain())
    except inspection_planning.PodNotFoundError as error:
        _fail(str(error))
    if output is inspection_report.Output.JSON:
        typer.echo(inspection_report.to_json(explanation))
    else:
        inspection_report.print_explanation(explanation)


@app.command("plan")
def plan(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Required: plan only shows, it never acts.")
    ] = False,
    kubeconfig: KubeconfigOption = None,
    snapshot_file: SnapshotOption = None,
    save_snapshot: Annotated[
        Path | None,
        typer.Option(
            help="Also write what the planner read to this file (.gz to compress): nodes, "
            "pods, pools, Autoscalers, ScaleRequests, DaemonSets, PodDisruptionBudgets; no "
            "env values or secrets."
        ),
    ] = None,
    output: OutputOption = inspection_report.Output.TABLE,
    catalog_file: CatalogFileOption = None,
    cloud_endpoint: CatalogEndpointOption = None,
    cloud_token_file: CatalogTokenOption = None,
) -> None:
    """The Autoscaler's plan for the cluster as it is now, made by the controller's own
    planner, without acting: which pools would grow and for which pods (with the cloud's
    catalog, each pool's offerings, its new nodes' and their price per hour), which pods
    no pool can host and why, which nodes scale-down would give back and why (never below
    minNodes), the rule that keeps each other node of the pool, and the drifted and
    expired nodes replaced next or held (by a budget, do-not-disrupt or a
    PodDisruptionBudget)."""
    if not dry_run:
        _fail("plan never acts; run it as `plan --dry-run`", code=2)
    sold = _catalog(catalog_file, cloud_endpoint, cloud_token_file)
    snapshot = _read(kubeconfig, snapshot_file)
    if save_snapshot is not None:
        snapshot.save(save_snapshot)
        typer.echo(f"snapshot written to {save_snapshot}", err=True)

    async def planned() -> inspection_report.ClusterPlan:
        return await inspection_planning.plan_cluster(
            inspection_planning.reads_of(snapshot, offerings_catalog=sold),
            budgets=inspection_snapshot.budgets_in(snapshot),
        )

    result = asyncio.run(planned())
    if output is inspection_report.Output.JSON:
        typer.echo(inspection_report.to_json(result))
    else:
        inspection_report.print_plan(result)


def main() -> None:
    app(prog_name="nodepool-operator")


if __name__ == "__main__":
    main()
