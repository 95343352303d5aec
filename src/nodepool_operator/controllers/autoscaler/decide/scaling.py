"""Pure decisions of the Autoscaler: no I/O, no clock, so each one is unit-tested alone.

Over the pool's facts (``snapshot.pool_facts``: its effective target, what is in flight):

* scale-up: what the scheduling simulation (``simulation``) opened in this pool for the
  pods that fit neither the nodes there nor the nodes on their way; only those new nodes
  are asked for, so a scan during a scale-up asks for nothing;
* scale-down: the nodes consolidation (``consolidator``) named, unneeded for long enough
  and tainted, are given up by name, never below ``minNodes`` and never while anything
  is in flight (requested nodes not Ready, a Pending request, pods still waiting for the
  scheduler): the hysteresis that keeps the pool from flapping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from nodepool_operator.controllers.autoscaler.simulation import PoolOutcome
from nodepool_operator.controllers.autoscaler.snapshot.pool_facts import PoolFacts

__all__ = ["Action", "ScalingDecision", "decide", "limit_reason", "scale_down_blocker"]

Action = Literal["none", "scale-up", "scale-down"]


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
    if up.new_node_offerings:
        reason += ": " + ", ".join(
            f"{count} x {kind} in {zone} ({capacity_type})"
            for (kind, zone, capacity_type), count in up.new_node_offerings.items()
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
