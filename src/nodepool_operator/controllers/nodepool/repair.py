"""Repair: what broke is replaced, and nothing is removed on a guess.

* A Node not Ready past the pool's timeouts (``runtime.nodes.unhealthy_from``: its Ready
  condition's ``lastTransitionTime``, or its creation when it never reported one), or
  still carrying the unregistered taint past registration since its creation, or one of
  the template's startup taints (its agent, a CNI or a device plugin, never finished),
  is drained as far as the drain rules allow, then its VM and the Node go; the size check
  then creates a new VM under the normal naming. The event names the startup taint.
* A VM RUNNING without a Node past registration (``registration.Registrar.overdue``) is
  deleted.
* A Node whose VM the cloud confirms gone (asked for that one VM: a listing that left it
  out is not enough) is removed.
* A VM stuck PROVISIONING past ``provisioning_timeout`` since the cloud created it is
  deleted.

A Node carrying the cloud's notice that it takes the VM back is not repair's: the pool's
disruption replaces it (``disruption``, reason ``Interrupted``), outside repair's brake.

Every timer here counts from a time stored in the world. Removals of our own initiative
take a token from the pool's budget (``removals.RemovalBudget``), so a wrong verdict
about many Nodes at once costs a few of them, not the pool; and the brake (``braked``)
replaces at most ``max(1, 20%)`` of the pool at a time, none while most of the pool or
most of the cluster is NotReady at once (a partition, not broken machines), and none in
any pool while the cluster's unready Nodes pass cluster-autoscaler's limits
(``readiness.UnreadyLimits``: more than ``ok_count`` and more than ``max_percentage`` of them).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from nodepool_operator import timestamps
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud.provider import CloudError, CloudProvider, VmName, VmState
from nodepool_operator.controllers import health, readiness
from nodepool_operator.controllers.nodepool import drain, plan, removals, termination
from nodepool_operator.controllers.nodepool import nodes as node_ops
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import nodes
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.events import EventRecorder

__all__ = [
    "REPAIR_SHARE",
    "Repairer",
    "braked",
    "unhealthy",
    "unhealthy_in",
]

log = logging.getLogger(__name__)

#: The share of a pool's Nodes replaced at once while more are unhealthy (Karpenter
#: stops repairing a NodePool past 20% unhealthy); one at least.
REPAIR_SHARE = 0.2
#: The reason of the event (and of ``Degraded``) while the brake holds repairs back.
REPAIR_HELD = "RepairHeld"


def _cut_off(down: int, total: int) -> bool:
    """More than half of ``total`` Nodes NotReady at once, two at least: a partition
    between them and the control plane (or an API server that was away) looks so."""
    return down >= 2 and 2 * down > total


def braked(
    view: plan.PoolView,
    unhealthy: frozenset[str],
    *,
    cluster: readiness.ClusterReadiness | None = None,
    limits: readiness.UnreadyLimits = readiness.DEFAULT_LIMITS,
) -> tuple[frozenset[str], str | None]:
    """Of the ``unhealthy`` Nodes, those to repair now, and why the others wait (None
    when none waits).

    Repairs under way (the Node is draining) go on. New ones start while fewer than
    ``max(1, REPAIR_SHARE)`` of the pool's Nodes are being repaired, and none while more
    than half of the pool's Nodes, or of the ``cluster``'s (two at least), are NotReady at
    once: that looks like a partition between the nodes and the control plane, or an API
    server that was away, which replacing machines does not cure and which ends by itself.
    The cluster's count is what holds a pool of one Node: alone it cannot show a partition.
    None starts either while the cluster's unready Nodes are past ``limits``. Likewise a
    zone whose every Node (two at least) is NotReady while another zone's are Ready looks
    cut off: its Nodes wait. Every input is the world as the pass sees it, so a restart
    holds back the same Nodes.
    """
    found = view.nodes
    started = {name for name in unhealthy if name in found and plan.is_draining(found[name])}
    waiting = sorted(name for name in unhealthy if name in found and name not in started)
    if not waiting:
        return frozenset(started), None
    total = len(found)
    down = {name for name, node in found.items() if readiness.is_down(node)}
    if _cut_off(len(down), total):
        return frozenset(started), (
            f"{len(down)} of {total} nodes are NotReady at once: the pool looks cut off from"
            " the control plane, so none is replaced until they come back"
        )
    if cluster is not None and cluster.past(limits):
        return frozenset(started), (
            f"{cluster.down} of the cluster's {cluster.total} nodes are NotReady, more than"
            f" okTotalUnreadyCount={limits.ok_count} and maxTotalUnreadyPercentage="
            f"{limits.max_percentage:g}%: no node is replaced in any pool until they come back"
        )
    if cluster is not None and _cut_off(cluster.down, cluster.total):
        return frozenset(started), (
            f"{cluster.down} of the cluster's {cluster.total} nodes are NotReady at once: the"
            " cluster looks cut off from the control plane, so none of this pool's is"
            " replaced until they come back"
        )
    reasons: list[str] = []
    cut_off = _zones_cut_off(found, down)
    if cut_off:
        in_cut_off = [n for n in waiting if _zone(found[n]) in cut_off]
        waiting = [n for n in waiting if n not in in_cut_off]
        reasons.append(
            f"every node of zone {', '.join(sorted(cut_off))} is NotReady at once while"
            f" other zones' are Ready: the zone looks cut off, so its {len(in_cut_off)}"
            " nodes are not replaced until they come back"
        )
    allowed = max(1, int(total * REPAIR_SHARE))
    chosen = waiting[: max(0, allowed - len(started))]
    held = len(waiting) - len(chosen)
    if held:
        reasons.append(
            f"{len(started) + len(waiting)} of {total} nodes are unhealthy: at most {allowed}"
            f" replaced at a time, {held} waiting"
        )
    return frozenset(started | set(chosen)), "; ".join(reasons) or None


def _zone(node: Mapping[str, Any]) -> str:
    return str(((node.get("metadata") or {}).get("labels") or {}).get(wellknown.ZONE_LABEL, ""))


def _zones_cut_off(found: Mapping[str, Mapping[str, Any]], down: set[str]) -> set[str]:
    """Zones whose every Node (two at least) is down while some other zone has a Node up."""
    members: dict[str, list[str]] = {}
    for name, node in found.items():
        members.setdefault(_zone(node), []).append(name)
    if len(members) < 2:
        return set()
    dead = {zone for zone, names in members.items() if len(names) >= 2 and set(names) <= down}
    alive = any(not set(names) <= down for zone, names in members.items() if zone not in dead)
    return dead if alive else set()


def unhealthy(
    view: plan.PoolView, spec: nodepool_api.NodePoolSpec, *, now: float
) -> frozenset[str]:
    """The Nodes of ``view`` not Ready past the pool's timeouts."""
    return frozenset(name for name, at in _unhealthy_from(view, spec).items() if now >= at)


def unhealthy_in(
    view: plan.PoolView, spec: nodepool_api.NodePoolSpec, *, now: float
) -> float | None:
    """Seconds until a Node not Ready now passes its timeout by time alone (no event
    comes then), so the repair is not left to the next resync."""
    waits = [at - now for at in _unhealthy_from(view, spec).values() if at > now]
    return max(min(waits), 0.01) if waits else None


def _unhealthy_from(view: plan.PoolView, spec: nodepool_api.NodePoolSpec) -> dict[str, float]:
    # A Node the cloud gave notice for is not broken: disruption replaces it (reason
    # Interrupted), never repair, so it is never held by repair's brake nor told as
    # NotReady. Ready or not, it goes, and its replacement is launched at once.
    found = {
        name: health.unhealthy_from(node, spec)
        for name, node in view.nodes.items()
        if wellknown.interrupted_at(node) is None
    }
    for name, at in found.items():
        back = _peers_back_at(view.nodes, name)
        if at is not None and back is not None:
            found[name] = max(at, back + spec.not_ready_timeout_seconds)
    return {name: at for name, at in found.items() if at is not None}


def _peers_back_at(found: Mapping[str, Mapping[str, Any]], name: str) -> float | None:
    """When the last of the pool's Nodes that were down with ``name`` (NotReady now) came
    back Ready, or None. Nodes cut off together come back one by one, seconds apart (each
    kubelet reports on its own beat): the first back must not end the brake on the last,
    so a Node still NotReady is given ``notReadyTimeoutSeconds`` again from its peers'
    return. A peer was down with it when it existed before the Node went NotReady and
    turned Ready after that (a Node Ready all along turned Ready before)."""
    since = wellknown.ready_changed_at(found[name])
    if since is None or nodes.is_ready(found[name]):
        return None
    back = [
        changed
        for peer, node in found.items()
        if peer != name
        and nodes.is_ready(node)
        and (changed := wellknown.ready_changed_at(node)) is not None
        and changed > since
        and (_created(node) or since) < since
    ]
    return max(back, default=None)


def _created(node: Mapping[str, Any]) -> float | None:
    return timestamps.parse_rfc3339(str((node.get("metadata") or {}).get("creationTimestamp", "")))


@dataclasses.dataclass(kw_only=True, eq=False)
class Repairer:
    cloud: CloudProvider
    terminator: termination.Terminator
    recorder: EventRecorder
    config: NodePoolConfig
    clock: clock_module.Clock
    wall_clock: clock_module.WallClock
    # Per pool: why repairs were last held back, as told (memory only spares repeats:
    # the brake itself follows from the Nodes' conditions).
    _held: dict[str, str | None] = dataclasses.field(default_factory=dict, init=False)
    budget: removals.RemovalBudget = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.budget = removals.RemovalBudget(config=self.config, clock=self.clock)

    def forget_pool(self, pool: str) -> None:
        self.budget.forget_pool(pool)
        self._held.pop(pool, None)

    async def tell_held(self, pool: Object, held: str | None) -> None:
        """One event each time the brake starts holding repairs back, or its words change."""
        name = pool["metadata"]["name"]
        if self._held.get(name) == held:
            return
        self._held[name] = held
        if held is None:
            log.info("event=repair-resumed")
            return
        log.warning("event=repair-held reason=%r", held)
        await self.recorder.event(pool, type="Warning", reason=REPAIR_HELD, message=held)

    async def repair(
        self, pool: Object, spec: nodepool_api.NodePoolSpec, view: plan.PoolView, vm: VmName
    ) -> drain.DrainProgress:
        """Replace a broken Node (or a VM without one), within the pool's budget."""
        node = view.nodes.get(vm)
        if node is None or not plan.is_draining(node):
            wait = self.budget.take(pool["metadata"]["name"])
            if wait > 0:
                return drain.DrainProgress(done=False, retry_in=wait)
            await self._tell(pool, spec, vm, node=node)
        if node is None:
            await self.cloud.delete_vm(vm)
            return drain.DrainProgress(done=True)
        return await self.terminator.remove_drained(pool, spec, node, vm=vm)

    async def _tell(
        self,
        pool: Object,
        spec: nodepool_api.NodePoolSpec,
        vm: VmName,
        *,
        node: Mapping[str, Any] | None,
    ) -> None:
        left = [] if node is None else health.startup_taints_left(node, spec.template)
        if node is None:
            why = (
                f"VM {vm} has had no Node for more than registrationTimeoutSeconds="
                f"{spec.registration_timeout_seconds}"
            )
        elif left and nodes.is_ready(node) and not node_ops.is_unregistered(node):
            why = (
                f"node {vm} still carries the startup taint {', '.join(left)} past"
                f" registrationTimeoutSeconds={spec.registration_timeout_seconds}: the agent"
                " that removes it never finished there"
            )
        else:
            why = (
                f"node {vm} is not Ready past notReadyTimeoutSeconds="
                f"{spec.not_ready_timeout_seconds} (or registrationTimeoutSeconds="
                f"{spec.registration_timeout_seconds} if its kubelet never reported)"
            )
        await self.recorder.event(
            pool, type="Warning", reason="NodeRepair", message=f"{why}; replacing it"
        )
        log.warning("event=node-repair vm=%s", vm)

    async def remove_nodes_without_vm(
        self, pool: Object, owned: Sequence[Object], view: plan.PoolView
    ) -> float | None:
        """Remove our Nodes whose VM the cloud confirms gone, within the pool's deletion
        budget; the seconds until the next token when one had to wait."""
        name = pool["metadata"]["name"]
        live = {vm.name for vm in view.vms}
        for node in owned:
            node_name = node["metadata"]["name"]
            if node_name in live:
                continue
            reserved = self.budget.reserved_in(name)
            if reserved is not None:
                return reserved  # no cloud call before the token is due
            if not await self._vm_confirmed_gone(node):
                continue
            wait = self.budget.take(name)
            if wait > 0:
                return wait
            log.info("event=delete-node-without-vm node=%s", node_name)
            await self.recorder.event(
                pool,
                type="Warning",
                reason="NodeWithoutVm",
                message=f"node {node_name}: the cloud confirms its VM is gone; removing it",
            )
            await self.terminator.delete_node(node_name)
        return None

    async def _vm_confirmed_gone(self, node: Mapping[str, Any]) -> bool:
        """The cloud, asked for this one VM, says it is gone (or going): no VM of that
        name, or one with another provider ID (a new VM took the name), or one deleting.
        A failed get is not enough."""
        name = VmName(str(node["metadata"]["name"]))
        provider_id = (node.get("spec") or {}).get("providerID")
        try:
            vm = await self.cloud.get_vm(name)
        except CloudError as error:
            log.warning("event=vm-get-failed vm=%s error=%s", name, error)
            return False
        if vm is None:
            return True
        if provider_id and vm.provider_id != provider_id:
            return True
        return vm.state == VmState.DELETING

    def stuck(self, view: plan.PoolView, *, now: float) -> list[VmName]:
        """VMs PROVISIONING for longer than ``provisioning_timeout`` since the cloud made them."""
        return [
            vm.name
            for vm in view.vms
            if vm.state == VmState.PROVISIONING
            and now - vm.created_at > self.config.provisioning_timeout
        ]

    async def remove_stuck_vms(self, view: plan.PoolView) -> None:
        for name in self.stuck(view, now=self.wall_clock.time()):
            log.warning("event=delete-stuck-vm vm=%s", name)
            await self.cloud.delete_vm(name)
