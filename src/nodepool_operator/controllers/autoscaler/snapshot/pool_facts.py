"""A pool's facts as a batch reads them: its ScaleRequests (``RequestView``), its target
once the requests handed over are answered, and what is Ready, cordoned or in flight
(``PoolFacts``). Pure: ``pool_reads`` fills them from the caches; the decisions read them.

The *effective target* is what the pool will have once the requests already handed over
are applied (the newest Pending request wins, as the NodePool controller applies them):
the NodePool controller's own rule, so the two never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nodepool_operator.api import disruption as disruption_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.runtime import versions

__all__ = ["PoolFacts", "RequestView", "base_target", "effective_target"]


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
    # status.zonesServed: written after its Nodes registered, long after it was applied,
    # so its resourceVersion no longer dates the application (``base_target``).
    zones_served: bool = False


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
    # spec.disruption.budgets (none: no cap), which consolidation honours.
    budgets: tuple[disruption_api.Budget, ...] = ()

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
    target it applied. This is what a new request states as its basis. A request marked
    ``zonesServed`` is not one: that mark is written once its Nodes registered, after the
    pool write, and only moves its resourceVersion past the pool's (were it counted, a
    request applied before the pool's last change would hold every new request to a
    stale basis, each one Superseded).
    """
    base = nodepool_api.within_bounds(target, min_nodes=min_nodes, max_nodes=max_nodes)
    behind = [
        r
        for r in requests
        if r.phase == "Applied"
        and r.applied is not None
        and r.applied != target
        and not r.zones_served
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
