"""The runtime Client against the real API server: typed errors, pagination, field managers."""

from __future__ import annotations

import itertools
import uuid

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from harness import wait_for
from integration.runtime.support import GADGETS, gadget
from nodepool_devtools.cluster.pytest_plugin import Cluster
from nodepool_operator import timestamps
from nodepool_operator.runtime import errors
from nodepool_operator.runtime.client import Client


async def test_each_refusal_arrives_as_its_typed_error(client: Client, namespace: str) -> None:
    name = f"g-{uuid.uuid4().hex[:6]}"
    created = await client.create(GADGETS, gadget(name, namespace))
    with pytest.raises(errors.AlreadyExists):
        await client.create(GADGETS, gadget(name, namespace))
    with pytest.raises(errors.NotFound):
        await client.get(GADGETS, "missing", namespace=namespace)
    await client.patch(GADGETS, name, {"spec": {"size": 2}}, namespace=namespace)
    created["spec"]["size"] = 3
    with pytest.raises(errors.Conflict) as conflict:
        await client.replace(GADGETS, created)  # the resourceVersion it carries is stale
    assert conflict.value.transient
    with pytest.raises(errors.Invalid) as invalid:
        await client.patch(GADGETS, name, {"spec": {"size": -1}}, namespace=namespace)
    assert not invalid.value.transient
    with pytest.raises(errors.Conflict):
        await client.delete(GADGETS, name, namespace=namespace, uid="not-its-uid")
    await client.delete(GADGETS, name, namespace=namespace, uid=created["metadata"]["uid"])


async def test_a_user_without_rights_is_forbidden_to_read_and_to_watch(
    cluster: Cluster, gadget_crd: object, namespace: str
) -> None:
    if cluster.plane is None:
        pytest.skip("needs the local control plane's unprivileged identities")
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(
        config_file=str(cluster.plane.kubeconfig_for("kube-scheduler")),
        client_configuration=configuration,
    )
    async with k8s.ApiClient(configuration) as api:
        stranger = Client(api, field_manager="stranger")
        with pytest.raises(errors.Forbidden):
            await stranger.list_page(GADGETS, namespace=namespace)
        with pytest.raises(errors.Forbidden):
            async for _ in stranger.watch(GADGETS, resource_version="0", namespace=namespace):
                pass


async def test_list_pages_follow_the_continue_token(client: Client, namespace: str) -> None:
    names = sorted(f"g{i}-{uuid.uuid4().hex[:4]}" for i in range(5))
    for name in names:
        await client.create(GADGETS, gadget(name, namespace))
    seen: list[str] = []
    pages = 0
    token: str | None = None
    while True:
        page = await client.list_page(GADGETS, namespace=namespace, limit=2, continue_token=token)
        pages += 1
        seen += [item["metadata"]["name"] for item in page["items"]]
        token = page["metadata"].get("continue") or None
        if not token:
            break
    assert (pages, seen) == (3, names)


async def test_a_status_patch_is_recorded_with_its_time_under_the_clients_field_manager(
    client: Client, namespace: str
) -> None:
    """The Autoscaler times its status holds from this record (its last status write,
    which survives a restart): each merge patch of ``/status`` that changes a value shows
    in ``managedFields`` as the entry of the client's field manager for the ``status``
    subresource, whose time (to the second) the write moves."""
    name = f"g-{uuid.uuid4().hex[:6]}"
    await client.create(GADGETS, gadget(name, namespace))
    counts = itertools.count(1)

    async def status_write_time() -> str:
        patched = await client.patch(
            GADGETS,
            name,
            {"status": {"count": next(counts)}},
            namespace=namespace,
            subresource="status",
        )
        [entry] = [
            entry
            for entry in patched["metadata"]["managedFields"]
            if entry["manager"] == client.field_manager and entry.get("subresource") == "status"
        ]
        assert entry["operation"] == "Update"
        return str(entry["time"])

    first = await status_write_time()
    assert timestamps.parse_rfc3339(first) is not None

    async def moved() -> bool:
        return await status_write_time() != first

    await wait_for(moved, within=10, every=0.5)
