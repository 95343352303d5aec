"""Consolidation's marks and the values a pool's decision is made of, pure: the writes a
pass makes on Nodes (``Marks``), the pool's part of the batch's choice (``Choice``), its
disruption budgets (``PoolBudgets``) and a pass's proposal (``ConsolidationProposal``);
which blockers clear or hold the marks, and the marks to take off (``stale_marks``).
``consolidation_choice`` decides with them, ``act.node_marks`` writes them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from nodepool_operator.api import disruption as disruption_api
from nodepool_operator.controllers.autoscaler.decide import consolidation_replace
from nodepool_operator.controllers.autoscaler.decide.consolidation_replace import (
    Replacement,
    Unreplaceable,
)
from nodepool_operator.controllers.autoscaler.decide.consolidation_rules import Kept, Review
from nodepool_operator.controllers.autoscaler.snapshot.consolidation_views import NodeView

__all__ = [
    "CLEARS",
    "NO_BUDGETS",
    "UNTAINTS",
    "Choice",
    "ConsolidationProposal",
    "Marks",
    "PoolBudgets",
    "clearable",
    "stale_marks",
]

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
    # A replacement's victims kept because its re-check failed: stamp, taint and mark
    # removed and the call-off recorded (``CALLED_OFF_ANNOTATION``), in one write.
    call_off: tuple[tuple[NodeView, Replacement], ...] = ()

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


#: A pool without disruption budgets and without Nodes being repaired.
NO_BUDGETS: Final = PoolBudgets()


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


def clearable(view: NodeView) -> bool:
    """A Node of ours to clear: carrying a mark, and eligible or NotReady for a while (a
    Node being drained or cordoned is the NodePool controller's now)."""
    return (view.eligible or view.stalled) and (view.since is not None or view.tainted)


def stale_marks(views: Sequence[NodeView]) -> Marks:
    """Every mark on ``views`` taken off: the pool has no Autoscaler acting for it any
    more (deleted, repointed, in dry run, or the pool is gone)."""
    return Marks(clear=tuple((v, None) for v in views if clearable(v)))
