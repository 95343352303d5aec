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
import yaml
from kubernetes_asyncio import client

from harness import CLI, Operator, Process, SimCloud, wait_for
from nodepool_operator.api import crds
from nodepool_operator.cluster.pytest_plugin import Cluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.path):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
async def crds_installed(api_client: client.ApiClient) -> None:
    extensions = client.ApiextensionsV1Api(api_client)
    for crd in crds.all_crds():
        name = crd["metadata"]["name"]
        try:
            existing = await extensions.read_custom_resource_definition(name)
            crd["metadata"]["resourceVersion"] = existing.metadata.resource_version
            await extensions.replace_custom_resource_definition(name, crd)
        except client.exceptions.ApiException as error:
            if error.status != 404:
                raise
            await extensions.create_custom_resource_definition(crd)
    for crd in crds.all_crds():
        await wait_for(lambda n=crd["metadata"]["name"]: _established(extensions, n), within=30)


async def _established(extensions: client.ApiextensionsV1Api, name: str) -> bool:
    crd = await extensions.read_custom_resource_definition(name)
    return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])


REPO = Path(__file__).resolve().parents[2]
OPERATOR_USER = "nodepool-operator"


@pytest.fixture(scope="session")
async def operator_rbac(api_client: client.ApiClient) -> None:
    """The deployed ClusterRole and leader-election Role, bound to the operator's test user."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    core = client.CoreV1Api(api_client)
    with contextlib.suppress(client.exceptions.ApiException):
        await core.create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name="nodepool-system"))
        )
    cluster_role = yaml.safe_load((REPO / "deploy/rbac/clusterrole.yaml").read_text())
    role = yaml.safe_load((REPO / "deploy/rbac/leader-election-role.yaml").read_text())
    subject = [{"kind": "User", "name": OPERATOR_USER, "apiGroup": "rbac.authorization.k8s.io"}]
    bindings = [
        (rbac.create_cluster_role, (cluster_role,)),
        (rbac.create_namespaced_role, ("nodepool-system", role)),
        (
            rbac.create_cluster_role_binding,
            (
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": "nodepool-operator-test-user"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": cluster_role["metadata"]["name"],
                    },
                    "subjects": subject,
                },
            ),
        ),
        (
            rbac.create_namespaced_role_binding,
            (
                "nodepool-system",
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {
                        "name": "nodepool-operator-test-user",
                        "namespace": "nodepool-system",
                    },
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Role",
                        "name": role["metadata"]["name"],
                    },
                    "subjects": subject,
                },
            ),
        ),
    ]
    for create, args in bindings:
        try:
            await create(*args)
        except client.exceptions.ApiException as error:
            if error.status != 409:
                raise


@pytest.fixture
async def start_simcloud(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    started: list[SimCloud] = []

    async def start(*extra: str) -> SimCloud:
        port_file = tmp_path / f"simcloud-{len(started)}.port"
        args = [
            *CLI,
            "simcloud",
            "--state",
            str(tmp_path / "simcloud.sqlite3"),
            "--port",
            "0",
            "--port-file",
            str(port_file),
            *extra,
        ]
        cloud = SimCloud(Process("simcloud", args, tmp_path / "simcloud.log"), port_file)
        await cloud.start()
        started.append(cloud)
        return cloud

    yield start
    for cloud in started:
        if cloud.client is not None:
            await cloud.client.close()
        cloud.process.stop()


@pytest.fixture
def start_operator(
    cluster: Cluster, tmp_path: Path, operator_rbac: None
) -> Iterator[Callable[..., Operator]]:
    """Start `nodepool-operator run` as the `nodepool-operator` user, under the deployed RBAC."""
    started: list[Operator] = []

    def start(cloud: SimCloud, *extra: str, identity: str = "operator") -> Operator:
        kubeconfig = cluster.plane.kubeconfig_for(identity) if cluster.plane else cluster.kubeconfig
        args = [
            *CLI,
            "run",
            "--kubeconfig",
            str(kubeconfig),
            "--cloud-endpoint",
            cloud.endpoint,
            "--metrics-port",
            "0",
            "--metrics-host",
            "127.0.0.1",
            "--poll-interval",
            "0.5",
            "--leader-election-namespace",
            "nodepool-system",
            *extra,
        ]
        operator = Operator("operator", args, tmp_path / f"operator-{len(started)}.log")
        operator.start()
        started.append(operator)
        return operator

    yield start
    for operator in started:
        operator.stop()


@pytest.fixture
async def pool_name(api_client: client.ApiClient, crds_installed: None) -> AsyncIterator[str]:
    """A unique NodePool name; the pool is deleted at the end while the operator still runs."""
    name = f"pool-{uuid.uuid4().hex[:6]}"
    yield name
    custom = client.CustomObjectsApi(api_client)
    group = ("nodepool.dev", "v1alpha1", "nodepools")
    with contextlib.suppress(client.exceptions.ApiException):
        await custom.delete_cluster_custom_object(*group, name)

    async def gone() -> bool:
        try:
            await custom.get_cluster_custom_object(*group, name)
        except client.exceptions.ApiException as error:
            return error.status == 404
        return False

    try:
        await wait_for(gone, within=30)
    except AssertionError:
        # The operator that would have cleaned up is gone: leave no object behind.
        with contextlib.suppress(client.exceptions.ApiException):
            await custom.patch_cluster_custom_object(
                *group,
                name,
                {"metadata": {"finalizers": None}},
                _content_type="application/merge-patch+json",
            )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes a minute or more")
