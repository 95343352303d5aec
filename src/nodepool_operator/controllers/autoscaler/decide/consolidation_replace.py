"""Consolidation by price, pure: which underused Nodes of a pool with requirements one
cheaper Node replaces (``choose_replacement``), the proof that their pods fit on it and
the room of the Nodes that stay (``ReplacementFit``), the record of that choice on the
victims (``REPLACEMENT_ANNOTATION``: ``mark``/``read_mark``) and, from that record alone,
the step a pass takes next (``next_step``), so a restarted operator continues.

Karpenter's single- and multi-node replace, our way. Removal stays preferred: only the
Nodes that could not simply go (their pods fit on no other Node, ``no-room``) are offered
here. The candidates come cheapest to remove first (fewest pods to evict, then least
used); the largest first ``n`` of them that one offering replaces is found by a binary
search on ``n`` (Karpenter's ``firstNConsolidationOption``), then, if none, each candidate
alone (its single-node replace). An offering is taken only when it is strictly cheaper
than the Nodes it replaces together, by the catalog's prices; with the catalog or one
victim's price unknown nothing is replaced, and ``Unreplaceable`` says why.

The steps, each a fact in the world: the victims are tainted (the consolidation taint)
and carry the mark (the offering, both prices, the victims, when it was chosen); the
replacement is asked for (``targetNodes`` + 1 naming the offering) -- launched first;
once a Node of that offering created after the mark is Ready, the victims' pods are
proved again (with the PodDisruptionBudgets, as any removal) and the victims are named
in ``removeNodes``; if that proof fails they are kept (mark and taint removed) and the
new Node is an ordinary consolidation candidate later. That call-off is recorded on the
victims (``CALLED_OFF_ANNOTATION``) and the same replacement is held back (``held_back``)
for a while, doubled at each call-off in a row, unless the pods on a victim change: a
proof that fails again the same way must not launch a Node every pass.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from nodepool_operator import timestamps
from nodepool_operator.api import meta, wellknown
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.controllers.autoscaler import simulation
from nodepool_operator.controllers.autoscaler.constraints import NodeTaint, PodProfile
from nodepool_operator.controllers.autoscaler.decide import scaling
from nodepool_operator.controllers.autoscaler.simulation.offering_plan import (
    PlannedOffering,
    node_offering,
)
from nodepool_operator.controllers.autoscaler.snapshot.consolidation_views import NodeView
from nodepool_operator.controllers.autoscaler.snapshot.pool_facts import PoolFacts
from nodepool_operator.runtime import conditions
from nodepool_operator.runtime import nodes as k8s_nodes

__all__ = [
    "CALLED_OFF_ANNOTATION",
    "CALLED_OFF_MAX_SECONDS",
    "CALLED_OFF_SECONDS",
    "MAX_VICTIMS",
    "MAX_WELL_USED_CANDIDATES",
    "REPLACEMENT_ANNOTATION",
    "CalledOff",
    "Replacement",
    "ReplacementFit",
    "RequestState",
    "Step",
    "Unreplaceable",
    "backoff_ends",
    "called_off_mark",
    "choose_replacement",
    "held_back",
    "launch_decision",
    "mark",
    "next_step",
    "node_offering",
    "read_called_off",
    "read_mark",
    "replacement_candidates",
    "replacement_node",
    "replacement_order",
    "request_state",
]

#: On each victim: the replacement chosen for it and its fellow victims (JSON), the record
#: a restarted operator continues from.
REPLACEMENT_ANNOTATION: Final = f"{meta.GROUP}/consolidation-replacement"
#: On each victim of a replacement its re-check called off: the offering, the victims, when,
#: how many times in a row, and the pods the Node had to move (JSON). The same replacement is
#: not tried again while it stands (``held_back``); a restarted operator reads it back.
CALLED_OFF_ANNOTATION: Final = f"{meta.GROUP}/consolidation-replacement-called-off"
#: How long a replacement called off by its re-check is held back, doubled at each call-off
#: of the same replacement in a row, up to ``CALLED_OFF_MAX_SECONDS``.
CALLED_OFF_SECONDS: Final = 120.0
CALLED_OFF_MAX_SECONDS: Final = 3600.0
#: At most this many Nodes used at the threshold or more are weighed for a replace in one
#: pass (the fewest pods to move first): each is simulated against every cheaper offering
#: whenever a pod or Node changed, and a pool of hundreds of busy Nodes must not make that
#: the pass's cost. The underused Nodes kept for lack of room are all weighed.
MAX_WELL_USED_CANDIDATES: Final = 10
#: At most this many Nodes are replaced by one (Karpenter's multi-node limit is 100; one
#: ScaleRequest may name 100 too).
MAX_VICTIMS: Final = 100

OfferingKey = tuple[str, str, str]  # (instance type, zone, capacity type)
Step = Literal["launch", "wait", "recheck", "name", "done"]
RequestState = Literal["none", "open"]


@dataclass(frozen=True)
class Replacement:
    """Victims to replace by one Node of ``offering``, cheaper than they are together."""

    victims: tuple[str, ...]
    offering: OfferingKey
    price_per_hour: float  # the replacement's
    replaced_per_hour: float  # the victims' together
    since: float | None = None  # when it was chosen (the mark's time); None: not marked yet

    def describe(self) -> str:
        kind, zone, capacity_type = self.offering
        return (
            f"replace {', '.join(self.victims)} (${self.replaced_per_hour:.4f}/h) with one "
            f"{kind} in {zone} ({capacity_type}, ${self.price_per_hour:.4f}/h)"
        )


@dataclass(frozen=True)
class Unreplaceable:
    """Why the underused ``nodes`` are not replaced by a cheaper one (their event says)."""

    nodes: tuple[str, ...]
    why: str
    # Called off because the victims' pods did not fit when proved again with the new
    # Node: recorded on the victims (``CALLED_OFF_ANNOTATION``) so that the same
    # replacement is not launched again at once (``held_back``).
    backs_off: bool = False


def replacement_order(views: Iterable[NodeView]) -> list[NodeView]:
    """Cheapest to remove first: fewest pods to evict, then least used (Karpenter orders
    by disruption cost, which grows with the pods evicted)."""
    return sorted(views, key=lambda v: (len(v.to_move), v.usage, v.name))


def replacement_candidates(
    views: Sequence[NodeView],
    *,
    no_room: Iterable[str],
    threshold: float,
    movable: Callable[[Mapping[str, Any]], object | None],
) -> list[NodeView]:
    """The Nodes a cheaper one may replace, in the order ``choose_replacement`` tries them:
    first the underused Nodes kept for lack of room (``no_room``), then the Nodes used at
    ``threshold`` or more whose every pod a drain may move (``movable(pod)`` is None), at
    most ``MAX_WELL_USED_CANDIDATES`` of them.

    A Node's utilisation says whether it can simply go; whether a cheaper Node holds its
    pods is a question of price, asked of every Node (Karpenter weighs every Node for a
    replace): a c-1x half full of one pod is replaced by a cheaper type as readily as an
    idle one. Nodes tainted, not eligible (do-not-disrupt, not Ready...), disrupting or
    empty are never candidates (an empty Node simply goes)."""
    kept = set(no_room)
    underused = replacement_order(v for v in views if v.name in kept)
    busy = replacement_order(
        v
        for v in views
        if v.name not in kept
        and v.usage >= threshold
        and v.eligible
        and not v.tainted
        and not v.disrupting
        and not v.empty
        and all(movable(pod) is None for pod in v.to_move)
    )
    return [*underused, *busy[:MAX_WELL_USED_CANDIDATES]]


def _total(
    victims: Sequence[NodeView], price_of: Callable[[NodeView], float | None]
) -> float | str:
    total = 0.0
    for view in victims:
        price = price_of(view)
        if price is None:
            return f"node {view.name}'s price is unknown (its offering is not in the catalog)"
        total += price
    return round(total, 6)


def _replace(
    victims: Sequence[NodeView],
    *,
    offerings: Sequence[PlannedOffering],
    price_of: Callable[[NodeView], float | None],
    fits: Callable[[Sequence[NodeView], PlannedOffering], str | None],
) -> Replacement | str:
    total = _total(victims, price_of)
    if isinstance(total, str):
        return total
    # Both sides in millionths of a dollar: a Node's price is the catalog's rounded to six
    # places (``offerings.cost_per_hour``), and an offering's unrounded price may fall just
    # under it -- the Node's own type "cheaper" than itself, replaced by itself forever.
    cheaper = [o for o in offerings if round(o.price, 6) < total]
    if not cheaper:
        return f"no offering the pool allows is cheaper than their ${total:.4f}/h"
    refusals: list[str] = []
    for offering in sorted(cheaper, key=lambda o: (o.price, o.key)):
        problem = fits(victims, offering)
        if problem is None:
            names = tuple(v.name for v in victims)
            return Replacement(names, offering.key, offering.price, total)
        refusals.append(f"{offering.key[0]}: {problem}")
    return f"their pods fit on no cheaper node ({'; '.join(refusals[:3])})"


def choose_replacement(
    candidates: Sequence[NodeView],
    *,
    offerings: Sequence[PlannedOffering] | None,
    price_of: Callable[[NodeView], float | None],
    fits: Callable[[Sequence[NodeView], PlannedOffering], str | None],
    max_victims: int = MAX_VICTIMS,
) -> Replacement | Unreplaceable | None:
    """The replacement of the largest first ``n`` of ``candidates`` (in the order given:
    ``replacement_order``) by one Node of an offering strictly cheaper than they are
    together, else of one candidate alone; ``Unreplaceable`` when none (why, for the first
    candidate); None without candidates.

    ``offerings``: what the pool may launch now, None when the catalog is unknown;
    ``price_of``: a Node's price by the catalog, None when unknown; ``fits(victims,
    offering)``: None when every pod of ``victims`` fits on one Node of ``offering`` and the
    room of the Nodes that stay, else why not."""
    if not candidates:
        return None
    names = tuple(v.name for v in candidates)
    if offerings is None:
        return Unreplaceable(names, "the catalog of offerings is unknown")
    if max_victims < 1:
        return Unreplaceable(names, "no node of the pool may go now")
    limit = min(len(candidates), max_victims)
    found: Replacement | None = None
    low, high = 2, limit
    while low <= high:  # the multi-node replace: 2 Nodes at least
        middle = (low + high) // 2
        tried = _replace(candidates[:middle], offerings=offerings, price_of=price_of, fits=fits)
        if isinstance(tried, Replacement):
            found, low = tried, middle + 1
        else:
            high = middle - 1
    if found is not None:
        return found
    first_refusal: str | None = None
    # The single-node replace: each candidate alone. ``max_victims`` bounds how many go at
    # once, not which may go: a budget of one disruption must not leave only the first
    # candidate weighed. (``MAX_VICTIMS`` of them at most, as many as a multi-node replace
    # weighs: each is simulated against every cheaper offering.)
    for view in candidates[:MAX_VICTIMS]:
        tried = _replace([view], offerings=offerings, price_of=price_of, fits=fits)
        if isinstance(tried, Replacement):
            return tried
        first_refusal = first_refusal or tried
    return Unreplaceable(names, first_refusal or "no candidate")


class ReplacementFit:
    """``fits`` for ``choose_replacement``: the victims' pods simulated on the Nodes that
    stay (``room``: the cluster without the Nodes already going) and one new Node of the
    offering (its DaemonSet pods counted, as a scale-up counts them); a Node used at
    ``threshold`` or more is replaced only when its pods need the new Node. The ``candidates``'
    pods are profiled when it is made (on the event loop: a profile reads the informers'
    caches, and the choice runs in a worker thread)."""

    def __init__(
        self,
        *,
        pool: str,
        room: Sequence[simulation.ExistingNode],
        taints: tuple[NodeTaint, ...],
        daemon_sets: Sequence[simulation.DaemonSetView],
        candidates: Sequence[NodeView],
        profile: Callable[[Mapping[str, Any]], PodProfile | str],
        threshold: float = 1.0,
    ) -> None:
        self.pool = pool
        self.well_used = frozenset(v.name for v in candidates if v.usage >= threshold)
        self.room = room
        self.taints = taints
        self.daemon_sets = daemon_sets
        self.profiles = {id(pod): profile(pod) for v in candidates for pod in v.to_move}

    def __call__(self, victims: Sequence[NodeView], offering: PlannedOffering) -> str | None:
        moving: list[PodProfile] = []
        for view in victims:
            for pod in view.to_move:
                found = self.profiles[id(pod)]
                if not isinstance(found, PodProfile):
                    return f"a pod's requests cannot be read: {found}"
                moving.append(found)
        going = {v.name for v in victims}
        kind, zone, capacity_type = offering.key
        name = f"{self.pool}/replacement/{kind}/{capacity_type}/{zone}"
        labels = {**offering.labels, wellknown.HOSTNAME_LABEL: name, wellknown.ZONE_LABEL: zone}
        new_node = simulation.PoolTemplate(
            name=name,
            weight=0,
            taints=self.taints,
            allocatable=dict(offering.allocatable),
            upcoming=lambda k, _zone: (f"{name}/{k}", labels),
            in_flight=0,
            headroom=1,
            zones=1,
            namespaces=None,
        )
        outcome = simulation.simulate(
            moving,
            nodes=[n for n in self.room if n.name not in going],
            pools=(new_node,),
            daemon_sets=self.daemon_sets,
        )
        if outcome.unfit:
            return next(iter(sorted(outcome.unfit.items())))[1]
        wanted = outcome.pools[name].wanted_nodes if name in outcome.pools else 0
        if wanted > 1:
            return f"their pods need {wanted} such nodes"
        if wanted == 0 and any(v.name in self.well_used for v in victims):
            # A Node used at the threshold or more whose pods fit on the others: whether
            # it may simply go is the threshold's call, and a new Node nothing needs is no
            # replacement. (An underused one whose pods fit would have been removed.)
            return "their pods fit on the nodes that stay: no new node is needed"
        return None


def mark(replacement: Replacement, *, now: float) -> str:
    """The annotation's value written on each victim."""
    kind, zone, capacity_type = replacement.offering
    return json.dumps(
        {
            "instanceType": kind,
            "zone": zone,
            "capacityType": capacity_type,
            "pricePerHour": replacement.price_per_hour,
            "replacedPerHour": replacement.replaced_per_hour,
            "victims": list(replacement.victims),
            "since": conditions.rfc3339(now),
        },
        sort_keys=True,
    )


def _recorded(view: NodeView, annotation: str) -> Mapping[str, Any] | None:
    """The JSON object ``annotation`` holds on ``view``'s Node; None when none or not one."""
    text = ((view.obj.get("metadata") or {}).get("annotations") or {}).get(annotation)
    if not text:
        return None
    try:
        raw = json.loads(text)
    except ValueError:
        return None
    return raw if isinstance(raw, dict) else None


def _offering_of(raw: Mapping[str, Any]) -> OfferingKey:
    return (str(raw["instanceType"]), str(raw["zone"]), str(raw["capacityType"]))


def read_mark(view: NodeView) -> Replacement | None:
    """The replacement recorded on ``view``'s Node; None when none, or unreadable (a mark
    nobody can read is cleared as any stale mark)."""
    raw = _recorded(view, REPLACEMENT_ANNOTATION)
    if raw is None:
        return None
    try:
        offering, victims = _offering_of(raw), tuple(str(v) for v in raw["victims"])
        price, replaced = float(raw["pricePerHour"]), float(raw["replacedPerHour"])
    except (ValueError, KeyError, TypeError):
        return None
    since = timestamps.parse_rfc3339(raw.get("since"))
    if since is None or not victims or view.name not in victims:
        return None
    return Replacement(victims, offering, price, replaced, since)


@dataclass(frozen=True)
class CalledOff:
    """A replacement its re-check called off, as recorded on one victim."""

    victims: tuple[str, ...]
    offering: OfferingKey
    at: float
    times: int  # call-offs of this replacement in a row
    pods: tuple[str, ...]  # the pods the victim had to move then (``_pod_keys``)

    @property
    def until(self) -> float:
        """Until when the same replacement is held back."""
        held = CALLED_OFF_SECONDS * (1 << min(max(self.times, 1) - 1, 16))
        return self.at + min(CALLED_OFF_MAX_SECONDS, held)


def _pod_keys(view: NodeView) -> tuple[str, ...]:
    """The pods ``view``'s Node has to move, by uid (else namespace/name): another pod
    there is a change that lets the replacement be tried again."""
    keys = []
    for pod in view.to_move:
        metadata = pod.get("metadata") or {}
        uid = metadata.get("uid")
        keys.append(str(uid) if uid else f"{metadata.get('namespace')}/{metadata.get('name')}")
    return tuple(sorted(keys))


def read_called_off(view: NodeView) -> CalledOff | None:
    """The call-off recorded on ``view``'s Node; None when none, or unreadable."""
    raw = _recorded(view, CALLED_OFF_ANNOTATION)
    if raw is None:
        return None
    try:
        offering, victims = _offering_of(raw), tuple(str(v) for v in raw["victims"])
        pods = tuple(str(p) for p in raw["pods"])
        times = int(raw["times"])
    except (ValueError, KeyError, TypeError):
        return None
    at = timestamps.parse_rfc3339(raw.get("at"))
    if at is None or not victims:
        return None
    return CalledOff(victims, offering, at, times, pods)


def called_off_mark(replacement: Replacement, view: NodeView, *, now: float) -> str:
    """The annotation's value written on victim ``view`` when its re-check calls
    ``replacement`` off: one more call-off in a row when the one recorded there is the
    same replacement's."""
    before = read_called_off(view)
    same = (
        before is not None
        and before.victims == replacement.victims
        and before.offering == replacement.offering
    )
    kind, zone, capacity_type = replacement.offering
    return json.dumps(
        {
            "instanceType": kind,
            "zone": zone,
            "capacityType": capacity_type,
            "victims": list(replacement.victims),
            "at": conditions.rfc3339(now),
            "times": before.times + 1 if same and before is not None else 1,
            "pods": list(_pod_keys(view)),
        },
        sort_keys=True,
    )


def held_back(
    replacement: Replacement, views: Sequence[NodeView], *, now: float
) -> Unreplaceable | None:
    """Why ``replacement`` is not tried now: every victim records a call-off of this same
    replacement (victims and offering) by its re-check, not yet past its backoff, and the
    pods on it are those it had then. None: it may be tried (nothing recorded, the
    backoff over, or something changed)."""
    present = {v.name: v for v in views}
    records: list[CalledOff] = []
    for name in replacement.victims:
        view = present.get(name)
        record = read_called_off(view) if view is not None else None
        if (
            view is None
            or record is None
            or record.victims != replacement.victims
            or record.offering != replacement.offering
            or record.pods != _pod_keys(view)
            or now >= record.until
        ):
            return None
        records.append(record)
    last = max(records, key=lambda r: r.at)
    kind = replacement.offering[0]
    return Unreplaceable(
        replacement.victims,
        f"its replacement by one {kind} was called off at {conditions.rfc3339(last.at)} "
        f"({last.times} in a row: the pods did not fit when proved again with the new node); "
        f"not tried again before {conditions.rfc3339(min(r.until for r in records))} "
        "unless the pods on it change",
    )


def backoff_ends(views: Iterable[NodeView]) -> tuple[float, ...]:
    """When the call-offs recorded on ``views`` end, sorted: a choice made while one held
    is made again once its time passes, though no Node or pod changed."""
    return tuple(sorted(r.until for v in views if (r := read_called_off(v)) is not None))


def replacement_node(
    replacement: Replacement, nodes: Iterable[Mapping[str, Any]]
) -> tuple[str, bool] | None:
    """The pool's Node that is ``replacement``'s (of its offering, created at or after the
    mark, not one of the victims), and whether it is Ready; None when none has registered.
    The oldest such Node is taken: the one the request launched first."""
    found: list[tuple[float, str, bool]] = []
    for node in nodes:
        metadata = node.get("metadata") or {}
        name = str(metadata.get("name", ""))
        created = timestamps.parse_rfc3339(metadata.get("creationTimestamp"))
        if name in replacement.victims or created is None or metadata.get("deletionTimestamp"):
            continue
        if replacement.since is not None and created < replacement.since:
            continue
        if node_offering(node) == replacement.offering:
            # Ready for pods: the kubelet says so and the NodePool controller took its
            # unregistered taint off (the Node has its own allocatable then).
            ready = k8s_nodes.is_ready(node) and not wellknown.is_unregistered(node)
            found.append((created, name, ready))
    if not found:
        return None
    _, name, ready = min(found)
    return name, ready


def request_state(
    replacement: Replacement, requests: Iterable[Mapping[str, Any]]
) -> RequestState | Unreplaceable:
    """Whether the replacement was asked for, from the pool's ScaleRequests: one created at
    or after the mark naming its offering in ``newNodeOfferings`` (``open``), refused
    (``Unreplaceable``: the replacement is called off), or none (``none``)."""
    kind, zone, capacity_type = replacement.offering
    for request in requests:
        metadata = request.get("metadata") or {}
        created = timestamps.parse_rfc3339(metadata.get("creationTimestamp"))
        if created is None or replacement.since is None or created < replacement.since:
            continue
        spec = scalerequest_api.spec_of(request)
        if not any(
            (o.instance_type, o.zone, o.capacity_type) == (kind, zone, capacity_type)
            for o in spec.new_node_offerings
        ):
            continue
        status = scalerequest_api.status_of(request)
        if status.phase in ("Rejected", "Superseded"):
            name = metadata.get("name", "")
            said = f": {status.message}" if status.message else ""
            return Unreplaceable(
                replacement.victims,
                f"ScaleRequest {name} for the replacement was {status.phase}{said}",
            )
        return "open"
    return "none"


def _on_its_way(view: NodeView) -> bool:
    """Named by a request or being drained: the NodePool controller's now."""
    return view.removing or (not view.eligible and not view.gives_room and not view.stalled)


def next_step(
    replacement: Replacement,
    *,
    views: Sequence[NodeView],
    nodes: Iterable[Mapping[str, Any]],
    requested: RequestState,
    settled: bool,
) -> Step | Unreplaceable:
    """What a pass does next for a ``replacement`` under way, from the world alone:
    ``launch`` (ask for the new Node: no request for it yet), ``wait`` (asked for, not
    Ready yet), ``recheck`` (Ready: prove the victims' pods again, then name them),
    ``done`` (named: on their way out).
    ``Unreplaceable`` (called off, the victims kept) when a victim is no longer there,
    eligible and tainted, or the request was answered (``settled``: nothing of the pool
    in flight any more) without a Node of the offering: the cloud fell back to another
    one, or refused."""
    present = {v.name: v for v in views}
    mine = [present[name] for name in replacement.victims if name in present]
    if mine and all(_on_its_way(v) for v in mine):
        return "done"  # named: the NodePool controller drains them; the mark goes with them
    for name in replacement.victims:
        view = present.get(name)
        if view is None or not view.tainted or not (view.eligible or view.stalled):
            return Unreplaceable(replacement.victims, f"node {name} is no longer a victim")
    found = replacement_node(replacement, nodes)
    if found is not None:
        return "recheck" if found[1] else "wait"
    if requested == "none":
        return "launch"
    if settled:
        kind = replacement.offering[0]
        return Unreplaceable(
            replacement.victims,
            f"no {kind} node came of the request (the launch fell back or failed)",
        )
    return "wait"


def launch_decision(pool: PoolFacts, replacement: Replacement) -> scaling.ScalingDecision:
    """The pool's decision that launches ``replacement``'s new Node (``targetNodes`` + 1,
    the request naming its offering); its victims are named once it is Ready."""
    target = pool.target + 1
    kind, zone, capacity_type = replacement.offering
    reason = (
        f"consolidation: 1 x {kind} in {zone} ({capacity_type}) to replace "
        f"{', '.join(replacement.victims)}: ${replacement.replaced_per_hour:.4f}/h before, "
        f"${replacement.price_per_hour:.4f}/h after"
    )
    return scaling.ScalingDecision("scale-up", pool.target, target, target, (), reason)
