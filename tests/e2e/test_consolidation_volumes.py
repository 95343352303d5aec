"""Consolidation never moves a pod away from its data: a StatefulSet's pod on a local
PersistentVolume (node affinity to its node's hostname), or on a zonal one (node affinity
to its zone), keeps its underused node although another node has room, and the
ConsolidationKept event names the pod, its claim and its volume. Nor does a drift
replacement: the node a pod keeps its data on is held (DisruptionBlocked names the pod
and volume) while the pool's other node is replaced. Control plane, scheduler, kwok,
simcloud and operator processes.

The control plane runs no PersistentVolume controller: each claim is bound by hand, as the
PV controller binds a claim to the volume kube-scheduler chose (``claimRef`` on the
volume, ``volumeName`` and the bind-completed mark on the claim).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes_asyncio import client

import workloads
from e2e.autoscaling import bound_pair, make_pool, running
from e2e.consolidating import (
    UNNEEDED,
    autoscaler_events,
    consolidating,
    deployment,
    pinned,
    pool_nodes,
    pool_of,
    pool_settled,
    two_nodes,
)
from e2e.scenes import World
from harness import MERGE, POOLS, REQUESTS, wait_for
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler.snapshot import volumes

ZONE = wellknown.ZONE_LABEL
CLAIM = "data-db-0"  # the StatefulSet controller's name for its pod db-0's claim "data"
#: How long the node and the pod are watched: past the unneeded time, and a minute more.
WATCHED_SECONDS = UNNEEDED + 60


@dataclass
class Storage:
    """The cluster-scoped objects a test made (a class, a volume), removed at its end."""

    storage_api: client.StorageV1Api
    core: client.CoreV1Api
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    volumes: list[str] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)
    claims: list[tuple[str, str]] = field(default_factory=list)

    async def local_class(self) -> str:
        """A class of hand-made volumes, bound when their first pod is scheduled."""
        name = f"local-{self.suffix}"
        body = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": name},
            "provisioner": volumes.NO_PROVISIONER,
            "volumeBindingMode": "WaitForFirstConsumer",
        }
        await self.storage_api.create_storage_class(body)
        self.classes.append(name)
        return name

    async def bound_volume(
        self, namespace: str, *, key: str, value: str, source: dict[str, Any]
    ) -> str:
        """A volume only nodes with label ``key=value`` reach, bound to the claim ``CLAIM``
        of ``namespace``; returns the volume's name."""
        storage_class = await self.local_class()
        name = f"pv-{self.suffix}"
        volume, claim = bound_pair(
            namespace,
            CLAIM,
            volume=name,
            storage_class=storage_class,
            key=key,
            value=value,
            persistentVolumeReclaimPolicy="Retain",
            **source,
        )
        await self.core.create_persistent_volume(volume)
        self.volumes.append(name)
        await self.core.create_namespaced_persistent_volume_claim(namespace, claim)
        self.claims.append((namespace, CLAIM))
        return name

    async def remove(self) -> None:
        """Delete what was made. No pvc-protection controller runs here to lift the
        protection finalizers the API server adds: they are lifted by hand."""
        unprotected = {"metadata": {"finalizers": None}}
        for namespace, name in self.claims:
            with contextlib.suppress(client.exceptions.ApiException):
                await self.core.patch_namespaced_persistent_volume_claim(
                    name, namespace, unprotected
                )
                await self.core.delete_namespaced_persistent_volume_claim(name, namespace)
        for name in self.volumes:
            with contextlib.suppress(client.exceptions.ApiException):
                await self.core.patch_persistent_volume(name, unprotected)
                await self.core.delete_persistent_volume(name)
        for name in self.classes:
            with contextlib.suppress(client.exceptions.ApiException):
                await self.storage_api.delete_storage_class(name)


@pytest.fixture
async def storage(api_client: client.ApiClient, namespace: str) -> AsyncIterator[Storage]:
    """Torn down before the namespace (it asks for it): the claim's finalizer is lifted
    before the namespace's deletion would wait on it."""
    made = Storage(client.StorageV1Api(api_client), client.CoreV1Api(api_client))
    yield made
    await made.remove()


def stateful_set(pool: str) -> dict[str, Any]:
    """One pause pod ``db-0`` of one cpu on the pool's nodes, its data on claim
    ``data-db-0`` (made before: the StatefulSet controller uses the claim it finds)."""
    labels = {"app": "db"}
    spec = {
        "nodeSelector": {wellknown.POOL_LABEL: pool},
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {**workloads.container("1"), "volumeMounts": [{"name": "data", "mountPath": "/data"}]}
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db"},
        "spec": {
            "replicas": 1,
            "serviceName": "db",
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                }
            ],
        },
    }


async def the_db_pod(core: client.CoreV1Api, namespace: str) -> client.V1Pod:
    pod: client.V1Pod = await core.read_namespaced_pod("db-0", namespace)
    return pod


async def db_on_local_volume(
    world: World, storage: Storage, node: str, *, running_pods: int
) -> str:
    """The StatefulSet's pod db-0 running on ``node``, its data on a local volume only
    ``node`` reaches (once ``running_pods`` pods of the namespace run); the volume's name."""
    volume = await storage.bound_volume(
        world.namespace,
        key=wellknown.HOSTNAME_LABEL,
        value=node,
        source={"local": {"path": f"/mnt/disks/{storage.suffix}"}},
    )
    await world.apps.create_namespaced_stateful_set(world.namespace, stateful_set(world.pool))
    await wait_for(lambda: running(world.core, world.namespace, running_pods), within=60)
    assert (await the_db_pod(world.core, world.namespace)).spec.node_name == node
    return volume


async def stays_where_it_is(world: World, *, nodes: list[str], volume: str) -> None:
    """For ``WATCHED_SECONDS`` after the Autoscaler was made: the pool's nodes stay, none
    is tainted, the pod db-0 is never evicted (its uid stays, no deletion) nor moved; the
    Autoscaler tells once why the pod's node stays, naming the pod, its claim and volume."""
    db = await the_db_pod(world.core, world.namespace)
    loop = asyncio.get_running_loop()
    until = loop.time() + WATCHED_SECONDS
    told: list[str] = []
    while loop.time() < until:
        found = await pool_nodes(world.core, world.pool)
        assert sorted(n.metadata.name for n in found) == nodes
        assert not any(consolidating(n) for n in found)
        now = await the_db_pod(world.core, world.namespace)
        assert now.metadata.uid == db.metadata.uid
        assert now.metadata.deletion_timestamp is None
        assert now.spec.node_name == db.spec.node_name
        told = told or await autoscaler_events(world.core, world.autoscaler, "ConsolidationKept")
        await asyncio.sleep(1)
    [message] = told
    assert f"pod {world.namespace}/db-0 fits on no other node" in message
    assert f'persistentvolumeclaim "{CLAIM}" is bound to persistentvolume "{volume}"' in message
    assert message.endswith("(no-room)")
    pool_now = await world.custom.get_cluster_custom_object(*POOLS, world.pool)
    assert pool_now["spec"]["targetNodes"] == len(nodes)
    requests = await world.custom.list_cluster_custom_object(
        *REQUESTS, label_selector=wellknown.pool_selector(world.pool)
    )
    assert requests["items"] == []  # nothing asked of the pool: no node named, none added


async def test_a_pod_on_a_local_volume_keeps_its_node_although_another_has_room(
    world: World, storage: Storage
) -> None:
    _, operator = await world.operated(latency=1)
    # The first node half used by two pods pinned to it: room for two cpus more.
    first, second = await two_nodes(world)
    volume = await db_on_local_volume(world, storage, second, running_pods=3)

    await world.create_autoscaler(unneeded_seconds=UNNEEDED)
    await stays_where_it_is(
        world,
        nodes=[first, second],
        volume=volume,
    )
    assert operator.errors_logged() == []


async def test_a_pod_on_a_zonal_volume_keeps_its_node_when_the_only_room_is_in_another_zone(
    world: World, storage: Storage
) -> None:
    _, operator = await world.operated(latency=1)
    await make_pool(world.custom, world.pool, zones=("zone-a", "zone-b"))
    await world.custom.patch_cluster_custom_object(
        *POOLS, world.pool, {"spec": {"targetNodes": 2}}, _content_type=MERGE
    )
    await wait_for(lambda: pool_settled(world.custom, world.pool, 2), within=60)
    zones = {
        n.metadata.labels[ZONE]: n.metadata.name for n in await pool_nodes(world.core, world.pool)
    }
    assert sorted(zones) == ["zone-a", "zone-b"]
    # The zone-a node half used by two pods pinned to it: room for two cpus more.
    anchor = deployment("anchor", pool=world.pool, replicas=2, **pinned(zones["zone-a"]))
    await world.apps.create_namespaced_deployment(world.namespace, anchor)
    volume = await storage.bound_volume(
        world.namespace,
        key=ZONE,
        value="zone-b",
        source={"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": f"vol-{storage.suffix}"}},
    )
    await world.apps.create_namespaced_stateful_set(world.namespace, stateful_set(world.pool))
    await wait_for(lambda: running(world.core, world.namespace, 3), within=60)
    assert (await the_db_pod(world.core, world.namespace)).spec.node_name == zones["zone-b"]

    await world.create_autoscaler(unneeded_seconds=UNNEEDED)
    await stays_where_it_is(
        world,
        nodes=sorted(zones.values()),
        volume=volume,
    )
    assert operator.errors_logged() == []


async def test_a_drifted_node_holding_a_pods_local_volume_is_held_while_the_other_is_replaced(
    world: World, storage: Storage
) -> None:
    _, operator = await world.operated(latency=1)
    await pool_of(world, 2)
    first, second = sorted(n.metadata.name for n in await pool_nodes(world.core, world.pool))
    volume = await db_on_local_volume(world, storage, second, running_pods=1)
    db = await the_db_pod(world.core, world.namespace)
    held = {n.metadata.name: n.metadata.uid for n in await pool_nodes(world.core, world.pool)}

    # Every node drifts: a label of the template changes, one node at a time.
    drift = {"template": {"labels": {"release": "b"}}, "disruption": {"budgets": [{"nodes": "1"}]}}
    await world.custom.patch_cluster_custom_object(
        *POOLS, world.pool, {"spec": drift}, _content_type=MERGE
    )

    async def first_replaced() -> bool:
        found = {n.metadata.uid for n in await pool_nodes(world.core, world.pool)}
        return len(found) == 2 and held[first] not in found

    await wait_for(first_replaced, within=120)
    blocked = await world.core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={world.pool},reason=DisruptionBlocked"
    )
    told = [e.message for e in blocked.items]
    assert any(
        f"node {second} is Drifted" in m
        and f"pod {world.namespace}/db-0 keeps its data on this node's disk" in m
        and volume in m
        for m in told
    ), told
    # Held for a while more: the node stays, untainted, and the pod is never evicted.
    for _ in range(15):
        nodes = {n.metadata.name: n for n in await pool_nodes(world.core, world.pool)}
        assert nodes[second].metadata.uid == held[second]
        assert not any(
            t.key == wellknown.DISRUPTED_TAINT_KEY for t in nodes[second].spec.taints or ()
        )
        now = await the_db_pod(world.core, world.namespace)
        assert (now.metadata.uid, now.spec.node_name) == (db.metadata.uid, second)
        assert now.metadata.deletion_timestamp is None
        await asyncio.sleep(1)
    assert operator.errors_logged() == []
