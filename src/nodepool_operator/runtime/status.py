"""The status writer: the only way a controller writes ``/status``.

Three rules keep status writes from feeding reconcile loops:

1. compare first: the desired status is compared structurally with the stored one and
   nothing is sent when they are equal (so an idle controller makes zero writes);
2. write only ``/status``, as a JSON merge patch without a resourceVersion: each status
   has exactly one writer (docs/field-ownership.md), so there is no other writer to lose
   an update to, and concurrent label or spec edits by others cannot make it fail with 409;
3. remember what was just written: until the informer delivers our own write, the cache
   still holds the old status, and a second reconcile in that window must not send the
   same status again.

It also tells when it last wrote each object's status (``written_at``), so that a caller
can hold back writes that only report progress. The fact is the API server's record: the
``time`` of its client's field manager's ``status`` entry in ``metadata.managedFields``
(``recorded_status_write``; the object's cache must keep it, ``informer.keep_write_times``),
which outlives the process, so a restarted operator or a new leader holds what the one
before it would have. The writer's memory of its last write stands in for the record
until the cache shows that write, and for the fraction of a second the record rounds
away: the later of the two counts.

``observedGeneration`` is set by the caller from the object it reconciled; conditions are
built with :func:`nodepool_operator.runtime.conditions.set_condition`, which keeps
``lastTransitionTime`` unless the condition's status changed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodepool_operator import timestamps
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import metrics, versions
from nodepool_operator.runtime.client import Client, Object, Resource
from nodepool_operator.runtime.informer import object_key

__all__ = ["StatusWriter", "merge_patch", "prune_none", "recorded_status_write"]

log = logging.getLogger(__name__)


def prune_none(value: Any) -> Any:
    """Drop None-valued keys recursively: the server never stores them."""
    if isinstance(value, Mapping):
        return {k: prune_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [prune_none(v) for v in value]
    return value


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The RFC 7386 merge patch that turns ``old`` into ``new`` (lists are replaced whole)."""
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            nested = merge_patch(before, value)
            if nested:
                patch[key] = nested
        elif before != value:
            patch[key] = value
    return patch


def recorded_status_write(obj: Object, *, manager: str) -> float | None:
    """When ``manager`` last wrote the object's status, as the API server records it: the
    ``time`` of its ``managedFields`` entry for the ``status`` subresource, to the second.
    The server moves it on each write that adds a field or changes a value (the status
    writer sends none that changes nothing); a write that only removes fields leaves it,
    so a hold counted from it after a restart may end sooner, at the cost of at most one
    more write. Another manager's entry, or our entry for the object's main resource, is
    not ours to count from. None if ``manager`` never wrote the status (or the cache
    dropped ``managedFields``)."""
    entries = (obj.get("metadata") or {}).get("managedFields") or ()
    moments = [
        timestamps.parse_rfc3339(entry.get("time"))
        for entry in entries
        if entry.get("manager") == manager and entry.get("subresource") == "status"
    ]
    return max((moment for moment in moments if moment is not None), default=None)


@dataclass(frozen=True)
class _Written:
    version_after: str
    status: Any
    at: float  # wall clock seconds

    def newer_than(self, cached_version: str) -> bool:
        """Is the cached copy older than our write?

        resourceVersions are opaque in general; on etcd-backed servers they are increasing
        integers, which is the only case where "older" can be told. Otherwise only an equal
        version proves the cache caught up, and anything else is treated as stale.
        """
        order = versions.compare(cached_version, self.version_after)
        return order is None or order < 0


class StatusWriter:
    """Writes the status of one resource on behalf of one controller."""

    def __init__(
        self,
        client: Client,
        resource: Resource,
        *,
        controller: str,
        wall_clock: clock_module.WallClock | None = None,
    ) -> None:
        self.client = client
        #: The manager the API server records our writes under (``written_at`` reads it).
        self.field_manager = client.field_manager
        self.resource = resource
        self.controller = controller
        self.wall_clock = wall_clock or clock_module.RealWallClock()
        self._written: dict[str, _Written] = {}
        self.writes = 0
        self.skipped = 0

    async def update(self, obj: Object, status: Mapping[str, Any]) -> Object | None:
        """Make the stored status equal ``status``; return the new object, or None if unchanged."""
        desired = prune_none(status)
        current = prune_none(obj.get("status") or {})
        key = object_key(obj)
        version = str(obj["metadata"].get("resourceVersion", ""))
        remembered = self._written.get(key)
        if remembered is not None and remembered.newer_than(version):
            # The cache has not caught up with our last write yet: compare with what we wrote.
            current = remembered.status
        if desired == current:
            self.skipped += 1
            return None
        patch = {"status": merge_patch(current, desired)}
        meta = obj["metadata"]
        updated = await self.client.patch(
            self.resource,
            meta["name"],
            patch,
            namespace=meta.get("namespace"),
            subresource="status",
        )
        self.writes += 1
        metrics.nodepool_status_writes_total.labels(
            controller=self.controller, resource=self.resource.plural
        ).inc()
        after = str(updated.get("metadata", {}).get("resourceVersion", ""))
        self._written[key] = _Written(
            version_after=after, status=desired, at=self.wall_clock.time()
        )
        log.debug("event=status-written patch=%s", patch)
        return updated

    def current(self, obj: Object) -> dict[str, Any]:
        """The object's status as it really is: what we last wrote when the cached copy is
        older than that write, else the cached one. Build the next status from this, not
        from ``obj["status"]``, or a lagging cache brings back what we already replaced."""
        remembered = self._written.get(object_key(obj))
        version = str(obj["metadata"].get("resourceVersion", ""))
        if remembered is not None and remembered.newer_than(version):
            return dict(remembered.status)
        return dict(prune_none(obj.get("status") or {}))

    def written_at(self, obj: Object) -> float | None:
        """When (wall clock) the object's status was last written by our field manager:
        the later of the API server's record in ``obj`` (``recorded_status_write``) and
        this writer's memory of its last write. The record survives a restart; the memory
        covers the moment before the cache shows the write, and the fraction of a second
        the record rounds away. None if neither knows of a write."""
        recorded = recorded_status_write(obj, manager=self.field_manager)
        remembered = self._written.get(object_key(obj))
        moments = [recorded, None if remembered is None else remembered.at]
        return max((moment for moment in moments if moment is not None), default=None)

    def forget(self, obj: Object) -> None:
        """Drop the memory of an object that is gone."""
        self._written.pop(object_key(obj), None)
