"""Answering a pool's ScaleRequests: the one place the NodePool controller does it.

The rule (which request wins, the basis check, the bounds, each request's phase) is
``scalerequest_api.answer_requests``, the one the Autoscaler predicts with. This module
reads the requests, writes the pool's ``spec.targetNodes`` and the requests' status, and
deletes finished requests once they are older than the retention period.

The spec write is an update with the resourceVersion precondition: first on the cached
pool (the write's success proves the copy current, so the decision reaches the cloud in
the same pass, without a GET and without waiting for our own write to come back), then,
on 409 or when the cached copy calls for no write, on a fresh read, recomputed from it
(basis check included) and changing only ``targetNodes``, so a concurrent edit of
anything else is never lost.

A scale-down request may name the Nodes to remove (``spec.removeNodes``, consolidation):
each is read from the server (a LIST by name) before the request is answered, and a
request naming a Node that is gone, being deleted, not the pool's (``membership``: a Node
labelled with the pool but not owned by it is not), no longer tainted for consolidation
(its requester called it off), or draining since before the request was made (removed
for another reason already: lowering the target for it again would take another Node in
its place) is Rejected with the Node named, changing nothing. Before the target of a
request that names Nodes is lowered, the Nodes it removes get their drain mark
(``nodes.cordon``: unschedulable, and when their drain started), on the condition that
each is still as read when checked (its resourceVersion; on 409 it is read and checked
again, so a removal called off meanwhile is Rejected, not drained). The mark is the
record: a draining Node is a scale-down's first victim (``plan.pick_victims``) and is
never switched for another, so the Nodes removed are exactly the ones named, after a
restart too, and nothing else goes in their place. If the target write then finds the
request Superseded, the marked Nodes are given back as any drain no longer needed is
(``termination``). A request that lowers the target by fewer Nodes than it names
(clamped to minNodes) marks the first ones it names.

A request we answered may still show Pending in the cache for a moment: deciding it again
from that stale copy would answer it twice, and maybe differently. So the uids answered
are remembered until the cache shows them answered (or gone). An answer this process
does not know of can only come from a write whose outcome it did not see: its own, when
the write failed without a clear answer (a timeout, a dropped connection: the write may
have been applied), or a previous run's, lost with that process. So a request is read
from the server before it is answered only then: when this process's answer to it failed
so, and on the first pass over a pool's requests after the process started. The
requests answered in between cost no read: the cache copy is the one to act on.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nodepool_operator import timestamps
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.controllers.nodepool import nodes as node_ops
from nodepool_operator.controllers.nodepool import plan
from nodepool_operator.controllers.nodepool.request_facts import (
    expired_requests,
    facts_of,
    is_pending,
    node_refusal,
    pending_requests,
    zones_served,
)
from nodepool_operator.controllers.resources import NODEPOOLS, REQUESTS_BY_POOL, SCALEREQUESTS
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import errors, retry
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import Informer
from nodepool_operator.runtime.status import StatusWriter

__all__ = ["RequestAnswers"]

log = logging.getLogger(__name__)

#: The longest answer a request's status keeps (the CRD allows 32768 characters).
_MAX_MESSAGE = 30000


class RequestAnswers:
    """Turns pending ScaleRequests into a pool's target and cleans finished ones up."""

    def __init__(
        self,
        *,
        client: Client,
        scale_requests: Informer,
        retention: float,
        controller: str,
        recorder: EventRecorder,
        wall_clock: clock_module.WallClock,
    ) -> None:
        self.client = client
        self.scale_requests = scale_requests
        self.retention = retention
        self.recorder = recorder
        self.wall_clock = wall_clock
        self.status = StatusWriter(client, SCALEREQUESTS, controller=controller)
        self._answered: dict[str, set[str]] = {}  # pool -> uids answered, maybe still Pending
        # pool -> the Nodes we marked for removal, as the patch left them (``take_marked``)
        self._marked: dict[str, list[Object]] = {}
        # pool -> uids whose answer write failed with an unknown outcome, maybe still Pending
        self._in_doubt: dict[str, set[str]] = {}
        # Pools whose pending requests were read from the server since the process started.
        self._read_since_start: set[str] = set()

    def of_pool(self, name: str) -> list[Object]:
        return self.scale_requests.by_index(REQUESTS_BY_POOL, name)

    async def answer(self, pool: Object, pool_requests: list[Object]) -> Object | None:
        """Answer the pool's pending requests; the pool to act on in this pass (as written
        when its target moved), or None when it turned out to be gone."""
        name = pool["metadata"]["name"]
        pending = await self._still_pending(name, self._unanswered(name, pool_requests))
        pending = await self._refuse_foreign_nodes(pool, pending)
        pending = await self._mark_named_nodes(pool, pending)
        if not pending:
            return pool
        written = await self._write_target(pool, pending)
        if written is None:
            await self._answer(
                name,
                pending,
                scalerequest_api.reject_requests([facts_of(r) for r in pending], pool_name=name),
            )
            log.info("event=pool-gone requests-rejected=%d", len(pending))
            return None
        current, outcome = written
        await self._answer(name, pending, outcome.answers)
        decisive = outcome.decisive
        if decisive is not None:
            log.info(
                "event=scale-request-%s request=%s message=%r",
                decisive.phase.lower(),
                decisive.name,
                decisive.message,
            )
        return current

    async def answer_orphans(self, name: str) -> tuple[bool, float | None]:
        """Reject the pending requests for ``name``, a pool the cache does not have.

        Owned requests go with their pool (garbage collection); this answers the ones
        made by hand for a pool that never existed, or whose pool was deleted. Returns
        whether the pool exists after all (the cache lags behind it: its event is coming)
        and the seconds until the next finished request expires.
        """
        orphans = self.of_pool(name)
        pending = self._unanswered(name, orphans)
        if pending:
            if await self._read_pool(name) is not None:
                return True, None
            answers = scalerequest_api.reject_requests(
                [facts_of(r) for r in pending], pool_name=name
            )
            await self._answer(name, pending, answers)
            log.info(
                "event=scale-request-rejected requests=%s message=%r",
                ",".join(r["metadata"]["name"] for r in pending),
                scalerequest_api.missing_pool(name),
            )
        next_expiry = await self.delete_expired(orphans)
        if not self._answered.get(name):
            self._answered.pop(name, None)
        if not self._in_doubt.get(name):
            self._in_doubt.pop(name, None)
        return False, next_expiry

    async def delete_expired(
        self,
        pool_requests: list[Object],
        *,
        registration_timeout: float = 0.0,
        nominations_settled: bool = False,
    ) -> float | None:
        """Delete finished requests past retention; seconds until the next one expires.
        A request naming zones is kept ``registration_timeout`` longer, and so is one whose
        Nodes wait for nominations unless ``nominations_settled`` (``expired_requests``)."""
        now = datetime.datetime.fromtimestamp(self.wall_clock.time(), datetime.UTC)
        expired, next_expiry = expired_requests(
            pool_requests,
            now=now,
            retention=self.retention,
            zoned_retention=self.retention + registration_timeout,
            nominations_settled=nominations_settled,
        )
        for request in expired:
            # NotFound: already gone; Conflict: the uid precondition failed, a new object.
            with contextlib.suppress(errors.NotFound, errors.Conflict):
                await self.client.delete(
                    SCALEREQUESTS, request["metadata"]["name"], uid=request["metadata"].get("uid")
                )
        return next_expiry

    async def mark_zones_served(
        self, pool_requests: list[Object], nodes: Iterable[Mapping[str, Any]]
    ) -> None:
        """Mark ``status.zonesServed`` on each Applied request whose zones the pool's
        ``nodes`` now hold (``request_facts.zones_served``): its claims steer no later
        launch, even when one of those Nodes goes while the request is still kept."""
        for request in zones_served(pool_requests, nodes):
            status = {**(request.get("status") or {}), "zonesServed": True}
            with contextlib.suppress(errors.NotFound):  # deleted meanwhile: nothing to mark
                await self.status.update(request, status)
            log.info("event=request-zones-served request=%s", request["metadata"]["name"])

    async def note_launches(self, pool_requests: list[Object], view: plan.PoolView) -> None:
        """A pool with requirements: add to each request's answer what this pass launched
        for it (offerings, fallbacks, a limit), and mark those whose every named node was
        placed (``zonesServed``: their offerings steer no later launch, a fallback's
        included)."""
        served = set(view.offerings_served)
        for request in pool_requests:
            name = str(request["metadata"]["name"])
            lines = view.launch_notes.get(name, ())
            if not lines and name not in served:
                continue
            status = dict(self.status.current(request))
            if lines:
                message = "; ".join([str(status.get("message") or ""), *lines]).lstrip("; ")
                status["message"] = message[:_MAX_MESSAGE]
            # The answer as written (this very pass, maybe): the cache may not show it yet.
            if name in served and status.get("phase") == "Applied":
                status["zonesServed"] = True
            with contextlib.suppress(errors.NotFound):  # deleted meanwhile: nobody to tell
                await self.status.update(request, status)
            log.info("event=request-launch-noted request=%s lines=%r", name, lines)

    async def _write_target(
        self, pool: Object, pending: list[Object]
    ) -> tuple[Object, scalerequest_api.Outcome] | None:
        """Set the target ``pending`` call for; the pool as it stands after, and the
        outcome it was decided on (None if the pool is gone)."""
        facts = [facts_of(r) for r in pending]
        outcome = scalerequest_api.answer_requests(facts, pool=nodepool_api.spec_of(pool))
        if outcome.target_nodes != pool["spec"].get("targetNodes"):
            # The precondition proves the cached copy current: no GET before the write.
            try:
                return await self._replace_target(pool, outcome.target_nodes), outcome
            except errors.NotFound:
                return None
            except errors.Conflict:
                pass
        name = pool["metadata"]["name"]

        async def on_fresh_read() -> tuple[Object, scalerequest_api.Outcome] | None:
            fresh = await self._read_pool(name)
            if fresh is None:
                return None
            decided = scalerequest_api.answer_requests(facts, pool=nodepool_api.spec_of(fresh))
            if decided.target_nodes != fresh["spec"].get("targetNodes"):
                fresh = await self._replace_target(fresh, decided.target_nodes)
            return fresh, decided

        return await retry.retry_on_conflict(on_fresh_read)

    async def _replace_target(self, pool: Object, target: int) -> Object:
        body = copy.deepcopy(pool)
        body["spec"]["targetNodes"] = target
        return await self.client.replace(NODEPOOLS, body)  # 409 if ``pool`` is stale

    async def _refuse_foreign_nodes(self, pool: Object, pending: list[Object]) -> list[Object]:
        """Reject the requests naming a Node the pool may not remove; the others."""
        kept: list[Object] = []
        for request in pending:
            refusal = None
            for node_name in scalerequest_api.spec_of(request).remove_nodes:
                node = await node_ops.node_named(self.client, node_name)
                refusal = self._refusal(pool, request, node_name, node)
                if refusal is not None:
                    break
            if refusal is None:
                kept.append(request)
            else:
                await self._reject(pool, request, refusal)
        return kept

    async def _mark_named_nodes(self, pool: Object, pending: list[Object]) -> list[Object]:
        """Mark for their drain the Nodes the request that decides names (as many as it
        lowers the target by), each only while it is still as checked; a request one of
        them is refused for now is Rejected and the others are decided without it."""
        outcome = scalerequest_api.answer_requests(
            [facts_of(r) for r in pending], pool=nodepool_api.spec_of(pool)
        )
        decisive = outcome.decisive
        if decisive is None or decisive.phase != "Applied":
            return pending
        [request] = [r for r in pending if r["metadata"]["name"] == decisive.name]
        removed = nodepool_api.spec_of(pool).target_nodes - outcome.target_nodes
        named = scalerequest_api.spec_of(request).remove_nodes
        for node_name in named[: max(removed, 0)]:
            refusal = await self._mark(pool, request, node_name)
            if refusal is not None:
                await self._reject(pool, request, refusal)
                rest = [r for r in pending if r is not request]
                return await self._mark_named_nodes(pool, rest)
        return pending

    async def _mark(self, pool: Object, request: Object, node_name: str) -> str | None:
        """Cordon ``node_name`` and stamp its drain start, if it may still be removed and
        has not changed since it was read (409: read and checked again); why not if not."""
        name = str(pool["metadata"]["name"])

        async def attempt() -> str | None:
            node = await node_ops.node_named(self.client, node_name)
            refusal = self._refusal(pool, request, node_name, node)
            if refusal is not None or node is None:
                return refusal
            if not plan.is_draining(node):
                node = await node_ops.cordon(
                    self.client, node, started=self.wall_clock.time(), as_read=True
                )
                log.info("event=node-marked-for-removal node=%s", node_name)
            self._marked.setdefault(name, []).append(node)
            return None

        try:
            return await retry.retry_on_conflict(attempt)
        except errors.NotFound:  # deleted between the read and the patch
            return f"node {node_name} named in removeNodes is gone; not applied"

    def take_marked(self, pool: str) -> list[Object]:
        """The Nodes marked for removal since the last call, as our patches left them:
        the cache may not show the marks yet when the pool acts on them."""
        return self._marked.pop(pool, [])

    @staticmethod
    def _refusal(pool: Object, request: Object, node_name: str, node: Object | None) -> str | None:
        meta = pool["metadata"]
        return node_refusal(
            str(meta["name"]),
            node_name,
            node,
            pool_uid=meta.get("uid"),
            requested_at=timestamps.parse_rfc3339(request["metadata"].get("creationTimestamp")),
        )

    async def _reject(self, pool: Object, request: Object, refusal: str) -> None:
        name = str(pool["metadata"]["name"])
        answer = scalerequest_api.Answer(
            name=str(request["metadata"]["name"]),
            phase="Rejected",
            applied_target_nodes=nodepool_api.spec_of(pool).target_nodes,
            message=refusal,
        )
        await self._answer(name, [request], [answer])
        log.info("event=scale-request-rejected request=%s message=%r", answer.name, refusal)

    async def _read_pool(self, name: str) -> Object | None:
        """Asked of the server, not the cache: a pool created (or deleted) a moment ago
        may not show there yet."""
        try:
            return await self.client.get(NODEPOOLS, name)
        except errors.NotFound:
            return None

    async def _still_pending(self, pool: str, pending: list[Object]) -> list[Object]:
        """Those of ``pending`` still Pending, read from the server where an answer this
        process does not know of may have been written: our own whose reply was lost (a
        timeout), or a previous run's. Answering such a request again could answer it
        differently (the pool's target may have moved since)."""
        first_pass = pool not in self._read_since_start
        doubted = self._in_doubt.get(pool, set())
        fresh = []
        for request in pending:
            if not first_pass and request["metadata"]["uid"] not in doubted:
                fresh.append(request)
                continue
            try:
                found = await self.client.get(SCALEREQUESTS, request["metadata"]["name"])
            except errors.NotFound:
                continue
            if is_pending(found) and found["metadata"].get("uid") == request["metadata"]["uid"]:
                fresh.append(found)
        self._read_since_start.add(pool)
        return fresh

    async def _answer(
        self, pool: str, pending: list[Object], answers: Sequence[scalerequest_api.Answer]
    ) -> None:
        """Write each answer to its request's status, oldest first, and remember it as
        answered once written (not before: an answer whose write failed is given again);
        a Warning on each Rejected one, so ``kubectl describe`` and event pipelines show
        why a scale did not happen."""
        by_name = {r["metadata"]["name"]: r for r in pending}
        for answer in answers:
            request = by_name[answer.name]
            generation = int(request["metadata"].get("generation", 0))
            status = answer.status(observed_generation=generation).to_dict()
            try:
                # Deleted meanwhile: nobody is left to read the answer.
                with contextlib.suppress(errors.NotFound):
                    await self.status.update(request, status)
            except BaseException:
                # The write may have been applied all the same (a timeout, a cancel): the
                # next pass reads the request from the server before answering it.
                self._in_doubt.setdefault(pool, set()).add(request["metadata"]["uid"])
                raise
            self._remember(pool, [request])
            if answer.phase == "Rejected":
                await self.recorder.event(
                    request, type="Warning", reason="ScaleRequestRejected", message=answer.message
                )

    def _remember(self, pool: str, answered: list[Object]) -> None:
        self._answered.setdefault(pool, set()).update(r["metadata"]["uid"] for r in answered)

    def _unanswered(self, pool: str, every: list[Object]) -> list[Object]:
        """The pending requests (oldest first) not answered already; the memory keeps
        only the uids the cache still shows Pending."""
        still_pending = {r["metadata"]["uid"] for r in every if is_pending(r)}
        answered = self._answered.get(pool, set()) & still_pending
        self._answered[pool] = answered
        if pool in self._in_doubt:
            self._in_doubt[pool] &= still_pending
        return [r for r in pending_requests(every) if r["metadata"]["uid"] not in answered]
