"""ScaleRequests: the NodePool controller is the only component that turns them into
``spec.targetNodes``.

The newest Pending request of a pool wins; older Pending ones are Superseded (requests
carry an absolute target, so the newest already includes what the older ones asked for).
The spec write is a read-modify-write with the resourceVersion precondition inside
``retry_on_conflict``: on 409 it re-reads the pool and recomputes from the fresh spec,
changing only ``targetNodes``, so a concurrent edit of anything else is never lost.
Finished requests are deleted once they are older than the retention period.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from nodepool_operator.api import nodepool as np
from nodepool_operator.api import scalerequest as sr
from nodepool_operator.controllers.nodepool import plan
from nodepool_operator.controllers.resources import NODEPOOLS, SCALEREQUESTS
from nodepool_operator.runtime import errors, retry
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.status import StatusWriter

__all__ = ["apply_pending", "expired_requests", "pending_requests"]


def _created(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("creationTimestamp", ""))


def pending_requests(requests: Sequence[Object]) -> list[Object]:
    """Pending requests, oldest first (creation time, then name)."""
    pending = [
        r
        for r in requests
        if sr.status_of(r).phase == "Pending" and not r["metadata"].get("deletionTimestamp")
    ]
    return sorted(pending, key=lambda r: (_created(r), r["metadata"]["name"]))


async def apply_pending(
    *, client: Client, statuses: StatusWriter, pool_name: str, pending: Sequence[Object]
) -> plan.RequestDecision:
    newest = pending[-1]
    requested = sr.spec_of(newest).target_nodes

    async def write_target() -> plan.RequestDecision:
        fresh = await client.get(NODEPOOLS, pool_name)
        decision = plan.decide_request(np.spec_of(fresh), requested)
        if decision.target != fresh["spec"].get("targetNodes"):
            fresh["spec"]["targetNodes"] = decision.target
            await client.replace(NODEPOOLS, fresh)  # resourceVersion precondition: 409 if stale
        return decision

    decision = await retry.retry_on_conflict(write_target)
    for request in pending[:-1]:
        await _set_phase(
            statuses, request, "Superseded", None, f"superseded by {newest['metadata']['name']}"
        )
    await _set_phase(statuses, newest, decision.phase, decision.target, decision.message)
    return decision


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
        if sr.status_of(request).phase == "Pending" or request["metadata"].get("deletionTimestamp"):
            continue
        created = datetime.datetime.fromisoformat(_created(request).replace("Z", "+00:00"))
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
