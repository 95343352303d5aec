"""A name that is taken never blocks a pool: the naming rule (``nodepool.names_taken``)
with names held in the cluster, in the cloud, or both, and the reconciler skipping them
on fakes (a hand-made Node only a LIST by name finds, a Node of another owner in the
cache, a VM of another pool in the cloud)."""

from __future__ import annotations

import itertools
from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud.provider import (
    MachineSpec,
    VirtualMachine,
    VmConflict,
    VmName,
    VmState,
)
from nodepool_operator.controllers.nodepool import launch
from nodepool_operator.runtime.client import Object
from unit.nodepool import reconcile_world as reconcile


def names(pool: str, taken: set[str], count: int) -> list[str]:
    return list(itertools.islice(nodepool_api.vm_names(pool, taken), count))


def foreign_node(name: str, **metadata: Any) -> Object:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": {"team": "ops"}, **metadata},
        "spec": {"taints": [{"key": "ops", "effect": "NoSchedule"}], "unschedulable": True},
    }


# --- the rule ----------------------------------------------------------------------------


def test_a_node_of_the_cluster_takes_its_name() -> None:
    taken = nodepool_api.names_taken(own=["web-1"], nodes=[foreign_node("web-0")])
    assert taken == {"web-0", "web-1"}
    assert names("web", taken, 2) == ["web-2", "web-3"]


def test_a_vm_held_by_another_pool_in_the_cloud_takes_its_name() -> None:
    taken = nodepool_api.names_taken(own=["web-0"], held=["web-1"])
    assert names("web", taken, 3) == ["web-2", "web-3", "web-4"]


def test_names_taken_in_the_cluster_and_the_cloud_are_both_skipped() -> None:
    taken = nodepool_api.names_taken(
        own=["web-2"], nodes=[foreign_node("web-0"), foreign_node("db-1")], held=["web-3"]
    )
    assert names("web", taken, 3) == ["web-1", "web-4", "web-5"]


def test_nothing_taken_gives_the_lowest_indexes() -> None:
    taken = nodepool_api.names_taken(own=[])
    assert names("web", taken, 2) == ["web-0", "web-1"]
    assert names("web", nodepool_api.names_taken(own=[], held=["web-0"]), 2) == ["web-1", "web-2"]


# --- the reconciler ----------------------------------------------------------------------


class Cloud(reconcile.Cloud):
    """Names in ``other_pools`` are VMs of another pool: a create by them is refused."""

    def __init__(self, clock: Any) -> None:
        super().__init__(clock)
        self.other_pools: set[str] = set()
        self.conflicts: list[str] = []

    async def create_vm(self, *, name: VmName, pool: str, spec: MachineSpec) -> VirtualMachine:
        if name in self.other_pools:
            self.conflicts.append(name)
            raise VmConflict(f"VM {name!r} exists in pool 'other', not {pool!r}")
        return await super().create_vm(name=name, pool=pool, spec=spec)


class World(reconcile.World):
    def __init__(self) -> None:
        super().__init__()
        self.cloud = Cloud(self.clock)
        self.lifecycle.launcher.cloud = self.cloud
        self.lifecycle.inventory.cloud = self.cloud
        self.lifecycle.repairer.cloud = self.cloud
        self.lifecycle.terminator.cloud = self.cloud

    def hand_made(self, name: str) -> None:
        """A Node without the pool label, in the API server and in the shared Node cache
        (which holds every Node of the cluster)."""
        node = foreign_node(name)
        self.api.objects[("nodes", name)] = node
        self.nodes.put(node)

    def name_events(self) -> list[str]:
        return [m for _, reason, m in self.recorder.events if reason == launch.NAME_TAKEN]


async def test_a_hand_made_node_holding_the_first_name_is_skipped_and_left_alone() -> None:
    world = World()
    world.hand_made("p-0")
    world.pool(2)

    await world.reconcile()

    assert world.cloud.created == ["p-1", "p-2"]
    assert sorted(world.nodes_created()) == ["p-1", "p-2"]
    assert world.name_events() == [
        "name p-0 is taken by Node p-0 (no owner); the pool uses the next free index"
    ]
    writes = [c for c in world.api.calls if c[2] == "p-0" and c[0] != "list"]
    assert writes == []


async def test_a_restarted_operator_skips_the_same_name() -> None:
    world = World()
    world.hand_made("p-0")
    world.pool(1)
    await world.reconcile()

    restarted = World()  # nothing remembered: the Node's existence decides again
    restarted.api.objects = world.api.objects
    for (kind, _), obj in world.api.objects.items():
        if kind == "nodes":
            restarted.nodes.put(obj)  # its cache's first LIST
    restarted.pool(1)
    await restarted.reconcile()

    assert world.cloud.created == restarted.cloud.created == ["p-1"]


async def test_a_node_of_another_owner_in_the_cache_is_skipped_without_asking_the_api() -> None:
    world = World()
    other = foreign_node(
        "p-0",
        labels={wellknown.POOL_LABEL: "p"},
        ownerReferences=[{"kind": "NodePool", "name": "p", "uid": "uid-old"}],
    )
    world.nodes.put(other)
    world.pool(1)

    await world.reconcile()

    assert world.cloud.created == ["p-1"]
    assert ("list", "nodes", "p-0") not in world.api.calls
    assert world.name_events() == [
        "name p-0 is taken by Node p-0 (NodePool/p (uid uid-old)); "
        "the pool uses the next free index"
    ]


async def test_a_vm_of_another_pool_in_the_cloud_is_skipped_for_the_next_free_index() -> None:
    world = World()
    world.cloud.other_pools = {"p-1"}
    world.pool(3)

    await world.reconcile()

    assert world.cloud.conflicts == ["p-1"]
    assert world.cloud.created == ["p-0", "p-2", "p-3"]
    assert world.condition("Degraded")["status"] == "False"
    [message] = world.name_events()
    assert message.startswith("name p-1 is taken by a VM of another pool in the cloud")


async def test_names_taken_in_the_cluster_and_the_cloud_together() -> None:
    world = World()
    world.hand_made("p-0")
    world.cloud.other_pools = {"p-1", "p-3"}
    world.pool(2)

    await world.reconcile()

    assert world.cloud.created == ["p-2", "p-4"]
    assert len(world.name_events()) == 3


async def test_too_many_taken_names_pause_the_pool_and_say_which() -> None:
    world = World()
    for index in range(launch.MAX_TAKEN_NAMES + 1):
        world.hand_made(f"p-{index}")
    world.pool(1)

    delay = await world.reconcile()

    assert world.cloud.created == []
    degraded = world.condition("Degraded")
    assert degraded["status"] == "True"
    assert degraded["reason"] == "NamesTaken"
    assert "p-0: Node p-0 (no owner)" in degraded["message"]
    assert delay == reconcile.CONFIG.degraded_backoff
    lists = sum(1 for c in world.api.calls if c[0] == "list")

    await world.reconcile()  # pausing: neither the cloud nor the API server is asked again

    assert world.cloud.created == []
    assert sum(1 for c in world.api.calls if c[0] == "list") == lists
    assert len(world.name_events()) == launch.MAX_TAKEN_NAMES + 1


async def test_a_vm_whose_node_name_was_taken_meanwhile_is_never_counted_as_registered() -> None:
    """The VM exists (named before the Node appeared): the create's 409 finds a Node the
    pool does not own, which is not its Node; the VM becomes overdue and is replaced."""
    world = World()
    world.cloud.vms["p-0"] = VmState.RUNNING
    world.hand_made("p-0")
    pool = world.pool(1)

    await world.reconcile()

    assert world.nodes_created() == ["p-0"]  # refused: AlreadyExists
    spec = nodepool_api.NodePoolSpec(target_nodes=1, max_nodes=100)
    view = await world.lifecycle.observe(pool)
    [vm] = view.vms
    later = vm.created_at + spec.registration_timeout_seconds
    assert world.lifecycle.registrar.overdue(vm, view, spec, now=later)
