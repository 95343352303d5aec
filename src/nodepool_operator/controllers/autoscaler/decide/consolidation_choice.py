"""Consolidation's decision for one pool, pure: from the pool's Node views, the time and
the pool's state, which marks to write (stamp, taint, clear), which Nodes to name, and why
the others stay. No I/O and no clock: ``snapshot.consolidation_views`` reads, this
decides, ``act.node_marks`` writes (``consolidator`` runs the three).

A decision is made in two steps because the PodDisruptionBudgets are looked at only for
the few Nodes about to be tainted or named (``ConsolidationProposal.going``), not every
pass for every candidate waiting for its turn: ``decide`` proposes, ``judge_budgets``
takes the budgets of ``going`` and settles.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from nodepool_operator.api import disruption as disruption_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.controllers.autoscaler.decide import consolidation_replace
from nodepool_operator.controllers.autoscaler.decide.consolidation_replace import (
    Replacement,
    Unreplaceable,
)
from nodepool_operator.controllers.autoscaler.decide.consolidation_rules import (
    Kept,
    Review,
    budget_problem,
    unneeded_timers,
    why_it_goes,
    within_budgets,
    within_limits,
)
from nodepool_operator.controllers.autoscaler.snapshot.consolidation_views import NodeView

__all__ = [
    "CLEARS",
    "Choice",
    "ConsolidationProposal",
    "Marks",
    "PoolBudgets",
    "decide",
    "judge_budgets",
    "named_by_open_requests",
    "preview",
    "stale_marks",
]

#: Blockers during which the timers start over: scale-down is off, or a scale-up is
#: settling (no Node is given up shortly after the pool grew). Any other blocker (a
#: Pending request, pods waiting for room) holds the timers: an eviction's replacement
#: must not restart every other candidate's wait; nothing is chosen, stamped or given up
#: until it ends, and pods waiting for room take the taints off (``UNTAINTS``).
CLEARS: Final = frozenset({"disabled", "capacity-in-flight"})
#: Blockers during which taints come off and stamps stay: pods are waiting for room, and
#: a tainted Node's room must not be kept from them (a victim a scale-up brought back
#: would otherwise keep its taint, and the pods would ask for another node).
UNTAINTS: Final = frozenset({"pods-pending"})


@dataclass(frozen=True)
class Marks:
    """The writes one pass makes on Nodes, in the order they are made."""

    stamp: tuple[NodeView, ...] = ()  # UNNEEDED_SINCE_ANNOTATION set to now
    # Stamp and taint removed (since None) or the stamp restarted at ``since``.
    clear: tuple[tuple[NodeView, float | None], ...] = ()
    untaint: tuple[NodeView, ...] = ()  # the taint removed, the stamp kept
    taint: tuple[NodeView, ...] = ()  # CONSOLIDATING_TAINT_KEY added
    kept: tuple[Kept, ...] = ()  # told once per Node and reason (events)
    # A replacement's victims: the taint and the replacement's mark added in one write.
    replace: tuple[tuple[NodeView, Replacement], ...] = ()

    def __add__(self, other: Marks) -> Marks:
        return Marks(*(a + b for a, b in zip(_fields(self), _fields(other), strict=True)))


def _fields(marks: Marks) -> tuple[Any, ...]:
    return tuple(getattr(marks, f.name) for f in dataclasses.fields(marks))


@dataclass(frozen=True)
class Choice:
    """One pool's part of the batch's choice (``rules.choose_together``): its Node views,
    the candidates among them, and why each other underused Node stays."""

    views: tuple[NodeView, ...] = ()
    chosen: tuple[NodeView, ...] = ()
    kept: tuple[Kept, ...] = ()
    gone: int = 0  # the pool's member Nodes being deleted (not among ``views``)
    # A replacement by one cheaper Node proposed in this batch, or why none
    # (``consolidation_replace.choose_replacement``); only when none is under way.
    replacement: Replacement | Unreplaceable | None = None
    # The replacement under way (read from its victims' marks) and its next step.
    replacing: Replacement | None = None
    step: consolidation_replace.Step | Unreplaceable | None = None


@dataclass(frozen=True)
class PoolBudgets:
    """What the pool's disruption budgets are judged with: its ``spec.disruption.budgets``
    (none: no cap) and its Nodes being repaired (NotReady past its timeouts), which use
    the budget as the NodePool controller counts it."""

    budgets: tuple[disruption_api.Budget, ...] = ()
    unhealthy: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ConsolidationProposal:
    """A pass's proposal: its marks and review, and the Nodes about to be tainted or named,
    whose PodDisruptionBudgets must be read before it stands."""

    marks: Marks
    review: Review
    going: tuple[NodeView, ...] = ()
    # The candidates whose earlier "kept" notices are forgotten (told anew if kept again):
    # those a disruption budget holds are not among them.
    chosen: frozenset[str] = field(default_factory=frozenset)
    # A replacement's victims about to be tainted and marked (their PodDisruptionBudgets
    # are read first, as for ``going``), and the replacement whose victims are named.
    replacing: tuple[NodeView, ...] = ()
    proposed: Replacement | None = None
    naming: Replacement | None = None


def named_by_open_requests(requests: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The Nodes a pool's Pending or Applied ScaleRequests name for removal: on their way
    out (the NodePool controller's marks may not show in our cache yet), never named
    again while the request stands. A Rejected or Superseded request removes nothing."""
    return frozenset(
        name
        for request in requests
        if not (request.get("metadata") or {}).get("deletionTimestamp")
        and scalerequest_api.status_of(request).phase in ("Pending", "Applied")
        for name in scalerequest_api.spec_of(request).remove_nodes
    )


def _clearable(view: NodeView) -> bool:
    """A Node of ours to clear: carrying a mark, and eligible or NotReady for a while (a
    Node being drained or cordoned is the NodePool controller's now)."""
    return (view.eligible or view.stalled) and (view.since is not None or view.tainted)


def stale_marks(views: Sequence[NodeView]) -> Marks:
    """Every mark on ``views`` taken off: the pool has no Autoscaler acting for it any
    more (deleted, repointed, in dry run, or the pool is gone)."""
    return Marks(clear=tuple((v, None) for v in views if _clearable(v)))


def decide(
    choice: Choice,
    *,
    now: float,
    unneeded_seconds: float,
    max_concurrent: int,
    room: int,
    per_request: int,
    blocked: str | None,
    active_since: float | None,
    budgets: PoolBudgets = PoolBudgets(),
) -> ConsolidationProposal:
    """One pass over a pool, from its part of the batch's ``choice``.

    ``room``: how many Nodes the pool may still give up (target - minNodes);
    ``per_request``: how many Nodes one ScaleRequest may name (a Node is tainted only when
    the request that names it can be made); ``active_since``: when scale-down last became
    possible for this Autoscaler (a stamp older than that started while nothing watched
    the Node, and starts over); ``budgets``: the pool's disruption budgets, which cap the
    taints beside ``room`` and ``max_concurrent``. A Node a budget holds keeps its stamp
    (it goes as soon as the budget allows, without waiting again) and is told which
    budget holds it; the next look is when a budget's window opens or closes.
    """
    under_way = _under_way(choice, blocked=blocked)
    if under_way is not None:
        return under_way
    views = choice.views
    if blocked in CLEARS:
        return ConsolidationProposal(stale_marks(views), Review())
    if blocked is not None:
        # Held: the timers run on, no Node is chosen or given up until the hold ends. Pods
        # waiting get the room of every tainted Node nobody is removing: a victim a
        # scale-up brought back (its drain called off) among them.
        untaint = (
            tuple(v for v in views if v.tainted and not v.removing) if blocked in UNTAINTS else ()
        )
        return ConsolidationProposal(Marks(untaint=untaint), Review())
    replacement = choice.replacement if isinstance(choice.replacement, Replacement) else None
    victims = tuple(v for v in views if replacement and v.name in replacement.victims)
    chosen = (*choice.chosen, *victims)
    kept = _kept_with_price(choice)
    names = frozenset(v.name for v in chosen)
    clear = tuple((v, None) for v in views if _clearable(v) and v.name not in names)
    stale = tuple(
        v for v in chosen if v.since is not None and active_since and v.since < active_since
    )
    fresh = [v for v in chosen if v.since is None]
    # A stamp restarted now waits the whole time, as one written now.
    timed = [dataclasses.replace(v, since=None) if v in stale else v for v in chosen]
    marks = Marks(stamp=tuple(fresh), clear=(*clear, *((v, now) for v in stale)), kept=tuple(kept))
    expired, next_check = unneeded_timers(timed, now=now, unneeded_seconds=unneeded_seconds)
    removing = [v for v in expired if v not in victims]
    to_taint = within_limits(
        [v for v in removing if not v.tainted],
        tainted=[v for v in views if v.tainted],
        room=min(room, per_request),
        max_concurrent=max_concurrent,
    )
    to_taint, held = within_budgets(
        to_taint,
        views=views,
        budgets=budgets.budgets,
        unhealthy=budgets.unhealthy,
        gone=choice.gone,
        now=now,
    )
    replacing: tuple[NodeView, ...] = ()
    if victims and all(v in expired for v in victims):
        replacing, held_victims = _victims_allowed(
            victims,
            views=views,
            taints=to_taint,
            room=room,
            per_request=per_request,
            max_concurrent=max_concurrent,
            budgets=budgets,
            gone=choice.gone,
            now=now,
        )
        held += held_victims
    if held:
        marks += Marks(kept=tuple(held))
        change = disruption_api.next_change_in(budgets.budgets, now=now)
        if change is not None:
            next_check = change if next_check is None else min(next_check, change)
    going = (*(v for v in removing if v.tainted), *to_taint)
    review = Review(candidates=len(chosen), next_check=next_check)
    # A Node the budget holds is told once, not every pass while it waits.
    return ConsolidationProposal(
        marks,
        review,
        going,
        names - {k.node for k in held},
        replacing=replacing,
        proposed=replacement if replacing else None,
    )


def _kept_with_price(choice: Choice) -> list[Kept]:
    """The Nodes kept from going, but a replacement's victims; a Node kept for lack of
    room is told too why no cheaper Node replaces it (one event: its rule stays)."""
    replacement = choice.replacement
    if isinstance(replacement, Replacement):
        return [k for k in choice.kept if k.node not in replacement.victims]
    if isinstance(replacement, Unreplaceable):
        return [
            dataclasses.replace(
                k, message=f"{k.message}; no cheaper node replaces it: {replacement.why}"
            )
            if k.node in replacement.nodes and k.rule == "no-room"
            else k
            for k in choice.kept
        ]
    return list(choice.kept)


def _victims_allowed(
    victims: Sequence[NodeView],
    *,
    views: Sequence[NodeView],
    taints: Sequence[NodeView],
    room: int,
    per_request: int,
    max_concurrent: int,
    budgets: PoolBudgets,
    gone: int,
    now: float,
) -> tuple[tuple[NodeView, ...], list[Kept]]:
    """A replacement's victims, all of them or none: within the limits and the pool's
    disruption budgets (reason ``Underutilized``) as any Node tainted, counting those
    tainted in this pass (``taints``) first."""
    allowed = within_limits(
        victims,
        tainted=[*(v for v in views if v.tainted), *taints],
        room=min(room, per_request),
        max_concurrent=max(max_concurrent, len(victims)),
    )
    if len(allowed) < len(victims):
        return (), []
    tainting = {v.name for v in taints}
    counted = [dataclasses.replace(v, disrupting=True) if v.name in tainting else v for v in views]
    allowed, held = within_budgets(
        victims,
        views=counted,
        budgets=budgets.budgets,
        unhealthy=budgets.unhealthy,
        gone=gone,
        now=now,
    )
    if held:
        return (), held
    return tuple(allowed), []


def _under_way(choice: Choice, *, blocked: str | None) -> ConsolidationProposal | None:
    """The pass of a pool with a replacement under way (``choice.replacing``), or None.
    Its victims keep their marks while the new Node is asked for and boots (the pool's
    own capacity in flight, its own request Pending); they are kept (marks removed) when
    scale-down is turned off, pods wait for room, or the step says it is called off."""
    replacement, step = choice.replacing, choice.step
    if replacement is None:
        return None
    views = choice.views
    victims = tuple(v for v in views if v.name in replacement.victims)
    if blocked == "disabled" or blocked in UNTAINTS:
        return ConsolidationProposal(stale_marks(views), Review())
    off = step if isinstance(step, Unreplaceable) else None
    if off is not None:
        # A victim named already (draining) is the NodePool controller's: its marks stay.
        mine = [v for v in victims if _clearable(v)]
        kept = tuple(
            Kept(v.name, "replacement", None, f"its replacement is called off: {off.why}")
            for v in mine
        )
        return ConsolidationProposal(
            Marks(clear=tuple((v, None) for v in mine), kept=kept), Review()
        )
    # The pool's other Nodes hold (nothing else is chosen while it is under way, so the
    # room its victims' pods are proved on stays as it was): their timers run on.
    if blocked is not None:
        return ConsolidationProposal(Marks(), Review())
    if step == "launch":
        return ConsolidationProposal(Marks(), Review(launch=replacement))
    if step == "name":
        return ConsolidationProposal(Marks(), Review(), going=victims, naming=replacement)
    return ConsolidationProposal(Marks(), Review())


def judge_budgets(
    decided: ConsolidationProposal,
    budgets: Sequence[Any] | None,
    *,
    now: float,
    recheck_seconds: float,
) -> tuple[Marks, Review]:
    """Settle ``decided`` with the budgets read for its ``going`` Nodes (None: they could
    not be read, so nothing is tainted or named in this pass). A Node a budget keeps is
    not tainted (or loses its taint) and starts its timer over: the budget may allow it
    later. Those allowed are tainted, or named once their taint shows."""
    if budgets is None:
        return decided.marks, decided.review
    marks = decided.marks + _replace_marks(decided, budgets, now=now)
    if decided.replacing:
        review = dataclasses.replace(
            decided.review,
            next_check=min(decided.review.next_check or recheck_seconds, recheck_seconds),
        )
        decided = dataclasses.replace(decided, review=review)
    decided = dataclasses.replace(decided, marks=marks)
    if not decided.going:
        return decided.marks, decided.review
    allowed: list[NodeView] = []
    kept: list[Kept] = []
    restart: list[tuple[NodeView, float | None]] = []
    for view in decided.going:
        problem = budget_problem(view.to_move, budgets)
        if problem is None:
            allowed.append(view)
            continue
        pod, rule, why = problem
        kept.append(Kept(view.name, rule, pod, f"pod {pod}: {why}"))
        restart.append((view, now))
    taint = tuple(v for v in allowed if not v.tainted)
    named = [v for v in allowed if v.tainted]
    next_check = decided.review.next_check
    if taint:
        # The watches do not wake us for our own taint: look again once it shows.
        next_check = min(next_check or recheck_seconds, recheck_seconds)
    review = dataclasses.replace(
        decided.review,
        victims=tuple(v.name for v in named),
        next_check=next_check,
        reasons={
            v.name: f"{why_it_goes(v)}; {decided.naming.describe()}"
            if decided.naming is not None
            else why_it_goes(v)
            for v in named
        },
    )
    marks = decided.marks + Marks(clear=tuple(restart), taint=taint, kept=tuple(kept))
    return marks, review


def _replace_marks(decided: ConsolidationProposal, budgets: Sequence[Any], *, now: float) -> Marks:
    """The taint and mark of a replacement's victims (``decided.replacing``), all of them
    or none: a victim whose pods a PodDisruptionBudget keeps now keeps them all (their
    timers start over)."""
    victims, replacement = decided.replacing, decided.proposed
    if not victims or replacement is None:
        return Marks()
    for view in victims:
        problem = budget_problem(view.to_move, budgets)
        if problem is not None:
            pod, rule, why = problem
            kept = Kept(view.name, rule, pod, f"pod {pod}: {why}")
            return Marks(clear=tuple((v, now) for v in victims), kept=(kept,))
    return Marks(replace=tuple((v, replacement) for v in victims))


def preview(
    choice: Choice,
    *,
    room: int,
    per_request: int,
    now: float,
    budgets: PoolBudgets = PoolBudgets(),
) -> Review:
    """What a dry run would remove now, timers aside (a dry run writes no stamp to time
    them): the candidates, as many as the pool may give up, one request may name and
    the pool's disruption budgets allow."""
    going, held = within_budgets(
        choice.chosen[: max(0, min(room, per_request))],
        views=choice.views,
        budgets=budgets.budgets,
        unhealthy=budgets.unhealthy,
        gone=choice.gone,
        now=now,
    )
    return Review(
        candidates=len(choice.chosen),
        would_remove=tuple(v.name for v in going),
        reasons={v.name: why_it_goes(v) for v in going},
        held=tuple(held),
    )
