"""The operator process: one manager running the controllers (NodePool, Autoscaler, and
interruptions where the cloud tells of them) against one API server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from nodepool_operator.cloud import credentials, provider, selection
from nodepool_operator.controllers import offerings
from nodepool_operator.controllers.autoscaler import setup as autoscaler_setup
from nodepool_operator.controllers.autoscaler.config import AutoscalerConfig
from nodepool_operator.controllers.nodepool import setup as nodepool_setup
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.controllers.nodepool.interruptions import setup as interruptions_setup
from nodepool_operator.runtime import clock as runtime_clock
from nodepool_operator.runtime import controller as runtime_controller
from nodepool_operator.runtime import logformat, metrics_auth, tls
from nodepool_operator.runtime.client import Client
from nodepool_operator.runtime.leader import LeaderElectionConfig
from nodepool_operator.runtime.manager import Manager

__all__ = [
    "OperatorOptions",
    "api_client",
    "check_cloud_credential",
    "configure_logging",
    "event_source",
    "run_operator",
]

log = logging.getLogger("nodepool_operator")


@dataclass(frozen=True)
class OperatorOptions:
    kubeconfig: Path | None
    cloud_endpoint: str | None
    cloud_token_file: Path | None = None
    cloud: str = "simcloud"
    """The provider's name (``cloud.selection``): simcloud, aws, or an installed one."""
    cluster_name: str | None = None
    """The cluster whose VMs the provider makes and sees; required for aws, the simcloud's
    default is the kubeconfig's current cluster."""
    interruption_queue: str | None = None
    """EC2: the SQS queue of EventBridge's interruption messages (none: not read). The
    simcloud tells its own (``GET /v1/events``)."""
    leader_elect: bool = False
    leader_election_namespace: str = "nodepool-system"
    leader_election_id: str = "nodepool-operator"
    metrics_port: int | None = 8443
    metrics_host: str = "0.0.0.0"
    metrics_secure: bool = True
    """HTTPS with TokenReview/SubjectAccessReview on ``/metrics``; off: plain HTTP, open."""
    metrics_cert_dir: Path | None = None
    """``tls.crt`` and ``tls.key`` to serve; without it a self-signed pair is made."""
    health_port: int | None = 8081
    """Plain HTTP ``/healthz`` and ``/readyz`` for kubelet probes; None: on the metrics port."""
    nodepool: NodePoolConfig = field(default_factory=NodePoolConfig)
    autoscaler: AutoscalerConfig = field(default_factory=AutoscalerConfig)


def configure_logging(
    level: str = "INFO", log_format: logformat.LogFormat = logformat.LogFormat.TEXT
) -> None:
    """One line per decision on stderr (where a Pod's logs are collected): ``key=value`` for
    people, or one JSON object for log pipelines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(runtime_controller.ReconcileLogContext())
    handler.setFormatter(logformat.formatter(log_format))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


async def api_client(kubeconfig: Path | None) -> k8s.ApiClient:
    configuration = k8s.Configuration()
    path = kubeconfig or (Path(os.environ["KUBECONFIG"]) if os.environ.get("KUBECONFIG") else None)
    if path is not None:
        await k8s_config.load_kube_config(config_file=str(path), client_configuration=configuration)
    else:
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return k8s.ApiClient(configuration)


def _cloud_token(path: Path | None, cloud: str) -> credentials.TokenFile | None:
    """The cloud token's file, read once now so a wrong path fails at startup."""
    if path is None:
        if cloud == "simcloud":
            log.warning("event=cloud-auth-off reason=no --cloud-token-file")
        return None
    token = credentials.TokenFile(path)
    token.read()
    return token


def _cluster_name(options: OperatorOptions) -> str | None:
    if options.cluster_name is not None:
        return selection.check_cluster_name(options.cluster_name)
    if options.cloud != "simcloud":
        return None  # the provider decides whether it needs one
    first = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    return selection.default_cluster_name(options.kubeconfig or (Path(first) if first else None))


#: A VM name no pool makes (pool VMs are ``<pool>-<index>``): the check reads, never writes.
CREDENTIAL_CHECK_VM = provider.VmName("nodepool-operator-credential-check")


async def check_cloud_credential(
    cloud: provider.CloudProvider, *, name: str, token: credentials.TokenFile | None
) -> bool:
    """Ask the cloud one read at startup; say once, at ERROR, when it refuses the
    credential and which flag fixes that. True when the cloud answered."""
    try:
        await cloud.get_vm(CREDENTIAL_CHECK_VM)
    except provider.CloudError as error:
        if error.code not in provider.UNAUTHORIZED_CODES:
            # Unreachable or failing: the controllers retry and report per pool.
            log.warning(
                "event=cloud-check-failed cloud=%s code=%s error=%s", name, error.code, error
            )
            return False
        if name != "simcloud":
            fix = "give the provider credentials the cloud accepts (for aws the SDK's chain)"
        elif token is None:
            fix = "pass --cloud-token-file FILE, the file holding the token the cloud accepts"
        else:
            fix = f"put the token the cloud accepts in --cloud-token-file {token.path}"
        answer = f"401 {error.code}: {error}" if error.code == "Unauthorized" else str(error)
        log.error(
            "event=cloud-unauthorized cloud=%s code=%s answer=%r fix=%r effect=%r",
            name,
            error.code,
            answer,
            fix,
            "every pool stays Degraded (CloudListFailed) until the cloud accepts the credential",
        )
        return False
    log.info("event=cloud-check-passed cloud=%s", name)
    return True


def event_source(
    cloud: provider.CloudProvider, *, name: str, interruption_queue: str | None
) -> provider.EventSource | None:
    """Where the NodePool controller's interruptions reconciler hears of the cloud taking
    VMs back: the simcloud's event stream, EC2's queue when one is given, any other
    provider's ``events`` when it has them; None: nothing to read (no reconciler then)."""
    if name == "aws" and interruption_queue is None:
        log.warning(
            "event=interruptions-off cloud=aws reason=no --interruption-queue: a spot "
            "interruption is noticed only once the instance is gone"
        )
        return None
    if name not in ("aws", "simcloud") and interruption_queue is not None:
        log.warning("event=interruption-queue-ignored cloud=%s", name)
    if callable(getattr(cloud, "events", None)) and callable(getattr(cloud, "handled", None)):
        return cast(provider.EventSource, cloud)
    return None


async def run_operator(options: OperatorOptions, *, stop: asyncio.Event | None = None) -> None:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()

    def request_stop() -> None:
        if stop.is_set():
            # A second signal while draining: the user wants out now (no lease release).
            log.warning("event=second-signal action=exit-now")
            os._exit(130)
        stop.set()

    handled = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, request_stop)
            handled.append(sig)
    token = _cloud_token(options.cloud_token_file, options.cloud)
    cluster_name = _cluster_name(options)
    cloud = selection.create(
        options.cloud,
        selection.ProviderOptions(
            endpoint=options.cloud_endpoint,
            token=token,
            cluster_name=cluster_name,
            interruption_queue=options.interruption_queue,
        ),
    )
    api = await api_client(options.kubeconfig)
    try:
        client = Client(api, field_manager="nodepool-operator")
        election = None
        if options.leader_elect:
            identity = f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
            election = LeaderElectionConfig(
                name=options.leader_election_id,
                namespace=options.leader_election_namespace,
                identity=identity,
            )
        metrics_tls, authorizer = None, None
        if options.metrics_secure and options.metrics_port is not None:
            metrics_tls, source = tls.server_context(options.metrics_cert_dir)
            log.info("event=metrics-tls certificate=%s", source)
            authorizer = metrics_auth.MetricsAuthorizer(
                client.for_manager("nodepool-operator-metrics"), clock=runtime_clock.RealClock()
            )
        manager = Manager(
            client,
            leader_election=election,
            metrics_port=options.metrics_port,
            metrics_host=options.metrics_host,
            health_port=options.health_port,
            metrics_tls=metrics_tls,
            metrics_authorizer=authorizer,
        )
        # One catalog reader for both controllers: one read of the cloud's catalog per TTL.
        offerings_catalog = offerings.OfferingsCatalog.of_cloud(cloud, clock=manager.clock)
        nodepool_setup.setup(
            manager, cloud=cloud, config=options.nodepool, offerings_catalog=offerings_catalog
        )
        autoscaler_setup.setup(
            manager, config=options.autoscaler, offerings_catalog=offerings_catalog
        )
        events = event_source(
            cloud, name=options.cloud, interruption_queue=options.interruption_queue
        )
        if events is not None:
            # Its long poll is cancelled on stop, not waited for (up to QUIET_WAIT).
            interruptions_setup.setup(manager, source=events, stopping=stop)
        log.info(
            "event=starting cloud=%s cluster=%s endpoint=%s cloud_auth=%s leader_elect=%s",
            options.cloud,
            cluster_name,
            options.cloud_endpoint or "default",
            "none" if token is None else f"token-file:{token.path}",
            options.leader_elect,
        )
        # Beside the manager, not before it: a slow or absent cloud must not delay startup.
        check = asyncio.create_task(
            check_cloud_credential(cloud, name=options.cloud, token=token),
            name="cloud-credential-check",
        )
        try:
            await manager.run(stop)
        finally:
            check.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await check
        log.info("event=stopped")
    finally:
        await cloud.close()
        await api.close()
        for sig in handled:
            loop.remove_signal_handler(sig)
