"""The hand-off: a decision becomes one ScaleRequest, the only thing the Autoscaler writes
besides its own status and events (and, for consolidation, its stamps and taints on the
Nodes it will name: ``node_marks``).

The request carries an absolute target, a reason and the requester, and is owned by its
NodePool (garbage-collected with it). The NodePool controller turns it into
``spec.targetNodes``; the Autoscaler never writes a NodePool.
Each request created is recorded in the ledger (``snapshot.scale_requests``), so the next
batch counts it before the cache shows it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler.snapshot.scale_requests import (
    RequestLedger,
    request_name,
    requester_of,
)
from nodepool_operator.controllers.resources import SCALEREQUESTS
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import errors
from nodepool_operator.runtime.client import Client

__all__ = [
    "REFUSAL_RECHECK_SECONDS",
    "RequestRefused",
    "ScaleRequester",
]

#: How long the same request, refused for good, is not sent again (unless what it asks
#: for changes): a CRD or RBAC fixed meanwhile is found within this.
REFUSAL_RECHECK_SECONDS: Final = 300.0


class RequestRefused(errors.OperatorError):
    """The API server refused a ScaleRequest for good (422 Invalid, 403 Forbidden...).

    ``said``: its reason without the request's own name (which changes with every try),
    so the same refusal reads the same; ``sent``: False when the request was not sent
    again because the same one was refused less than ``REFUSAL_RECHECK_SECONDS`` ago."""

    def __init__(self, cause: errors.OperatorError, *, said: str, sent: bool) -> None:
        super().__init__(said)
        self.cause = cause
        self.said = said
        self.sent = sent


def _refusal(error: errors.OperatorError, name: str) -> str:
    """What a refusal says, the same for every try of the same request."""
    causes = error.details.get("causes") if isinstance(error, errors.ApiError) else None
    if causes:
        return "; ".join(
            f"{c.get('field', '')}: {c.get('message', '')}".strip(": ") for c in causes
        )
    return str(error).replace(f' "{name}"', "").replace(name, "")


def _capacity_type(text: str) -> wellknown.CapacityType:
    """A catalog offering's capacity type as the API's type (the catalog sells no other)."""
    for known in wellknown.CAPACITY_TYPES:
        if known == text:
            return known
    raise ValueError(f"not a capacity type: {text!r}")


@dataclass(frozen=True)
class _Refused:
    asked: object  # what the refused request asked for (compared, never hashed)
    until: float  # wall-clock time before which the same request is not sent again
    error: RequestRefused


class ScaleRequester:
    """Creates ScaleRequests for Autoscalers and remembers them in the ledger."""

    def __init__(
        self,
        *,
        client: Client,
        ledger: RequestLedger,
        wall_clock: clock_module.WallClock,
        await_nominations_seconds: int = 0,
    ) -> None:
        """``await_nominations_seconds``: how long a scale-up's new Nodes wait for the
        nominations of their pods (``api.nominations``); 0: they do not wait."""
        self.client = client
        self.ledger = ledger
        self.wall_clock = wall_clock
        self.await_nominations_seconds = await_nominations_seconds
        self._refused: dict[str, _Refused] = {}  # autoscaler -> its last refused request

    async def request(
        self,
        autoscaler: str,
        *,
        pool: str,
        pool_uid: str,
        target: int,
        basis: int,
        direction: str,
        reason: str,
        remove_nodes: tuple[str, ...] = (),
        new_node_zones: Mapping[str, int] | None = None,
        new_node_offerings: Mapping[tuple[str, str, str], int] | None = None,
        await_nominations: bool = False,
    ) -> autoscaler_api.LastScaleRequest:
        """Ask for ``target`` nodes, computed from the pool's ``spec.targetNodes`` ``basis``;
        a scale-down may name the nodes to remove, a scale-up the zones of its new nodes
        or, for a pool with requirements, their offerings ((type, zone, capacity type) ->
        how many). ``await_nominations``: its new Nodes wait for the nominations of the
        pods planned there (a scale-up for pending pods)."""
        name = request_name(
            autoscaler, direction=direction, millis=int(self.wall_clock.time() * 1000)
        )
        spec = scalerequest_api.ScaleRequestSpec(
            node_pool_name=pool,
            target_nodes=target,
            reason=reason[:1024],
            requester=requester_of(autoscaler),
            based_on_target_nodes=basis,
            remove_nodes=remove_nodes,
            new_node_zones=dict(new_node_zones or {}),
            new_node_offerings=tuple(
                scalerequest_api.OfferingCount(
                    instance_type=kind,
                    zone=zone,
                    capacity_type=_capacity_type(capacity_type),
                    count=count,
                )
                for (kind, zone, capacity_type), count in sorted((new_node_offerings or {}).items())
                if count > 0
            ),
            await_nominations_seconds=(
                self.await_nominations_seconds
                if await_nominations and self.await_nominations_seconds > 0
                else None
            ),
        )
        # The spec but its reason (which carries the pod counts of the moment).
        asked = (pool_uid, dataclasses.replace(spec, reason=""))
        refused = self._refused.get(autoscaler)
        now = self.wall_clock.time()
        if refused is not None and refused.asked == asked and now < refused.until:
            raise RequestRefused(refused.error.cause, said=refused.error.said, sent=False)
        try:
            created = await self.client.create(
                SCALEREQUESTS, scalerequest_api.manifest(name, spec, pool_uid=pool_uid)
            )
        except errors.OperatorError as error:
            if error.transient:
                raise
            said = _refusal(error, name)
            refusal = RequestRefused(error, said=said, sent=True)
            self._refused[autoscaler] = _Refused(asked, now + REFUSAL_RECHECK_SECONDS, refusal)
            raise refusal from error
        self._refused.pop(autoscaler, None)
        self.ledger.record(pool, created)
        return autoscaler_api.LastScaleRequest(name=name, target_nodes=target, reason=spec.reason)
