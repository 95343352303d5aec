"""The NodePool controller's interruptions reconciler: reads the cloud's events
(``provider.EventSource``) and stores each notice for a VM of ours on its Node, before the
event is said handled.

One key (``POLL``) is reconciled over and over: a pass waits for the cloud's next events
(a long poll), acts on them and on those a failed write left over, and times the moves
under way (``moves``). For each event:

* a Node of ours (``membership.is_member``: the VM's pool label and an owner reference to
  that pool) gets the notice's marks (``notice.marks``:
  annotations, the NoSchedule taint, cordon) in one merge patch carrying the
  resourceVersion of the cache's copy (the taint list is replaced whole); a 409 leaves the
  event to the next pass, which reads the Node again from the cache.
  Only once the marks are stored is the event ``handled`` (its SQS message deleted): an
  event whose write failed is kept and tried again next pass, and comes again from SQS
  after its visibility timeout if the operator stops meanwhile. Acting twice is harmless:
  a Node already marked is not written again.
* a rebalance recommendation is marked likewise (kind ``rebalance``, no ``terminateAt``)
  where the Node's pool opts in (``spec.disruption.rebalanceRecommendation: Replace``):
  the pool's disruption then launches its replacement at once without draining it. Where
  the pool does not, it is logged and handled. A notice that comes later for a Node so
  marked replaces the mark (``notice.Notice.merged``) and is told as a first notice.
* an event for a VM without a Node of ours (another cluster's instance, a Node already
  gone or not registered yet), for a Node whose VM we are deleting already (EC2 tells of
  our own terminations too) or being deleted, or of a kind not known is logged and
  handled: nothing here will ever act on it. A Node already draining is marked: the
  notice's deadline concerns its drain.

Events ``SpotInterrupted`` (and the reasons of the other kinds) go on the Node and its
pool. What the NodePool controller does next it does in the pool's disruption
(``disruption.plan``: reason ``Interrupted``): the replacement launched at once, the
drain through the Eviction API at once with the notice's ``terminateAt`` as its
deadline, then the VM and the Node deleted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, Final

from nodepool_operator.api import disruption as disruption_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud import provider
from nodepool_operator.controllers import membership
from nodepool_operator.controllers.nodepool.interruptions import metrics, moves, notice
from nodepool_operator.controllers.resources import PODS_BY_NODE
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import errors, kinds, ratelimit
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.controller import Request, Result
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import Informer

__all__ = ["NAME", "POLL", "REASONS", "InterruptionReconciler"]

log = logging.getLogger(__name__)

NAME: Final = "interruptions"
#: The one key: the cloud's event stream.
POLL: Final = Request(name="cloud-events")
#: The event reason on the Node and the pool, by kind.
REASONS: Final[Mapping[str, str]] = {
    notice.SPOT_INTERRUPTION: "SpotInterrupted",
    notice.SCHEDULED_CHANGE: "ScheduledChange",
    notice.STATE_CHANGE: "InstanceStopping",
    notice.REBALANCE: "RebalanceRecommended",
}
#: A pass waits this long for the cloud's next event while nothing is being timed...
QUIET_WAIT: Final = 5.0
#: ...and this long while a noticed Node's pods are moving (the looks that time them).
MOVING_WAIT: Final = 1.0
#: After a pass whose writes failed (a 409: the cache catches up meanwhile), the next
#: try, doubling while they keep failing (a 403 until the RBAC is fixed) up to the cap.
RETRY_AFTER: Final = 0.5
RETRY_AFTER_MAX: Final = 10.0
#: Seconds before the stream is read again after the cloud refused the credential: the
#: runtime's recheck of a refused dependency (an admin fixes the token without an event).
UNAUTHORIZED_RECHECK: Final = 300.0
_MARKS: Final = "marks"


@dataclasses.dataclass(kw_only=True, eq=False)
class InterruptionReconciler:
    client: Client
    nodes: Informer
    pools: Informer
    pods: Informer
    source: provider.EventSource
    recorder: EventRecorder
    wall_clock: clock_module.WallClock
    quiet_wait: float = QUIET_WAIT
    #: Set when the operator stops: a long poll under way is cancelled then, so stopping
    #: (which waits for the reconciles in flight) does not wait out the poll.
    stopping: asyncio.Event | None = None
    # Events whose marks could not be stored yet (told again next pass, not handled).
    _left: list[provider.CloudEvent] = dataclasses.field(default_factory=list, init=False)
    _moving: dict[str, moves.Move] = dataclasses.field(default_factory=dict, init=False)
    _backoff: ratelimit.ItemExponentialFailureRateLimiter[str] = dataclasses.field(
        default_factory=lambda: ratelimit.ItemExponentialFailureRateLimiter[str](
            base_delay=RETRY_AFTER, max_delay=RETRY_AFTER_MAX
        ),
        init=False,
    )

    async def reconcile(self, request: Request) -> Result:
        if request != POLL:
            return Result()
        wait = 0.0 if self._left else MOVING_WAIT if self._moving else self.quiet_wait
        try:
            fresh = await self._poll(wait)
        except provider.CloudError as error:
            if error.code in provider.UNAUTHORIZED_CODES:
                # The startup check said it at ERROR, with the fix; a second ERROR line for
                # the same credential would only bury it. Looked at again as a refused
                # dependency would be.
                log.warning(
                    "event=cloud-events-unauthorized code=%s recheck-in=%.0fs error=%s",
                    error.code,
                    UNAUTHORIZED_RECHECK,
                    error,
                )
                return Result(requeue_after=UNAUTHORIZED_RECHECK)
            kind = errors.DependencyUnavailable if error.transient else errors.DependencyRefused
            raise kind(f"cloud events {error.code}: {error}") from error
        todo, self._left = [*self._left, *fresh], []
        for event in todo:
            if not await self._act(event):
                self._left.append(event)
                continue
            try:
                await self.source.handled(event)
            except provider.CloudError as error:
                # Stored already: the event comes again and finds the Node marked.
                log.warning("event=interruption-handled-failed vm=%s error=%s", event.name, error)
        self._time_moves()
        if self._left:
            return Result(requeue_after=self._backoff.when(_MARKS))
        self._backoff.forget(_MARKS)
        # Straight on to the next long poll; the wait is in the poll, not here.
        return Result(requeue_after=0.001)

    async def _poll(self, wait: float) -> list[provider.CloudEvent]:
        """The cloud's next events, or none when the operator stops meanwhile (the poll
        cancelled: what it would have told comes again to the next reader, simcloud's
        stream by position, an SQS message after its visibility timeout)."""
        if self.stopping is None:
            return await self.source.events(wait=wait)
        if self.stopping.is_set():
            return []
        poll = asyncio.ensure_future(self.source.events(wait=wait))
        stopped = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait({poll, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not poll.done():
                poll.cancel()
                await asyncio.gather(poll, return_exceptions=True)
                log.info("event=cloud-events-poll-cancelled why=stopping")
        return [] if poll.cancelled() else poll.result()

    async def _act(self, event: provider.CloudEvent) -> bool:
        """Store the event's notice on its Node; False when the write failed (try again)."""
        kind = notice.KIND_OF_EVENT.get(event.kind)
        if kind is None:
            log.warning("event=interruption-unknown-kind kind=%r vm=%s", event.kind, event.name)
            metrics.nodepool_interruption_messages_dropped_total.labels("unknown-kind").inc()
            return True
        node = self.nodes.get(event.name)
        pool = self.pools.get(event.pool)
        if (
            node is None
            or pool is None
            or not membership.is_member(
                node, pool_name=event.pool, pool_uid=pool["metadata"].get("uid")
            )
        ):
            # Another cluster's instance, a VM whose Node is gone or not there yet, or a
            # Node of that name the pool does not own (never changed: not ours).
            log.info(
                "event=interruption-no-node vm=%s pool=%s kind=%s", event.name, event.pool, kind
            )
            metrics.nodepool_interruption_messages_dropped_total.labels("no-node").inc()
            return True
        if _leaving(node):
            # Its VM is being deleted by us (the state change EC2 tells of our own
            # TerminateInstances), or the Node is: nothing left to replace ahead.
            log.debug("event=interruption-node-leaving node=%s kind=%s", event.name, kind)
            metrics.nodepool_interruption_messages_dropped_total.labels("node-leaving").inc()
            return True
        if kind == notice.REBALANCE and not _replaces_on_rebalance(pool):
            log.info("event=rebalance-recommended node=%s action=none", event.name)
            metrics.nodepool_interruption_messages_dropped_total.labels("rebalance-not-acted").inc()
            return True
        now = self.wall_clock.time()
        wanted = notice.Notice(
            kind=kind, noticed_at=event.at if event.at > 0 else now, terminate_at=event.terminate_at
        )
        try:
            first = await self._mark(node, wanted)
        except errors.Conflict:
            # Written by another since the cache's copy: the next pass reads it again.
            log.debug("event=interruption-mark-conflict node=%s", event.name)
            return False
        except errors.NotFound:
            log.info("event=interruption-node-gone node=%s kind=%s", event.name, kind)
            return True
        except errors.ApiError as error:
            log.warning("event=interruption-mark-failed node=%s error=%r", event.name, error)
            return False
        if first:
            await self._tell(node, pool, wanted)
        return True

    async def _mark(self, node: Object, wanted: notice.Notice) -> bool:
        """Store ``wanted`` on ``node`` (the cache's copy: the patch carries its
        resourceVersion, so a Node written since is a 409, never overwritten); True when
        the Node had no notice of that kind before (none, or a rebalance recommendation
        a notice now follows)."""
        found = notice.read(node)
        stored = wanted if found is None else found.merged(wanted)
        if notice.is_marked(node, stored):
            return False
        await self.client.patch(
            kinds.NODES, str(node["metadata"]["name"]), notice.marks(node, stored)
        )
        return found is None or found.kind != stored.kind

    async def _tell(self, node: Object, pool: Object, wanted: notice.Notice) -> None:
        name = str(node["metadata"]["name"])
        labels = node["metadata"].get("labels") or {}
        zone = str(labels.get(wellknown.ZONE_LABEL, ""))
        instance_type = str(labels.get(wellknown.INSTANCE_TYPE_LABEL, ""))
        metrics.nodepool_interruptions_total.labels(wanted.kind, zone, instance_type).inc()
        left = (
            "no time given"
            if wanted.terminate_at is None
            else f"{max(0.0, wanted.terminate_at - self.wall_clock.time()):.0f}s left"
        )
        what = (
            "its replacement is launched now; it is drained once a notice comes"
            if wanted.kind == notice.REBALANCE
            else "its replacement is launched and it is drained now"
        )
        message = (
            f"node {name} ({instance_type or 'no instance type'} in {zone or 'no zone'}): the"
            f" cloud gave notice ({wanted.kind}, {left}); tainted {notice.INTERRUPTED_TAINT_KEY}"
            f" and cordoned, {what}"
        )
        log.warning(
            "event=node-interrupted node=%s kind=%s zone=%s instance_type=%s terminate_at=%s",
            name,
            wanted.kind,
            zone,
            instance_type,
            wanted.terminate_at,
        )
        reason = REASONS[wanted.kind]
        await self.recorder.event(_node_ref(node), type="Warning", reason=reason, message=message)
        await self.recorder.event(pool, type="Warning", reason=reason, message=message)
        if wanted.kind == notice.REBALANCE:
            return  # its pods stay until a notice: nothing moves yet, nothing to time
        move = moves.start(
            node=name,
            kind=wanted.kind,
            noticed_at=wanted.noticed_at,
            on_node=self.pods.by_index(PODS_BY_NODE, name),
            every_pod=self.pods.items(),
        )
        if move is not None:
            self._moving[name] = move

    def _time_moves(self) -> None:
        if not self._moving:
            return
        every_pod = self.pods.items()
        now = self.wall_clock.time()
        for name, move in list(self._moving.items()):
            if not moves.finished(move, every_pod):
                continue
            del self._moving[name]
            took = max(0.0, now - move.noticed_at)
            metrics.nodepool_interruption_pods_moved_seconds.labels(move.kind).observe(took)
            log.info("event=interrupted-pods-moved node=%s seconds=%.1f", name, took)


def _replaces_on_rebalance(pool: Mapping[str, Any]) -> bool:
    """The pool opts in to act on a rebalance recommendation. Read from the object as
    stored (the CRD defaults and validates the field); any other value is the default,
    Ignore: nothing is replaced on a guess."""
    disruption = ((pool.get("spec") or {}).get("disruption")) or {}
    return bool(disruption.get("rebalanceRecommendation") == disruption_api.REBALANCE_REPLACE)


def _leaving(node: Mapping[str, Any]) -> bool:
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    return bool(meta.get("deletionTimestamp")) or wellknown.VM_DELETED_ANNOTATION in annotations


def _node_ref(node: Mapping[str, Any]) -> Object:
    return {"apiVersion": "v1", "kind": "Node", "metadata": dict(node.get("metadata") or {})}
