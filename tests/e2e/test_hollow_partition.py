"""Repair and its brake on real kubelets: a hollow kubelet SIGSTOPped (simcloud's
``partitioned`` fault) stops renewing its Lease, and only kube-controller-manager's
node-lifecycle controller, after ``--node-monitor-grace-period`` of silence, marks its Node
NotReady. No test writes a Ready condition here.

These tests run on a control plane of their own: the shared one waits 240 s before a
silent Node counts as unresponsive (kwok renews thousands of leases only every 30 s, and
must not flap under load), which would make one stopped kubelet a four-minute wait. Here
the only Nodes are hollow kubelets, which renew every 10 s, so 30 s of silence is safe
(``ControlPlane(node_silence_seconds=...)``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from e2e import hollow
from e2e.scenes import World
from harness import SimCloud, settled, wait_for
from nodepool_devtools.cluster import install
from nodepool_devtools.cluster.pytest_plugin import (
    EXISTING_CLUSTER_ENV,
    Cluster,
    connected,
    local_plane,
)
from nodepool_operator.api import wellknown
from nodepool_operator.cloud.provider import VmState

#: Seconds of silence before kube-controller-manager marks a Node NotReady, on this
#: module's control plane: three of the hollow kubelets' 10 s Lease renewals.
SILENCE_SECONDS = 30
#: The pool's notReadyTimeoutSeconds: longer than the spread of the three Nodes'
#: NotReady marks (their last renewals are up to 10 s apart, the controller looks every
#: 5 s), so when all three stop, the brake sees them down together before any is due.
NOT_READY_TIMEOUT = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A control plane of this module's own, whose controller-manager counts a Node
    unresponsive after ``SILENCE_SECONDS`` of silence."""
    if os.environ.get(EXISTING_CLUSTER_ENV) == "1":
        pytest.skip("needs a control plane of its own (a short node-monitor grace period)")
    directory = tmp_path_factory.mktemp("kubelet-control-plane")
    with local_plane(directory, node_silence_seconds=SILENCE_SECONDS) as plane:
        yield Cluster(kubeconfig=plane.kubeconfig, plane=plane)


@pytest.fixture(scope="module")
async def api_client(cluster: Cluster) -> AsyncIterator[client.ApiClient]:
    async with connected(cluster.kubeconfig) as api:
        yield api


@pytest.fixture(scope="module")
async def crds_installed(api_client: client.ApiClient) -> None:
    """The CRDs and the operator's RBAC, on this module's control plane (the session's
    fixtures cannot use its module-scoped ``api_client``)."""
    await install.install_crds(api_client)
    await install.grant_operator_rbac(api_client)


@pytest.fixture(scope="module")
def operator_rbac(crds_installed: None) -> None:
    """Granted with the CRDs (``crds_installed``)."""


async def partition(cloud: SimCloud, names: set[str]) -> None:
    """SIGSTOP the kubelets of ``names`` (and SIGCONT every other's)."""
    assert cloud.client is not None
    faults = await cloud.client.faults()
    await cloud.client.set_faults(dataclasses.replace(faults, partitioned=frozenset(names)))


async def running_vms(cloud: SimCloud, pool: str) -> list[str]:
    assert cloud.client is not None
    vms = await cloud.client.list_vms(pool=pool)
    return sorted(vm.name for vm in vms if vm.state is VmState.RUNNING)


def is_ready(node: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or ())


async def nodes_by_uid(core: client.CoreV1Api, pool: str) -> dict[str, Any]:
    found = await core.list_node(label_selector=f"{wellknown.POOL_LABEL}={pool}")
    return {node.metadata.uid: node for node in found.items}


async def warnings(core: client.CoreV1Api, pool: str, reason: str) -> list[str]:
    found = await core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={pool},reason={reason}"
    )
    return [event.message for event in found.items]


async def test_a_stopped_kubelet_is_replaced_and_a_whole_pool_stopped_is_held(world: World) -> None:
    cloud, operator, custom, core = await hollow.hollow_pool(
        world, target=3, max_nodes=6, not_ready_timeout_seconds=NOT_READY_TIMEOUT
    )
    assert cloud.client is not None
    first = await nodes_by_uid(core, world.pool)
    victim = sorted(node.metadata.name for node in first.values())[0]
    [victim_uid] = [uid for uid, node in first.items() if node.metadata.name == victim]

    # One kubelet stops: its Lease stops, the control plane marks it NotReady after the
    # silence, and the operator replaces it notReadyTimeoutSeconds later.
    await partition(cloud, {victim})

    async def replaced() -> dict[str, Any] | None:
        found = await nodes_by_uid(core, world.pool)
        ready = [uid for uid, node in found.items() if is_ready(node)]
        return found if victim_uid not in found and len(ready) == 3 else None

    after = await wait_for(replaced, within=SILENCE_SECONDS + NOT_READY_TIMEOUT + 60)
    [repaired] = await warnings(core, world.pool, "NodeRepair")
    assert f"node {victim} is not Ready past notReadyTimeoutSeconds=" in repaired
    assert set(after) - set(first) != set()  # a new Node, its kubelet's
    assert all(n.spec.provider_id == f"kubemark://{n.metadata.name}" for n in after.values())
    await partition(cloud, set())
    await wait_for(lambda: settled(custom, world.pool, 3), within=30)

    # All three stop at once: a partition, not three broken machines. None is replaced.
    vms = await running_vms(cloud, world.pool)
    deletions = (await cloud.client.stats()).deletions_started
    await partition(cloud, set(vms))

    async def all_not_ready() -> bool:
        found = await nodes_by_uid(core, world.pool)
        return len(found) == 3 and not any(is_ready(node) for node in found.values())

    await wait_for(all_not_ready, within=SILENCE_SECONDS + 30)

    async def held() -> list[str]:
        return await warnings(core, world.pool, "RepairHeld")

    # The brake speaks once the Nodes are due for repair, NOT_READY_TIMEOUT later.
    [brake] = await wait_for(held, within=NOT_READY_TIMEOUT + 30)
    assert "3 of 3 nodes are NotReady at once" in brake
    assert await warnings(core, world.pool, "NodeRepair") == [repaired]
    assert await running_vms(cloud, world.pool) == vms
    assert (await cloud.client.stats()).deletions_started == deletions

    await partition(cloud, set())

    async def all_back() -> dict[str, Any] | None:
        found = await nodes_by_uid(core, world.pool)
        return found if len(found) == 3 and all(map(is_ready, found.values())) else None

    back = await wait_for(all_back, within=60)
    assert set(back) == set(after)  # the same three Nodes, on the same three VMs
    assert await running_vms(cloud, world.pool) == vms
    assert (await cloud.client.stats()).deletions_started == deletions
    await wait_for(lambda: settled(custom, world.pool, 3), within=30)
    assert operator.errors_logged() == []
