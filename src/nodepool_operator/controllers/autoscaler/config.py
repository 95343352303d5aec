"""Tunables of the Autoscaler controller, with the defaults the operator runs with.

What each Autoscaler may choose (scan interval, batch window, scale-down delay) is in its
spec; these are the process-wide knobs.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodepool_operator.controllers import readiness

__all__ = ["AutoscalerConfig"]


@dataclass(frozen=True)
class AutoscalerConfig:
    """Process-wide knobs of the Autoscaler controller."""

    # Status reconciles of different Autoscalers run this many at a time.
    max_concurrent_reconciles: int = 4
    # The planner hands over this many pools' decisions at a time (their ScaleRequest
    # creates overlap their round trips), and writes this many pools' events at a time
    # after the batch; the plan itself is made once per batch, by one planner.
    hand_over_parallelism: int = 4
    # Pod events (TriggeredScaleUp, NotTriggerScaleUp) written in parallel per decision.
    event_parallelism: int = 8
    # TriggeredScaleUp goes to at most this many pods per request: enough for people to see
    # why pods wait on a new node, without a write per pod in a burst of thousands (the
    # request's own event on the Autoscaler gives the count; 0 turns pod events off).
    triggered_events_per_request: int = 10
    # Parsed pod profiles kept between scans (by uid and resourceVersion).
    request_cache_size: int = 100_000
    # Pods with a lower priority never trigger a scale-up (cluster-autoscaler's
    # --expendable-pods-priority-cutoff): they may use room that exists, never a new node.
    expendable_pods_priority_cutoff: int = -10
    # Status writes that carry nothing but moved pod counts (pendingPods,
    # unschedulablePods), over all Autoscalers together: at most this many a second (after
    # a first burst of as many as two seconds' worth), on top of each Autoscaler's own
    # limit of one per scan interval. Decisions, conditions and generations are not
    # counted here: they are written at once.
    count_writes_per_second: float = 5.0
    # No scale decision is made (no scale-up, no consolidation) while more of the
    # cluster's Nodes are unready than both of these allow, as the NodePool controller
    # holds its repairs (cluster-autoscaler's --ok-total-unready-count and
    # --max-total-unready-percentage, with its defaults).
    unready_limits: readiness.UnreadyLimits = readiness.DEFAULT_LIMITS
    # A scale-up's new Nodes stay tainted until the pending pods planned there are
    # nominated on them (``status.nominatedNodeName``), at most this long after each Node
    # turns Ready (``api.nominations``): kube-scheduler then puts each pod where the plan
    # did, and no pod is stranded by another taking its room. 0: no nominations.
    await_nominations_seconds: int = 20
    # Nominations written at a time (one pods/status patch each).
    nomination_parallelism: int = 8
