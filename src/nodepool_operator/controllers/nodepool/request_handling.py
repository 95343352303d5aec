"""ScaleRequests: the NodePool controller is the only component that turns them into
``spec.targetNodes``.

Requests are ordered by when they were made (creationTimestamp, then resourceVersion,
since timestamps have one-second resolution), never by name. The newest Pending request
of a pool wins; older Pending ones are Superseded (requests carry an absolute target, so
the newest already includes what the older ones asked for). The newest is Superseded
too when it was computed from another target than the pool has now
(``basedOnTargetNodes``): it is never applied over the newer value.

The spec write is a read-modify-write with the resourceVersion precondition inside
``retry_on_conflict``: on 409 it re-reads the pool and recomputes from the fresh spec
(basis check included), changing only ``targetNodes``, so a concurrent edit of anything
else is never lost. A request for a pool that does not exist is Rejected. Finished
requests are deleted once they are older than the retention period.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Sequence

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.controllers.nodepool import plan
from nodepool_operator.controllers.resources import NODEPOOLS, SCALEREQUESTS
from nodepool_operator.runtime import errors, retry, versions
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.status import StatusWriter

__all__ = [
    "apply_pending",
    "delete_requests",
    "expired_requests",
    "missing_pool",
    "pending_requests",
    "pool_exists",
    "reject",
]


def pending_requests(requests: Sequence[Object]) -> list[Object]:
    """Pending requests, oldest first: by creation time, then resourceVersion.

    The name only breaks a tie the server cannot (two equal versions), so that the
    order is total; it never decides which of two requests is newer.
    """
    pending = [
        r
        for r in requests
        if scalerequest_api.status_of(r).phase == "Pending"
        and not r["metadata"].get("deletionTimestamp")
    ]
    return sorted(pending, key=versions.creation_order_of)


def missing_pool(pool_name: str) -> str:
    """Why a request for ``pool_name`` is Rejected when there is no such pool."""
    return f"NodePool {pool_name!r} does not exist"


async def pool_exists(client: Client, pool_name: str) -> bool:
    """Asked of the server, not the cache: a pool created a moment ago may not be there yet."""
    try:
        await client.get(NODEPOOLS, pool_name)
    except errors.NotFound:
        return False
    return True


async def apply_pending(
    *, client: Client, statuses: StatusWriter, pool_name: str, pending: Sequence[Object]
) -> plan.RequestDecision | None:
    """Answer ``pending`` (oldest first); the decision on the newest, or None when the
    pool turned out not to exist (every request is then Rejected)."""
    newest = pending[-1]
    request = scalerequest_api.spec_of(newest)

    async def write_target() -> plan.RequestDecision | None:
        try:
            fresh = await client.get(NODEPOOLS, pool_name)
        except errors.NotFound:
            return None  # deleted since the cache showed it
        decision = plan.decide_request(
            nodepool_api.spec_of(fresh),
            request.target_nodes,
            based_on=request.based_on_target_nodes,
        )
        if decision.target != fresh["spec"].get("targetNodes"):
            fresh["spec"]["targetNodes"] = decision.target
            await client.replace(NODEPOOLS, fresh)  # resourceVersion precondition: 409 if stale
        return decision

    decision = await retry.retry_on_conflict(write_target)
    if decision is None:
        await reject(statuses, pending, missing_pool(pool_name))
        return None
    for older in pending[:-1]:
        await _set_phase(
            statuses, older, "Superseded", None, f"superseded by {newest['metadata']['name']}"
        )
    # Rejected reports the target the pool kept; Superseded changed nothing to report.
    applied = None if decision.phase == "Superseded" else decision.target
    await _set_phase(statuses, newest, decision.phase, applied, decision.message)
    return decision


async def reject(statuses: StatusWriter, pending: Sequence[Object], message: str) -> None:
    """Answer every request in ``pending`` Rejected with ``message``."""
    for request in pending:
        await _set_phase(statuses, request, "Rejected", None, message)


async def _set_phase(
    statuses: StatusWriter, request: Object, phase: str, applied: int | None, message: str
) -> None:
    status = {
        "phase": phase,
        "observedGeneration": int(request["metadata"].get("generation", 0)),
        "appliedTargetNodes": applied,
        "message": message,
    }
    # Deleted meanwhile: nobody is left to read the answer.
    with contextlib.suppress(errors.NotFound):
        await statuses.update(request, status)


def expired_requests(
    requests: Sequence[Object], *, now: datetime.datetime, retention: float
) -> tuple[list[Object], float | None]:
    """Finished requests older than ``retention`` seconds, and when the next one expires."""
    expired: list[Object] = []
    next_expiry: float | None = None
    for request in requests:
        if scalerequest_api.status_of(request).phase == "Pending" or request["metadata"].get(
            "deletionTimestamp"
        ):
            continue
        stamp = str(request["metadata"].get("creationTimestamp", ""))
        created = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        age = (now - created).total_seconds()
        if age >= retention:
            expired.append(request)
        else:
            remaining = retention - age
            next_expiry = remaining if next_expiry is None else min(next_expiry, remaining)
    return expired, next_expiry


async def delete_requests(client: Client, requests: Sequence[Object]) -> None:
    for request in requests:
        # NotFound: already gone; Conflict: the uid precondition failed, it is a new object.
        with contextlib.suppress(errors.NotFound, errors.Conflict):
            await client.delete(
                SCALEREQUESTS, request["metadata"]["name"], uid=request["metadata"].get("uid")
            )
