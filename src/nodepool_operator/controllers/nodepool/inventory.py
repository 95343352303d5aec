"""Inventory: what the cloud and the cluster hold of a pool, read before anything is done.

The pool's VMs come from the cloud's listing, its Nodes from the cache: its members by
``membership.is_member`` (the pool label and an owner reference naming it by uid, the rule
the Autoscaler reads too). A listing that cannot be acted on (it failed, or it is empty while the
pool owns Nodes) raises ``ListingDoubtful``: nothing is deleted on it.

A VM whose create the cloud answered counts as the pool's for up to a minute even if the
listing does not show it yet (an eventually consistent cloud), as long as a get by name
finds it: a lagging listing must not make a pass create others in its place. Memory only
says which names to ask for; the cloud answers. After a restart the same deterministic
names are asked for again and the cloud's idempotent create finds the VM, so nothing is
created twice either way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence

from nodepool_operator.api import wellknown
from nodepool_operator.cloud.provider import CloudError, CloudProvider, VirtualMachine, VmName
from nodepool_operator.controllers import membership
from nodepool_operator.controllers.nodepool import drain, plan
from nodepool_operator.controllers.nodepool.local_data import LocalData
from nodepool_operator.controllers.resources import NODES_BY_POOL
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import versions
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import Informer

__all__ = ["VM_EXPECTATION_SECONDS", "Inventory", "ListingDoubtful", "owned_by"]

#: How long a VM the cloud answered a create for may stay out of its listings before we
#: stop counting it.
VM_EXPECTATION_SECONDS = 60.0


class ListingDoubtful(Exception):  # noqa: N818 (a verdict, not a failure of ours)
    """The cloud's listing of a pool cannot be acted on: it failed, or it is empty while
    the pool owns Nodes (a cloud that lost its state, a wrong endpoint). Nothing is
    deleted on it; ``reason`` and ``message`` go to the pool's ``Degraded`` condition."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


#: Owned by uid, label aside: for a Node found by name (registration, a taken name).
#: Which Nodes are the pool's is ``membership.is_member``.
owned_by = membership.is_owned


@dataclasses.dataclass(kw_only=True, eq=False)
class Inventory:
    nodes: Informer
    cloud: CloudProvider
    drainer: drain.Drainer
    recorder: EventRecorder
    clock: clock_module.Clock
    # Which pods keep their data on their Node's disk (None: not read, none held).
    local_data: LocalData | None = None
    # VM -> (it, until when it counts while listings do not show it)
    _launched: dict[str, tuple[VirtualMachine, float]] = dataclasses.field(
        default_factory=dict, init=False
    )
    # pool -> Nodes not ours already evented
    _told: dict[str, set[str]] = dataclasses.field(default_factory=dict, init=False)
    # Node -> the copy our last write of it got back, until the cache shows that version
    _written: dict[str, Object] = dataclasses.field(default_factory=dict, init=False)

    def forget_pool(self, pool: str) -> None:
        self._told.pop(pool, None)
        self._written = {
            name: node for name, node in self._written.items() if wellknown.pool_of(node) != pool
        }
        self._launched = {n: seen for n, seen in self._launched.items() if seen[0].pool != pool}

    def launched(self, vms: Sequence[VirtualMachine]) -> None:
        """Count ``vms``, just created, as the pool's until a listing shows them."""
        until = self.clock.now() + VM_EXPECTATION_SECONDS
        self._launched.update((vm.name, (vm, until)) for vm in vms)

    def wrote_nodes(self, nodes: Sequence[Object]) -> None:
        """Read ``nodes`` as our writes left them until the cache shows as much."""
        self._written.update((str(n["metadata"]["name"]), n) for n in nodes)

    def owned_nodes(self, pool: Object) -> list[Object]:
        """The pool's Nodes (``membership.members``), each as our last write of it left it
        when the cache has not caught up with that write yet (a drain mark a request's
        answer wrote a moment ago: acted on in the same pass, never chosen around)."""
        name = str(pool["metadata"]["name"])
        found = membership.members(self.nodes, pool_name=name, pool_uid=pool["metadata"].get("uid"))
        newest = [self._newest(node) for node in found]
        present = {str(node["metadata"]["name"]) for node in found}
        self._written = {
            node_name: node
            for node_name, node in self._written.items()
            if node_name in present or wellknown.pool_of(node) != name
        }
        return newest

    def _newest(self, cached: Object) -> Object:
        name = str(cached["metadata"]["name"])
        ours = self._written.get(name)
        if ours is None:
            return cached
        if ours["metadata"].get("uid") == cached["metadata"].get("uid"):
            order = versions.compare(
                str(ours["metadata"].get("resourceVersion", "")),
                str(cached["metadata"].get("resourceVersion", "")),
            )
            if order is not None and order > 0:
                return ours
        del self._written[name]
        return cached

    async def list_vms(self, pool: Object, owned: Sequence[Object]) -> list[VirtualMachine]:
        """The pool's VMs, or ``ListingDoubtful`` when the answer cannot be acted on."""
        name = pool["metadata"]["name"]
        try:
            vms = await self.cloud.list_vms(pool=name)
        except CloudError as error:
            raise ListingDoubtful(
                "CloudListFailed", f"listing the pool's VMs failed ({error.code}): {error}"
            ) from error
        # Nodes whose VM we deleted ourselves (marked before asking the cloud) are expected
        # to be missing: a crash between the VM's deletion and the Node's leaves one, and
        # an empty listing then is the truth, not a doubtful answer. Any other Node makes
        # an empty listing a reason to act on nothing.
        unaccounted = [n for n in owned if not plan.vm_deletion_requested(n)]
        if not vms and unaccounted:
            raise ListingDoubtful(
                "CloudListEmpty",
                f"the cloud listed no VM for the pool, which owns {len(unaccounted)} Nodes; "
                "nothing is deleted until it lists them again",
            )
        return vms + await self._launched_unlisted(name, vms)

    async def _launched_unlisted(
        self, pool: str, listed: Sequence[VirtualMachine]
    ) -> list[VirtualMachine]:
        """VMs of ``pool`` created a moment ago that the listing does not show yet, as a
        get by name finds them now: one that died meanwhile is not counted."""
        now = self.clock.now()
        shown = {vm.name for vm in listed}
        self._launched = {
            name: (vm, deadline)
            for name, (vm, deadline) in self._launched.items()
            if deadline > now and not (vm.pool == pool and name in shown)
        }
        found = []
        for name, (vm, _) in list(self._launched.items()):
            if vm.pool != pool:
                continue
            try:
                fresh = await self.cloud.get_vm(VmName(name))
            except CloudError:
                found.append(vm)  # unknown: count it, so that no twin is created
                continue
            if fresh is None or fresh.pool != pool:
                del self._launched[name]
            else:
                found.append(fresh)
        return found

    async def note_strangers(self, pool: Object, *, ours: Collection[str] = ()) -> None:
        """Nodes with the pool's label that the pool does not own: left alone, told once.
        ``ours``: Nodes the pool just created or adopted, which the cache may not show as
        owned yet (a kubelet's Node adopted this pass)."""
        name = pool["metadata"]["name"]
        uid = pool["metadata"].get("uid")
        strangers = {
            n["metadata"]["name"]
            for n in self.nodes.by_index(NODES_BY_POOL, name)
            if not membership.is_member(n, pool_name=name, pool_uid=uid)
            and n["metadata"]["name"] not in ours
        }
        told = self._told.setdefault(name, set())
        for node_name in sorted(strangers - told):
            await self.recorder.event(
                pool,
                type="Warning",
                reason="NodeNotOwned",
                message=(
                    f"node {node_name} carries the label {wellknown.POOL_LABEL}={name} "
                    "but is not owned by this pool; it is left alone"
                ),
            )
        told.intersection_update(strangers)
        told.update(strangers)

    def view(self, owned: Sequence[Object], vms: Sequence[VirtualMachine]) -> plan.PoolView:
        """The pool's live VMs, their Nodes, and what a drain of each would move."""
        live = plan.live_vms(vms)
        names = {vm.name for vm in live}
        pool_nodes = {n["metadata"]["name"]: n for n in owned if n["metadata"]["name"] in names}
        on_node = {node: self.drainer.pods_to_move(node) for node in pool_nodes}
        return plan.PoolView(
            vms=live,
            nodes=pool_nodes,
            pods_per_node={node: len(found) for node, found in on_node.items()},
            protected=frozenset(
                node
                for node, found in on_node.items()
                if drain.node_is_protected(pool_nodes[node], found)
            ),
            local_data=self._local_data(pool_nodes, on_node),
        )

    def _local_data(
        self, pool_nodes: Mapping[str, Object], on_node: Mapping[str, Sequence[Object]]
    ) -> dict[str, str]:
        if self.local_data is None:
            return {}
        held = {
            node: self.local_data.holder(pool_nodes[node], found) for node, found in on_node.items()
        }
        return {node: why for node, why in held.items() if why is not None}

    async def observe(self, pool: Object) -> plan.PoolView:
        owned = self.owned_nodes(pool)
        return self.view(owned, await self.list_vms(pool, owned))
