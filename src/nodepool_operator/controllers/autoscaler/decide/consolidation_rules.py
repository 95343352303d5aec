"""Consolidation's rules, pure: which pods may move (``movable_problem``), what the
PodDisruptionBudgets allow (``budget_problem``), which Nodes go together (``choose``),
which of them have been unneeded long enough (``unneeded_timers``), how many may be
tainted at once (``within_limits``) and what the pool's disruption budgets allow
(``within_budgets``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from nodepool_operator.api import disruption as disruption_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler.constraints import Selector
from nodepool_operator.controllers.autoscaler.snapshot.consolidation_views import (
    NodeView,
    annotations_of,
)

__all__ = [
    "DISRUPTION_BUDGET_RULE",
    "Kept",
    "Review",
    "budget_problem",
    "choose",
    "choose_together",
    "disruption_reason",
    "movable_problem",
    "pod_key",
    "unneeded_timers",
    "why_it_goes",
    "within_budgets",
    "within_limits",
]

#: The rule a Node kept by its pool's ``spec.disruption.budgets`` is told with.
DISRUPTION_BUDGET_RULE: Final = "disruption-budget"

_KUBE_SYSTEM: Final = "kube-system"


@dataclass(frozen=True)
class Kept:
    """Why an underused Node stays: the rule, and the pod it applies to (if one)."""

    node: str
    rule: str
    pod: str | None
    message: str


@dataclass(frozen=True)
class Review:
    """What one pass found: the Nodes to name now, and when to look again."""

    victims: tuple[str, ...] = ()
    candidates: int = 0
    next_check: float | None = None  # seconds until a stamp reaches unneededSeconds
    # Why each named Node goes, for the events written once the request is made.
    reasons: Mapping[str, str] = field(default_factory=dict)
    # A dry run's preview: the Nodes a request would name now (timers aside), and the
    # candidates the pool's disruption budgets hold.
    would_remove: tuple[str, ...] = ()
    held: tuple[Kept, ...] = ()
    # A replacement under way whose new Node is to be asked for now (``target + 1``
    # naming its offering): a ``consolidation_replace.Replacement``.
    launch: Any = None


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def movable_problem(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(rule, message) when a drain must not move ``pod``; None when it may.

    The budgets (and a kube-system pod's need of one) are judged apart, with the
    budgets read (``budget_problem``).
    """
    annotations = annotations_of(pod)
    safe = annotations.get(wellknown.SAFE_TO_EVICT_ANNOTATION) == "true"
    refusal = wellknown.do_not_disrupt_reason(pod, node=False)
    if refusal is not None:
        return "do-not-disrupt", refusal
    owners = (pod.get("metadata") or {}).get("ownerReferences") or ()
    if not any(ref.get("controller") for ref in owners) and not safe:
        return "not-replicated", "no controller recreates it (a bare pod)"
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        if safe:
            break
        if "hostPath" in volume:
            return "local-storage", f"hostPath volume {volume.get('name', '')!r}"
        empty_dir = volume.get("emptyDir")
        if empty_dir is not None and (empty_dir or {}).get("medium") != "Memory":
            return "local-storage", f"emptyDir volume {volume.get('name', '')!r} on the node's disk"
    return None


def _selector(raw: Mapping[str, Any] | None) -> Selector:
    if raw is None:
        return Selector((("", "NoSuchOperator", frozenset()),))  # a PDB without one: none
    requirements = [
        (str(k), "In", frozenset({str(v)}))
        for k, v in sorted((raw.get("matchLabels") or {}).items())
    ]
    requirements += [
        (
            str(e.get("key", "")),
            str(e.get("operator", "")),
            frozenset(map(str, e.get("values") or ())),
        )
        for e in raw.get("matchExpressions") or ()
    ]
    return Selector(tuple(requirements))


def budget_problem(
    to_move: Sequence[Mapping[str, Any]], budgets: Sequence[Mapping[str, Any]]
) -> tuple[str, str, str] | None:
    """(pod, rule, message) when the budgets do not allow moving every pod of ``to_move``
    now, or a kube-system pod has no budget (cluster-autoscaler's rule); else None."""
    covering: dict[str, int] = {}
    named: dict[str, Mapping[str, Any]] = {}
    for pod in to_move:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        matched = False
        for budget in budgets:
            bmeta = budget.get("metadata") or {}
            if bmeta.get("namespace") != meta.get("namespace"):
                continue
            if not _selector((budget.get("spec") or {}).get("selector")).matches(labels):
                continue
            matched = True
            key = f"{bmeta.get('namespace')}/{bmeta.get('name')}"
            covering[key] = covering.get(key, 0) + 1
            named[key] = budget
            allowed = int((budget.get("status") or {}).get("disruptionsAllowed") or 0)
            if covering[key] > allowed:
                message = f"PodDisruptionBudget {key} allows {allowed} disruptions now"
                return pod_key(pod), "pod-disruption-budget", message
        if not matched and meta.get("namespace") == _KUBE_SYSTEM:
            safe = annotations_of(pod).get(wellknown.SAFE_TO_EVICT_ANNOTATION) == "true"
            if not safe:
                return pod_key(pod), "kube-system", "a kube-system pod without a budget"
    return None


def choose(
    views: Sequence[NodeView],
    *,
    threshold: float,
    fits: Callable[[Sequence[NodeView]], tuple[str, str] | None],
) -> tuple[list[NodeView], list[Kept]]:
    """The candidates among one pool's ``views``, and why each other underused Node stays
    (``choose_together`` of that one pool)."""
    return choose_together([(views, threshold)], fits=fits)


def choose_together(
    pools: Sequence[tuple[Sequence[NodeView], float]],
    *,
    fits: Callable[[Sequence[NodeView]], tuple[str, str] | None],
    fit_together: Callable[[Sequence[NodeView]], bool] | None = None,
) -> tuple[list[NodeView], list[Kept]]:
    """The candidates among the Nodes of every pool in ``pools`` (each pool's views with
    its Autoscaler's utilisation threshold), and why each other underused Node stays.

    Checked together, so that two removals never count on the same room, whichever pools
    they are in. Empty Nodes first (no simulation), then the Nodes already tainted (a
    decision in progress keeps its room), then the longest stamped (a pass after a removal
    keeps the timers that ran, instead of starting another Node's from zero), then the
    least used. ``fits(chosen)`` says which pod of ``chosen`` fits nowhere on the Nodes
    that stay (``(pod, why)``), or None. ``fit_together(views)``, when given, says whether
    the pods of all ``views`` fit at once on the Nodes that stay: when every movable
    candidate's do (the common case), one proof stands for all of them.
    """

    def order(v: NodeView) -> tuple[bool, bool, bool, float, float, str]:
        return (not v.empty, not v.tainted, v.since is None, v.since or 0.0, v.usage, v.name)

    underused = sorted(
        (v for views, threshold in pools for v in views if v.eligible and v.usage < threshold),
        key=order,
    )
    movable: list[NodeView] = []
    kept: list[Kept] = []
    for view in underused:
        problems = ((pod, movable_problem(pod)) for pod in view.to_move)
        pod, problem = next(((p, found) for p, found in problems if found), (None, None))
        if pod is not None and problem is not None:
            rule, why = problem
            kept.append(Kept(view.name, rule, pod_key(pod), f"pod {pod_key(pod)}: {why}"))
            continue
        movable.append(view)
    if fit_together is not None and any(not v.empty for v in movable) and fit_together(movable):
        return movable, kept
    chosen: list[NodeView] = []
    for view in movable:
        if view.empty:
            chosen.append(view)
            continue
        unfit = fits([*chosen, view])
        if unfit is not None:
            pod_name, why = unfit
            message = f"pod {pod_name} fits on no other node: {why}"
            kept.append(Kept(view.name, "no-room", pod_name, message))
            continue
        chosen.append(view)
    return chosen, kept


def unneeded_timers(
    chosen: Sequence[NodeView], *, now: float, unneeded_seconds: float
) -> tuple[list[NodeView], float | None]:
    """Of the ``chosen`` Nodes, those unneeded for ``unneeded_seconds`` by ``now`` (their
    stamp says since when), and the seconds until the next one is: a Node stamped in this
    pass waits the whole time; None when none waits."""
    expired = [v for v in chosen if v.since is not None and now - v.since >= unneeded_seconds]
    waiting = [
        v.since + unneeded_seconds - now for v in chosen if v.since is not None and v not in expired
    ]
    if waiting:
        return expired, min(waiting)
    return expired, unneeded_seconds if any(v.since is None for v in chosen) else None


def within_limits(
    untainted: Sequence[NodeView], *, tainted: Sequence[NodeView], room: int, max_concurrent: int
) -> list[NodeView]:
    """Those of ``untainted`` (in order) that may be tainted now: never more tainted Nodes
    than the pool may give up, never more than ``max_concurrent`` with pods to move. Nodes
    tainted already count (named, or draining)."""
    busy = sum(1 for v in tainted if not v.empty)
    count = len(tainted)
    chosen = []
    for view in untainted:
        if count >= room:
            break
        if not view.empty and busy >= max_concurrent:
            continue
        chosen.append(view)
        count += 1
        busy += not view.empty
    return chosen


def disruption_reason(view: NodeView) -> disruption_api.DisruptionReason:
    """The budget reason consolidating ``view`` is counted under."""
    return "Empty" if view.empty else "Underutilized"


def within_budgets(
    untainted: Sequence[NodeView],
    *,
    views: Sequence[NodeView],
    budgets: Sequence[disruption_api.Budget],
    unhealthy: frozenset[str] = frozenset(),
    gone: int = 0,
    now: float,
) -> tuple[list[NodeView], list[Kept]]:
    """Those of ``untainted`` (in order) the pool's disruption ``budgets`` let be tainted at
    ``now``, and a ``Kept`` naming the holding budget for each other. The pool's Nodes are
    ``views`` and ``gone`` more being deleted (a percentage is of the registered ones,
    ``counted_in_budgets``); those being disrupted for any reason (our
    taint, the NodePool controller's drift or expiry taint, on their way out) and the
    ``unhealthy`` ones (being repaired) use the budget already, as the NodePool controller
    counts them (``controllers.nodepool.disruption``): each one tainted here uses it too."""
    total = disruption_api.counted_in_budgets(v.obj for v in views) + gone
    disrupting = gone + sum(1 for v in views if v.disrupting or v.name in unhealthy)
    allowed: list[NodeView] = []
    held: list[Kept] = []
    for view in untainted:
        reason = disruption_reason(view)
        allows = disruption_api.allowance(
            budgets, reason=reason, total=total, disrupting=disrupting, now=now
        )
        if allows.allowed <= 0:
            message = f"its removal ({reason}) waits for the pool's disruption {allows.describe()}"
            held.append(Kept(view.name, DISRUPTION_BUDGET_RULE, None, message))
            continue
        allowed.append(view)
        disrupting += 1
    return allowed, held


def why_it_goes(view: NodeView) -> str:
    if view.empty:
        return "empty (DaemonSet and mirror pods only)"
    return (
        f"underused ({view.usage:.0%} requested); its {len(view.to_move)} pods fit on other nodes"
    )
