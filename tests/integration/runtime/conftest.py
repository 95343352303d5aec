"""Fixtures for the runtime's integration tests: the Gadget CRD and a client of their own.

Each test also gets its own namespace (the plugin's fixture), so its informers see only its
own objects.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from harness import wait_for
from integration.runtime.support import FIELD_MANAGER, GADGET_CRD, GADGETS, GROUP
from nodepool_devtools.cluster.pytest_plugin import Cluster
from nodepool_operator.runtime.client import Client, Resource


@pytest.fixture(scope="session")
async def gadget_crd(api_client: k8s.ApiClient) -> AsyncIterator[Resource]:
    extensions = k8s.ApiextensionsV1Api(api_client)
    name = GADGET_CRD["metadata"]["name"]
    try:
        await extensions.create_custom_resource_definition(GADGET_CRD)
    except k8s.exceptions.ApiException as error:
        if error.status != 409:
            raise

    async def established() -> bool:
        crd = await extensions.read_custom_resource_definition(name)
        return any(
            c.type == "Established" and c.status == "True" for c in crd.status.conditions or []
        )

    await wait_for(established, within=30, every=0.05)
    # Established means served, but the first requests can still meet a 404 for a moment
    # while the discovery and handler chains catch up: wait until a LIST answers.
    custom = k8s.CustomObjectsApi(api_client)

    async def listable() -> bool:
        try:
            await custom.list_cluster_custom_object(GROUP, "v1", GADGETS.plural, limit=1)
        except k8s.exceptions.ApiException:
            return False
        return True

    await wait_for(listable, within=30, every=0.05)
    yield GADGETS
    with contextlib.suppress(k8s.exceptions.ApiException):
        await extensions.delete_custom_resource_definition(name)


@pytest.fixture
async def client(cluster: Cluster, gadget_crd: Resource) -> AsyncIterator[Client]:
    """A Client on a connection pool of its own, as an operator process would have."""
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(
        config_file=str(cluster.kubeconfig), client_configuration=configuration
    )
    async with k8s.ApiClient(configuration) as api:
        yield Client(api, field_manager=FIELD_MANAGER)
