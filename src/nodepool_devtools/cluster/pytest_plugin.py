"""A pytest plugin: the local control plane as a session fixture, a namespace per test.

Use it with ``pytest_plugins = ["nodepool_devtools.cluster.pytest_plugin"]``. The control
plane is started once per session, lazily: a run of unit tests alone never builds or starts
it. Set NODEPOOL_TEST_EXISTING_CLUSTER=1 to run the integration tests
against the cluster of $KUBECONFIG instead (tests that read the audit log then skip).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config

from nodepool_devtools.cluster import audit, controlplane

__all__ = [
    "EXISTING_CLUSTER_ENV",
    "Cluster",
    "api_client",
    "cluster",
    "connected",
    "local_plane",
    "namespace",
]

EXISTING_CLUSTER_ENV = "NODEPOOL_TEST_EXISTING_CLUSTER"


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path
    plane: controlplane.ControlPlane | None

    def kubeconfig_for(self, identity: str) -> Path:
        """The kubeconfig of ``identity``'s user on the local control plane; on an existing
        cluster, the one kubeconfig there is."""
        return self.plane.kubeconfig_for(identity) if self.plane else self.kubeconfig

    def audit_log(self) -> audit.AuditLog:
        if self.plane is None:
            pytest.skip("the audit log is only readable on the local control plane")
        return audit.AuditLog(self.plane.audit_log)


@contextlib.contextmanager
def local_plane(
    directory: Path, *, node_silence_seconds: int = controlplane.NODE_SILENCE_SECONDS
) -> Iterator[controlplane.ControlPlane]:
    """A local control plane in ``directory``, up for the block and down after it
    (``node_silence_seconds``: as ``ControlPlane`` says)."""
    plane = controlplane.ControlPlane(directory, node_silence_seconds=node_silence_seconds)
    plane.up()
    try:
        yield plane
    finally:
        plane.down()


@contextlib.asynccontextmanager
async def connected(kubeconfig: Path) -> AsyncIterator[client.ApiClient]:
    """An API client for the cluster of ``kubeconfig``, closed after the block."""
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api:
        yield api


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if os.environ.get(EXISTING_CLUSTER_ENV) == "1":
        kubeconfig = os.environ.get("KUBECONFIG", str(Path.home() / ".kube" / "config"))
        yield Cluster(kubeconfig=Path(kubeconfig), plane=None)
        return
    with local_plane(tmp_path_factory.mktemp("control-plane")) as plane:
        yield Cluster(kubeconfig=plane.kubeconfig, plane=plane)


@pytest.fixture(scope="session")
async def api_client(cluster: Cluster) -> AsyncIterator[client.ApiClient]:
    async with connected(cluster.kubeconfig) as api:
        yield api


@pytest.fixture
async def namespace(api_client: client.ApiClient) -> AsyncIterator[str]:
    """A namespace of this test's own, deleted (with everything in it) afterwards."""
    name = f"test-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api_client)
    await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    await core.delete_namespace(name)
