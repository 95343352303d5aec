"""Launch: the VMs a pool is short of are asked of the cloud.

Names are deterministic (``plan.names_to_create``: the lowest free indexes), so a retry
or a restarted operator asks for the same names and the cloud's idempotent create makes
no duplicate. Each VM goes to the zone its name gives it, which its Node is labelled
with. Creates run a bounded number at a time; when some fail, a permanent refusal
(quota) is raised before a transient one, so the pool's pause starts even if a 503 came
first.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud.provider import (
    CloudProvider,
    MachineSpec,
    PermanentCloudError,
    VirtualMachine,
    VmName,
)
from nodepool_operator.controllers.nodepool import inventory, plan
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.events import EventRecorder

__all__ = ["Launcher", "machine_spec"]

log = logging.getLogger(__name__)


def machine_spec(pool: Object, template: nodepool_api.NodeTemplate, name: VmName) -> MachineSpec:
    return MachineSpec(
        cpu=template.cpu,
        memory=template.memory,
        pods=template.pods,
        zone=nodepool_api.zone_of(name, template),
        pool_uid=pool["metadata"].get("uid"),
        launch=template.provider,
    )


@dataclasses.dataclass(kw_only=True, eq=False)
class Launcher:
    cloud: CloudProvider
    inventory: inventory.Inventory
    recorder: EventRecorder
    config: NodePoolConfig
    clock: clock_module.Clock

    async def launch(
        self,
        pool: Object,
        spec: nodepool_api.NodePoolSpec,
        *,
        live: int,
        every_vm: Sequence[VirtualMachine],
        missing: int,
    ) -> list[VirtualMachine]:
        """Create ``missing`` VMs next to the ``live`` ones; those the cloud answered."""
        name = pool["metadata"]["name"]
        names = plan.names_to_create(name, (vm.name for vm in every_vm), missing)
        await self.recorder.event(
            pool,
            type="Normal",
            reason="ScaleUp",
            message=f"creating {missing} VMs ({live} -> {live + missing})",
        )
        limit = asyncio.Semaphore(self.config.create_parallelism)

        async def create(vm_name: VmName) -> VirtualMachine:
            async with limit:
                return await self.cloud.create_vm(
                    name=vm_name, pool=name, spec=machine_spec(pool, spec.template, vm_name)
                )

        started = self.clock.now()
        results = await asyncio.gather(*(create(n) for n in names), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        launched = [vm for vm in results if isinstance(vm, VirtualMachine)]
        self.inventory.launched(launched)
        log.info(
            "event=vms-created count=%d failed=%d seconds=%.2f",
            len(names) - len(failures),
            len(failures),
            self.clock.now() - started,
        )
        if failures:
            permanent = [f for f in failures if isinstance(f, PermanentCloudError)]
            raise (permanent or failures)[0]
        return launched
