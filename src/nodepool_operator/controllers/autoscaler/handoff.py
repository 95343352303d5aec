"""The hand-off: a decision becomes one ScaleRequest, the only thing the Autoscaler writes
besides its own status and events (and, for consolidation, its stamps and taints on the
Nodes it will name: ``consolidation``).

The request carries an absolute target, a reason and the requester, and is owned by its
NodePool (garbage-collected with it). The NodePool controller turns it into
``spec.targetNodes``; the Autoscaler never writes a NodePool.

Our informer sees a request we created a moment after the create returns. A scan in that
moment must not ask again, so the ledger remembers the last request created per pool
until the cache has caught up with it: it shows up there, or the cache has moved past
its resourceVersion without it (it was already answered and deleted).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.controllers.resources import SCALEREQUESTS
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import errors, versions
from nodepool_operator.runtime.client import Client, Object

__all__ = [
    "REFUSAL_RECHECK_SECONDS",
    "RequestLedger",
    "RequestRefused",
    "ScaleRequester",
    "asks_for_more",
    "request_name",
    "requester_of",
]

#: How long the same request, refused for good, is not sent again (unless what it asks
#: for changes): a CRD or RBAC fixed meanwhile is found within this.
REFUSAL_RECHECK_SECONDS: Final = 300.0

# Leaves room for "-down-" and a base-36 millisecond stamp within the 253 characters of a
# DNS subdomain name.
_MAX_PREFIX: Final = 200
_DIGITS: Final = "0123456789abcdefghijklmnopqrstuvwxyz"


def _base36(value: int) -> str:
    text = ""
    while True:
        value, digit = divmod(value, 36)
        text = _DIGITS[digit] + text
        if value == 0:
            return text


def request_name(autoscaler: str, *, direction: str, millis: int) -> str:
    """``<autoscaler>-<time>-<up|down>``: readable, unique per autoscaler, and in time order.

    The NodePool controller takes the newest Pending request by creationTimestamp (whole
    seconds), then resourceVersion, then name (``versions.creation_order``); the time in
    milliseconds, in base 36 (eight digits until 2059), comes before the direction so that
    where the name decides, it decides the right way.
    """
    prefix = re.sub(r"[.-]+$", "", autoscaler[:_MAX_PREFIX])
    return f"{prefix}-{_base36(millis)}-{direction}"


def asks_for_more(name: str) -> bool:
    """A request named by ``request_name`` asked for more nodes (its direction is the
    name's last part; our own names only: another writer's request says nothing here)."""
    return name.endswith("-up")


def requester_of(autoscaler: str) -> str:
    return f"autoscaler/{autoscaler}"


def _version(obj: Object) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion", ""))


def _caught_up(cache_version: str, created_version: str) -> bool:
    # Unknown order: keep showing our request until the cache shows it by name.
    order = versions.compare(cache_version, created_version)
    return order is not None and order >= 0


class RequestLedger:
    """The last ScaleRequest created per pool, until the cache shows it or has moved past it."""

    def __init__(self) -> None:
        self._created: dict[str, Object] = {}
        #: Moves with every request recorded, so a plan made before it is made again.
        self.serial = 0

    def record(self, pool: str, created: Object) -> None:
        self._created[pool] = created
        self.serial += 1

    def visible(self, pool: str, cached: Sequence[Object], *, cache_version: str) -> list[Object]:
        """``cached`` plus the request we created that the cache does not show yet."""
        created = self._created.get(pool)
        if created is None:
            return list(cached)
        name = created["metadata"]["name"]
        seen = any(r["metadata"]["name"] == name for r in cached)
        if seen or _caught_up(cache_version, _version(created)):
            del self._created[pool]
            return list(cached)
        return [*cached, created]


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
    ) -> None:
        self.client = client
        self.ledger = ledger
        self.wall_clock = wall_clock
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
    ) -> autoscaler_api.LastScaleRequest:
        """Ask for ``target`` nodes, computed from the pool's ``spec.targetNodes`` ``basis``;
        a scale-down may name the nodes to remove, a scale-up the zones of its new nodes."""
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
