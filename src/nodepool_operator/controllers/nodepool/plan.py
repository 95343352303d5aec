"""Pure decisions of the NodePool controller: no I/O, so each is unit-tested on its own.

* which VM names to create (``nodepool.vm_names``: deterministic, so a retry or a restart
  asks for the same names and the cloud's idempotent create makes no duplicate);
* which Nodes to give up on a scale-down (those already being drained, among them the
  ones a ScaleRequest named, marked when it was answered; then VMs that never became
  Nodes, then not-Ready Nodes, then the emptiest; Nodes with a do-not-disrupt pod, or
  annotated do-not-disrupt themselves, last);
* the status the pool should show.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from nodepool_operator import timestamps
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud.provider import VirtualMachine, VmName, VmState
from nodepool_operator.controllers import allocatable
from nodepool_operator.runtime import conditions, nodes

__all__ = [
    "PoolView",
    "Verdicts",
    "degraded_status",
    "desired_nodes",
    "is_unregistered",
    "names_to_create",
    "pick_victims",
    "pool_status",
    "vm_deletion_requested",
]

#: On a Node we are draining; its value is when the drain started (RFC 3339). Defined in
#: the API package: the Autoscaler reads it too (such a Node is never a candidate).
SCALE_DOWN_ANNOTATION = wellknown.SCALE_DOWN_ANNOTATION
#: On a drained Node whose VM we are about to delete; its value is when (RFC 3339). Our own
#: record that the VM's absence is our doing: it survives a crash between the VM's
#: deletion and the Node's.
VM_DELETED_ANNOTATION = wellknown.VM_DELETED_ANNOTATION


def desired_nodes(spec: nodepool_api.NodePoolSpec) -> int:
    """The target, kept within [minNodes, maxNodes] (CEL already refuses target > max)."""
    return nodepool_api.within_bounds(
        spec.target_nodes, min_nodes=spec.min_nodes, max_nodes=spec.max_nodes
    )


def names_to_create(pool: str, existing: Iterable[str], count: int) -> list[VmName]:
    return [VmName(name) for name in itertools.islice(nodepool_api.vm_names(pool, existing), count)]


#: ``node`` still carries the unregistered taint: no pod may be bound there yet.
is_unregistered = wellknown.is_unregistered


def is_consolidating(node: Mapping[str, Any]) -> bool:
    """The Autoscaler tainted ``node`` to remove it (and names it in its ScaleRequest)."""
    return any(
        taint.get("key") == wellknown.CONSOLIDATING_TAINT_KEY
        for taint in (node.get("spec") or {}).get("taints") or ()
    )


def is_draining(node: Mapping[str, Any]) -> bool:
    return SCALE_DOWN_ANNOTATION in (node.get("metadata", {}).get("annotations") or {})


def vm_deletion_requested(node: Mapping[str, Any]) -> bool:
    return VM_DELETED_ANNOTATION in (node.get("metadata", {}).get("annotations") or {})


def drain_started(node: Mapping[str, Any]) -> float | None:
    """When the drain of ``node`` started (seconds since the epoch); None if it is not
    draining, or its mark is not a time (a hand-made one): the drain then stamps it."""
    mark = (node.get("metadata", {}).get("annotations") or {}).get(SCALE_DOWN_ANNOTATION)
    return None if mark is None else timestamps.parse_rfc3339(str(mark))


@dataclass(frozen=True)
class PoolView:
    """What the controller observed of one pool: its live VMs and their Nodes."""

    vms: Sequence[VirtualMachine]  # not DELETING
    nodes: Mapping[str, Mapping[str, Any]]  # by name, only those of live VMs
    pods_per_node: Mapping[str, int]  # pods that a drain would have to evict
    # Nodes that hold a do-not-disrupt pod or are annotated do-not-disrupt themselves.
    protected: frozenset[str] = frozenset()
    # Nodes a pod keeps its data on (a local PersistentVolume), with the pod and volume:
    # not replaced by drift or expiry (``local_data``).
    local_data: Mapping[str, str] = field(default_factory=dict)
    # Why drains cannot go on (a budget, a do-not-disrupt pod), one stable line each.
    blocked: tuple[str, ...] = ()
    # Seconds until a drain can move on without an event (a backoff ends, a grace period).
    recheck_in: float | None = None
    # Nodes NotReady (or never Ready) past the pool's timeouts: being replaced.
    unhealthy: frozenset[str] = frozenset()
    # The API server refused a Node create for good (422): (reason, message).
    refused: tuple[str, str] | None = None
    # VMs this pass asked the cloud for that are not running yet: polled for soon.
    launching: tuple[VmName, ...] = ()
    # Zones where no VM is launched for a while (``controllers.capacity``), as the
    # status should record them.
    zone_backoffs: tuple[nodepool_api.ZoneBackoff, ...] = ()
    # The pool's VM creations paused after a refusal (``backoff.CloudPauses``), as the
    # status should record it.
    cloud_pause: nodepool_api.CloudPause | None = None
    # Why unhealthy Nodes wait for their repair (the repair brake), if some do.
    repair_held: str | None = None
    # What the pool's kubelets report against the template (``allocatable``), as the
    # status should record it; None leaves it out.
    reported_allocatable: nodepool_api.ReportedAllocatable | None = None
    # A pool with requirements: what its nodes cost per hour by the catalog (None: not
    # known), and what this pass's launch tells (``launch.OfferingLaunch``): the lines
    # each request's answer gains, the requests whose named nodes are all placed, and why
    # the launch stopped short, if it did (a ``Degraded`` reason and message).
    cost_per_hour: float | None = None
    launch_notes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    offerings_served: tuple[str, ...] = ()
    launch_held: tuple[str, str] | None = None
    # How many of the pool's Nodes differ from its spec (``disruption.plan``).
    drifted: int = 0

    @property
    def draining(self) -> list[str]:
        return sorted(name for name, node in self.nodes.items() if is_draining(node))

    @property
    def cancellable(self) -> list[str]:
        """Draining Nodes a change of mind may give back: not those being repaired."""
        return [name for name in self.draining if name not in self.unhealthy]

    @property
    def ready(self) -> int:
        return sum(
            1 for node in self.nodes.values() if nodes.is_ready(node) and not is_draining(node)
        )


@dataclass(frozen=True)
class Verdicts:
    """What a pass decides about a pool's machines, from the world alone: the same for a
    restarted operator as for one that ran all along (the model test checks it)."""

    victims: tuple[VmName, ...]  # to remove for the pool's size
    unhealthy: frozenset[str]  # Nodes not Ready past the pool's timeouts
    overdue: frozenset[str]  # VMs RUNNING without a Node past registration
    stuck: frozenset[str]  # VMs PROVISIONING past the provisioning timeout
    changes_in: float | None  # seconds until a verdict changes by time alone


def pick_victims(view: PoolView, excess: int) -> list[VmName]:
    """The ``excess`` VMs to remove, cheapest first; stable across reconciles.

    Nodes already draining first (never switch victims mid-drain). The Nodes a
    ScaleRequest names are among them: their drain mark is written before the request
    lowers the target (``answering``), so a request's scale-down takes exactly the Nodes
    it named, after a restart too. Then VMs without a Node (nothing runs there), then
    not-Ready Nodes, then the emptiest; a Node that holds a do-not-disrupt pod, or is
    do-not-disrupt itself, only when nothing else is left. The Autoscaler's consolidation
    taint gives a Node no precedence: until a request that names it is applied it is
    the Autoscaler's proposal, not a removal.
    """
    if excess <= 0:
        return []
    ordered = sorted(view.vms, key=lambda vm: victim_cost(view, vm))
    return [vm.name for vm in ordered[:excess]]


#: ``victim_cost``'s first field for a Ready Node nothing protects: below it, the VMs that
#: go first anyway; above it, the protected ones, only when nothing else is left.
READY_RANK: Final = 3


def victim_cost(view: PoolView, vm: VirtualMachine) -> tuple[int, int, int, str]:
    """How cheap removing ``vm`` is (lower first), in ``pick_victims``'s order."""
    node = view.nodes.get(vm.name)
    if node is not None and is_draining(node):
        return (0, 0, 0, vm.name)
    if node is None:
        return (1, 0, 0, vm.name)
    ready = 1 if nodes.is_ready(node) else 0
    rank = READY_RANK + 1 if vm.name in view.protected else READY_RANK if ready else 2
    return (rank, ready, view.pods_per_node.get(vm.name, 0), vm.name)


def pool_status(
    *,
    pool: Mapping[str, Any],
    desired: int,
    view: PoolView,
    degraded: tuple[str, str] | None,
    now: str,
) -> dict[str, Any]:
    """The full status the pool should have; equal inputs give an equal status."""
    meta = pool["metadata"]
    generation = int(meta.get("generation", 0))
    active = _is_active(view, desired)
    found = conditions.ConditionList(
        pool.get("status", {}).get("conditions"), observed_generation=generation, now=now
    )
    ready = view.ready
    # More Ready than wanted (a replacement up before the Node it replaces goes, a
    # scale-down's victims not drained yet) is every wanted Node Ready.
    found.set(
        "Ready",
        ready >= desired,
        reason="NodesReady" if ready >= desired else "NodesNotReady",
        message=f"{ready}/{desired} nodes ready",
    )
    _set_scaling(found, view=view, desired=desired, active=active)
    if degraded is None:
        found.set("Degraded", False, reason="AsExpected", message="the cloud accepts our requests")
    else:
        found.set("Degraded", True, reason=degraded[0], message=degraded[1])
    reported = view.reported_allocatable
    _set_allocatable(found, pool=pool, reported=reported)
    return (
        {
            "observedGeneration": generation,
            "scaleOperation": "active" if active else "inactive",
            "currentNodes": len(view.nodes),
            "readyNodes": ready,
            "selector": wellknown.pool_selector(str(meta["name"])),
            "conditions": found.items,
        }
        | (
            {"zoneBackoffs": [b.to_dict() for b in view.zone_backoffs]}
            if view.zone_backoffs
            else {}
        )
        | ({"cloudPause": view.cloud_pause.to_dict()} if view.cloud_pause is not None else {})
        | ({"reportedAllocatable": reported.to_dict()} if reported is not None else {})
        | ({"costPerHour": view.cost_per_hour} if view.cost_per_hour is not None else {})
        | ({"driftedNodes": view.drifted} if view.drifted else {})
    )


def _is_active(view: PoolView, desired: int) -> bool:
    """A scale operation goes on until VMs, Nodes and Ready Nodes all match the target and
    no Node drains."""
    return (
        len(view.vms) != desired
        or len(view.nodes) != desired
        or view.ready != desired
        or bool(view.draining)
    )


def _set_allocatable(
    found: conditions.ConditionList,
    *,
    pool: Mapping[str, Any],
    reported: nodepool_api.ReportedAllocatable | None,
) -> None:
    """The allocatable condition, once a Ready Node has reported what it offers (and kept
    from then on, also when no Node reports for a while)."""
    if reported is None:
        return
    if reported.lowest or conditions.find_condition(found.items, allocatable.CONDITION):
        overstated, reason, message = allocatable.condition(
            reported, nodepool_api.spec_of(pool).template
        )
        found.set(allocatable.CONDITION, overstated, reason=reason, message=message)


def _set_scaling(
    found: conditions.ConditionList, *, view: PoolView, desired: int, active: bool
) -> None:
    """The ``Scaling`` condition: which way the operation goes, and how far it has come."""
    if not active:
        found.set("Scaling", False, reason="Stable", message=f"{desired} nodes")
        return
    live, current = len(view.vms), len(view.nodes)
    direction = "ScalingUp" if live < desired or current < desired else "ScalingDown"
    if live == desired and current == desired and not view.draining:
        direction = "WaitingForNodes"
    message = f"{live} VMs, {current} nodes, {desired} wanted"
    if view.blocked:
        direction = "DrainBlocked"
        message = f"{message}; {_blocked_summary(view.blocked)}"
    found.set("Scaling", True, reason=direction, message=message)


#: ``Scaling``'s reason while the pool's target is not met and the cloud's listing of its
#: VMs cannot be acted on: nothing moves until it can.
WAITING_FOR_CLOUD = "WaitingForCloud"


def degraded_status(
    *, pool: Mapping[str, Any], desired: int, reason: str, message: str, now: str
) -> dict[str, Any]:
    """The pool's status when the cloud's answer cannot be acted on: ``Degraded`` set, the
    counts as last written (no VM listing can be trusted to change them), and ``Ready``,
    ``Scaling`` and ``scaleOperation`` made to agree with ``desired``. A pool whose
    target is not met is never shown Ready or Stable, nor its operation inactive, while
    the cloud cannot be listed (one that is met stays as it was)."""
    status = dict(pool.get("status") or {})
    generation = int(pool["metadata"].get("generation", 0))
    found = conditions.ConditionList(
        status.get("conditions"), observed_generation=generation, now=now
    )
    found.set("Degraded", True, reason=reason, message=message)
    current, ready = int(status.get("currentNodes") or 0), int(status.get("readyNodes") or 0)
    if current != desired or ready != desired:
        found.set(
            "Ready",
            False,
            reason="NodesNotReady",
            message=f"{ready}/{desired} nodes ready",
        )
        found.set(
            "Scaling",
            True,
            reason=WAITING_FOR_CLOUD,
            message=f"{current} nodes, {desired} wanted; waiting for the cloud: {reason}",
        )
        status["scaleOperation"] = "active"
    status["conditions"] = found.items
    return status


#: How many blocked pods the Scaling condition names; the events name every one.
MAX_BLOCKED_IN_MESSAGE = 3


def _blocked_summary(blocked: Sequence[str]) -> str:
    shown = "; ".join(blocked[:MAX_BLOCKED_IN_MESSAGE])
    more = len(blocked) - MAX_BLOCKED_IN_MESSAGE
    return f"{shown}; and {more} more" if more > 0 else shown


def live_vms(vms: Iterable[VirtualMachine]) -> list[VirtualMachine]:
    return [vm for vm in vms if vm.state != VmState.DELETING]
