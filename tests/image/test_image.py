"""The image as a cluster would run it: its entrypoint, as its user, inside its own root
filesystem (read-only), with the arguments, environment and mounted files that
deploy/manager/deployment.yaml gives its Pod, against the real control plane and a simcloud.

No container runtime is needed: the unpacked root filesystem is entered with
`unshare --mount` (a mount namespace of the operator's own: the root bind-mounted
read-only, tmpfs on /tmp, /proc, a few device nodes, the Secrets' files bind-mounted
read-only) and `unshare --root --setuid --setgid`. The network is the host's, so the
operator reaches the API server and the simcloud on 127.0.0.1, as in-cluster config does.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import ssl
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import aiohttp
import pytest
import yaml
from cryptography import x509
from kubernetes_asyncio import client

from harness import (
    CLI,
    MERGE,
    POOLS,
    Operator,
    Process,
    SimCloud,
    pool_body,
    remove_pool,
    settled,
    wait_for,
)
from nodepool_devtools.cluster import install
from nodepool_devtools.cluster.pytest_plugin import Cluster
from nodepool_operator.cloud import credentials
from nodepool_operator.runtime import tls

REPO = Path(__file__).resolve().parents[2]
DEPLOYMENT = REPO / "deploy" / "manager" / "deployment.yaml"
RBAC = REPO / "deploy" / "rbac"
NAMESPACE = install.OPERATOR_NAMESPACE
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# The chart's mount path of a metrics certificate (charts/.../deployment.yaml).
METRICS_TLS_DIR = "/var/run/secrets/nodepool.dev/metrics-tls"
RUN_AS = 65532  # deployment.yaml: runAsUser, runAsGroup, fsGroup

# Runs as root in a mount namespace of its own, then execs the entrypoint chrooted, as
# the image's user. $1 the root filesystem, $2 "SOURCE:TARGET ..." read-only binds (TARGET
# the host's path of a directory inside the root filesystem).
ENTER = r"""
set -eu
root=$1; binds=$2; shift 2
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount -t tmpfs -o mode=0755,size=64k tmpfs "$root/dev"
for node in null zero random urandom; do
  touch "$root/dev/$node" && mount --bind "/dev/$node" "$root/dev/$node"
done
mount -t tmpfs -o mode=1777,size=64m tmpfs "$root/tmp"
for bind in $binds; do
  mount --bind "${bind%%:*}" "${bind#*:}"
  mount -o remount,bind,ro "${bind#*:}"
done
mount -o remount,bind,ro "$root"
exec setpriv --no-new-privs "$@"
"""


def _deployment_container() -> dict[str, Any]:
    deployment = yaml.safe_load(DEPLOYMENT.read_text())
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def _mount_paths() -> dict[str, str]:
    """The deployment's volume mounts, by volume name."""
    return {m["name"]: m["mountPath"] for m in _deployment_container()["volumeMounts"]}


def _args(cloud_endpoint: str) -> list[str]:
    """The deployment's container args, with what differs on a shared machine: free ports
    and loopback instead of 8443/8081 on every interface; the metrics certificate mounted
    (the chart's --metrics-cert-dir)."""
    values = {"$(CLOUD_ENDPOINT)": cloud_endpoint, "$(POD_NAMESPACE)": NAMESPACE}
    local = {"--metrics-port": "0", "--health-port": "0", "--metrics-host": "127.0.0.1"}
    args = []
    for arg in _deployment_container()["args"]:
        for name, value in values.items():
            arg = arg.replace(name, value)
        flag = arg.split("=", 1)[0]
        args.append(f"{flag}={local[flag]}" if flag in local else arg)
    return [*args, f"--metrics-cert-dir={METRICS_TLS_DIR}"]


def _write(path: Path, content: bytes, mode: int) -> None:
    """A file as the kubelet projects a Secret: owned by root, group fsGroup."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    os.chown(path, 0, RUN_AS)
    path.chmod(mode)


@dataclass(frozen=True)
class Mounted:
    """The files of the Pod's volumes, on the host."""

    cloud_token: Path
    service_account: Path
    metrics_tls: Path
    metrics_cert: bytes


@pytest.fixture
async def service_account_token(
    api_client: client.ApiClient, cluster: Cluster
) -> AsyncIterator[str]:
    """A token of the deployed ServiceAccount, bound to the deployed roles (deploy/rbac)."""
    await install.grant_operator_rbac(api_client)
    await install.install_crds(api_client)
    core = client.CoreV1Api(api_client)
    rbac = client.RbacAuthorizationV1Api(api_client)
    made: list[tuple[str, str]] = []
    documents = {
        name: yaml.safe_load((RBAC / name).read_text())
        for name in (
            "service-account.yaml",
            "clusterrole-binding.yaml",
            "leader-election-role-binding.yaml",
        )
    }
    suffix = uuid.uuid4().hex[:6]
    for document in documents.values():
        if document["kind"] != "ServiceAccount":
            document["metadata"]["name"] += f"-image-{suffix}"
    with contextlib.suppress(client.exceptions.ApiException):
        await core.create_namespaced_service_account(NAMESPACE, documents["service-account.yaml"])
        made.append(("ServiceAccount", documents["service-account.yaml"]["metadata"]["name"]))
    binding = documents["clusterrole-binding.yaml"]
    await rbac.create_cluster_role_binding(binding)
    election = documents["leader-election-role-binding.yaml"]
    await rbac.create_namespaced_role_binding(NAMESPACE, election)
    account = documents["service-account.yaml"]["metadata"]["name"]
    request: Any = {"spec": {"expirationSeconds": 3600}}
    answer = await core.create_namespaced_service_account_token(account, NAMESPACE, request)
    try:
        yield answer.status.token
    finally:
        with contextlib.suppress(client.exceptions.ApiException):
            await rbac.delete_cluster_role_binding(binding["metadata"]["name"])
        with contextlib.suppress(client.exceptions.ApiException):
            await rbac.delete_namespaced_role_binding(election["metadata"]["name"], NAMESPACE)
        for _, name in made:
            with contextlib.suppress(client.exceptions.ApiException):
                await core.delete_namespaced_service_account(name, NAMESPACE)


@pytest.fixture
async def simcloud(tmp_path: Path) -> AsyncIterator[SimCloud]:
    """The simulated cloud, on the host, requiring a bearer token."""
    token_file = tmp_path / "simcloud.token"
    credentials.write_new_token(token_file)
    port_file = tmp_path / "simcloud.port"
    args = [*CLI, "simcloud", "--state", str(tmp_path / "simcloud.sqlite3"), "--port", "0",
            "--port-file", str(port_file), "--token-file", str(token_file)]  # fmt: skip
    cloud = SimCloud(Process("simcloud", args, tmp_path / "simcloud.log"), port_file, token_file)
    await cloud.start()
    yield cloud
    if cloud.client is not None:
        await cloud.client.close()
    cloud.process.stop()


@pytest.fixture
def mounted(
    tmp_path: Path, simcloud: SimCloud, service_account_token: str, cluster: Cluster
) -> Mounted:
    if cluster.plane is None:
        pytest.skip("runs on the local control plane (its CA and address are mounted)")
    volumes = tmp_path / "volumes"
    cloud_token = volumes / "cloud-token"
    # deployment.yaml: the Secret's defaultMode 0440, readable through fsGroup.
    _write(cloud_token / "token", simcloud.token_file.read_bytes(), 0o440)
    account = volumes / "service-account"
    _write(account / "token", service_account_token.encode(), 0o440)
    _write(account / "ca.crt", (cluster.plane.directory / "pki" / "ca.crt").read_bytes(), 0o444)
    _write(account / "namespace", NAMESPACE.encode(), 0o444)
    cert, key = tls.self_signed_pem(hosts=["nodepool-operator-metrics.nodepool-system.svc"])
    metrics_tls = volumes / "metrics-tls"
    _write(metrics_tls / tls.CERT_FILE, cert, 0o440)
    _write(metrics_tls / tls.KEY_FILE, key, 0o440)
    for directory in (cloud_token, account, metrics_tls):
        directory.chmod(0o755)
    return Mounted(cloud_token, account, metrics_tls, cert)


@pytest.fixture
def operator_in_image(
    image: Any, mounted: Mounted, simcloud: SimCloud, cluster: Cluster, tmp_path: Path
) -> Iterator[Operator]:
    config = image.config["config"]
    binds = {
        mounted.cloud_token: _mount_paths()["cloud-token"],
        mounted.service_account: SERVICE_ACCOUNT_DIR,
        mounted.metrics_tls: METRICS_TLS_DIR,
    }
    targets = {source: _inside(image.rootfs, target) for source, target in binds.items()}
    for target in targets.values():
        target.mkdir(parents=True, exist_ok=True)
    apiserver = json.loads(cluster.plane.state_file.read_text())["apiserver"]  # type: ignore[union-attr]
    host, port = apiserver.removeprefix("https://").rsplit(":", 1)
    uid, gid = config["User"].split(":")
    # What the kubelet puts in the environment: the image's, the Pod's, the Service's.
    environment = [
        *config["Env"],
        "HOME=/home/nodepool",
        f"CLOUD_ENDPOINT={simcloud.endpoint}",
        f"POD_NAMESPACE={NAMESPACE}",
        f"KUBERNETES_SERVICE_HOST={host}",
        f"KUBERNETES_SERVICE_PORT={port}",
    ]
    command = [
        "unshare", "--mount", "--propagation", "private", "--", "sh", "-c", ENTER, "enter",
        str(image.rootfs), " ".join(f"{source}:{target}" for source, target in targets.items()),
        "env", "-i", *environment,
        "unshare", f"--root={image.rootfs}", f"--wd={config['WorkingDir']}",
        f"--setuid={uid}", f"--setgid={gid}", "--",
        *config["Entrypoint"], *_args(simcloud.endpoint),
    ]  # fmt: skip
    operator = Operator("operator-in-image", command, tmp_path / "operator.log")
    operator.start()
    yield operator
    operator.stop()


def _inside(rootfs: Path, path: str) -> Path:
    """Where ``path`` of the image is on the host: its symbolic links followed inside the
    root filesystem (Debian's /var/run is a link to the absolute /run), never out of it."""
    current, parts = rootfs, list(PurePosixPath(path).parts[1:])
    while parts:
        part = parts.pop(0)
        if part == "..":
            current = current.parent if current != rootfs else rootfs
            continue
        candidate = current / part
        if candidate.is_symlink():
            link = PurePosixPath(os.readlink(candidate))
            if link.is_absolute():
                current, parts = rootfs, [*link.parts[1:], *parts]
            else:
                parts = [*link.parts, *parts]
            continue
        current = candidate
    return current


async def _get(url: str, token: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, headers=headers, ssl=False) as response,
    ):
        return response.status


def _process_facts(pid: int) -> tuple[str, list[str]]:
    """The process's root directory and its real/effective/saved/fs uids."""
    status = Path(f"/proc/{pid}/status").read_text()
    [uids] = re.findall(r"^Uid:\s+(.*)$", status, re.MULTILINE)
    return os.readlink(f"/proc/{pid}/root"), uids.split()


async def test_the_image_runs_as_deployed_scales_a_pool_and_serves_its_endpoints(
    image: Any,
    operator_in_image: Operator,
    mounted: Mounted,
    api_client: client.ApiClient,
) -> None:
    operator = operator_in_image
    probes = await operator.served("probes")
    metrics = await operator.served("metrics")
    assert operator.popen is not None
    root, uids = _process_facts(operator.popen.pid)
    assert Path(root) == image.rootfs
    assert uids == [str(RUN_AS)] * 4

    async def healthy() -> bool:
        return await _get(f"{probes}/healthz") == 200

    await wait_for(healthy, within=60)
    assert await _get(f"{metrics}/metrics") == 401
    port = int(metrics.rsplit(":", 1)[1])
    served = ssl.get_server_certificate(("127.0.0.1", port))
    assert x509.load_pem_x509_certificate(served.encode()) == x509.load_pem_x509_certificate(
        mounted.metrics_cert
    ), "the metrics endpoint does not serve the mounted certificate"

    custom = client.CustomObjectsApi(api_client)
    name = f"pool-{uuid.uuid4().hex[:6]}"
    await custom.create_cluster_custom_object(*POOLS, pool_body(name, target=0))
    try:
        await wait_for(lambda: settled(custom, name, 0), within=60)
        for target in (2, 0):
            patch = {"spec": {"targetNodes": target}}
            await custom.patch_cluster_custom_object(*POOLS, name, patch, _content_type=MERGE)
            pool = await wait_for(lambda t=target: settled(custom, name, t), within=120)
            assert pool["status"]["readyNodes"] == target
    finally:
        await remove_pool(custom, name)
    assert operator.running, operator.output()
    assert operator.errors_logged() == []
    assert "event=metrics-tls certificate=" + METRICS_TLS_DIR in operator.output()
