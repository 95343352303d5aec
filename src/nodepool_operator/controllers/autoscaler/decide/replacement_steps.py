"""A pool's pass when consolidation replaces Nodes by one cheaper Node, pure: the Kept
told when none does (``kept_with_price``), the victims tainted and marked all together
or none (``victims_allowed``, ``replace_marks``), and the pass of a replacement under way
(``under_way``). ``consolidation_choice`` calls these; ``consolidation_replace`` chose
the replacement and says its next step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from nodepool_operator.controllers.autoscaler.decide import consolidation_marks as marks
from nodepool_operator.controllers.autoscaler.decide.consolidation_replace import (
    Replacement,
    Unreplaceable,
)
from nodepool_operator.controllers.autoscaler.decide.consolidation_rules import (
    Kept,
    Review,
    budget_problem,
    within_budgets,
    within_limits,
)
from nodepool_operator.controllers.autoscaler.snapshot.consolidation_views import NodeView

__all__ = ["kept_with_price", "replace_marks", "under_way", "victims_allowed"]


def kept_with_price(choice: marks.Choice) -> list[Kept]:
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


def victims_allowed(
    victims: Sequence[NodeView],
    *,
    views: Sequence[NodeView],
    taints: Sequence[NodeView],
    room: int,
    per_request: int,
    max_concurrent: int,
    budgets: marks.PoolBudgets,
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


def under_way(choice: marks.Choice, *, blocked: str | None) -> marks.ConsolidationProposal | None:
    """The pass of a pool with a replacement under way (``choice.replacing``), or None.
    Its victims keep their marks while the new Node is asked for and boots (the pool's
    own capacity in flight, its own request Pending); they are kept (marks removed) when
    scale-down is turned off, pods wait for room, or the step says it is called off."""
    replacement, step = choice.replacing, choice.step
    if replacement is None:
        return None
    views = choice.views
    victims = tuple(v for v in views if v.name in replacement.victims)
    if blocked == "disabled" or blocked in marks.UNTAINTS:
        return marks.ConsolidationProposal(marks.stale_marks(views), Review())
    off = step if isinstance(step, Unreplaceable) else None
    if off is not None:
        # A victim named already (draining) is the NodePool controller's: its marks stay.
        mine = [v for v in victims if marks.clearable(v)]
        kept = tuple(
            Kept(v.name, "replacement", None, f"its replacement is called off: {off.why}")
            for v in mine
        )
        if off.backs_off:  # recorded, so that it is not launched again at once
            called_off = marks.Marks(call_off=tuple((v, replacement) for v in mine), kept=kept)
            return marks.ConsolidationProposal(called_off, Review())
        return marks.ConsolidationProposal(
            marks.Marks(clear=tuple((v, None) for v in mine), kept=kept), Review()
        )
    # The pool's other Nodes hold (nothing else is chosen while it is under way, so the
    # room its victims' pods are proved on stays as it was): their timers run on.
    if blocked is not None:
        return marks.ConsolidationProposal(marks.Marks(), Review())
    if step == "launch":
        return marks.ConsolidationProposal(marks.Marks(), Review(launch=replacement))
    if step == "name":
        return marks.ConsolidationProposal(
            marks.Marks(), Review(), going=victims, naming=replacement
        )
    return marks.ConsolidationProposal(marks.Marks(), Review())


def replace_marks(
    decided: marks.ConsolidationProposal, budgets: Sequence[Any], *, now: float
) -> marks.Marks:
    """The taint and mark of a replacement's victims (``decided.replacing``), all of them
    or none: a victim whose pods a PodDisruptionBudget keeps now keeps them all (their
    timers start over)."""
    victims, replacement = decided.replacing, decided.proposed
    if not victims or replacement is None:
        return marks.Marks()
    for view in victims:
        problem = budget_problem(view.to_move, budgets)
        if problem is not None:
            pod, rule, why = problem
            kept = Kept(view.name, rule, pod, f"pod {pod}: {why}")
            return marks.Marks(clear=tuple((v, now) for v in victims), kept=(kept,))
    return marks.Marks(replace=tuple((v, replacement) for v in victims))
