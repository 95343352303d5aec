"""The VM step both baselines share: list a pool's VMs, create the missing ones and wait.

As ``nodepool-operator run`` does it: names from ``nodepool_api.vm_names`` (lowest free index, so a
retry asks for the same VMs and the cloud's idempotent create makes no duplicate), the
zone from the name, the machine from the pool's template.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud import provider
from nodepool_operator.cloud.simcloud.client import SimCloudClient
from nodepool_operator.runtime import errors, kinds
from nodepool_operator.runtime.client import Client

__all__ = ["create", "live", "remove"]

POLL_SECONDS = 0.5


async def live(cloud: SimCloudClient, pool: str) -> list[provider.VirtualMachine]:
    """The pool's VMs that are not being deleted, by index."""
    alive = [vm for vm in await cloud.list_vms(pool=pool) if vm.state != provider.VmState.DELETING]
    return sorted(alive, key=lambda vm: int(vm.name.rpartition("-")[2]))


async def create(
    cloud: SimCloudClient,
    pool: str,
    spec: nodepool_api.NodePoolSpec,
    vms: list[provider.VirtualMachine],
) -> None:
    """Create the VMs ``spec.targetNodes`` asks for beyond ``vms``; return once all run."""
    missing = spec.target_nodes - len(vms)
    taken = (vm.name for vm in vms)
    names = [
        provider.VmName(n) for n in itertools.islice(nodepool_api.vm_names(pool, taken), missing)
    ]
    template = spec.template
    zones = template.zones
    await asyncio.gather(
        *(
            cloud.create_vm(
                name=vm,
                pool=pool,
                spec=provider.MachineSpec(
                    cpu=template.cpu,
                    memory=template.memory,
                    pods=template.pods,
                    # Naive: round the zones by count, whatever the pods need.
                    zone=zones[(len(vms) + i) % len(zones)] if zones else None,
                ),
            )
            for i, vm in enumerate(names)
        )
    )
    while True:
        states = {vm.name: vm.state for vm in await cloud.list_vms(pool=pool)}
        if all(states.get(vm) == provider.VmState.RUNNING for vm in names):
            return
        await asyncio.sleep(POLL_SECONDS)


async def remove(api: Client, cloud: SimCloudClient, vm: provider.VirtualMachine) -> None:
    """Delete the VM's Node, then the VM."""
    with contextlib.suppress(errors.NotFound):
        await api.delete(kinds.NODES, vm.name)
    await cloud.delete_vm(vm.name)
