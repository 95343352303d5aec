"""The Autoscaler's status: what it decided, computed from the decision alone.

Nothing in it changes from one scan to the next unless a decision does: no scan time, no
timer, no "last seen"; the pod counts move only when the pods of its pool (or of its
namespaces that no pool can host) do, and they and each further request of a scale-up are
held while its pool is not settled (``pool_settled``, ``with_progress_held``); conditions
keep their ``lastTransitionTime`` unless their status flips. So an idle cluster costs no
status write, and the status writer's compare-before-write has something to compare.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.controllers.autoscaler.decide import scaling
from nodepool_operator.controllers.autoscaler.decide.batch_plan import (
    ConflictingAutoscaler,
    MissingPool,
    Observation,
    Part,
)
from nodepool_operator.controllers.autoscaler.snapshot import scale_requests
from nodepool_operator.runtime import conditions

__all__ = [
    "COUNTS",
    "DRY_RUN",
    "LAST_REQUEST",
    "LIMIT_REACHED",
    "READY",
    "alarms",
    "autoscaler_status",
    "decision_line",
    "nodes_in_flight",
    "pool_settled",
    "progress_fields",
    "with_progress_held",
    "would_request",
]

READY = "Ready"
LIMIT_REACHED = "LimitReached"
DRY_RUN = "DryRun"


def autoscaler_status(
    *,
    generation: int,
    spec: autoscaler_api.AutoscalerSpec,
    current: Mapping[str, Any],
    seen: Part,
    decision: scaling.ScalingDecision | None,
    last_request: autoscaler_api.LastScaleRequest | None,
    now: str,
    hold_progress: bool = False,
) -> dict[str, Any]:
    """The full status the Autoscaler of ``generation`` and ``spec``, whose status is
    ``current``, should have; equal inputs give an equal status. ``hold_progress``: keep
    the stored progress fields (``with_progress_held``)."""
    found = conditions.ConditionList(
        current.get("conditions"), observed_generation=generation, now=now
    )
    _set_ready(found, spec, seen)
    if isinstance(seen, Observation) and decision is not None:
        _set_limit(found, spec.node_pool_name, seen, decision, dry_run=spec.dry_run)
    _set_dry_run(found, spec)
    would = would_request(decision) if spec.dry_run else None
    status = {
        "observedGeneration": generation,
        "conditions": found.items,
        "lastRequest": None if last_request is None else last_request.to_dict(),
        "wouldRequest": None if would is None else would.to_dict(),
        "pendingPods": 0 if isinstance(seen, ConflictingAutoscaler) else seen.pending,
        "unschedulablePods": 0 if isinstance(seen, ConflictingAutoscaler) else seen.unschedulable,
    }
    if not isinstance(seen, Observation) or not hold_progress:
        return status
    return with_progress_held(current, status)


def _set_ready(
    found: conditions.ConditionList, spec: autoscaler_api.AutoscalerSpec, seen: Part
) -> None:
    pool = spec.node_pool_name
    if isinstance(seen, MissingPool):
        found.set(
            READY, False, reason="NodePoolNotFound", message=f"NodePool {pool} does not exist"
        )
    elif isinstance(seen, ConflictingAutoscaler):
        message = (
            f"NodePool {pool} is already scaled by Autoscaler {seen.owner} (the oldest that "
            "names it); this one makes no decisions while both exist"
        )
        found.set(READY, False, reason="ConflictingAutoscaler", message=message)
    else:
        where = ", ".join(spec.namespaces) if spec.namespaces else "all namespaces"
        message = f"scaling NodePool {pool} for pods in {where}"
        found.set(READY, True, reason="Watching", message=message)


def _set_limit(
    found: conditions.ConditionList,
    pool: str,
    seen: Observation,
    decision: scaling.ScalingDecision,
    *,
    dry_run: bool,
) -> None:
    top = seen.pool.max_nodes
    if decision.limited:
        # A dry run requests nothing: the pool reaches maxNodes only in what it would do.
        where = "would be" if dry_run and seen.pool.target < top else "is"
        message = f"NodePool {pool} {where} at maxNodes={top}; the pods need {decision.wanted}"
        found.set(LIMIT_REACHED, True, reason="MaxNodesReached", message=message)
    else:
        found.set(LIMIT_REACHED, False, reason="WithinLimits", message=f"maxNodes={top}")


def _set_dry_run(found: conditions.ConditionList, spec: autoscaler_api.AutoscalerSpec) -> None:
    """Shown while dry run is on, and kept (False) once it was: so turning it off shows too."""
    if spec.dry_run:
        message = "decisions are reported in status.wouldRequest; no ScaleRequest is created"
        found.set(DRY_RUN, True, reason="DryRun", message=message)
    elif conditions.find_condition(found.items, DRY_RUN) is not None:
        found.set(DRY_RUN, False, reason="Acting", message="decisions become ScaleRequests")


#: Status fields that move with every pod of a burst.
COUNTS = ("pendingPods", "unschedulablePods")
LAST_REQUEST = "lastRequest"


def _scales_up(request: Any) -> bool:
    """The request (``lastRequest`` as stored) asked for more nodes."""
    return isinstance(request, Mapping) and scale_requests.asks_for_more(
        str(request.get("name", ""))
    )


def progress_fields(current: Mapping[str, Any], status: Mapping[str, Any]) -> frozenset[str]:
    """The fields of ``status`` whose change from ``current`` is progress of a scale-up
    under way rather than news: the pod counts always, and ``lastRequest`` when both the
    stored one and the new one ask for more nodes (each request of a burst supersedes the
    last; the ScaleRequests show each one, the status catches up). A first request, one
    in the other direction, a dry run's ``wouldRequest``, a condition or a generation is
    news."""
    before, after = current.get(LAST_REQUEST), status.get(LAST_REQUEST)
    if _scales_up(before) and _scales_up(after):
        return frozenset((*COUNTS, LAST_REQUEST))
    return frozenset(COUNTS)


def with_progress_held(current: Mapping[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """``status`` with the stored progress fields (``progress_fields``) kept when nothing
    else moved: for a pool that is not settled (``pool_settled``), whose counts move with
    every pod its nodes take and whose next request of the burst asks for more again; both
    are written once it has settled."""
    progress = progress_fields(current, status)
    rest = {k: v for k, v in status.items() if k not in progress and v is not None}
    before = {k: v for k, v in current.items() if k not in progress and v is not None}
    if rest != before or any(k not in current for k in COUNTS):
        return status
    return {**status, **{k: current[k] for k in progress if k in current}}


def nodes_in_flight(seen: Part) -> bool:
    """The pool has nodes asked for that are not Ready yet."""
    return isinstance(seen, Observation) and seen.pool.in_flight > 0


def pool_settled(seen: Part) -> bool:
    """Nothing is on its way for the pool: no node in flight, no request open, none of the
    pods the plan gives it waiting for room it has or will get (those only nodes past
    maxNodes could host wait for nothing), and no pod of its namespaces the scheduler has
    not judged yet (in a burst, those are the pods its next request may be for: a pool
    whose first nodes land in a second can ask again when the scheduler, tens of seconds
    later, judges the rest of the burst)."""
    if not isinstance(seen, Observation):
        return True
    pool = seen.pool
    placeable = len(seen.fitting) - len(seen.beyond_max)
    return pool.in_flight == 0 and not pool.open_request and placeable <= 0 and not seen.waiting


def would_request(decision: scaling.ScalingDecision | None) -> autoscaler_api.WouldRequest | None:
    """The ScaleRequest a decision makes, as a dry run reports it; None for no change."""
    if decision is None or decision.action == "none":
        return None
    return autoscaler_api.WouldRequest(target_nodes=decision.target, reason=decision.reason[:1024])


def alarms(
    before: Sequence[Mapping[str, Any]] | None, after: Sequence[Mapping[str, Any]]
) -> list[tuple[str, str]]:
    """(reason, message) of each condition that just went bad: one Warning per transition."""
    found: list[tuple[str, str]] = []
    limit = conditions.find_condition(after, LIMIT_REACHED)
    limited = limit is not None and limit.get("status") == "True"
    if limit is not None and limited and not conditions.is_true(before, LIMIT_REACHED):
        found.append(("LimitReached", str(limit["message"])))
    ready = conditions.find_condition(after, READY)
    lost = ready is not None and ready.get("status") == "False"
    if ready is not None and lost and not conditions.is_false(before, READY):
        found.append((str(ready["reason"]), str(ready["message"])))
    return found


def decision_line(
    seen: Observation,
    decision: scaling.ScalingDecision,
    *,
    warned: int,
    made: autoscaler_api.LastScaleRequest | None,
    dry_run: bool = False,
) -> str:
    """The key=value fields of the one log line a decision gets."""
    pool = seen.pool
    event = decision.action if decision.action != "none" else ("unfit" if warned else "scan")
    fields = {
        "event": event,
        "pool": pool.name,
        "pending": seen.pending,
        "unschedulable": seen.unschedulable,
        "fitting": len(seen.fitting),
        "unfit": len(seen.unfit),
        "new_unfit": warned,
        "ready": pool.ready,
        "in_flight": pool.in_flight,
        "target": f"{decision.current}->{decision.target}",
        "wanted": decision.wanted,
        "unneeded": len(seen.unneeded),
        "blocked": decision.blocked or "-",
        "request": made.name if made is not None else ("dry-run" if dry_run else "-"),
    }
    text = " ".join(f"{k}={v}" for k, v in fields.items())
    return f"{text} reason={decision.reason!r}"
