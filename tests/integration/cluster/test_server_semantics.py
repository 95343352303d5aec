"""What the operator relies on, proven on the real kube-apiserver, etcd and kube-scheduler.

A throwaway CRD with the status subresource stands in for our kinds, so these facts hold
independently of the operator's own schemas.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

import crds
from harness import wait_for
from nodepool_devtools.cluster.pytest_plugin import Cluster

GROUP = "semantics.test.nodepool.dev"
PLURAL = "widgets"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"

WIDGET_CRD = crds.crd_with_status(
    group=GROUP,
    plural=PLURAL,
    kind="Widget",
    scope="Cluster",
    spec={
        "size": {"type": "integer", "minimum": 0},
        "color": {"type": "string"},
        "shape": {"type": "string"},
    },
    status={"phase": {"type": "string"}},
)


@pytest.fixture(scope="module")
async def widgets(api_client: client.ApiClient) -> AsyncIterator[client.CustomObjectsApi]:
    extensions = client.ApiextensionsV1Api(api_client)
    try:
        await extensions.create_custom_resource_definition(WIDGET_CRD)
    except ApiException as error:
        if error.status != 409:
            raise
    await _wait_established(extensions, WIDGET_CRD["metadata"]["name"])
    yield client.CustomObjectsApi(api_client)
    await extensions.delete_custom_resource_definition(WIDGET_CRD["metadata"]["name"])


async def _wait_established(extensions: client.ApiextensionsV1Api, name: str) -> None:
    for _ in range(200):
        crd = await extensions.read_custom_resource_definition(name)
        conditions = crd.status.conditions or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"CRD {name} never became Established")


@pytest.fixture
async def widget(widgets: client.CustomObjectsApi) -> AsyncIterator[dict[str, Any]]:
    name = f"w-{uuid.uuid4().hex[:8]}"
    body = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": 1, "color": "red"},
    }
    created: dict[str, Any] = await widgets.create_cluster_custom_object(GROUP, "v1", PLURAL, body)
    yield created
    await widgets.delete_cluster_custom_object(GROUP, "v1", PLURAL, name)


def _meta(obj: dict[str, Any]) -> tuple[int, int]:
    return obj["metadata"]["generation"], int(obj["metadata"]["resourceVersion"])


async def _patch(
    widgets: client.CustomObjectsApi, name: str, body: dict[str, Any], **options: Any
) -> dict[str, Any]:
    """Patch widget ``name``: a merge patch, unless ``options`` name another content type."""
    options.setdefault("_content_type", MERGE)
    patched: dict[str, Any] = await widgets.patch_cluster_custom_object(
        GROUP, "v1", PLURAL, name, body, **options
    )
    return patched


def _status_body(error: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(error.body)
    return body


async def test_spec_change_bumps_generation_and_resource_version(
    widgets: client.CustomObjectsApi, widget: dict[str, Any]
) -> None:
    generation, version = _meta(widget)
    patched = await _patch(widgets, widget["metadata"]["name"], {"spec": {"size": 2}})
    new_generation, new_version = _meta(patched)
    assert new_generation == generation + 1
    assert new_version > version


@pytest.mark.parametrize("field", ["labels", "annotations"])
async def test_metadata_change_bumps_only_resource_version(
    widgets: client.CustomObjectsApi, widget: dict[str, Any], field: str
) -> None:
    generation, version = _meta(widget)
    patch = {"metadata": {field: {"team": "blue"}}}
    patched = await _patch(widgets, widget["metadata"]["name"], patch)
    new_generation, new_version = _meta(patched)
    assert new_generation == generation
    assert new_version > version
    assert patched["metadata"][field] == {"team": "blue"}


async def test_status_write_never_bumps_generation_nor_changes_spec(
    widgets: client.CustomObjectsApi, widget: dict[str, Any]
) -> None:
    generation, version = _meta(widget)
    sneaky = dict(widget, spec={"size": 99, "color": "blue"}, status={"phase": "Ready"})
    updated = await widgets.replace_cluster_custom_object_status(
        GROUP, "v1", PLURAL, widget["metadata"]["name"], sneaky
    )
    new_generation, new_version = _meta(updated)
    assert new_generation == generation
    assert new_version > version
    assert updated["status"] == {"phase": "Ready"}
    assert updated["spec"] == {"size": 1, "color": "red"}


async def test_put_with_stale_resource_version_is_409_conflict(
    widgets: client.CustomObjectsApi, widget: dict[str, Any]
) -> None:
    name = widget["metadata"]["name"]
    await _patch(widgets, name, {"spec": {"size": 5}})
    stale = dict(widget, spec={"size": 7, "color": "red"})
    with pytest.raises(ApiException) as raised:
        await widgets.replace_cluster_custom_object(GROUP, "v1", PLURAL, name, stale)
    assert raised.value.status == 409
    assert _status_body(raised.value)["reason"] == "Conflict"
    current = await widgets.get_cluster_custom_object(GROUP, "v1", PLURAL, name)
    assert current["spec"]["size"] == 5


async def test_two_appliers_of_one_field_conflict_unless_forced(
    widgets: client.CustomObjectsApi, widget: dict[str, Any]
) -> None:
    name = widget["metadata"]["name"]
    base = {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": name}}
    square = dict(base, spec={"shape": "square"})
    await _patch(
        widgets,
        name,
        dict(base, spec={"shape": "round"}),
        field_manager="first",
        _content_type=APPLY,
    )
    with pytest.raises(ApiException) as raised:
        await _patch(widgets, name, square, field_manager="second", _content_type=APPLY)
    assert raised.value.status == 409
    assert "first" in _status_body(raised.value)["message"]
    forced = await _patch(
        widgets, name, square, field_manager="second", force=True, _content_type=APPLY
    )
    assert forced["spec"]["shape"] == "square"


async def test_schema_violation_is_422_invalid(
    widgets: client.CustomObjectsApi, widget: dict[str, Any]
) -> None:
    with pytest.raises(ApiException) as raised:
        await _patch(widgets, widget["metadata"]["name"], {"spec": {"size": -1}})
    assert raised.value.status == 422
    assert _status_body(raised.value)["reason"] == "Invalid"


async def test_audit_log_records_each_write_with_its_response_code(
    cluster: Cluster, widgets: client.CustomObjectsApi
) -> None:
    log = cluster.audit_log()
    log.mark()
    name = f"w-{uuid.uuid4().hex[:8]}"
    body = {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": name}}
    await widgets.create_cluster_custom_object(GROUP, "v1", PLURAL, body)
    with pytest.raises(ApiException):
        await widgets.create_cluster_custom_object(GROUP, "v1", PLURAL, body)
    await widgets.delete_cluster_custom_object(GROUP, "v1", PLURAL, name)
    mine = [e for e in log.events_since_mark() if e.name == name and e.resource == PLURAL]
    assert [(e.verb, e.code) for e in mine] == [("create", 201), ("create", 409), ("delete", 200)]
    assert {e.user for e in mine} == {"nodepool-admin"}
    assert all(e.user_agent for e in mine)


def _pod(name: str, cpu: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "example.invalid/app",
                    "resources": {"requests": {"cpu": cpu}},
                }
            ],
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}],
        },
    }


def _fake_node(name: str, cpu: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
        },
        "status": {
            "capacity": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
        },
    }


async def test_scheduler_marks_unfitting_pod_unschedulable_then_binds_it_to_a_new_node(
    api_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api_client)
    pod_name = "needs-64-cpus"
    await core.create_namespaced_pod(namespace, _pod(pod_name, "64"))

    async def unschedulable() -> bool:
        pod = await core.read_namespaced_pod(pod_name, namespace)
        conditions = pod.status.conditions or []
        return any(
            c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
            for c in conditions
        )

    await wait_for(unschedulable)
    node_name = f"kwok-{uuid.uuid4().hex[:8]}"
    await core.create_node(_fake_node(node_name, "96"))
    try:

        async def running_on_node() -> bool:
            pod = await core.read_namespaced_pod(pod_name, namespace)
            return bool(pod.spec.node_name == node_name and pod.status.phase == "Running")

        await wait_for(running_on_node)
        node = await core.read_node(node_name)
        ready = [c for c in node.status.conditions or [] if c.type == "Ready"]
        assert [c.status for c in ready] == ["True"]
    finally:
        await core.delete_namespaced_pod(pod_name, namespace, grace_period_seconds=0)
        await core.delete_node(node_name)
