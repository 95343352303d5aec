"""A pool with requirements in the plan: which catalog offerings its new nodes are.

Such a pool's nodes are not its template's shape: each is one offering (an instance type
sold in a zone as a capacity type, at a price). The simulation runs it as one template per
instance type and capacity type (``OfferingPool.templates``: that type's allocatable and
labels, in the zones it is offered in), so every filter judges the pods against a node as
it would be; where they go among those templates is not what is launched. Once the
simulation has placed the pending pods, ``plan_offerings`` takes the pods it put on new
nodes of the pool and packs them again, at the lowest price per hour
(``priced_packing.plan_cheapest``), each pod allowed only the offerings whose labels and
the pool's taints its node selector, node affinity, tolerations and volumes accept, with
room for it beside the DaemonSet pods that would run there. Pods with pod affinity, anti
affinity, spread or host ports keep the node the simulation gave them (repacked, they
could break the rule it judged); that node's offering is launched.

The pool's outcome then says how many new nodes of each offering (``new_node_offerings``,
handed over as ``spec.newNodeOfferings``) and, per pod, the offering its node is and the
cheaper ones that refused it (``offering_notes``, ``explain pod``). A pod no offering both
allows and holds is not the pool's: it is unfit, with every offering's refusal.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler.constraints import (
    NodeTaint,
    PodProfile,
    node_affinity_problem,
    untolerated,
)
from nodepool_operator.controllers.autoscaler.simulation.model import (
    DaemonSetView,
    ExistingNode,
    PoolOutcome,
    PoolTemplate,
    SimulationOutcome,
)
from nodepool_operator.controllers.autoscaler.simulation.priced_packing import (
    PackingPlan,
    PodDemand,
    PricedCandidate,
    plan_cheapest,
)

__all__ = [
    "OfferingKey",
    "OfferingPool",
    "PlannedOffering",
    "node_offering",
    "offering_problem",
    "plan_offerings",
]

#: (instance type, zone, capacity type)
OfferingKey = tuple[str, str, str]


def node_offering(node: Mapping[str, Any]) -> OfferingKey | None:
    """The offering a Node was made of, from its labels (instance type, zone, capacity
    type); None when one of them is missing."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    kind = labels.get(wellknown.INSTANCE_TYPE_LABEL)
    zone = labels.get(wellknown.ZONE_LABEL)
    capacity_type = labels.get(wellknown.CAPACITY_TYPE_LABEL)
    if not kind or not zone or not capacity_type:
        return None
    return (str(kind), str(zone), str(capacity_type))


#: Cheaper offerings named in a pod's note at most: an event's message stays short.
_REFUSALS_TOLD: Final = 3


@dataclass(frozen=True)
class PlannedOffering:
    """One offering a new node of the pool may be."""

    key: OfferingKey
    price: float  # per hour
    allocatable: Mapping[str, int]  # after the pool's reserve and the type's overhead
    labels: Mapping[str, str]  # the node's labels (the template's and the offering's)
    # What the node counts against the pool's ``limits``: the VM's capacity, by resource.
    capacity: Mapping[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        kind, zone, capacity_type = self.key
        return f"{kind} in {zone} ({capacity_type}, {self.price:g}/h)"


@dataclass(frozen=True)
class OfferingPool:
    """A pool with requirements as the plan sees it (module docstring).

    ``offerings``: those the pool may use now, cheapest first. ``templates``: one per
    instance type and capacity type, named ``<pool>/<type>/<capacity type>``.
    ``node_offerings``: the offering of every node name those templates made (filled as
    the simulation asks for them)."""

    pool: str
    offerings: tuple[PlannedOffering, ...]
    taints: tuple[NodeTaint, ...]
    weight: int
    headroom: int
    templates: tuple[PoolTemplate, ...]
    node_offerings: dict[str, OfferingKey] = field(default_factory=dict, compare=False)
    # Why the pool cannot grow when it has no offering to plan with (no catalog read, none
    # allowed or available): its template's shape is not what would be launched, so it is
    # not simulated; the pods no other node or pool hosts that it might are its, waiting.
    blocked: str | None = None
    namespaces: frozenset[str] | None = None  # whose pods its Autoscaler plans for
    labels: Mapping[str, str] = field(default_factory=dict)  # its nodes' template labels
    # The VMs asked for and not registered yet, by the name the simulation gives each (its
    # templates' first nodes), with their offering: the pods waiting for them go there first.
    in_flight_nodes: Mapping[str, OfferingKey] = field(default_factory=dict)
    # With ``limits``: the capacity the pool may still add under them (the limits less its
    # Nodes' and VMs' in flight), by resource, and the limits in words; None: no limit.
    limits_left: Mapping[str, int] | None = None
    limits: str = ""


def offering_problem(
    profile: PodProfile, labels: Mapping[str, str], taints: Sequence[NodeTaint]
) -> str | None:
    """What refuses the pod on a node of these labels and taints whatever is on it."""
    taint = untolerated(profile.tolerations, taints)
    if taint is not None:
        value = f"={taint.value}" if taint.value else ""
        return f"taint {taint.key}{value}:{taint.effect} is not tolerated"
    why = node_affinity_problem(
        profile.node_selector, profile.node_affinity, labels=labels, name=""
    )
    if why:
        return f"{why} does not match"
    if profile.volumes is not None:
        return profile.volumes.problem(labels, "")
    return None


def _might_host(pool: OfferingPool, profile: PodProfile) -> bool:
    """Whether a node of the blocked pool might take the pod: its namespace is planned
    for, the pool's taints tolerated, and its node selector names only the pool's labels
    or an offering's (which no template shows)."""
    if pool.namespaces is not None and profile.namespace not in pool.namespaces:
        return False
    if untolerated(profile.tolerations, pool.taints) is not None:
        return False
    return all(
        key in wellknown.OFFERING_LABELS or pool.labels.get(key) == value
        for key, value in profile.node_selector.items()
    )


def _blocked_outcome(
    pool: OfferingPool,
    profiles: Sequence[PodProfile],
    *,
    unfit: dict[int, str],
    on_nodes: Sequence[int],
) -> PoolOutcome:
    """A pool that cannot grow for want of offerings: the pods no node hosts that it might
    are its, beyond what it can add (told why, and no node of it given up meanwhile)."""
    waiting = [i for i in sorted(unfit) if _might_host(pool, profiles[i])]
    for i in waiting:
        del unfit[i]
    return PoolOutcome(
        new_nodes=0,
        wanted_nodes=1 if waiting else 0,
        triggering=(),
        hosted=tuple(sorted({*on_nodes, *waiting})),
        beyond=tuple(waiting),
    )


def _room_problem(requests: Mapping[str, int], allocatable: Mapping[str, int]) -> str | None:
    short = [name for name, need in sorted(requests.items()) if need > allocatable.get(name, 0)]
    return f"too small ({', '.join(f'Insufficient {name}' for name in short)})" if short else None


def _less(requests: Mapping[str, int], taken: Mapping[str, int]) -> dict[str, int]:
    return {name: amount - taken.get(name, 0) for name, amount in requests.items()}


@dataclass
class _Planned:
    """The pool's new nodes: their offerings and pods, granted first."""

    granted: list[tuple[int, list[int]]] = field(default_factory=list)  # (offering, pods)
    beyond: list[tuple[int, list[int]]] = field(default_factory=list)
    unplaced: dict[int, str] = field(default_factory=dict)  # pod -> why
    notes: dict[int, str] = field(default_factory=dict)


class _Judge:
    """Each pod's verdict on each offering, per pod rules (pods of equal profile share)."""

    def __init__(self, pool: OfferingPool, daemon_sets: Sequence[DaemonSetView]) -> None:
        self.pool = pool
        self.room: list[dict[str, int]] = []
        for offering in pool.offerings:
            daemons: Counter[str] = Counter()
            for daemon in daemon_sets:
                if offering_problem(daemon.profile, offering.labels, pool.taints) is None:
                    daemons.update(daemon.profile.requests)
            self.room.append(_less(dict(offering.allocatable), daemons))
        self._problems: dict[PodProfile, tuple[str | None, ...]] = {}

    def problems(self, profile: PodProfile) -> tuple[str | None, ...]:
        found = self._problems.get(profile)
        if found is None:
            found = tuple(
                offering_problem(profile, o.labels, self.pool.taints)
                or _room_problem(profile.requests, room)
                for o, room in zip(self.pool.offerings, self.room, strict=True)
            )
            self._problems[profile] = found
        return found

    def note(self, profile: PodProfile, chosen: int) -> str:
        offerings, problems = self.pool.offerings, self.problems(profile)
        refused = [
            f"{offerings[c].describe()}: {problems[c]}"
            for c in range(chosen)
            if problems[c] is not None and offerings[c].price < offerings[chosen].price
        ]
        told = refused[:_REFUSALS_TOLD]
        if len(refused) > len(told):
            told.append(f"{len(refused) - len(told)} more")
        cheaper = sum(
            1
            for c in range(chosen)
            if problems[c] is None and offerings[c].price < offerings[chosen].price
        )
        text = f"offering {offerings[chosen].describe()}"
        if told:
            text += f"; cheaper refused: {'; '.join(told)}"
        if cheaper:
            text += f"; {cheaper} cheaper that hold it cost more for the pods packed together"
        return text

    def refusals(self, profile: PodProfile) -> str:
        offerings, problems = self.pool.offerings, self.problems(profile)
        if not offerings:
            return f"{self.pool.pool}: no offering its requirements allow is available"
        told = [f"{o.describe()}: {p}" for o, p in zip(offerings, problems, strict=True)]
        shown = told[:_REFUSALS_TOLD] + (
            [f"{len(told) - _REFUSALS_TOLD} more"] if len(told) > _REFUSALS_TOLD else []
        )
        return f"{self.pool.pool}: no offering both allows and holds it: {'; '.join(shown)}"


def _candidates(
    pool: OfferingPool, judge: _Judge, *, limited: bool = True
) -> list[PricedCandidate]:
    """The pool's offerings as the priced packing's candidates, with their room (and,
    ``limited``, within what its limits leave)."""
    return [
        PricedCandidate(
            pool=pool.pool,
            instance_type=o.key[0],
            zone=o.key[1],
            capacity_type=o.key[2],
            price=o.price,
            allocatable=room,
            weight=pool.weight,
            capacity=o.capacity,
            limits_left=pool.limits_left if limited else None,
        )
        for o, room in zip(pool.offerings, judge.room, strict=True)
    ]


def _pack(
    pool: OfferingPool,
    judge: _Judge,
    profiles: Sequence[PodProfile],
    free: Sequence[int],
    headroom: int,
    planned: _Planned,
) -> None:
    """The pods of ``free`` onto the cheapest nodes; the first ``headroom`` are granted."""
    groups: dict[tuple[tuple[tuple[str, int], ...], frozenset[int]], list[int]] = {}
    for i in free:
        profile = profiles[i]
        allowed = frozenset(c for c, p in enumerate(judge.problems(profile)) if p is None)
        if not allowed:
            planned.unplaced[i] = judge.refusals(profile)
            continue
        groups.setdefault((tuple(sorted(profile.requests.items())), allowed), []).append(i)
    if not groups:
        return
    keys = list(groups)
    demands = [
        PodDemand(requests=dict(requests), allowed=allowed, count=len(groups[(requests, allowed)]))
        for requests, allowed in keys
    ]
    plan = plan_cheapest(demands, _candidates(pool, judge))
    taken = [0] * len(keys)
    for n, node in enumerate(plan.nodes):
        pods: list[int] = []
        for d, count in node.pods:
            members = groups[keys[d]]
            pods.extend(members[taken[d] : taken[d] + count])
            taken[d] += count
        for i in pods:
            planned.notes[i] = judge.note(profiles[i], node.candidate)
        (planned.granted if n < headroom else planned.beyond).append((node.candidate, pods))
    for d in plan.unplaced:
        for i in groups[keys[d]][taken[d] :]:
            # Some offering allows and holds it (its group has one): the limits refused.
            planned.unplaced[i] = (
                f"{pool.pool}: its limits ({pool.limits}) leave no room for a node that holds it"
                if pool.limits_left is not None
                else judge.refusals(profiles[i])
            )


def _price(pool: OfferingPool, planned: _Planned) -> float:
    return sum(pool.offerings[c].price for c, _ in (*planned.granted, *planned.beyond))


@dataclass(frozen=True)
class _Bin:
    """A node already asked for that pending pods may be packed on again: a VM in flight
    (``offering`` its index, the offering's room) or a Node of the pool (its room left
    beside the pods bound to it and its DaemonSets' pods)."""

    name: str
    room: Mapping[str, int]
    price: float
    key: OfferingKey | None
    offering: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[NodeTaint, ...] = ()

    def allows(self, judge: _Judge, profile: PodProfile) -> bool:
        if self.offering is not None:
            return judge.problems(profile)[self.offering] is None
        return (
            offering_problem(profile, self.labels, self.taints) is None
            and _room_problem(profile.requests, self.room) is None
        )


def _in_flight_bin(pool: OfferingPool, judge: _Judge, name: str, c: int) -> _Bin:
    offering = pool.offerings[c]
    return _Bin(name, judge.room[c], offering.price, offering.key, offering=c)


def _node_bin(
    pool: OfferingPool, node: ExistingNode, daemon_sets: Sequence[DaemonSetView]
) -> _Bin | None:
    """The pool's Node as a bin, None if it is not one: cordoned, or holding a pod whose
    rules read other pods (moving pods beside it could break them)."""
    held = (*node.pods, *node.terminating)
    if node.unschedulable or any(p.has_pod_constraints for p in held):
        return None
    taken: Counter[str] = Counter()
    for profile in held:
        taken.update(profile.requests)
    for daemon in daemon_sets:
        if daemon.uid not in node.daemon_sets and (
            offering_problem(daemon.profile, node.labels, node.taints) is None
        ):
            taken.update(daemon.profile.requests)
    key = (
        node.labels.get(wellknown.INSTANCE_TYPE_LABEL, ""),
        node.labels.get(wellknown.ZONE_LABEL, ""),
        node.labels.get(wellknown.CAPACITY_TYPE_LABEL, ""),
    )
    price = next((o.price for o in pool.offerings if o.key == key), 0.0)
    return _Bin(
        node.name,
        _less(dict(node.allocatable), taken),
        price,
        key,
        labels=node.labels,
        taints=node.taints,
    )


def _packings_on_bins(
    pool: OfferingPool,
    judge: _Judge,
    profiles: Sequence[PodProfile],
    *,
    bins: Sequence[_Bin],
    pods: Sequence[int],
) -> list[dict[int, str]]:
    """Ways to put ``pods`` (those the simulation put on the nodes already asked for, and
    those it opened new nodes for) on those nodes alone (``bins``), each pod with its
    node: the simulation fills them first-fit in its own order, and pods the plan had
    fitted there a moment before can come out over, and buy nodes that stay empty (issue
    49). ``pods`` come in the order the plan packed them (equal worths keep it).

    Two ways: the plan's own packing made again for these pods (over every offering, as it
    was made), each of its nodes matched to a bin of that offering (else the cheapest that
    holds its pods), its pods left over where none is left; and the same priced packing
    over the bins alone (each bin one node)."""
    if not bins or not pods:
        return []
    groups: dict[tuple[tuple[tuple[str, int], ...], frozenset[int], frozenset[int]], list[int]] = {}
    for i in pods:
        profile = profiles[i]
        allowed = frozenset(c for c, p in enumerate(judge.problems(profile)) if p is None)
        on = frozenset(b for b, bin_ in enumerate(bins) if bin_.allows(judge, profile))
        if allowed or on:
            groups.setdefault((tuple(sorted(profile.requests.items())), allowed, on), []).append(i)
    keys = list(groups)
    counts = [len(groups[key]) for key in keys]

    def members(plan: PackingPlan, kept: Sequence[int]) -> list[tuple[int, list[int]]]:
        taken = [0] * len(kept)
        found = []
        for node in plan.nodes:
            held: list[int] = []
            for d, count in node.pods:
                held.extend(groups[keys[kept[d]]][taken[d] : taken[d] + count])
                taken[d] += count
            found.append((node.candidate, held))
        return found

    # The plan made again, each node matched to a bin: of its offering, else the cheapest
    # left that every pod on it allows and that holds them all. (The bins are counted
    # against the pool's limits already.)
    offered = [d for d, (_, allowed, _) in enumerate(keys) if allowed]
    replayed = plan_cheapest(
        [
            PodDemand(requests=dict(keys[d][0]), allowed=keys[d][1], count=counts[d])
            for d in offered
        ],
        _candidates(pool, judge, limited=False),
    )
    unused = list(range(len(bins)))
    matched: dict[int, str] = {}
    for chosen, held in members(replayed, offered):
        need: Counter[str] = Counter()
        for i in held:
            need.update(profiles[i].requests)
        fits = [
            b
            for b in unused
            if all(bins[b].allows(judge, profiles[i]) for i in held)
            and _room_problem(need, bins[b].room) is None
        ]
        if not fits:
            continue
        same = [b for b in fits if bins[b].key == pool.offerings[chosen].key]
        b = (same or sorted(fits, key=lambda f: bins[f].price))[0]
        unused.remove(b)
        matched.update((i, bins[b].name) for i in held)
    # The priced packing over the bins alone: a pool of its own per bin, one node each.
    placeable = [d for d, (_, _, on) in enumerate(keys) if on]
    alone = plan_cheapest(
        [
            PodDemand(requests=dict(keys[d][0]), allowed=keys[d][2], count=counts[d])
            for d in placeable
        ],
        [
            PricedCandidate(
                pool=bin_.name,
                instance_type=(bin_.key or ("", "", ""))[0],
                zone=(bin_.key or ("", "", ""))[1],
                capacity_type=(bin_.key or ("", "", ""))[2],
                price=bin_.price,
                allocatable=bin_.room,
                headroom=1,
            )
            for bin_ in bins
        ],
    )
    on_alone = {i: bins[b].name for b, held in members(alone, placeable) for i in held}
    return [matched, on_alone]


def _pool_outcome(
    pool: OfferingPool,
    subs: Sequence[PoolOutcome],
    *,
    profiles: Sequence[PodProfile],
    placements: list[str | None],
    unfit: dict[int, str],
    on_nodes: Sequence[int],
    pool_nodes: Sequence[ExistingNode],
    daemon_sets: Sequence[DaemonSetView],
) -> PoolOutcome:
    granted_pods = {i for sub in subs for i in sub.triggering}
    new_pods = sorted(granted_pods | {i for sub in subs for i in sub.beyond})
    judge = _Judge(pool, daemon_sets)
    index_of = {o.key: c for c, o in enumerate(pool.offerings)}
    # Pods whose rules read other pods keep the node the simulation judged them on.
    kept: dict[str, list[int]] = {}
    free: list[int] = []
    for i in new_pods:
        name = placements[i]
        key = pool.node_offerings.get(name or "")
        if profiles[i].has_pod_constraints and key in index_of and name is not None:
            kept.setdefault(name, []).append(i)
        else:
            free.append(i)
    in_flight = {i for sub in subs for i in sub.hosted} - set(new_pods)

    def packed(free: Sequence[int]) -> _Planned:
        planned = _Planned()
        for name, pods in kept.items():
            chosen = index_of[pool.node_offerings[name]]
            for i in pods:
                planned.notes[i] = judge.note(profiles[i], chosen)
            is_granted = all(i in granted_pods for i in pods)
            (planned.granted if is_granted else planned.beyond).append((chosen, pods))
        _pack(pool, judge, profiles, free, max(0, pool.headroom - len(planned.granted)), planned)
        return planned

    planned = packed(free)
    on_nodes_kept = set(on_nodes)
    if free and (pool.in_flight_nodes or pool_nodes):
        on_bins: dict[str, list[int]] = {}
        for i in sorted({*in_flight, *on_nodes}):
            on_bins.setdefault(placements[i] or "", []).append(i)
        # A VM holding a pod whose rules read other pods keeps what it holds, untouched.
        bins = [
            _in_flight_bin(pool, judge, name, index_of[key])
            for name, key in pool.in_flight_nodes.items()
            if key in index_of
            and not any(profiles[i].has_pod_constraints for i in on_bins.get(name, ()))
        ]
        # The pool's Nodes too, where no pending pod's rules read other pods (moved, a pod
        # could come to share a node or zone with one whose rules refuse it).
        if not any(profiles[i].has_pod_constraints for i in (*new_pods, *in_flight, *on_nodes)):
            bins.extend(
                found
                for node in pool_nodes
                if (found := _node_bin(pool, node, daemon_sets)) is not None
            )
        movable = sorted({i for bin_ in bins for i in on_bins.get(bin_.name, ())} | set(free))
        # Only the pods the nodes already asked for cannot hold may buy nodes: a packing
        # of them on those nodes is kept where what it leaves over costs less to host
        # than what the simulation left (fewer pods unfit first).
        best = (len(planned.unplaced), round(_price(pool, planned), 9))
        chosen: dict[int, str] | None = None
        for placed in _packings_on_bins(pool, judge, profiles, bins=bins, pods=movable):
            other = packed([i for i in movable if i not in placed])
            rank = (len(other.unplaced), round(_price(pool, other), 9))
            if rank < best:
                best, planned, chosen = rank, other, placed
        if chosen is not None:
            for i, name in chosen.items():
                placements[i] = name
            in_flight = (in_flight - set(movable)) | set(chosen)
            on_nodes_kept -= set(movable)
    for i, why in planned.unplaced.items():
        placements[i] = None
        unfit[i] = why
    offerings = pool.offerings
    triggering = sorted(i for _, pods in planned.granted for i in pods)
    beyond = sorted(i for _, pods in planned.beyond for i in pods)
    passed = set(triggering)
    granted_keys = [offerings[c].key for c, _ in planned.granted]
    return PoolOutcome(
        new_nodes=len(planned.granted),
        wanted_nodes=len(planned.granted) + len(planned.beyond),
        triggering=tuple(triggering),
        hosted=tuple(sorted({*on_nodes_kept, *in_flight, *triggering, *beyond})),
        beyond=tuple(beyond),
        passed_over=tuple(
            sorted({(i, other) for sub in subs for i, other in sub.passed_over if i in passed})
        ),
        new_node_zones=dict(sorted(Counter(zone for _, zone, _ in granted_keys).items())),
        opened_zones=tuple(offerings[c].key[1] for c, _ in (*planned.granted, *planned.beyond)),
        new_node_offerings=dict(sorted(Counter(granted_keys).items())),
        offering_notes=dict(sorted(planned.notes.items())),
    )


def plan_offerings(
    outcome: SimulationOutcome,
    profiles: Sequence[PodProfile],
    *,
    pools: Sequence[OfferingPool],
    nodes: Sequence[ExistingNode],
    daemon_sets: Sequence[DaemonSetView],
) -> SimulationOutcome:
    """``outcome`` with each pool of ``pools`` planned as offerings (module docstring):
    its templates' outcomes become the pool's own."""
    if not pools:
        return outcome
    placements = list(outcome.placements)
    unfit = dict(outcome.unfit)
    merged = dict(outcome.pools)
    pool_of_node = {node.name: node.pool for node in nodes}
    on_nodes: dict[str, list[int]] = {}
    for i, name in enumerate(placements):
        owner = pool_of_node.get(name) if name is not None else None
        if owner is not None:
            on_nodes.setdefault(owner, []).append(i)
    for pool in pools:
        if pool.blocked is not None:
            merged[pool.pool] = _blocked_outcome(
                pool, profiles, unfit=unfit, on_nodes=on_nodes.get(pool.pool, ())
            )
            continue
        subs = [merged.pop(t.name) for t in pool.templates if t.name in merged]
        merged[pool.pool] = _pool_outcome(
            pool,
            subs,
            profiles=profiles,
            placements=placements,
            unfit=unfit,
            on_nodes=on_nodes.get(pool.pool, ()),
            pool_nodes=[node for node in nodes if node.pool == pool.pool],
            daemon_sets=daemon_sets,
        )
    return SimulationOutcome(
        pools=dict(sorted(merged.items())),
        placements=tuple(placements),
        unfit=dict(sorted(unfit.items())),
    )
