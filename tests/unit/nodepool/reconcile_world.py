"""The NodePool reconciler's world on fakes (``drain_world``'s, with a cloud that creates
VMs): what the reconcile, allocatable, taken-names and report tests drive."""

from __future__ import annotations

import dataclasses
from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud.provider import (
    MachineSpec,
    VirtualMachine,
    VmName,
    VmState,
)
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.controller import Request
from unit.nodepool import drain_world as fakes

CONFIG = NodePoolConfig(poll_interval=1.0, boot_poll_initial=0.1, create_parallelism=3)


class Cloud(fakes.FakeCloud):
    """A cloud whose create answers with the VM in ``boot_state`` (RUNNING: up at once)."""

    def __init__(self, clock: fakes.Clock) -> None:
        super().__init__(clock, ())
        self.boot_state = VmState.RUNNING
        self.created: list[str] = []
        self.refuse: Exception | None = None
        self.created_at: dict[str, float] = {}

    async def create_vm(self, *, name: VmName, pool: str, spec: MachineSpec) -> VirtualMachine:
        if self.refuse is not None:
            raise self.refuse
        self.created.append(name)
        self.vms.setdefault(name, self.boot_state)
        self.created_at.setdefault(name, self.clock.time())
        [vm] = [vm for vm in await self.list_vms(pool=pool) if vm.name == name]
        return vm

    async def list_vms(self, *, pool: str) -> list[VirtualMachine]:
        return [
            dataclasses.replace(vm, created_at=self.created_at.get(vm.name, self.clock.time()))
            for vm in await super().list_vms(pool=pool)
        ]


class World(fakes.World):
    def __init__(self, *vm_names: str, config: NodePoolConfig = CONFIG) -> None:
        super().__init__(*vm_names)
        self.run_steps_on(Cloud(self.clock), config)
        for name in vm_names:
            self.cloud.vms[name] = VmState.RUNNING
        self.pools = fakes.FakeInformer({})
        self.reconciler = self.reconciler_for(self.pools)
        self.generation = 1

    def pool(self, target: int, *, generation: int = 1, **metadata: Any) -> Object:
        found = fakes.pool_object(
            nodepool_api.NodePoolSpec(target_nodes=target, max_nodes=100),
            generation=generation,
            **metadata,
        )
        self.pools.put(found)
        return found

    async def reconcile(self) -> float | None:
        return (await self.reconciler.reconcile(Request(name="p"))).requeue_after

    def nodes_deleted(self) -> list[str]:
        return [name for verb, kind, name in self.api.calls if (verb, kind) == ("delete", "nodes")]

    def nodes_created(self) -> list[str]:
        return [name for verb, kind, name in self.api.calls if (verb, kind) == ("create", "nodes")]

    def show_created_nodes(self) -> None:
        """The cache catches up with the Nodes the API accepted (kwok marks them Ready)."""
        for name in self.nodes_created():
            self.nodes.put(fakes.node(name))

    def condition(self, kind: str) -> dict[str, Any]:
        [found] = [c for c in self.api.status_patches[-1]["conditions"] if c["type"] == kind]
        return found
