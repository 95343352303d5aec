"""Pure decisions of the Autoscaler: no I/O, no clock, so each one is unit-tested alone.

* the pool's *effective target*: what it will have once the requests already handed over
  are applied (the newest Pending request wins, as the NodePool controller applies them);
* scale-up: what the scheduling simulation (``simulation``) opened in this pool for the
  pods that fit neither the nodes there nor the nodes on their way; only those new nodes
  are asked for, so a scan during a scale-up asks for nothing;
* scale-down: the nodes consolidation (``consolidation``) named, unneeded for long enough
  and tainted, are given up by name, never below ``minNodes`` and never while anything
  is in flight (requested nodes not Ready, a Pending request, pods still waiting for the
  scheduler): the hysteresis that keeps the pool from flapping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.controllers.autoscaler.simulation import PoolOutcome
from nodepool_operator.runtime import versions

__all__ = [
    "Action",
    "PoolFacts",
    "RequestView",
    "ScalingDecision",
    "base_target",
    "decide",
    "effective_target",
    "limit_reason",
    "scale_down_blocker",
]

Action = Literal["none", "scale-up", "scale-down"]


@dataclass(frozen=True)
class RequestView:
    """What planning needs of one ScaleRequest of the pool."""

    name: str
    created: str  # metadata.creationTimestamp (RFC 3339 sorts as text)
    target: int
    phase: scalerequest_api.Phase
    applied: int | None
    version: str  # metadata.resourceVersion
    based_on: int | None = None  # spec.basedOnTargetNodes


@dataclass(frozen=True)
class PoolFacts:
    """The pool as planning sees it."""

    name: str
    min_nodes: int
    max_nodes: int
    target: int  # the effective target
    ready: int  # Ready nodes, cordoned or not
    open_request: bool  # a request of the pool is still Pending
    cordoned: int = 0  # Ready nodes that take no pods (being drained, or by hand)
    unhealthy: int = 0  # NotReady past the pool's timeouts: being replaced, not coming
    cannot_grow: str | None = None  # why the pool launches no VM now (its zones backed off)
    # Registered nodes that were Ready and are NotReady now, within the pool's timeouts: a
    # blip, not capacity on its way (it must not reset every consolidation timer).
    stalled: int = 0

    @property
    def in_flight(self) -> int:
        """Nodes requested but not Ready yet: each one is an empty template node soon."""
        return max(0, self.target - self.ready - self.unhealthy - self.stalled)

    @property
    def leaving(self) -> int:
        """Schedulable Ready nodes the pool will still remove to come down to its target.

        Cordoned nodes are assumed to go first (the NodePool controller finishes the
        drains it started before it picks other victims).
        """
        return max(0, self.ready - self.cordoned - self.target)


@dataclass(frozen=True)
class ScalingDecision:
    """What to ask of the pool, and what a person needs to know about it."""

    action: Action
    current: int  # the effective target before the decision
    target: int  # the target to ask for (== current for "none")
    wanted: int  # the target the pods would need without maxNodes
    involved: tuple[int, ...]  # indexes of the pods the new nodes are for
    reason: str
    blocked: str | None = None  # why scale-down is not considered now
    victims: tuple[str, ...] = ()  # the nodes a scale-down names for removal

    @property
    def limited(self) -> bool:
        return self.wanted > self.target


def _newer(version: str, than: str) -> bool:
    # When the versions cannot be ordered, assume the cache is behind (the safe side:
    # ask for less).
    order = versions.compare(version, than)
    return order is None or order > 0


def base_target(
    *,
    target: int,
    min_nodes: int,
    max_nodes: int,
    pool_version: str,
    requests: Sequence[RequestView],
) -> int:
    """The pool's ``spec.targetNodes`` as it is now, even where our cache lags behind.

    An Applied request whose pool write our cache has not seen yet (the request's status
    was written after the pool, so it is newer than the cached pool) counts with the
    target it applied. This is what a new request states as its basis.
    """
    base = nodepool_api.within_bounds(target, min_nodes=min_nodes, max_nodes=max_nodes)
    behind = [
        r
        for r in requests
        if r.phase == "Applied"
        and r.applied is not None
        and r.applied != target
        and _newer(r.version, pool_version)
    ]
    if behind:
        last = max(behind, key=lambda r: versions.sort_number(r.version))
        base = last.applied if last.applied is not None else base
    return base


def effective_target(
    *, base: int, min_nodes: int, max_nodes: int, requests: Sequence[RequestView]
) -> int:
    """What the pool will have once the requests handed over are answered: the NodePool
    controller's own rule (``api.scalerequest.answer_requests``: the newest Pending request
    decides, one computed from another target is Superseded, bounds apply), over the
    pool's target as ``base_target`` reads it."""
    facts = [
        scalerequest_api.RequestFacts(
            name=r.name,
            order=versions.creation_order(created=r.created, version=r.version, name=r.name),
            phase=r.phase,
            target_nodes=r.target,
            based_on_target_nodes=r.based_on,
        )
        for r in requests
    ]
    pool = nodepool_api.NodePoolSpec(target_nodes=base, min_nodes=min_nodes, max_nodes=max_nodes)
    return scalerequest_api.answer_requests(facts, pool=pool).target_nodes


def scale_down_blocker(pool: PoolFacts, *, enabled: bool, pending_fitting: int) -> str | None:
    """Why no node may be given up now, or None. Anything in flight blocks it."""
    if not enabled:
        return "disabled"
    if pool.open_request:
        return "request-pending"
    if pool.in_flight:
        return "capacity-in-flight"
    if pending_fitting:
        return "pods-pending"
    return None


def _scale_up(pool: PoolFacts, up: PoolOutcome) -> ScalingDecision | None:
    if up.wanted_nodes == 0:
        return None
    target = pool.target + up.new_nodes
    wanted = pool.target + up.wanted_nodes
    clamped = f" (clamped to maxNodes={pool.max_nodes})" if wanted > target else ""
    reason = (
        f"{len(up.hosted)} pending pods need {up.wanted_nodes} more nodes "
        f"after {pool.ready} ready and {pool.in_flight} requested{clamped}"
    )
    action: Action = "scale-up" if target > pool.target else "none"
    return ScalingDecision(action, pool.target, target, wanted, up.triggering, reason)


def _scale_down(
    pool: PoolFacts, unneeded: Sequence[str], *, unneeded_seconds: int
) -> ScalingDecision:
    # Ready nodes beyond the target are already on their way out (the NodePool controller
    # removes the emptiest first): they must not be given up a second time.
    give_up = max(0, min(len(unneeded) - pool.leaving, pool.target - pool.min_nodes))
    if give_up == 0:
        return ScalingDecision("none", pool.target, pool.target, pool.target, (), "no change")
    target = pool.target - give_up
    victims = tuple(sorted(unneeded)[:give_up])
    reason = (
        f"{give_up} of {len(unneeded)} nodes unneeded for {unneeded_seconds}s "
        f"(minNodes={pool.min_nodes}): {', '.join(victims)}"
    )
    return ScalingDecision("scale-down", pool.target, target, target, (), reason, victims=victims)


def decide(
    pool: PoolFacts,
    up: PoolOutcome,
    *,
    unneeded: Sequence[str],
    unneeded_seconds: int,
    blocked: str | None,
) -> ScalingDecision:
    """Scale up if the simulation opened nodes in the pool; else give up ``unneeded`` nodes.

    ``up`` is the simulation's outcome for the pool; ``unneeded`` the nodes consolidation
    found unneeded for ``unneeded_seconds`` and ready to name, ``blocked`` why scale-down
    is not allowed now.
    """
    grow = _scale_up(pool, up)
    if grow is not None:
        return grow
    if blocked is not None or not unneeded:
        reason = "no change" if blocked is None else f"scale-down blocked: {blocked}"
        return ScalingDecision("none", pool.target, pool.target, pool.target, (), reason, blocked)
    return _scale_down(pool, unneeded, unneeded_seconds=unneeded_seconds)


def limit_reason(pool: PoolFacts, decision: ScalingDecision) -> str:
    """Why pods beyond ``maxNodes`` get no node, in the words their event carries."""
    more = decision.wanted - decision.target
    if pool.cannot_grow is not None:
        return f"NodePool {pool.name} cannot grow: {pool.cannot_grow}; these pods wait"
    return (
        f"NodePool {pool.name} is at maxNodes {pool.max_nodes}; "
        f"these pods need {more} more {'node' if more == 1 else 'nodes'}"
    )
