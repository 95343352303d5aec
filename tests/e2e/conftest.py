"""End-to-end fixtures: the real control plane, a simcloud process, an operator process.

Everything a user runs is a separate process here, started from the same command line
a user types, so a crash, a SIGKILL or a restart is the real thing.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from e2e.scenes import Operators, World
from harness import AUTOSCALERS, CLI, Operator, Process, SimCloud, operator_args, remove_pool
from nodepool_devtools.cluster import install
from nodepool_devtools.cluster.pytest_plugin import Cluster
from nodepool_operator.cloud import credentials


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.path):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
async def crds_installed(api_client: client.ApiClient) -> None:
    await install.install_crds(api_client)


@pytest.fixture(scope="session")
async def operator_rbac(api_client: client.ApiClient) -> None:
    """The deployed ClusterRole and leader-election Role, bound to the operator's test user."""
    await install.grant_operator_rbac(api_client)


@pytest.fixture
async def start_simcloud(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    started: list[SimCloud] = []

    async def start(*extra: str) -> SimCloud:
        """A simcloud requiring a bearer token (one per test; a restart keeps it)."""
        port_file = tmp_path / f"simcloud-{len(started)}.port"
        token_file = tmp_path / "simcloud.token"
        if not token_file.exists():
            credentials.write_new_token(token_file)
        args = [
            *CLI,
            "simcloud",
            "--state",
            str(tmp_path / "simcloud.sqlite3"),
            "--port",
            "0",
            "--port-file",
            str(port_file),
            "--token-file",
            str(token_file),
            *extra,
        ]
        process = Process("simcloud", args, tmp_path / "simcloud.log")
        cloud = SimCloud(process, port_file, token_file)
        await cloud.start()
        started.append(cloud)
        return cloud

    yield start
    for cloud in started:
        if cloud.client is not None:
            await cloud.client.close()
        cloud.process.stop()


@pytest.fixture
def start_hollow_simcloud(
    cluster: Cluster, start_simcloud: Callable[..., Any]
) -> Callable[..., Any]:
    """Start a simcloud whose VMs boot real (hollow) kubelets into the test cluster
    (``--kubelets hollow``, as the cluster's admin). Its VMs say they boot their own
    kubelet, so an operator with the default flags never annotates their Nodes for kwok."""

    async def start(*extra: str) -> SimCloud:
        hollow = ("--kubelets", "hollow", "--kubelet-kubeconfig", str(cluster.kubeconfig))
        cloud: SimCloud = await start_simcloud(*hollow, *extra)
        return cloud

    return start


@pytest.fixture
def start_operator(
    cluster: Cluster, tmp_path: Path, operator_rbac: None
) -> Iterator[Callable[..., Operator]]:
    """Start `nodepool-operator run` as the `nodepool-operator` user, under the deployed RBAC."""
    operators = Operators(tmp_path)

    def start(cloud: SimCloud, *extra: str, identity: str = "operator") -> Operator:
        reach = ("--cloud-endpoint", cloud.endpoint, "--cloud-token-file", str(cloud.token_file))
        return operators.start(
            [*CLI, *operator_args(cluster.kubeconfig_for(identity), *reach), *extra]
        )

    yield start
    operators.stop_all()


@pytest.fixture
async def pool_name(api_client: client.ApiClient, crds_installed: None) -> AsyncIterator[str]:
    """A unique NodePool name; the pool is deleted at the end while the operator still runs."""
    name = f"pool-{uuid.uuid4().hex[:6]}"
    yield name
    await remove_pool(client.CustomObjectsApi(api_client), name)


@pytest.fixture
async def autoscaler_name(api_client: client.ApiClient, crds_installed: None) -> AsyncIterator[str]:
    """A unique Autoscaler name; the Autoscaler is deleted at the end."""
    name = f"nas-{uuid.uuid4().hex[:6]}"
    yield name
    custom = client.CustomObjectsApi(api_client)
    with contextlib.suppress(client.exceptions.ApiException):
        await custom.delete_cluster_custom_object(*AUTOSCALERS, name)


@pytest.fixture
def world(
    api_client: client.ApiClient,
    cluster: Cluster,
    start_simcloud: Callable[..., Any],
    start_hollow_simcloud: Callable[..., Any],
    start_operator: Callable[..., Operator],
    pool_name: str,
    autoscaler_name: str,
    namespace: str,
) -> World:
    """What an e2e test works in (``World``). The names come after the starters, so the
    namespace, the Autoscaler and the pool are removed while the operator still runs."""
    return World(
        api_client,
        cluster,
        pool_name,
        autoscaler_name,
        namespace,
        start_simcloud,
        start_hollow_simcloud,
        start_operator,
    )


@pytest.fixture
async def operator(world: World) -> Operator:
    """An operator, against a simcloud whose VMs boot in one second."""
    _, started = await world.operated(latency=1)
    return started


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes a minute or more")
