"""The NodePool controller's world for the repair and capacity tests: ``drain_world``'s,
with a cloud whose listings and gets can be told to lie or fail."""

from __future__ import annotations

from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud.provider import TransientCloudError, VirtualMachine, VmName, VmState
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.runtime import conditions, errors
from nodepool_operator.runtime.client import Object
from unit.nodepool import drain_world as fakes

CONFIG = NodePoolConfig(poll_interval=1.0, node_deletions_per_minute=6.0, node_deletion_burst=2)


class Cloud(fakes.FakeCloud):
    """The drain tests' cloud, whose listing and gets can be told to lie or fail."""

    def __init__(self, clock: fakes.Clock, names: Any) -> None:
        super().__init__(clock, names)
        self.list_empty = False
        self.list_fails = False
        self.hidden: set[str] = set()  # left out of listings, still found by a get
        self.get_fails = False
        self.provider_ids: dict[str, str] = {}
        self.created_at: dict[str, float] = {}  # as the cloud records it
        self.gets: list[str] = []

    async def list_vms(self, *, pool: str) -> list[VirtualMachine]:
        if self.list_fails:
            raise TransientCloudError("connection refused")
        if self.list_empty:
            return []
        found = await super().list_vms(pool=pool)
        return [
            VirtualMachine(
                name=vm.name,
                pool=vm.pool,
                cpu=vm.cpu,
                memory=vm.memory,
                state=vm.state,
                provider_id=self.provider_ids.get(vm.name, vm.provider_id),
                created_at=self.created_at.get(vm.name, vm.created_at),
                zone=vm.zone,
            )
            for vm in found
            if vm.name not in self.hidden
        ]

    async def get_vm(self, name: VmName) -> VirtualMachine | None:
        self.gets.append(name)
        if self.get_fails:
            raise TransientCloudError("timeout")
        hidden, self.hidden = self.hidden, set()
        try:
            return await super().get_vm(name)
        finally:
            self.hidden = hidden

    def remove(self, name: str) -> None:
        self.vms.pop(name, None)

    async def create_vm(self, *, name: VmName, pool: str, spec: Any) -> None:
        self.vms.setdefault(name, VmState.PROVISIONING)
        self.zones.setdefault(name, spec.zone)
        self.order.append(f"create {name}")


class World(fakes.World):
    def __init__(self, *vm_names: str) -> None:
        super().__init__(*vm_names)
        self.run_steps_on(Cloud(self.clock, vm_names), CONFIG)
        self.pools = fakes.FakeInformer({})
        self.reconciler = self.reconciler_for(self.pools)

    def nodes_deleted(self) -> list[str]:
        return [name for verb, kind, name in self.api.calls if (verb, kind) == ("delete", "nodes")]

    def pool(self, target: int, **spec: Any) -> Object:
        found = fakes.pool_object(nodepool_api.NodePoolSpec(target_nodes=target, **spec))
        self.pools.put(found)
        return found

    async def converge(self, target: int) -> Any:
        pool = self.pool(target)
        return await self.lifecycle.converge(pool, nodepool_api.spec_of(pool), target)

    def warnings(self, reason: str) -> list[str]:
        return [m for t, r, m in self.recorder.events if t == "Warning" and r == reason]


def refuse_nodes(world: World) -> list[str]:
    """Make the API server refuse every Node create (422); the names it was asked for."""
    creates: list[str] = []

    async def refuse(resource: Any, body: Object, **_: Any) -> Object:
        creates.append(body["metadata"]["name"])
        raise errors.Invalid('Node is invalid: metadata.labels: Invalid value: "x"')

    world.api.create = refuse  # type: ignore[method-assign]
    return creates


def not_ready(name: str, *, since: float) -> Object:
    """A pool Node whose Ready condition turned False at ``since``."""
    found = fakes.node(name)
    found["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "lastTransitionTime": conditions.rfc3339(since)}
    ]
    return found


def pool_of_nodes(count: int, *, not_ready_names: set[str]) -> World:
    """A pool of ``count`` Nodes, those named NotReady for 15 minutes."""
    names = [f"p-{i}" for i in range(count)]
    world = World(*names)
    for name in names:
        if name in not_ready_names:
            world.nodes.put(not_ready(name, since=fakes.START - 900))
        else:
            world.nodes.put(fakes.node(name))
    return world
