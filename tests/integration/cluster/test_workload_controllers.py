"""The workload controllers of the local control plane, proven by what they make happen.

DaemonSets, StatefulSets, Jobs, CronJobs and Services are handled by kube-controller-manager
and their Pods are run by kwok, as in a real cluster. Each test gets kwok Nodes of its own,
labelled and tainted with a value unique to the test: its Pods select and tolerate exactly
those Nodes, and no other test's Pods land on them.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from harness import wait_for

RUN_KEY = "workloads.test.nodepool.dev/run"
APP = "app"


@dataclass
class OwnNodes:
    """kwok Nodes that only this test's Pods select and tolerate."""

    core: client.CoreV1Api
    run: str
    names: list[str] = field(default_factory=list)

    async def add(self, *, extra_taints: tuple[dict[str, str], ...] = ()) -> str:
        name = f"kwok-{self.run}-{len(self.names)}"
        taint = {"key": RUN_KEY, "value": self.run, "effect": "NoSchedule"}
        await self.core.create_node(
            {
                "metadata": {
                    "name": name,
                    "annotations": {"kwok.x-k8s.io/node": "fake"},
                    "labels": {"kubernetes.io/hostname": name, RUN_KEY: self.run},
                },
                "spec": {"taints": [taint, *extra_taints]},
                "status": {
                    "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                    "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                },
            }
        )
        self.names.append(name)
        return name

    def pod_template(self, labels: dict[str, str]) -> dict[str, Any]:
        return {
            "metadata": {"labels": labels},
            "spec": {
                "nodeSelector": {RUN_KEY: self.run},
                "tolerations": [
                    {"key": RUN_KEY, "operator": "Equal", "value": self.run, "effect": "NoSchedule"}
                ],
                "containers": [{"name": "app", "image": "example.invalid/app"}],
            },
        }


@pytest.fixture
async def own_nodes(api_client: client.ApiClient) -> AsyncIterator[OwnNodes]:
    nodes = OwnNodes(client.CoreV1Api(api_client), uuid.uuid4().hex[:8])
    yield nodes
    for name in nodes.names:
        with contextlib.suppress(ApiException):
            await nodes.core.delete_node(name)
    # With their Node gone nothing would finish these Pods until the pod garbage collector's
    # quarantine ends, and the test's namespace would wait for them that long.
    for name in nodes.names:
        left = await nodes.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}")
        for pod in left.items:
            with contextlib.suppress(ApiException):
                await nodes.core.delete_namespaced_pod(
                    pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
                )


@pytest.fixture
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture
def apps(api_client: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api_client)


@pytest.fixture
def batch(api_client: client.ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(api_client)


def _running_and_ready(pod: Any) -> bool:
    conditions = pod.status.conditions or []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    return bool(pod.status.phase == "Running" and ready and pod.metadata.deletion_timestamp is None)


def _running(
    core: client.CoreV1Api, namespace: str, selector: str
) -> Callable[[], Awaitable[dict[str, str]]]:
    """A poll for the Pods matching ``selector`` that run: their names and Nodes."""

    async def poll() -> dict[str, str]:
        pods = await core.list_namespaced_pod(namespace, label_selector=selector)
        return {p.metadata.name: p.spec.node_name for p in pods.items if _running_and_ready(p)}

    return poll


async def test_daemonset_runs_one_pod_on_every_node_it_may_use(
    core: client.CoreV1Api, apps: client.AppsV1Api, namespace: str, own_nodes: OwnNodes
) -> None:
    first = await own_nodes.add()
    second = await own_nodes.add()
    # A taint the DaemonSet does not tolerate keeps its Pod off this Node.
    await own_nodes.add(extra_taints=({"key": "dedicated", "value": "x", "effect": "NoSchedule"},))
    labels = {APP: "daemon"}
    await apps.create_namespaced_daemon_set(
        namespace,
        {
            "metadata": {"name": "daemon"},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": own_nodes.pod_template(labels),
            },
        },
    )

    async def on_nodes(expected: set[str]) -> bool:
        daemon = await apps.read_namespaced_daemon_set_status("daemon", namespace)
        status = daemon.status
        placed = await _running(core, namespace, "app=daemon")()
        return (
            status.desired_number_scheduled == len(expected)
            and status.number_ready == len(expected)
            and sorted(placed.values()) == sorted(expected)
        )

    await wait_for(lambda: on_nodes({first, second}))

    # A Node added later gets its Pod too.
    third = await own_nodes.add()
    await wait_for(lambda: on_nodes({first, second, third}))
    pods = await core.list_namespaced_pod(namespace, label_selector="app=daemon")
    assert all(p.metadata.owner_references[0].kind == "DaemonSet" for p in pods.items)


async def test_statefulset_creates_each_pod_after_the_previous_one_is_ready(
    core: client.CoreV1Api, apps: client.AppsV1Api, namespace: str, own_nodes: OwnNodes
) -> None:
    await own_nodes.add()
    labels = {APP: "web"}
    await core.create_namespaced_service(
        namespace,
        {"metadata": {"name": "web"}, "spec": {"clusterIP": "None", "selector": labels}},
    )
    # Watch from before the StatefulSet exists: the stream orders every change to its Pods.
    start = (await core.list_namespaced_pod(namespace)).metadata.resource_version
    await apps.create_namespaced_stateful_set(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {
                "serviceName": "web",
                "replicas": 3,
                "podManagementPolicy": "OrderedReady",
                "selector": {"matchLabels": labels},
                "template": own_nodes.pod_template(labels),
            },
        },
    )
    seen: list[tuple[str, bool]] = []  # (pod, running and ready), in the order of the stream
    stream = watch.Watch()
    async with asyncio.timeout(60):
        async for event in stream.stream(
            core.list_namespaced_pod, namespace, label_selector="app=web", resource_version=start
        ):
            pod = event["object"]
            seen.append((pod.metadata.name, _running_and_ready(pod)))
            if {name for name, ready in seen if ready} == {"web-0", "web-1", "web-2"}:
                break
    stream.stop()

    def first(name: str, *, ready: bool = False) -> int:
        return next(i for i, (n, r) in enumerate(seen) if n == name and (r or not ready))

    assert first("web-0") < first("web-0", ready=True) < first("web-1")
    assert first("web-1") < first("web-1", ready=True) < first("web-2")

    async def counted_ready() -> bool:
        # The controller writes its status after the pods it saw turn Ready: a moment later.
        web = await apps.read_namespaced_stateful_set_status("web", namespace)
        return bool(web.status.ready_replicas == 3)

    await wait_for(counted_ready, within=30)


@pytest.fixture
async def job_template(own_nodes: OwnNodes) -> dict[str, Any]:
    """A Job's Pod template (it never restarts) for the one Node this adds."""
    await own_nodes.add()
    template = own_nodes.pod_template({})
    template["spec"]["restartPolicy"] = "Never"
    return template


async def test_job_runs_its_pod(
    api_client: client.ApiClient,
    batch: client.BatchV1Api,
    namespace: str,
    own_nodes: OwnNodes,
    job_template: dict[str, Any],
) -> None:
    core = client.CoreV1Api(api_client)
    await batch.create_namespaced_job(
        namespace, {"metadata": {"name": "once"}, "spec": {"template": job_template}}
    )

    running = await wait_for(_running(core, namespace, "batch.kubernetes.io/job-name=once"))
    assert list(running.values()) == own_nodes.names

    async def counted_active() -> bool:
        job = await batch.read_namespaced_job_status("once", namespace)
        return bool(job.status.active == 1)

    await wait_for(counted_active)


async def test_finished_job_is_deleted_after_its_ttl(
    batch: client.BatchV1Api, namespace: str, job_template: dict[str, Any]
) -> None:
    # kwok never completes a Pod, so the Job finishes by its deadline: Failed, then deleted.
    spec = {"activeDeadlineSeconds": 2, "ttlSecondsAfterFinished": 0, "template": job_template}
    await batch.create_namespaced_job(namespace, {"metadata": {"name": "short"}, "spec": spec})

    async def gone() -> bool:
        try:
            await batch.read_namespaced_job("short", namespace)
        except ApiException as error:
            return error.status == 404
        return False

    await wait_for(gone, within=60)


async def test_cronjob_starts_a_job_on_schedule(
    batch: client.BatchV1Api, namespace: str, job_template: dict[str, Any]
) -> None:
    every_minute = {
        "schedule": "* * * * *",
        "concurrencyPolicy": "Forbid",
        "jobTemplate": {"spec": {"template": job_template}},
    }
    await batch.create_namespaced_cron_job(
        namespace, {"metadata": {"name": "every-minute"}, "spec": every_minute}
    )

    async def started() -> list[str]:
        jobs = await batch.list_namespaced_job(namespace)
        return [
            j.metadata.name
            for j in jobs.items
            if any(o.kind == "CronJob" for o in j.metadata.owner_references or [])
        ]

    # The first run is at the next minute boundary.
    jobs = await wait_for(started, within=90, every=1)
    assert all(name.startswith("every-minute-") for name in jobs)


async def test_service_gets_endpointslice_and_endpoints_with_its_running_pods(
    api_client: client.ApiClient, namespace: str, own_nodes: OwnNodes
) -> None:
    core = client.CoreV1Api(api_client)
    discovery = client.DiscoveryV1Api(api_client)
    await own_nodes.add()
    labels = {APP: "backend"}
    for name in ("backend-a", "backend-b"):
        pod = own_nodes.pod_template(labels)
        pod["metadata"]["name"] = name
        await core.create_namespaced_pod(namespace, pod)
    await core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "backend"},
            "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    )
    both = {"backend-a", "backend-b"}
    running = await wait_for(lambda: _when_complete(_running(core, namespace, "app=backend"), both))

    async def sliced() -> dict[str, str]:
        slices = await discovery.list_namespaced_endpoint_slice(
            namespace, label_selector="kubernetes.io/service-name=backend"
        )
        return {
            e.target_ref.name: e.addresses[0]
            for s in slices.items
            for e in s.endpoints or []
            if e.conditions.ready
        }

    addresses = await wait_for(lambda: _when_complete(sliced, set(running)))
    pods = await core.list_namespaced_pod(namespace, label_selector="app=backend")
    assert addresses == {p.metadata.name: p.status.pod_ip for p in pods.items}
    assert len(set(addresses.values())) == 2  # kwok gave each Pod an IP of its own

    async def endpoints() -> dict[str, str]:
        found = await core.read_namespaced_endpoints("backend", namespace)
        return {a.target_ref.name: a.ip for subset in found.subsets or [] for a in subset.addresses}

    assert await wait_for(lambda: _when_complete(endpoints, set(running))) == addresses


async def test_pod_sent_back_to_pending_with_its_ip_runs_again_with_the_same_ip(
    api_client: client.ApiClient, namespace: str, own_nodes: OwnNodes
) -> None:
    """kwok plays its running stage again on a Pod that already has an IP (seen on a
    50,000-Pod cluster); the Pod must run again with the IP it had, not be refused for
    two, nor given a new one, and a condition another writer set stays."""
    core = client.CoreV1Api(api_client)
    await own_nodes.add()
    pod = own_nodes.pod_template({APP: "again"})
    pod["metadata"]["name"] = "again"
    await core.create_namespaced_pod(namespace, pod)
    await wait_for(lambda: _when_complete(_running(core, namespace, "app=again"), {"again"}))
    first = await core.read_namespaced_pod("again", namespace)
    assert first.status.pod_ip
    assert [ip.ip for ip in first.status.pod_ips] == [first.status.pod_ip]

    # A reason kube-controller-manager's disruption controller leaves alone: it resets any
    # other DisruptionTarget on a Pod not being deleted to False once 2 minutes old.
    someone_elses = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "TerminationByKubelet",
        "message": "set by this test, not by kwok",
        "lastTransitionTime": "2026-01-02T03:04:05Z",
    }
    await core.patch_namespaced_pod_status(
        "again",
        namespace,
        {
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "Ready", "status": "False"}, someone_elses],
            }
        },
        _content_type="application/merge-patch+json",
    )
    back = await wait_for(lambda: _when_complete(_running(core, namespace, "app=again"), {"again"}))
    assert back == {"again": own_nodes.names[0]}
    again = await core.read_namespaced_pod("again", namespace)
    assert again.status.pod_ip == first.status.pod_ip
    assert [ip.ip for ip in again.status.pod_ips] == [first.status.pod_ip]
    [kept] = [c for c in again.status.conditions if c.type == "DisruptionTarget"]
    assert (kept.status, kept.reason, kept.message) == (
        "True",
        "TerminationByKubelet",
        someone_elses["message"],
    )


async def test_endpoints_of_a_service_without_selector_are_mirrored_to_a_slice(
    api_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api_client)
    discovery = client.DiscoveryV1Api(api_client)
    await core.create_namespaced_service(
        namespace, {"metadata": {"name": "external"}, "spec": {"ports": [{"port": 443}]}}
    )
    await core.create_namespaced_endpoints(
        namespace,
        {
            "metadata": {"name": "external"},
            "subsets": [{"addresses": [{"ip": "192.0.2.10"}], "ports": [{"port": 443}]}],
        },
    )

    async def mirrored() -> list[str]:
        slices = await discovery.list_namespaced_endpoint_slice(
            namespace,
            label_selector="endpointslice.kubernetes.io/managed-by="
            "endpointslicemirroring-controller.k8s.io",
        )
        return [a for s in slices.items for e in s.endpoints or [] for a in e.addresses]

    assert await wait_for(mirrored) == ["192.0.2.10"]


async def _when_complete(
    read: Callable[[], Awaitable[dict[str, str]]], names: set[str]
) -> dict[str, str] | None:
    found = await read()
    return found if set(found) == names else None
