"""Kubernetes Events, aggregated and rate-limited like client-go's event correlator.

Events explain decisions to people (``kubectl describe``); they are not a log. So:

* a Normal event narrates a decision, and its latest message and count tell the story:
  one Event object per involved object and reason (client-go's aggregation key), a later
  occurrence folding into it, raising ``count`` and ``lastTimestamp`` and showing the
  latest message, prefixed as client-go prefixes combined events when the messages
  differ;
* a Warning names a problem to act on (this pod blocks the drain, that name is taken), so
  one with a new message is a new Event, as in client-go, until an object has had
  ``AGGREGATE_MAX`` of one reason within ``AGGREGATE_SECONDS``; after that they fold into
  one combined Event. A repeat of the same message always folds;
* the fold reaches the API server at most once per ``SERIES_FLUSH_SECONDS`` per Event, as
  ``events.k8s.io`` series do: the first occurrence is created at once and the first
  repeat patched at once; a later repeat soon after the last write waits for the window to
  end and goes out as one patch with everything seen meanwhile. The window is measured
  from the Event's ``lastTimestamp`` as last written (a fact in the API; the memory here
  only caches it, and after a restart an existing Event is read back and folded into);
* each object has a token bucket (burst 25, one more every 5 minutes, client-go's spam
  filter defaults): an object that keeps failing cannot flood the API server;
* writing an event is best effort: a failure is logged and never fails a reconcile.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from dataclasses import dataclass
from typing import Literal

from nodepool_operator import pacing
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import conditions, errors, kinds, metrics
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.lru import Bounded

__all__ = ["EVENTS", "EventRecorder", "EventType"]

log = logging.getLogger(__name__)

EVENTS = kinds.EVENTS
EventType = Literal["Normal", "Warning"]

CACHE_SIZE = 4096
SPAM_BURST = 25
SPAM_REFILL_SECONDS = 300.0
#: A repeat of an Event is written at most this often (and at the end of the wait).
SERIES_FLUSH_SECONDS = 60.0
#: client-go's aggregation: this many Warnings of one object and reason with different
#: messages within this window, then one combined Event for the rest.
AGGREGATE_MAX = 10
AGGREGATE_SECONDS = 600.0
#: client-go's prefix for an Event that stands for occurrences with different messages.
COMBINED_PREFIX = "(combined from similar events): "
#: Events of cluster-scoped objects live in this namespace, as kubectl expects.
CLUSTER_SCOPED_NAMESPACE = "default"

# involved object uid, type, reason, and for Warnings the message or COMBINED_PREFIX
_Key = tuple[str, str, str, str]
_Similar = tuple[str, str, str]  # involved object uid, type, reason


@dataclass
class _Series:
    """One Event in the API and the occurrences of it not written yet."""

    involved: Object
    name: str
    namespace: str
    written_count: int
    written_at: float  # clock.now() of the last write: the cached lastTimestamp
    first_message: str
    count: int
    message: str
    last_timestamp: str

    @property
    def pending(self) -> bool:
        return self.count > self.written_count

    def shown_message(self) -> str:
        if self.message == self.first_message and self.first_message:
            return self.message
        return COMBINED_PREFIX + self.message


class EventRecorder:
    def __init__(
        self,
        client: Client,
        *,
        component: str,
        instance: str = "",
        clock: clock_module.Clock | None = None,
        wall_clock: clock_module.WallClock | None = None,
    ) -> None:
        self.client = client
        self.component = component
        self.instance = instance or component
        self.clock = clock or clock_module.RealClock()
        self.wall_clock = wall_clock or clock_module.RealWallClock()
        # Both bounded, least recently used first out (client-go keeps 4096 as well): one
        # entry per object and per distinct event would otherwise grow for ever.
        self._buckets: Bounded[str, pacing.TokenBucket] = Bounded(CACHE_SIZE)
        self._seen: Bounded[_Key, _Series] = Bounded(CACHE_SIZE)
        self._flushes: dict[_Key, asyncio.Task[None]] = {}
        # Per object, type and reason: the Warning messages seen, and when each was last.
        self._similar: Bounded[_Similar, dict[str, float]] = Bounded(CACHE_SIZE)
        self.dropped = 0

    async def event(self, obj: Object, *, type: EventType, reason: str, message: str) -> None:
        meta = obj.get("metadata", {})
        uid = str(meta.get("uid", meta.get("name", "")))
        if not self._take_token(uid):
            self.dropped += 1
            log.debug("event=dropped reason=%s object=%s (rate limited)", reason, meta.get("name"))
            return
        try:
            await self._record(obj, key=self._key(uid, type, reason, message), message=message)
        except errors.ApiError as error:
            log.warning(
                "event=not-recorded reason=%s object=%s error=%r", reason, meta.get("name"), error
            )
        else:
            metrics.nodepool_events_total.labels(
                component=self.component, type=type, reason=reason
            ).inc()

    async def flush(self) -> None:
        """Write every fold still waiting for its window now (call before the process
        ends, or the counts of the last window's repeats are not written)."""
        waiting = list(self._flushes.items())
        self._flushes.clear()
        for key, task in waiting:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            series = self._seen.get(key)
            if series is not None and series.pending:
                try:
                    await self._fold(key, series)
                except errors.ApiError as error:
                    log.warning("event=not-recorded reason=%s error=%r", key[2], error)

    def _key(self, uid: str, type: EventType, reason: str, message: str) -> _Key:
        """The Event an occurrence belongs to: by reason for Normal events; for Warnings by
        message too, unless the object had ``AGGREGATE_MAX`` other messages of the reason
        within ``AGGREGATE_SECONDS`` (then the combined one)."""
        if type == "Normal":
            return (uid, type, reason, "")
        now = self.clock.now()
        seen = {
            said: at
            for said, at in (self._similar.get((uid, type, reason)) or {}).items()
            if now - at < AGGREGATE_SECONDS
        }
        combined = message not in seen and len(seen) >= AGGREGATE_MAX
        if not combined:
            seen[message] = now
        self._similar[(uid, type, reason)] = seen
        return (uid, type, reason, COMBINED_PREFIX if combined else message)

    def _take_token(self, uid: str) -> bool:
        bucket = self._buckets.get(uid)
        if bucket is None:
            bucket = pacing.TokenBucket(
                now=self.clock.now, rate=1 / SPAM_REFILL_SECONDS, burst=SPAM_BURST
            )
        self._buckets[uid] = bucket
        return bucket.allow()

    async def _record(self, obj: Object, *, key: _Key, message: str) -> None:
        now = self._timestamp()
        series = self._seen.get(key)
        if series is None:
            await self._create(obj, key=key, message=message, now=now)
            return
        series.involved = obj
        series.count += 1
        series.message = message
        series.last_timestamp = now
        wait = series.written_at + SERIES_FLUSH_SECONDS - self.clock.now()
        # The first repeat goes out at once, as events.k8s.io does when an Event becomes a
        # series: the reader sees that it recurs and the latest message without delay.
        if wait <= 0 or series.written_count == 1:
            await self._fold(key, series)
        elif key not in self._flushes:
            self._flushes[key] = asyncio.create_task(self._fold_later(key, wait))

    async def _fold_later(self, key: _Key, wait: float) -> None:
        await self.clock.sleep(wait)
        self._flushes.pop(key, None)
        series = self._seen.get(key)
        if series is None or not series.pending:
            return
        try:
            await self._fold(key, series)
        except errors.ApiError as error:
            log.warning("event=not-recorded reason=%s error=%r", key[2], error)

    async def _fold(self, key: _Key, series: _Series) -> None:
        try:
            await self._write_fold(key, series)
        except errors.NotFound:
            # Expired (events have a TTL): the latest occurrence starts a new Event.
            await self._create(
                series.involved, key=key, message=series.message, now=series.last_timestamp
            )

    async def _write_fold(self, key: _Key, series: _Series) -> None:
        # Occurrences that arrive while the patch is in flight stay pending.
        count = series.count
        patch = {
            "count": count,
            "lastTimestamp": series.last_timestamp,
            "message": series.shown_message(),
        }
        try:
            await self.client.patch(EVENTS, series.name, patch, namespace=series.namespace)
        except errors.NotFound:
            self._seen.pop(key)
            raise
        series.written_count = count
        series.written_at = self.clock.now()

    async def _create(self, obj: Object, *, key: _Key, message: str, now: str) -> None:
        first = "" if key[3] == COMBINED_PREFIX else message  # "": shown as combined
        shown = message if first else COMBINED_PREFIX + message
        body = self._event(obj, key=key, message=shown, now=now)
        name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
        count = 1
        try:
            await self.client.create(EVENTS, body, namespace=namespace)
        except errors.AlreadyExists:
            # Written by an earlier run of this process, or by a concurrent first
            # occurrence: fold into it, as it stands in the API.
            existing = await self.client.get(EVENTS, name, namespace=namespace)
            count = int(existing.get("count", 1)) + 1
            if first:
                first = str(existing.get("message", message))
            shown = message if message == first else COMBINED_PREFIX + message
            patch = {"count": count, "lastTimestamp": now, "message": shown}
            await self.client.patch(EVENTS, name, patch, namespace=namespace)
        self._seen[key] = _Series(
            involved=obj,
            name=name,
            namespace=namespace,
            written_count=count,
            written_at=self.clock.now(),
            first_message=first,
            count=count,
            message=message,
            last_timestamp=now,
        )

    def _event(self, obj: Object, *, key: _Key, message: str, now: str) -> Object:
        """A new core/v1 Event about ``obj``, named after it and a digest of ``key``."""
        meta = obj.get("metadata", {})
        _, type, reason, _ = key
        digest = hashlib.sha1("/".join(key).encode(), usedforsecurity=False).hexdigest()[:10]
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta.get('name', 'object')}.{digest}",
                "namespace": meta.get("namespace") or CLUSTER_SCOPED_NAMESPACE,
            },
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": type,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
        }

    def _timestamp(self) -> str:
        return conditions.rfc3339(self.wall_clock.time())
