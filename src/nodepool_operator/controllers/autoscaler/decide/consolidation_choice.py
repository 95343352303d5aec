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
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from nodepool_operator import timestamps
from nodepool_operator.api import disruption as disruption_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.controllers.autoscaler.decide import replacement_steps
from nodepool_operator.controllers.autoscaler.decide.consolidation_marks import (
    CLEARS,
    NO_BUDGETS,
    UNTAINTS,
    Choice,
    ConsolidationProposal,
    Marks,
    PoolBudgets,
    clearable,
    stale_marks,
)
from nodepool_operator.controllers.autoscaler.decide.consolidation_replace import Replacement
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


def named_by_open_requests(
    requests: Iterable[Mapping[str, Any]],
    *,
    node: Callable[[str], Mapping[str, Any] | None] | None = None,
) -> frozenset[str]:
    """The Nodes a pool's Pending or Applied ScaleRequests name for removal: on their way
    out (the NodePool controller's marks may not show in our cache yet), never named
    again while the request stands. A Rejected or Superseded request removes nothing.

    A request stays Applied until its retention is over, and the NodePool controller gives
    the lowest free name to its next Node: a Node of a name a request named, created after
    that request, is a new Node (the one named is gone) and is not on its way out. ``node``
    finds the cache's Node of a name (without it, or without timestamps to compare, the
    name counts as named: the safe side)."""
    found: set[str] = set()
    for request in requests:
        metadata = request.get("metadata") or {}
        if metadata.get("deletionTimestamp"):
            continue
        if scalerequest_api.status_of(request).phase not in ("Pending", "Applied"):
            continue
        asked = timestamps.parse_rfc3339(metadata.get("creationTimestamp"))
        for name in scalerequest_api.spec_of(request).remove_nodes:
            if not _made_after(node(name) if node is not None else None, asked):
                found.add(name)
    return frozenset(found)


def _made_after(node: Mapping[str, Any] | None, asked: float | None) -> bool:
    """Whether ``node`` was created after the request made at ``asked`` (so it is not the
    Node the request named); False when either time is unknown."""
    if node is None or asked is None:
        return False
    created = timestamps.parse_rfc3339((node.get("metadata") or {}).get("creationTimestamp"))
    return created is not None and created > asked


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
    budgets: PoolBudgets = NO_BUDGETS,
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
    under_way = replacement_steps.under_way(choice, blocked=blocked)
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
    kept = replacement_steps.kept_with_price(choice)
    names = frozenset(v.name for v in chosen)
    clear = tuple((v, None) for v in views if clearable(v) and v.name not in names)
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
        replacing, held_victims = replacement_steps.victims_allowed(
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
    marks = decided.marks + replacement_steps.replace_marks(decided, budgets, now=now)
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


def preview(
    choice: Choice,
    *,
    room: int,
    per_request: int,
    now: float,
    budgets: PoolBudgets = NO_BUDGETS,
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
