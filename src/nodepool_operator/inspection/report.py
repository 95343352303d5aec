"""What ``explain`` and ``plan`` found, as data (``-o json``) and as terminal tables (rich).

The data classes are the contract scripts read; the tables are for people. Colour only on
a terminal (rich decides that from the stream), and never a traceback for a wrong name.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, TextIO

from rich.console import Console
from rich.table import Table

__all__ = [
    "ClusterPlan",
    "KeptNode",
    "NewestScaleRequest",
    "NodeVerdict",
    "OfferingNodes",
    "OfferingPrice",
    "Output",
    "PodExplanation",
    "PoolGrowth",
    "PoolOfferings",
    "PoolScaleDown",
    "PoolVerdict",
    "Removable",
    "UnfitPod",
    "Watcher",
    "print_explanation",
    "print_plan",
    "to_json",
]


class Output(enum.StrEnum):
    TABLE = "table"
    JSON = "json"


@dataclass(frozen=True)
class NodeVerdict:
    """An existing Node and whether the pod fits it now; ``problem`` is the first filter
    that refuses, in the scheduler's words."""

    name: str
    pool: str | None
    booting: bool  # requested, not Ready yet: room on its way
    problem: str | None


@dataclass(frozen=True)
class PoolVerdict:
    """Whether a new node of the pool could host the pod, and whether the pool may grow."""

    name: str
    problem: str | None
    headroom: int  # nodes it may still add (maxNodes - targetNodes)
    autoscaled: bool  # an Autoscaler plans for it and watches the pod's namespace


@dataclass(frozen=True)
class NewestScaleRequest:
    """The newest ScaleRequest for the pool the plan gives the pod to."""

    name: str
    pool: str
    target_nodes: int
    phase: str
    message: str
    created: str


@dataclass(frozen=True)
class Watcher:
    """An Autoscaler that plans for the pod: it looks again at the latest
    ``scan_interval_seconds`` after its last look, at once when a pod, node or pool
    changes; in dry run it reports what it would ask for and asks for nothing."""

    autoscaler: str
    pool: str
    scan_interval_seconds: int
    dry_run: bool


@dataclass(frozen=True)
class PodExplanation:
    namespace: str
    name: str
    phase: str
    node: str | None  # where it is bound, if it is
    scheduler_says: str  # the PodScheduled condition's message, if any
    planned: str  # what the plan does for it, in one sentence
    planned_pool: str | None
    nodes: tuple[NodeVerdict, ...]
    pools: tuple[PoolVerdict, ...]
    decision: NewestScaleRequest | None
    watchers: tuple[Watcher, ...] = ()  # for its pool, or every one watching its namespace
    # A pool with requirements: the offering its new node is and the cheaper ones that
    # refused it (``simulation.offering_plan``).
    offering: str | None = None


@dataclass(frozen=True)
class PoolGrowth:
    pool: str
    target_nodes: int
    new_nodes: int
    pods: tuple[str, ...]  # namespace/name of the pods the new nodes are for
    limited_to: int | None = None  # maxNodes stopped it here; the pods need more
    beyond_max: tuple[str, ...] = ()  # pods only nodes past maxNodes could host


@dataclass(frozen=True)
class Removable:
    """A node of the pool consolidation would give back once it has been unneeded for
    the Autoscaler's ``scaleDown.unneededSeconds``: empty (DaemonSet and mirror pods
    only), or underused with every pod movable and fitting on the nodes that stay."""

    pool: str
    node: str
    reason: str  # why it goes, in the words of its ConsolidationRemoving event
    empty: bool
    usage: float  # the larger of its requested cpu and memory shares of allocatable
    pods: tuple[str, ...] = ()  # namespace/name of the pods a drain would move


@dataclass(frozen=True)
class KeptNode:
    """A node of the pool scale-down keeps, and the rule that keeps it: ``busy``,
    ``do-not-disrupt``, ``not-ready``, ``cordoned``, ``unregistered``, ``being-replaced``
    (tainted for its drift or expiry replacement), ``min-nodes``, ``disruption-budget``
    (the message names the pool's budget that holds), or one of consolidation's pod rules
    (``not-replicated``, ``local-storage``, ``no-room``...)."""

    pool: str
    node: str
    rule: str
    message: str


@dataclass(frozen=True)
class NodeDisruption:
    """A Node the NodePool controller replaces because it drifted from its pool's spec or
    expired (``reason`` ``Drifted`` or ``Expired``; ``why``: what changed, or its age):
    ``state`` ``next`` (tainted in its next pass, within the pool's disruption budgets),
    ``held`` (``held_by`` says what holds it: the budget, or a do-not-disrupt
    annotation), or ``in-progress`` (tainted already, being replaced)."""

    pool: str
    node: str
    reason: str
    why: str
    state: str
    held_by: str | None = None


@dataclass(frozen=True)
class OfferingPrice:
    """One offering of the cloud's catalog a pool allows: a type in a zone as a capacity
    type, at a price per hour."""

    instance_type: str
    zone: str
    capacity_type: str
    price_per_hour: float

    def describe(self) -> str:
        """In the words ``explain pod`` names an offering with."""
        return (
            f"{self.instance_type} in {self.zone} ({self.capacity_type}, {self.price_per_hour:g}/h)"
        )


@dataclass(frozen=True)
class OfferingNodes:
    """How many new nodes of one offering the plan adds to a pool."""

    offering: OfferingPrice
    count: int


@dataclass(frozen=True)
class PoolOfferings:
    """A pool with requirements as the plan saw it with the cloud's catalog: the offerings
    a new node of it may be now (allowed, available, not backed off; cheapest first), why
    it cannot grow when it cannot (no catalog read, none allowed or available), and the
    offerings of the new nodes the plan gives it, with what they cost per hour."""

    pool: str
    offerings: tuple[OfferingPrice, ...]
    blocked: str | None
    new_nodes: tuple[OfferingNodes, ...] = ()
    new_nodes_per_hour: float = 0.0


@dataclass(frozen=True)
class PoolScaleDown:
    """How far the pool may shrink, and what holds scale-down back now, if anything."""

    pool: str
    target_nodes: int
    min_nodes: int
    may_give_up: int  # targetNodes - minNodes
    waits_for: str | None  # disabled, request-pending, capacity-in-flight, pods-pending


@dataclass(frozen=True)
class UnfitPod:
    pod: str
    reason: str


@dataclass(frozen=True)
class ClusterPlan:
    pending: int
    on_existing: int  # pending pods the plan places on nodes that exist or are coming
    growth: tuple[PoolGrowth, ...]
    unfit: tuple[UnfitPod, ...]
    removable: tuple[Removable, ...]
    troubles: tuple[str, ...]  # Autoscalers that decide nothing, and why
    kept: tuple[KeptNode, ...] = ()
    scale_down: tuple[PoolScaleDown, ...] = ()
    disruptions: tuple[NodeDisruption, ...] = ()  # drifted and expired Nodes
    # Pools with requirements: their offerings and the new nodes' (needs the catalog).
    offerings: tuple[PoolOfferings, ...] = ()
    # What the new nodes of pools with requirements cost per hour, together; None when
    # no pool has offerings to plan with (a template's shape has no price).
    new_nodes_per_hour: float | None = None


def to_json(result: PodExplanation | ClusterPlan) -> str:
    def convert(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {
                _camel(field.name): convert(getattr(value, field.name))
                for field in dataclasses.fields(value)
            }
        if isinstance(value, tuple | list):
            return [convert(item) for item in value]
        return value

    return json.dumps(convert(result), indent=2)


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(word.title() for word in rest)


def _yes_no(problem: str | None) -> str:
    return "[green]yes[/green]" if problem is None else "[red]no[/red]"


def print_explanation(explanation: PodExplanation, *, out: TextIO | None = None) -> None:
    console = Console(file=out, highlight=False)
    where = f"bound to {explanation.node}" if explanation.node else explanation.phase
    console.print(f"[bold]Pod {explanation.namespace}/{explanation.name}[/bold]: {where}")
    if explanation.scheduler_says:
        console.print(f"  scheduler: {explanation.scheduler_says}")
    console.print(f"  plan: {explanation.planned}")
    if explanation.offering:
        console.print(f"  new node: {explanation.offering}")
    if explanation.decision is not None:
        d = explanation.decision
        console.print(
            f"  latest decision: ScaleRequest {d.name} for pool {d.pool}: "
            f"targetNodes {d.target_nodes}, {d.phase}" + (f" ({d.message})" if d.message else "")
        )
    for w in explanation.watchers:
        console.print(
            f"  next look: Autoscaler {w.autoscaler} (pool {w.pool}), within "
            f"{w.scan_interval_seconds} s, at once when a pod, node or pool changes"
            + ("; [yellow]dry run[/yellow]: it reports and asks for nothing" if w.dry_run else "")
        )
    pools = Table(title="A new node of each pool", title_justify="left")
    for column in (
        "pool",
        "could host it",
        "first filter that refuses",
        "may grow by",
        "autoscaled",
    ):
        pools.add_column(column)
    for pool in explanation.pools:
        pools.add_row(
            pool.name,
            _yes_no(pool.problem),
            pool.problem or "",
            str(pool.headroom),
            "yes" if pool.autoscaled else "no",
        )
    console.print(pools)
    _print_nodes(console, explanation.nodes)


def _print_nodes(console: Console, nodes: Sequence[NodeVerdict], limit: int = 20) -> None:
    if not nodes:
        console.print("Existing nodes: none in any pool, none on their way")
        return
    fitting = [node for node in nodes if node.problem is None]
    refusing = [node for node in nodes if node.problem is not None]
    table = Table(title="Existing nodes", title_justify="left")
    for column in ("node", "pool", "fits now", "first filter that refuses"):
        table.add_column(column)
    for node in [*fitting, *refusing][:limit]:
        name = f"{node.name} (booting)" if node.booting else node.name
        table.add_row(name, node.pool or "(no pool)", _yes_no(node.problem), node.problem or "")
    console.print(table)
    if len(nodes) > limit:
        console.print(f"  ... and {len(nodes) - limit} more nodes (-o json lists every one)")


def _few(pods: Sequence[str], shown: int = 5) -> str:
    more = f" and {len(pods) - shown} more" if len(pods) > shown else ""
    return ", ".join(pods[:shown]) + more


def print_plan(plan: ClusterPlan, *, out: TextIO | None = None) -> None:
    console = Console(file=out, highlight=False)
    past_max = sum(len(g.beyond_max) for g in plan.growth)
    console.print(
        f"[bold]pending pods: {plan.pending}[/bold]; on nodes that exist or are on their "
        f"way: {plan.on_existing}; on new nodes: {sum(len(g.pods) for g in plan.growth)} "
        f"(nodes to add: {sum(g.new_nodes for g in plan.growth)}); no pool can host: "
        f"{len(plan.unfit)}" + (f"; held by maxNodes: {past_max}" if past_max else "")
    )
    for trouble in plan.troubles:
        console.print(f"  [yellow]decides nothing[/yellow]: {trouble}")
    growth = Table(title="Pools that would grow", title_justify="left")
    for column in ("pool", "targetNodes", "new nodes", "for pods", "held by maxNodes"):
        growth.add_column(column)
    for g in plan.growth:
        target = f"{g.target_nodes} -> {g.target_nodes + g.new_nodes}"
        if g.limited_to is not None:
            target += " (maxNodes)"
        growth.add_row(g.pool, target, str(g.new_nodes), _few(g.pods), _few(g.beyond_max))
    console.print(growth)
    _print_offerings(console, plan)
    _print_scale_down(console, plan)
    _print_disruptions(console, plan.disruptions)
    if plan.unfit:
        unfit = Table(title="Pods no pool can host", title_justify="left")
        unfit.add_column("pod")
        unfit.add_column("why")
        for pod in plan.unfit:
            unfit.add_row(pod.pod, pod.reason)
        console.print(unfit)


def _print_offerings(console: Console, plan: ClusterPlan, shown: int = 3) -> None:
    if not plan.offerings:
        return
    table = Table(
        title="Pools with requirements (offerings from the cloud's catalog)", title_justify="left"
    )
    for column in ("pool", "offerings now, cheapest first", "new nodes", "new nodes $/h"):
        table.add_column(column)
    for pool in plan.offerings:
        if pool.blocked is not None:
            offered = f"[red]cannot grow[/red]: {pool.blocked}"
        else:
            more = len(pool.offerings) - shown
            offered = "; ".join(o.describe() for o in pool.offerings[:shown]) + (
                f" and {more} more" if more > 0 else ""
            )
        table.add_row(
            pool.pool,
            offered,
            ", ".join(f"{n.count} x {n.offering.describe()}" for n in pool.new_nodes),
            f"{pool.new_nodes_per_hour:g}" if pool.new_nodes else "",
        )
    console.print(table)
    if plan.new_nodes_per_hour is not None:
        console.print(
            f"  the plan's new nodes cost {plan.new_nodes_per_hour:g}/h (pools with "
            "requirements; a template's shape has no price)"
        )


_WAITS: Final = {
    "disabled": "scale-down is disabled",
    "request-pending": "a ScaleRequest of the pool is still Pending",
    "capacity-in-flight": "nodes it asked for are not Ready yet",
    "pods-pending": "pods wait for the pool",
}


def _print_scale_down(console: Console, plan: ClusterPlan) -> None:
    for pool in plan.scale_down:
        if pool.waits_for is not None:
            why = _WAITS.get(pool.waits_for, pool.waits_for)
            console.print(f"  [yellow]scale-down of {pool.pool} waits[/yellow]: {why}")
    if plan.removable:
        removable = Table(
            title="Nodes scale-down would give back (after unneededSeconds)", title_justify="left"
        )
        for column in ("pool", "node", "why", "pods to move"):
            removable.add_column(column)
        for r in plan.removable:
            removable.add_row(r.pool, r.node, r.reason, _few(r.pods))
        console.print(removable)
    busy = [k for k in plan.kept if k.rule == "busy"]
    held = [k for k in plan.kept if k.rule != "busy"]
    if held:
        kept = Table(title="Nodes scale-down keeps", title_justify="left")
        for column in ("pool", "node", "rule", "why"):
            kept.add_column(column)
        for k in held:
            kept.add_row(k.pool, k.node, k.rule, k.message)
        console.print(kept)
    if busy:
        console.print(
            f"  and {len(busy)} busy nodes (requests at or above utilizationThreshold; "
            "-o json lists every one)"
        )


def _print_disruptions(console: Console, disruptions: Sequence[NodeDisruption]) -> None:
    if not disruptions:
        return
    table = Table(
        title="Nodes the NodePool controller replaces (drift, expiry)", title_justify="left"
    )
    for column in ("pool", "node", "reason", "next", "held by"):
        table.add_column(column)
    for d in disruptions:
        reason = f"{d.reason}: {d.why}" if d.why else d.reason
        table.add_row(d.pool, d.node, reason, d.state, d.held_by or "")
    console.print(table)
