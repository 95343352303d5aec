"""The Autoscaler's own ScaleRequests as a batch reads them: their names (who asked, in
which direction, in time order) and the ledger of the last one created per pool.

Our informer sees a request we created a moment after the create returns. A scan in that
moment must not ask again, so the ledger remembers the last request created per pool
until the cache has caught up with it: it shows up there, or the cache has moved past
its resourceVersion without it (it was already answered and deleted). The hand-over
(``act.handoff``) records each create; the pool reads (``pool_reads``) read the ledger.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from nodepool_operator.runtime import versions
from nodepool_operator.runtime.client import Object

__all__ = ["RequestLedger", "asks_for_more", "request_name", "requester_of"]

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
