"""Termination: a Node leaves drained, then its VM goes, then the Node.

Scale-down victims are marked on their Nodes with when their drain started
(``nodes.cordon``), so a restarted operator finishes the same drains, with the same
deadlines, instead of picking others. Once a drain is done the Node is marked
``vm-deleted`` before the cloud is asked: a crash after the VM's deletion leaves a Node
the next pass removes as one without a VM, never a VM that looks like it needs one, and
an empty listing then is the truth, not a doubtful answer. Nor is a Node so marked ever
given back when a drain is cancelled: its removal is finished (``cancel_drains``). A
deleted pool's Nodes and VMs go the same way (``tear_down``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud.provider import CloudProvider, VmName, VmState
from nodepool_operator.controllers.nodepool import drain, inventory, plan, zoning
from nodepool_operator.controllers.nodepool import nodes as node_ops
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import errors, kinds
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.events import EventRecorder

__all__ = ["Terminator", "combined"]

log = logging.getLogger(__name__)


def combined(progress: Sequence[drain.DrainProgress]) -> drain.DrainProgress:
    """Several Nodes' drains as one: done when all are, the soonest retry, every block."""
    retries = [p.retry_in for p in progress if p.retry_in is not None]
    return drain.DrainProgress(
        done=all(p.done for p in progress),
        retry_in=min(retries) if retries else None,
        blocked=tuple(sorted(b for p in progress for b in p.blocked)),
    )


@dataclasses.dataclass(kw_only=True, eq=False)
class Terminator:
    client: Client
    cloud: CloudProvider
    inventory: inventory.Inventory
    drainer: drain.Drainer
    recorder: EventRecorder
    wall_clock: clock_module.WallClock

    async def scale_down(
        self, pool: Object, spec: nodepool_api.NodePoolSpec, view: plan.PoolView, excess: int
    ) -> drain.DrainProgress:
        """Drain and remove ``excess`` Nodes (``zoning.balanced_victims``), and give back
        the draining Nodes no longer needed as victims."""
        victims = zoning.balanced_victims(view, excess, zoned=bool(spec.template.zones))
        fresh = [v for v in victims if v not in view.draining]
        if fresh:
            await self.recorder.event(
                pool,
                type="Normal",
                reason="ScaleDown",
                message=f"removing {len(victims)} nodes: {', '.join(victims)}",
            )
        extra = [n for n in view.cancellable if n not in victims]
        if extra:
            await self.cancel_drains(view, extra)
        progress = []
        for victim in victims:
            node = view.nodes.get(victim)
            if node is None:
                await self.cloud.delete_vm(victim)
                continue
            progress.append(await self.remove_drained(pool, spec, node, vm=victim))
        return combined(progress)

    async def remove_drained(
        self,
        pool: Object,
        spec: nodepool_api.NodePoolSpec,
        node: Mapping[str, Any],
        *,
        vm: VmName | None,
        keep_until: float | None = None,
    ) -> drain.DrainProgress:
        """One drain pass over ``node``; once it is done, its VM and then the Node go.
        With ``keep_until`` (a noticed Node whose replacement is not Ready yet), a drained
        Node and its VM stay until then, or until a pass without it."""
        node_name = str(node["metadata"]["name"])
        progress = await self.drainer.drain(pool, node, timeout_seconds=spec.drain_timeout_seconds)
        if not progress.done:
            return progress
        left = None if keep_until is None else keep_until - self.wall_clock.time()
        if left is not None and left > 0:
            # The replacement's Ready wakes the pool; the deadline is looked at regardless.
            log.info(
                "event=drained-node-kept node=%s until_replacement seconds_left=%.0f",
                node_name,
                left,
            )
            return drain.DrainProgress(done=False, retry_in=left)
        await self._remove(node, vm=vm)
        return progress

    async def _remove(self, node: Mapping[str, Any], *, vm: VmName | None) -> None:
        """A drained Node's VM (marked ``vm-deleted`` first, unless it is already) and then
        the Node go."""
        node_name = str(node["metadata"]["name"])
        if vm is not None:
            if not plan.vm_deletion_requested(node):
                await node_ops.mark_vm_deleted(self.client, node, at=self.wall_clock.time())
            await self.cloud.delete_vm(vm)
        await self.delete_node(node_name)
        log.info("event=node-removed node=%s", node_name)

    async def cancel_drains(self, view: plan.PoolView, names: Sequence[str]) -> None:
        """Give the draining Nodes ``names`` back, but those whose VM deletion is
        recorded: the mark is written only once the drain is done, and the cloud may have
        been asked already (a crash or a lost answer after it). Such a Node is never
        given back (uncordoned, it would keep the mark, count as leaving for ever, and
        its VM would never be deleted): its removal is finished (``_remove``, as
        ``remove_drained`` ends), and the pool launches its replacement."""
        for node_name in names:
            node = view.nodes[node_name]
            if plan.vm_deletion_requested(node):
                log.info("event=node-removal-finished node=%s reason=vm-deleted", node_name)
                await self._remove(node, vm=VmName(node_name))
            else:
                await node_ops.uncordon(self.client, node)
            self.drainer.forget_node(node_name)

    async def delete_node(self, name: str) -> None:
        with contextlib.suppress(errors.NotFound):
            await self.client.delete(kinds.NODES, name)

    async def tear_down(self, pool: Object) -> tuple[int, drain.DrainProgress]:
        """Drain and remove every Node and VM of a pool being deleted: how many remain,
        and how the drains stand."""
        spec = nodepool_api.spec_of(pool)
        owned = self.inventory.owned_nodes(pool)
        vms = {vm.name: vm for vm in await self.inventory.list_vms(pool, owned)}
        progress = []
        for node in owned:
            vm = vms.get(node["metadata"]["name"])
            target = vm.name if vm is not None and vm.state != VmState.DELETING else None
            progress.append(await self.remove_drained(pool, spec, node, vm=target))
        for vm in vms.values():
            if vm.state != VmState.DELETING and self.inventory.nodes.get(vm.name) is None:
                await self.cloud.delete_vm(vm.name)
        return len(vms) + len(self.inventory.owned_nodes(pool)), combined(progress)
