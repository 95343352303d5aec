"""Disruption: a pool's drifted and expired Nodes replaced, within its budgets, and its
Nodes the cloud takes back (an interruption notice) replaced at once.

Each pass, from the world alone (so a restarted operator goes on with the same roll):

1. **Record.** A Node without a spec hash (registered before the operator recorded
   them) is stamped with the pool's current one; a Node that has drifted carries
   ``wellknown.DRIFTED_ANNOTATION`` naming what changed (removed if the spec goes back).
2. **Choose.** A Node is a candidate when it has drifted (``api.drift``) or expired
   (``spec.expireAfter`` past its creationTimestamp), is Ready, registered, not being
   disrupted already, not repaired, neither it nor a pod on it is do-not-disrupt, and
   no pod on it keeps its data on the Node's own disk (a local PersistentVolume,
   ``local_data``: that pod could run nowhere else).
   Candidates (expired first, then the oldest) are tainted
   ``wellknown.DISRUPTED_TAINT_KEY=<reason>:NoSchedule`` as far as the pool's budgets
   allow (``api.disruption.allowance``), counting every Node being disrupted for any
   reason (the Autoscaler's consolidation taints, drains, repairs), and every Node the
   pool lacks to be whole (a replacement not serving yet for a Node that went first).
   The taint is the record: it holds the Node's place in the budget until the Node is
   gone; the missing Node then holds it until its replacement is Ready and registered.
   A Node carrying the cloud's notice (``wellknown.interrupted_at``: a spot interruption,
   a scheduled change, the instance stopping) is a candidate too, reason ``Interrupted``,
   Ready or not, do-not-disrupt or not: the VM goes whatever anyone says. No budget holds
   it, but it counts among the Nodes being disrupted, and it is chosen first.
3. **Replace.** A tainted Node's replacement is launched first while the pool has room
   under ``maxNodes`` (the pool is sized one Node larger per such Node); once enough
   Nodes are Ready without it, its drain starts. Without room, its drain starts at once
   and the replacement is launched once it is gone (remove, then launch: the event says so).
   The room is ``maxNodes`` less the target: a Node draining never takes it from a Node
   waiting for its replacement (which then launches once the VMs are under ``maxNodes``).
   A noticed Node does not wait for its replacement: its drain starts at once (the
   notice's ``terminateAt`` is its deadline, ``drain.Drainer``) and its replacement is
   launched at once beside it, while the pool has room under ``maxNodes``; once drained,
   its VM waits for that replacement to be Ready, no later than ``terminateAt``.
   A Node carrying a rebalance recommendation (``is_rebalancing``: marked only where the
   pool opts in, ``spec.disruption.rebalanceRecommendation: Replace``, and cordoned) is
   not drained: its replacement is launched at once beside it (not budgeted, counted, as
   an interruption; while the pool has room under ``maxNodes``, before the voluntary
   replacements) and it stays, cordoned, its pods running. A notice that follows makes
   it a noticed Node (above), its replacement already there. Without one it stays until
   it drifts or expires (the voluntary path, within the budget, where it goes first and
   takes no more room than it holds already, finds its replacement up), or is uncordoned
   by hand (the mark no longer counts: the pool is one over its target and its plain
   scale-down removes the emptiest Node). The Autoscaler's consolidation never picks it:
   a cordoned Node is not eligible there.
4. **Drain.** A tainted Node that is draining goes through the one drain there is
   (``termination.Terminator.remove_drained``: the Eviction API, PodDisruptionBudgets,
   do-not-disrupt pods, ``drainTimeoutSeconds``), then its VM and the Node go.

``plan`` decides (pure); ``Disrupter`` writes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nodepool_operator import timestamps
from nodepool_operator.api import disruption as disruption_api
from nodepool_operator.api import drift, wellknown
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud.provider import VmName
from nodepool_operator.controllers.nodepool import drain, metrics, termination
from nodepool_operator.controllers.nodepool import plan as pool_plan
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import errors, kinds, nodes
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.events import EventRecorder

__all__ = [
    "Candidate",
    "Disrupter",
    "DisruptionPlan",
    "disruption_reason",
    "is_noticed",
    "is_rebalancing",
    "plan",
    "sized",
    "sized_target",
]

log = logging.getLogger(__name__)

# Expiry first: an expired Node must go whatever else changed; drift can wait a pass.
# The cloud's notice first of all: its VM goes whatever else happens.
_REASON_ORDER: dict[disruption_api.TaintReason, int] = {
    "Interrupted": -1,
    "Expired": 0,
    "Drifted": 1,
}


def disruption_reason(node: Mapping[str, Any]) -> str | None:
    """The reason the NodePool controller tainted ``node`` for, if it did."""
    for taint in (node.get("spec") or {}).get("taints") or ():
        if taint.get("key") == wellknown.DISRUPTED_TAINT_KEY:
            return str(taint.get("value") or "")
    return None


@dataclasses.dataclass(frozen=True)
class Candidate:
    node: str
    reason: disruption_api.TaintReason
    why: str  # what changed, how long ago it expired, or what the cloud said


@dataclasses.dataclass(frozen=True)
class DisruptionPlan:
    """What a pass does about a pool's disruption (voluntary, and the cloud's notices)."""

    stamp: Mapping[str, str]  # Node -> the spec hash to record on it
    drifted: Mapping[str, str | None]  # Node -> DRIFTED_ANNOTATION's new value (None: off)
    taint: tuple[Candidate, ...]  # chosen now, within budget
    held: tuple[tuple[Candidate, str], ...]  # candidates a budget holds, and which
    drain: tuple[str, ...]  # tainted Nodes draining, or to start draining now
    no_room: tuple[str, ...]  # those among them drained before their replacement
    waiting: tuple[str, ...]  # tainted Nodes whose replacement is launched first
    recheck_in: float | None  # when an expiry or a budget window changes the plan
    drifted_nodes: int = 0  # Nodes that differ from the spec
    # Noticed Nodes whose VM stays once drained, until their replacement is Ready or the
    # notice's terminateAt: the pool is never short of Ready Nodes while there is time.
    keep: tuple[str, ...] = ()
    # Nodes with a rebalance recommendation whose replacement runs beside them (room
    # under maxNodes): the pool is sized one larger per such Node; none is drained.
    rebalancing: tuple[str, ...] = ()


def _created(node: Mapping[str, Any]) -> float | None:
    return timestamps.parse_rfc3339((node.get("metadata") or {}).get("creationTimestamp"))


def _annotation(node: Mapping[str, Any], key: str) -> str | None:
    value = ((node.get("metadata") or {}).get("annotations") or {}).get(key)
    return None if value is None else str(value)


def _draining(node: Mapping[str, Any]) -> bool:
    return pool_plan.is_draining(node) or pool_plan.vm_deletion_requested(node)


def is_noticed(node: Mapping[str, Any]) -> bool:
    """The cloud gave notice that it takes the Node's VM back, and the VM is not being
    deleted by us already: the Node is disruption's, reason ``Interrupted``."""
    return (
        wellknown.interrupted_at(node) is not None
        and not pool_plan.vm_deletion_requested(node)
        and not (node.get("metadata") or {}).get("deletionTimestamp")
    )


def is_rebalancing(node: Mapping[str, Any]) -> bool:
    """The Node carries the cloud's rebalance recommendation (stored only where its pool
    opts in) and is still cordoned, and nothing else replaces it already: not being
    disrupted or removed, no VM deletion requested. Its replacement runs beside it."""
    spec = node.get("spec") or {}
    return (
        wellknown.interruption_kind(node) == wellknown.REBALANCE
        and bool(spec.get("unschedulable"))
        and not wellknown.is_being_disrupted(node)
        and not _draining(node)
        and not (node.get("metadata") or {}).get("deletionTimestamp")
    )


def _interrupted(name: str, node: Mapping[str, Any], *, now: float) -> Candidate:
    kind = wellknown.interruption_kind(node) or "notice"
    due = wellknown.interruption_terminate_at(node)
    left = "no time given" if due is None else f"{max(0, int(due - now))}s left"
    return Candidate(name, disruption_api.INTERRUPTED, f"the cloud gave notice: {kind}, {left}")


def _candidate(
    name: str,
    node: Mapping[str, Any],
    changed: tuple[str, ...],
    *,
    expire_after: int | None,
    now: float,
) -> tuple[Candidate | None, float | None]:
    """The Node as a candidate (None: not one), and when it expires if not yet."""
    created = _created(node)
    left = (
        None
        if created is None
        else disruption_api.expires_in(created_at=created, expire_after=expire_after, now=now)
    )
    if left is not None and left <= 0:
        return Candidate(name, "Expired", f"created {int(now - (created or now))}s ago"), None
    if changed:
        return Candidate(name, "Drifted", f"changed: {', '.join(changed)}"), left
    return None, left


def plan(
    view: pool_plan.PoolView,
    spec: nodepool_api.NodePoolSpec,
    *,
    desired: int,
    now: float,
) -> DisruptionPlan:
    """The pass's decisions on ``view`` (pure: the world in, the writes out)."""
    current = drift.spec_hash(spec)
    expire_after = disruption_api.parse_expire_after(spec.expire_after)
    stamp: dict[str, str] = {}
    drifted: dict[str, str | None] = {}
    candidates: list[Candidate] = []
    held: list[tuple[Candidate, str]] = []
    expiries: list[float] = []
    drifted_nodes = 0
    interrupted: list[Candidate] = []
    for name, node in sorted(view.nodes.items()):
        if drift.needs_stamp(node, current):
            stamp[name] = current.text
        changed = drift.drift_of(node, spec, current)
        drifted_nodes += 1 if changed else 0
        shown = ",".join(changed) or None
        if shown != _annotation(node, wellknown.DRIFTED_ANNOTATION):
            drifted[name] = shown
        if is_noticed(node) and disruption_reason(node) != disruption_api.INTERRUPTED:
            # Whatever else holds it (a voluntary taint, a drain under way, not Ready):
            # the VM goes, so the Node is replaced now.
            interrupted.append(_interrupted(name, node, now=now))
            continue
        if wellknown.is_being_disrupted(node) or name in view.unhealthy:
            continue
        if not nodes.is_ready(node) or wellknown.is_unregistered(node):
            continue
        candidate, left = _candidate(name, node, changed, expire_after=expire_after, now=now)
        if left is not None and left > 0:
            expiries.append(left)
        if candidate is None:
            continue
        refusal = wellknown.do_not_disrupt_reason(node, node=True)
        if refusal is not None or name in view.protected:
            held.append((candidate, refusal or "a do-not-disrupt pod on it"))
            continue
        if name in view.local_data:
            held.append((candidate, view.local_data[name]))
            continue
        candidates.append(candidate)
    rebalancing = _rebalancing(view)
    # Within a reason, a Node with a rebalance recommendation first: its replacement is
    # up already, and it holds its place in the budget already.
    candidates.sort(
        key=lambda c: (
            _REASON_ORDER[c.reason],
            c.node not in rebalancing,
            _created(view.nodes[c.node]) or 0,
        )
    )
    disrupting = sum(
        1
        for name, node in view.nodes.items()
        if wellknown.is_being_disrupted(node) or name in view.unhealthy
    )
    # Not budgeted, but counted: each takes room a voluntary disruption would have used.
    chosen: list[Candidate] = list(interrupted)
    disrupting += sum(
        1 for c in interrupted if not wellknown.is_being_disrupted(view.nodes[c.node])
    )
    disrupting += len(rebalancing)
    # The Nodes the pool lacks beside those: a replacement not Ready yet for a Node gone
    # first (no room under maxNodes) is a disruption still under way. Counted, or the
    # next Node would go before the last one's replacement serves, two short under a
    # budget of one.
    disrupting += max(0, desired - _serving(view) - disrupting)
    for candidate in candidates:
        reason = candidate.reason
        if reason == disruption_api.INTERRUPTED:
            continue  # never among these: chosen above, outside every budget
        # A Node with a rebalance recommendation is counted already: choosing it for a
        # voluntary disruption takes no more room (else it would hold itself for ever).
        counted = 1 if candidate.node in rebalancing else 0
        allowed = disruption_api.allowance(
            spec.disruption.budgets,
            reason=reason,
            total=disruption_api.counted_in_budgets(view.nodes.values()),
            disrupting=disrupting - counted,
            now=now,
        )
        if allowed.allowed <= 0:
            held.append((candidate, allowed.describe()))
            continue
        chosen.append(candidate)
        disrupting += 1 - counted
    drain_now, no_room, waiting, beside = _replacements(
        view, spec, desired=desired, rebalancing=rebalancing
    )
    keep = _kept(view, drain_now, no_room, rebalancing, desired=desired, now=now)
    budget_change = disruption_api.next_change_in(spec.disruption.budgets, now=now)
    waits = [*expiries, *([budget_change] if held and budget_change is not None else [])]
    return DisruptionPlan(
        stamp=stamp,
        drifted=drifted,
        taint=tuple(chosen),
        held=tuple(held),
        drain=drain_now,
        no_room=no_room,
        waiting=waiting,
        keep=keep,
        rebalancing=beside,
        recheck_in=min(waits) if waits else None,
        drifted_nodes=drifted_nodes,
    )


def _rebalancing(view: pool_plan.PoolView) -> tuple[str, ...]:
    """The pool's Nodes with a rebalance recommendation to replace beside them (a Node
    repair has taken is repair's), sorted."""
    return tuple(
        sorted(
            name
            for name, node in view.nodes.items()
            if is_rebalancing(node) and name not in view.unhealthy
        )
    )


def _serving(view: pool_plan.PoolView) -> int:
    """The pool's Nodes that serve: Ready, registered, and neither being disrupted,
    unhealthy, given notice by the cloud, nor cordoned for a rebalance recommendation."""
    return sum(
        1
        for name, node in view.nodes.items()
        if nodes.is_ready(node)
        and not wellknown.is_unregistered(node)
        and not wellknown.is_being_disrupted(node)
        and not is_noticed(node)
        and not is_rebalancing(node)
        and name not in view.unhealthy
    )


def _ready_without(view: pool_plan.PoolView, left_out: Iterable[str]) -> int:
    """The pool's Ready, registered Nodes but ``left_out`` (those leaving, and those
    cordoned for a rebalance recommendation: none of them is a replacement)."""
    gone = set(left_out)
    return sum(
        1
        for name, node in view.nodes.items()
        if name not in gone and nodes.is_ready(node) and not wellknown.is_unregistered(node)
    )


def _replacements(
    view: pool_plan.PoolView,
    spec: nodepool_api.NodePoolSpec,
    *,
    desired: int,
    rebalancing: Sequence[str],
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Which tainted Nodes drain now (and which of them for want of room under
    ``maxNodes``), which wait for their replacement, and which of ``rebalancing`` get
    theirs beside them (room first, before the voluntary replacements). A noticed Node
    drains now, tainted yet or not (this pass taints it): its replacement does not hold
    it up."""
    tainted = sorted(
        name
        for name, node in view.nodes.items()
        if (disruption_reason(node) is not None and name not in view.unhealthy) or is_noticed(node)
    )
    leaving = [n for n in tainted if _draining(view.nodes[n]) or is_noticed(view.nodes[n])]
    staying = [n for n in tainted if n not in leaving]
    # Each replacement launched first is one VM beyond the target: never past maxNodes.
    # A Node draining takes none of that room from those waiting: one drained for want of
    # room is one of the target's VMs, not one beyond (counting it moved a Node whose
    # replacement was booting already to "no room", drained before it served); one whose
    # replacement served holds its VM only until it is gone, and ``sized_target`` keeps
    # the VMs under maxNodes meanwhile (a waiting Node's replacement launches then).
    room = max(0, spec.max_nodes - desired)
    beside = tuple(rebalancing[:room])
    room -= len(beside)
    first, no_room = staying[:room], staying[room:]
    # Noticed Nodes drain now whatever the room; those beyond it are replaced once gone.
    others = [n for n in leaving if not is_noticed(view.nodes[n])]
    noticed = [n for n in leaving if n not in others]
    slots = max(0, spec.max_nodes - desired - len(others))
    unroomed = noticed[slots:]
    # Ready Nodes beyond the target, the tainted ones that still run pods included: that
    # many replacements are up, and that many tainted Nodes may start draining.
    surplus = max(0, _ready_without(view, [*leaving, *rebalancing]) - desired)
    start, waiting = first[:surplus], first[surplus:]
    drain_now = tuple([*leaving, *start, *no_room])
    return drain_now, tuple([*unroomed, *no_room]), tuple(waiting), beside


def _kept(
    view: pool_plan.PoolView,
    drain_now: Sequence[str],
    no_room: Sequence[str],
    rebalancing: Sequence[str],
    *,
    desired: int,
    now: float,
) -> tuple[str, ...]:
    """The noticed Nodes draining whose VM waits, drained, for its replacement: as many
    as the pool lacks Ready Nodes without those leaving, among those whose replacement is
    launched now (room under ``maxNodes``) and whose ``terminateAt`` has not come (past
    it the cloud takes the VM anyway; without one, the instance is stopping already)."""
    missing = max(0, desired - _ready_without(view, [*drain_now, *rebalancing]))
    replaced = [
        name
        for name in drain_now
        if name not in no_room
        and is_noticed(view.nodes[name])
        and (due := wellknown.interruption_terminate_at(view.nodes[name])) is not None
        and now < due
    ]
    return tuple(replaced[:missing])


def sized(view: pool_plan.PoolView, leaving: Sequence[str]) -> pool_plan.PoolView:
    """``view`` without the Nodes (and VMs) disruption is draining: the pool is sized,
    and its plain scale-down chooses, among the others."""
    gone = set(leaving)
    return dataclasses.replace(
        view,
        vms=[vm for vm in view.vms if vm.name not in gone],
        nodes={name: node for name, node in view.nodes.items() if name not in gone},
    )


def sized_target(spec: nodepool_api.NodePoolSpec, desired: int, decided: DisruptionPlan) -> int:
    """How many VMs the pool keeps beside those draining for disruption: one more per
    replacement launched first, and per Node with a rebalance recommendation replaced
    beside it, never past ``maxNodes`` with the draining ones."""
    beside = len(decided.waiting) + len(decided.rebalancing)
    return max(0, min(desired + beside, spec.max_nodes - len(decided.drain)))


@dataclasses.dataclass(kw_only=True, eq=False)
class Disrupter:
    """Writes a ``DisruptionPlan``: stamps, taints, events; drains through the one drain."""

    client: Client
    recorder: EventRecorder
    terminator: termination.Terminator
    wall_clock: clock_module.WallClock
    # (pool, node, what holds it) already told: events say a fact once, not every pass.
    _told: set[tuple[str, str, str]] = dataclasses.field(default_factory=set, init=False)

    async def act(
        self,
        pool: Object,
        spec: nodepool_api.NodePoolSpec,
        view: pool_plan.PoolView,
        decided: DisruptionPlan,
    ) -> tuple[list[Object], list[drain.DrainProgress]]:
        """The Nodes as our patches left them, and the drains' progress."""
        written: list[Object] = []
        pool_name = str(pool["metadata"]["name"])
        for name in sorted(set(decided.stamp) | set(decided.drifted)):
            annotations: dict[str, str | None] = {}
            if name in decided.stamp:
                annotations[wellknown.SPEC_HASH_ANNOTATION] = decided.stamp[name]
            if name in decided.drifted:
                annotations[wellknown.DRIFTED_ANNOTATION] = decided.drifted[name]
            patched = await self._patch(name, {"metadata": {"annotations": annotations}})
            if patched is not None:
                written.append(patched)
        # What was told of Nodes no longer held is forgotten: told again if held again.
        still = {(pool_name, c.node) for c, _ in decided.held}
        self._told = {t for t in self._told if t[0] != pool_name or t[:2] in still}
        for candidate, holder in decided.held:
            await self._tell_held(pool, candidate, holder)
        for candidate in decided.taint:
            patched = await self._taint(view.nodes[candidate.node], candidate.reason)
            if patched is None:
                continue
            written.append(patched)
            metrics.nodepool_disruptions_total.labels(pool=pool_name, reason=candidate.reason).inc()
            await self.recorder.event(
                pool,
                type="Normal",
                reason=f"Disrupting{candidate.reason}",
                message=f"replacing node {candidate.node}: {candidate.reason} ({candidate.why})",
            )
            log.info(
                "event=node-disrupted pool=%s node=%s reason=%s why=%r",
                pool_name,
                candidate.node,
                candidate.reason,
                candidate.why,
            )
        progress = []
        for name in decided.drain:
            node = view.nodes[name]
            if not _draining(node):
                reason = disruption_reason(node)
                if is_noticed(node):
                    reason = disruption_api.INTERRUPTED
                    how = "the cloud takes its VM back: drained now, before its deadline, " + (
                        f"its replacement launched once it is gone (no room under maxNodes="
                        f"{spec.max_nodes})"
                        if name in decided.no_room
                        else "its replacement launched beside it"
                    )
                elif name in decided.no_room:
                    how = (
                        f"no room under maxNodes={spec.max_nodes}: removing it before "
                        "launching its replacement"
                    )
                else:
                    how = "its replacement is Ready"
                await self.recorder.event(
                    pool,
                    type="Normal",
                    reason="DisruptionDraining",
                    message=f"draining node {name} ({reason}): {how}",
                )
            keep_until = wellknown.interruption_terminate_at(node) if name in decided.keep else None
            progress.append(
                await self.terminator.remove_drained(
                    pool, spec, node, vm=VmName(name), keep_until=keep_until
                )
            )
        return written, progress

    async def _tell_held(self, pool: Object, candidate: Candidate, holder: str) -> None:
        fact = (str(pool["metadata"]["name"]), candidate.node, f"{candidate.reason}:{holder}")
        if fact in self._told:
            return
        self._told = {t for t in self._told if t[:2] != fact[:2]} | {fact}
        await self.recorder.event(
            pool,
            type="Normal",
            reason="DisruptionBlocked",
            message=f"node {candidate.node} is {candidate.reason} ({candidate.why}) "
            f"and waits: {holder}",
        )

    async def _taint(
        self, node: Mapping[str, Any], reason: disruption_api.TaintReason
    ) -> Object | None:
        taints = [
            t
            for t in (node.get("spec") or {}).get("taints") or ()
            if t.get("key") != wellknown.DISRUPTED_TAINT_KEY
        ]
        taints.append(
            {"key": wellknown.DISRUPTED_TAINT_KEY, "value": reason, "effect": "NoSchedule"}
        )
        # The resourceVersion it was read at: a taint another writer added meanwhile is
        # never dropped, and a Node changed meanwhile is judged again next pass.
        return await self._patch(
            str(node["metadata"]["name"]),
            {
                "metadata": {"resourceVersion": node["metadata"].get("resourceVersion")},
                "spec": {"taints": taints},
            },
        )

    async def _patch(self, name: str, body: dict[str, Any]) -> Object | None:
        try:
            return await self.client.patch(kinds.NODES, name, body)
        except (errors.NotFound, errors.Conflict):
            return None  # gone, or changed since it was read: the next pass sees it

    def forget_pool(self, pool: str) -> None:
        self._told = {t for t in self._told if t[0] != pool}
