"""A name that is taken never blocks a pool, end to end (real control plane, simcloud and
operator processes): a hand-made Node holding ``<pool>-0``, a VM of another pool holding
``<pool>-1`` in the cloud. The pool takes the next free indexes, reaches its target, and
leaves what is not its own untouched through scale-down and deletion."""

from __future__ import annotations

import contextlib
from typing import Any

from kubernetes_asyncio import client

from e2e.scenes import World
from harness import MERGE, POOLS, Operator, SimCloud, pool_body, settled, wait_for
from nodepool_devtools.cluster import audit
from nodepool_operator.api import wellknown
from nodepool_operator.cloud import credentials
from nodepool_operator.cloud.provider import MachineSpec, VirtualMachine, VmName, VmState
from nodepool_operator.cloud.simcloud.client import SimCloudClient

CLUSTER = "e2e-taken-names"
OPERATOR_USER = "nodepool-operator"


def foreign_node(name: str) -> dict[str, Any]:
    """A Node someone made by hand: no owner, its own label and taint, cordoned."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"team": "ops", "kubernetes.io/hostname": name}},
        "spec": {
            "taints": [{"key": "ops.example.com/dedicated", "value": "x", "effect": "NoSchedule"}],
            "unschedulable": True,
        },
    }


def facts(node: Any) -> tuple[Any, ...]:
    """What the pool must never change on a Node it does not own (the audit log shows it
    never even tried)."""
    # The node lifecycle controller's own taints (not-ready, unschedulable) come and go.
    taints = sorted(
        (t.key, t.value, t.effect)
        for t in node.spec.taints or []
        if not t.key.startswith("node.kubernetes.io/")
    )
    return (
        node.metadata.uid,
        dict(node.metadata.labels or {}),
        taints,
        node.spec.unschedulable,
        node.metadata.owner_references,
        node.metadata.deletion_timestamp,
    )


def same_vm(vm: VirtualMachine | None, before: VirtualMachine) -> bool:
    """The VM is still there, the same one (booting further is its own business)."""
    return (
        vm is not None
        and (vm.name, vm.pool, vm.provider_id, vm.created_at)
        == (before.name, before.pool, before.provider_id, before.created_at)
        and vm.state != VmState.DELETING
    )


async def own_nodes(core: client.CoreV1Api, pool: str) -> list[str]:
    found = await core.list_node(label_selector=f"{wellknown.POOL_LABEL}={pool}")
    return sorted(n.metadata.name for n in found.items)


async def pool_gone(custom: client.CustomObjectsApi, name: str) -> bool:
    try:
        await custom.get_cluster_custom_object(*POOLS, name)
    except client.exceptions.ApiException as error:
        return error.status == 404
    return False


async def test_a_hand_made_node_holding_a_name_is_skipped_and_never_touched(world: World) -> None:
    log = world.cluster.audit_log()
    cloud: SimCloud = await world.start_simcloud()
    taken = f"{world.pool}-0"
    log.mark()
    await world.core.create_node(foreign_node(taken))
    try:
        before = facts(await world.core.read_node(taken))
        operator: Operator = world.start_operator(cloud)

        await world.custom.create_cluster_custom_object(*POOLS, pool_body(world.pool, target=2))
        pool = await wait_for(lambda: settled(world.custom, world.pool, 2), within=60)

        assert await own_nodes(world.core, world.pool) == [f"{world.pool}-1", f"{world.pool}-2"]
        assert pool["status"]["readyNodes"] == 2
        degraded = [c for c in pool["status"]["conditions"] if c["type"] == "Degraded"]
        assert degraded[0]["status"] == "False"
        assert cloud.client is not None
        vms = sorted(vm.name for vm in await cloud.client.list_vms(pool=world.pool))
        assert vms == [f"{world.pool}-1", f"{world.pool}-2"]
        events = await world.core.list_namespaced_event(
            "default", field_selector=f"involvedObject.name={world.pool},reason=NameTaken"
        )
        assert [e.message for e in events.items] == [
            f"name {taken} is taken by Node {taken} (no owner); the pool uses the next free index"
        ]
        assert facts(await world.core.read_node(taken)) == before

        await world.custom.patch_cluster_custom_object(
            *POOLS, world.pool, {"spec": {"targetNodes": 0}}, _content_type=MERGE
        )
        await wait_for(lambda: settled(world.custom, world.pool, 0), within=60)
        assert await own_nodes(world.core, world.pool) == []
        assert facts(await world.core.read_node(taken)) == before

        await world.custom.delete_cluster_custom_object(*POOLS, world.pool)
        await wait_for(lambda: pool_gone(world.custom, world.pool), within=30)
        assert facts(await world.core.read_node(taken)) == before
        writes = audit.writes(log.events_since_mark(), user=OPERATOR_USER, resource="nodes")
        assert [w for w in writes if w.name == taken] == []
        assert {w.name for w in writes} == {f"{world.pool}-1", f"{world.pool}-2"}
        assert operator.errors_logged() == []
    finally:
        with contextlib.suppress(client.exceptions.ApiException):
            await world.core.delete_node(taken)


async def test_a_vm_of_another_pool_holding_a_name_in_the_cloud_is_skipped(world: World) -> None:
    cloud: SimCloud = await world.start_simcloud()
    ours = SimCloudClient(
        cloud.endpoint, token=credentials.TokenFile(cloud.token_file), cluster=CLUSTER
    )
    theirs = SimCloudClient(
        cloud.endpoint, token=credentials.TokenFile(cloud.token_file), cluster="elsewhere"
    )
    spec = MachineSpec(cpu="4", memory="16Gi", pods=110)
    try:
        # Another pool of this cluster holds <pool>-1; another cluster has a <pool>-2 of
        # its own, which holds nothing here (simcloud names VMs per cluster).
        held = await ours.create_vm(name=VmName(f"{world.pool}-1"), pool="other", spec=spec)
        elsewhere = await theirs.create_vm(
            name=VmName(f"{world.pool}-2"), pool=world.pool, spec=spec
        )
        operator: Operator = world.start_operator(cloud, "--cluster-name", CLUSTER)

        await world.custom.create_cluster_custom_object(*POOLS, pool_body(world.pool, target=2))
        await wait_for(lambda: settled(world.custom, world.pool, 2), within=60)

        expected = [f"{world.pool}-0", f"{world.pool}-2"]
        assert await own_nodes(world.core, world.pool) == expected
        assert sorted(vm.name for vm in await ours.list_vms(pool=world.pool)) == expected
        assert same_vm(await ours.get_vm(held.name), held)
        [still] = await theirs.list_vms(pool=world.pool)
        assert same_vm(still, elsewhere)
        events = await world.core.list_namespaced_event(
            "default", field_selector=f"involvedObject.name={world.pool},reason=NameTaken"
        )
        assert any(
            e.message.startswith(f"name {held.name} is taken by a VM of another pool")
            for e in events.items
        )

        await world.custom.patch_cluster_custom_object(
            *POOLS, world.pool, {"spec": {"targetNodes": 0}}, _content_type=MERGE
        )
        await wait_for(lambda: settled(world.custom, world.pool, 0), within=60)
        assert same_vm(await ours.get_vm(held.name), held)
        [still] = await theirs.list_vms(pool=world.pool)
        assert same_vm(still, elsewhere)
        assert operator.errors_logged() == []
    finally:
        await ours.close()
        await theirs.close()
