"""Kubernetes Events, folded and rate-limited like client-go's event correlator.

Events explain decisions to people (``kubectl describe``); they are not a log. So:

* a repeat of the same event (same object, type, reason and message) updates the count
  and ``lastTimestamp`` of the existing Event instead of creating another;
* each object has a token bucket (burst 25, one more every 5 minutes, client-go's spam
  filter defaults): an object that keeps failing cannot flood the API server;
* writing an event is best effort: a failure is logged and never fails a reconcile.
"""

from __future__ import annotations

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
#: Events of cluster-scoped objects live in this namespace, as kubectl expects.
CLUSTER_SCOPED_NAMESPACE = "default"


@dataclass
class _Seen:
    name: str
    namespace: str
    count: int


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
        self._seen: Bounded[tuple[str, str, str, str], _Seen] = Bounded(CACHE_SIZE)
        self.dropped = 0

    async def event(self, obj: Object, *, type: EventType, reason: str, message: str) -> None:
        meta = obj.get("metadata", {})
        uid = str(meta.get("uid", meta.get("name", "")))
        if not self._take_token(uid):
            self.dropped += 1
            log.debug("event=dropped reason=%s object=%s (rate limited)", reason, meta.get("name"))
            return
        try:
            await self._write(obj, uid=uid, type=type, reason=reason, message=message)
        except errors.ApiError as error:
            log.warning(
                "event=not-recorded reason=%s object=%s error=%r", reason, meta.get("name"), error
            )
        else:
            metrics.nodepool_events_total.labels(
                component=self.component, type=type, reason=reason
            ).inc()

    def _take_token(self, uid: str) -> bool:
        bucket = self._buckets.get(uid)
        if bucket is None:
            bucket = pacing.TokenBucket(
                now=self.clock.now, rate=1 / SPAM_REFILL_SECONDS, burst=SPAM_BURST
            )
        self._buckets[uid] = bucket
        return bucket.allow()

    async def _write(
        self, obj: Object, *, uid: str, type: EventType, reason: str, message: str
    ) -> None:
        now = self._timestamp()
        key = (uid, type, reason, message)
        if await self._count_again(key, now=now):
            return
        body = self._event(obj, key=key, type=type, reason=reason, message=message, now=now)
        name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
        try:
            await self.client.create(EVENTS, body, namespace=namespace)
            self._seen[key] = _Seen(name=name, namespace=namespace, count=1)
        except errors.AlreadyExists:
            # Written by an earlier run of this process: fold into it.
            existing = await self.client.get(EVENTS, name, namespace=namespace)
            count = int(existing.get("count", 1)) + 1
            await self.client.patch(
                EVENTS, name, {"count": count, "lastTimestamp": now}, namespace=namespace
            )
            self._seen[key] = _Seen(name=name, namespace=namespace, count=count)

    async def _count_again(self, key: tuple[str, str, str, str], *, now: str) -> bool:
        """Fold a repeat into the Event we wrote for ``key``; False if there is none (any
        more: events expire)."""
        seen = self._seen.get(key)
        if seen is None:
            return False
        patch = {"count": seen.count + 1, "lastTimestamp": now}
        try:
            await self.client.patch(EVENTS, seen.name, patch, namespace=seen.namespace)
        except errors.NotFound:
            self._seen.pop(key)  # expired (events have a TTL): create a new one
            return False
        seen.count += 1
        return True

    def _event(
        self,
        obj: Object,
        *,
        key: tuple[str, str, str, str],
        type: EventType,
        reason: str,
        message: str,
        now: str,
    ) -> Object:
        """A new core/v1 Event about ``obj``, named after it and a digest of ``key``."""
        meta = obj.get("metadata", {})
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
