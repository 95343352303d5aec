"""Installing the operator's API and permissions into a cluster.

``install_crds`` creates or updates the three CRDs and waits until they are served.
``grant_operator_rbac``: grant the operator's own user of the local control plane the
deployed RBAC.

The local control plane has a client certificate for the user ``nodepool-operator``. Bound
to the ClusterRole and leader-election Role of ``deploy/rbac/`` (the same files a real
installation applies), it lets tests, benchmarks and the demo run the operator with
exactly the permissions it has in production: a missing permission fails there first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client

from nodepool_devtools.cluster import binaries
from nodepool_operator.api import crds

__all__ = ["OPERATOR_NAMESPACE", "OPERATOR_USER", "grant_operator_rbac", "install_crds"]

OPERATOR_USER = "nodepool-operator"
OPERATOR_NAMESPACE = "nodepool-system"
RBAC_API = "rbac.authorization.k8s.io"


def _deploy_directory() -> Path:
    return binaries.source_path("deploy/rbac")


def _binding(kind: str, name: str, role_kind: str, role: str, namespace: str | None) -> Any:
    metadata: dict[str, str] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": f"{RBAC_API}/v1",
        "kind": kind,
        "metadata": metadata,
        "roleRef": {"apiGroup": RBAC_API, "kind": role_kind, "name": role},
        "subjects": [{"kind": "User", "name": OPERATOR_USER, "apiGroup": RBAC_API}],
    }


async def grant_operator_rbac(api: client.ApiClient, *, rbac_dir: Path | None = None) -> None:
    """Create or update the operator's roles and bind them to its user; idempotent.

    The roles are replaced when they exist, so a cluster kept from an earlier run never
    runs the operator under rules older than ``deploy/rbac``.
    """
    directory = rbac_dir or _deploy_directory()
    cluster_role = yaml.safe_load((directory / "clusterrole.yaml").read_text())
    role = yaml.safe_load((directory / "leader-election-role.yaml").read_text())
    rbac = client.RbacAuthorizationV1Api(api)
    core = client.CoreV1Api(api)
    namespace = client.V1Namespace(metadata=client.V1ObjectMeta(name=OPERATOR_NAMESPACE))
    user_binding = "nodepool-operator-local-user"
    cluster_role_name = cluster_role["metadata"]["name"]
    role_name = role["metadata"]["name"]
    await _create_or(core.create_namespace(namespace))
    await _create_or(
        rbac.create_cluster_role(cluster_role),
        lambda: rbac.replace_cluster_role(cluster_role_name, cluster_role),
    )
    await _create_or(
        rbac.create_namespaced_role(OPERATOR_NAMESPACE, role),
        lambda: rbac.replace_namespaced_role(role_name, OPERATOR_NAMESPACE, role),
    )
    await _create_or(
        rbac.create_cluster_role_binding(
            _binding("ClusterRoleBinding", user_binding, "ClusterRole", cluster_role_name, None)
        )
    )
    await _create_or(
        rbac.create_namespaced_role_binding(
            OPERATOR_NAMESPACE,
            _binding("RoleBinding", user_binding, "Role", role_name, OPERATOR_NAMESPACE),
        )
    )


async def _create_or(
    create: Awaitable[Any], replace: Callable[[], Awaitable[Any]] | None = None
) -> None:
    """Await ``create``; if the object exists (409), await ``replace()`` if given."""
    try:
        await create
    except client.exceptions.ApiException as error:
        if error.status != 409:
            raise
        if replace is not None:
            await replace()


async def install_crds(api: client.ApiClient, *, within: float = 30.0) -> None:
    """Create or update the CRDs, then wait until each one is Established."""
    extensions = client.ApiextensionsV1Api(api)
    # The generated API accepts manifests as plain dicts; its annotations say model objects.
    manifests: list[Any] = crds.all_crds()
    for crd in manifests:
        name = crd["metadata"]["name"]
        try:
            existing = await extensions.read_custom_resource_definition(name)
        except client.exceptions.ApiException as error:
            if error.status != 404:
                raise
            await extensions.create_custom_resource_definition(crd)
            continue
        crd["metadata"]["resourceVersion"] = existing.metadata.resource_version
        await extensions.replace_custom_resource_definition(name, crd)
    custom = client.CustomObjectsApi(api)
    async with asyncio.timeout(within):
        for crd in manifests:
            await _wait_established(extensions, crd["metadata"]["name"])
            await _wait_served(custom, crd)


async def _wait_served(custom: client.CustomObjectsApi, crd: Any) -> None:
    # Established is not yet served: the storage of a new CRD answers 429 "storage is
    # (re)initializing" (or 404) for a moment after it, which every client would meet.
    spec = crd["spec"]
    while True:
        try:
            await custom.list_cluster_custom_object(
                spec["group"], spec["versions"][0]["name"], spec["names"]["plural"], limit=1
            )
            return
        except client.exceptions.ApiException as error:
            if error.status not in (404, 429, 503):
                raise
        await asyncio.sleep(0.1)


async def _wait_established(extensions: client.ApiextensionsV1Api, name: str) -> None:
    # Polling: a CRD becomes Established within a second, not worth a watch.
    while True:
        crd = await extensions.read_custom_resource_definition(name)
        conditions = (crd.status.conditions or []) if crd.status else []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return
        await asyncio.sleep(0.1)
