"""Launch: the VMs a pool is short of are asked of the cloud.

Names are deterministic (``plan.names_to_create``: the lowest free indexes), so a retry
or a restarted operator asks for the same names and the cloud's idempotent create makes
no duplicate. Each VM goes to the zone its name gives it, which its Node is labelled
with; names of a zone backed off in the pool's status (``backoff.ZoneLedger``) are
passed over, and a zone the cloud says has no capacity is backed off and its VMs asked
for in the other zones within the same launch. Creates run a bounded number at a time;
when some fail, a permanent refusal (quota) is raised before a transient one, so the
pool's pause starts even if a 503 came first.

A name is free only when neither the cloud nor the cluster has it (``nodepool.names_taken``).
A Node of that name the pool does not own (a hand-made one, another tool's) holds the index
for good; the shared Node cache holds every Node of the cluster, so no read is made for it,
and a Node created since the cache last heard is met at registration, whose create is
refused and whose VM is replaced once overdue. A VM of another pool (the cloud's
``VmConflict``) holds its index too. The next free index is used; the skip follows from
the foreign object's existence, so a restarted operator skips the same names. Past
``MAX_TAKEN_NAMES`` taken names in one launch the pool stops and says why
(``NamesTaken``: a pause, ``Degraded``, an event).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud.provider import (
    CloudProvider,
    InsufficientCapacity,
    MachineSpec,
    PermanentCloudError,
    VirtualMachine,
    VmConflict,
    VmName,
)
from nodepool_operator.controllers import capacity
from nodepool_operator.controllers.nodepool import backoff, inventory, plan
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.events import EventRecorder

__all__ = ["MAX_TAKEN_NAMES", "Launcher", "NamesTaken", "machine_spec"]

log = logging.getLogger(__name__)

#: How many taken names one launch skips before the pool stops and says so: names are
#: taken by hand or by another tool, a few at a time; more means a naming clash to fix.
MAX_TAKEN_NAMES = 16
#: The reason of the event naming a skipped name.
NAME_TAKEN = "NameTaken"


class NamesTaken(PermanentCloudError):  # noqa: N818 (a verdict, named like the cloud's)
    """More names of the pool are held by others than a launch skips: the pool pauses
    its creations and shows this in ``Degraded`` until something changes."""

    code = "NamesTaken"


def node_owner(node: Mapping[str, Any]) -> str:
    """Who holds a Node's name, as a person would look it up."""
    meta = node.get("metadata") or {}
    refs = meta.get("ownerReferences") or ()
    if refs:
        return ", ".join(
            f"{ref.get('kind')}/{ref.get('name')} (uid {ref.get('uid')})" for ref in refs
        )
    pool = nodepool_api.pool_of(node)
    if pool is not None:
        return f"no owner, labelled {nodepool_api.POOL_LABEL}={pool}"
    return "no owner"


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
    client: Client
    inventory: inventory.Inventory
    recorder: EventRecorder
    config: NodePoolConfig
    clock: clock_module.Clock
    # pool -> taken names already evented
    _told: dict[str, set[str]] = dataclasses.field(default_factory=dict, init=False)

    async def launch(
        self,
        pool: Object,
        spec: nodepool_api.NodePoolSpec,
        *,
        live: int,
        every_vm: Sequence[VirtualMachine],
        missing: int,
        zones: backoff.ZoneLedger | None = None,
    ) -> list[VirtualMachine]:
        """Create ``missing`` VMs next to the ``live`` ones; those the cloud answered.

        With ``zones``, names in a backed-off zone are passed over, and a zone the cloud
        says has no capacity is backed off and its VMs asked for in the other zones.
        """
        name = pool["metadata"]["name"]
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
        chosen: set[str] = {vm.name for vm in every_vm}  # the pool's, and those asked for since
        taken: dict[str, str] = {}  # name -> who holds it
        launched: list[VirtualMachine] = []
        failures: list[BaseException] = []
        tried = 0
        wanted = missing
        while wanted > 0:
            names = await self._free_names(pool, chosen, wanted, taken, spec.template, zones)
            chosen.update(names)
            if len(taken) > MAX_TAKEN_NAMES:
                failures.append(_too_many_taken(taken))
                break
            if not names:
                break  # every zone is backed off: the status says so
            tried += len(names)
            results = await asyncio.gather(*(create(n) for n in names), return_exceptions=True)
            wanted = 0
            for vm_name, result in zip(names, results, strict=True):
                if isinstance(result, VmConflict):
                    taken[vm_name] = f"a VM of another pool in the cloud ({result.message})"
                    await self._tell_taken(pool, vm_name, taken[vm_name])
                    wanted += 1
                elif isinstance(result, InsufficientCapacity) and zones is not None:
                    zones.refused(
                        nodepool_api.zone_of(vm_name, spec.template) or result.zone,
                        shape=result.shape or "",
                        reason=capacity.NO_CAPACITY,
                        message=str(result),
                    )
                    wanted += 1  # in another zone, if one is left
                elif isinstance(result, BaseException):
                    failures.append(result)
                elif isinstance(result, VirtualMachine):
                    launched.append(result)
        self.inventory.launched(launched)
        if zones is not None:
            zones.launched(nodepool_api.zone_of(vm.name, spec.template) for vm in launched)
        log.info(
            "event=vms-created count=%d failed=%d skipped=%d seconds=%.2f",
            len(launched),
            tried - len(launched),
            len(taken),
            self.clock.now() - started,
        )
        if failures:
            permanent = [f for f in failures if isinstance(f, PermanentCloudError)]
            raise (permanent or failures)[0]
        return launched

    async def _free_names(
        self,
        pool: Object,
        chosen: set[str],
        count: int,
        taken: dict[str, str],
        template: nodepool_api.NodeTemplate,
        zones: backoff.ZoneLedger | None,
    ) -> list[VmName]:
        """The next ``count`` names, past ``chosen`` and ``taken`` and those of zones
        backed off, that no foreign Node holds; those found held go to ``taken`` (with
        their holder), and the search stops past ``MAX_TAKEN_NAMES``."""
        if zones is not None and zones.cannot_grow() is not None:
            return []
        passed: list[str] = []  # names of backed-off zones, left free for later
        free: list[VmName] = []
        limit = asyncio.Semaphore(self.config.create_parallelism)

        async def holder(candidate: str) -> str | None:
            async with limit:
                return await self._node_holder(pool, candidate)

        while len(free) < count and len(taken) <= MAX_TAKEN_NAMES:
            batch = plan.names_to_create(
                pool["metadata"]["name"],
                nodepool_api.names_taken(own=chosen, held=[*taken, *free, *passed]),
                count - len(free),
            )
            if zones is not None:
                passed.extend(n for n in batch if zones.blocked(nodepool_api.zone_of(n, template)))
                batch = [n for n in batch if n not in passed]
            holders = await asyncio.gather(*(holder(c) for c in batch))
            for candidate, held_by in zip(batch, holders, strict=True):
                if held_by is None:
                    free.append(VmName(candidate))
                else:
                    taken[candidate] = held_by
                    await self._tell_taken(pool, candidate, held_by)
        return free

    async def _node_holder(self, pool: Object, name: str) -> str | None:
        """Who holds ``name`` in the cluster, if a Node the pool does not own has it."""
        node = self.inventory.nodes.get(name)
        if node is None or inventory.owned_by(node, pool["metadata"].get("uid")):
            return None
        return f"Node {name} ({node_owner(node)})"

    async def _tell_taken(self, pool: Object, name: str, holder: str) -> None:
        """One event per taken name and pool (memory only spares repeats: the skip itself
        follows from the holder's existence)."""
        told = self._told.setdefault(pool["metadata"]["name"], set())
        if name in told:
            return
        told.add(name)
        log.warning("event=name-taken name=%s holder=%r", name, holder)
        await self.recorder.event(
            pool,
            type="Warning",
            reason=NAME_TAKEN,
            message=f"name {name} is taken by {holder}; the pool uses the next free index",
        )

    def forget_pool(self, pool: str) -> None:
        self._told.pop(pool, None)


def _too_many_taken(taken: Mapping[str, str]) -> NamesTaken:
    shown = "; ".join(f"{name}: {holder}" for name, holder in list(taken.items())[:3])
    return NamesTaken(
        f"{len(taken)} names of the pool are taken by others ({shown}"
        f"{'; ...' if len(taken) > 3 else ''}); the pool creates no VM until they are freed"
        " or the pool is renamed"
    )
