"""Nominations' act step: each planned pod's ``status.nominatedNodeName``, then the mark
that releases its Node (``decide.nominations`` chooses both; ``api.nominations`` has the
contract with the NodePool controller).

A nomination is written at the pod's resourceVersion (and uid): a pod that changed
meanwhile is read again and nominated only if it is the same pod, still unbound and
without a nomination (one kube-scheduler wrote for preemption is never overwritten). The
Nodes are marked after every nomination of their pool is written, so kube-scheduler sees
them all before the Nodes take pods. A write that fails is logged and left: the Node is
released anyway, by the mark or by its wait running out, and the pod is scheduled as it
would have been without a nomination.

Before the mark, the nominations are confirmed. kube-scheduler clears a pod's nomination
whenever it tries the pod and fails, and it tries the pending pods again on each event
that may make room: a Node turning Ready reports its allocatable, and kube-scheduler
retries them at once. Those retries still fail, for the Nodes are still tainted, and
when they end just after a nomination is written they clear it. (A fresh-clone CI run had
all four of a burst's nominations cleared 23 to 48 ms after they were written, when a
real kubelet's Ready came 15 ms before them: the pods were then bound first come, and a
third Node was bought.) So, ``CONFIRM_SECONDS`` after writing, the Nominator reads each pod
from the informer's cache and writes again each nomination cleared meanwhile, at most
``CONFIRM_ROUNDS`` times (a pod the cache has not heard of since the write is looked at
again in the next round); only then are the Nodes marked. kube-scheduler does not retry a
pod for a change of its nomination alone (no plugin's queueing hint takes a plain pod
update), so writing it again starts no try of its own; another event may still, hence
the rounds. The cost is the pause: a release that writes nominations waits 0.3 s at
least, up to about 1 s, and holds the planner's pass meanwhile.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler import metrics
from nodepool_operator.controllers.autoscaler.constraints import pending_pods
from nodepool_operator.controllers.autoscaler.decide.nominations import Nomination, NominationPlan
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import conditions, errors, kinds, retry
from nodepool_operator.runtime.client import Client, Object, read_by_listing

__all__ = ["CONFIRM_ROUNDS", "CONFIRM_SECONDS", "Nominator"]

log = logging.getLogger(__name__)

#: How long after writing nominations they are read again (from the cache), before the
#: Nodes are marked: kube-scheduler's retries of the pods, started by an event just before
#: the writes, end within tens of milliseconds.
CONFIRM_SECONDS: Final = 0.3
#: Reads (and writes again of the nominations cleared) before the Nodes are marked anyway.
CONFIRM_ROUNDS: Final = 3

#: ``(namespace, name)`` -> the pod as the informer's cache holds it now (None: gone).
CachedPod = Callable[[str, str], Object | None]


@dataclass(frozen=True)
class _NominationWritten:
    """A nomination written, with every resourceVersion of its pod read or written on the
    way (the plan's, each read again after a 409, the write's): a cached pod at one of
    them without a nomination has not been heard of since the write, not cleared."""

    nomination: Nomination
    versions: frozenset[str]


class Nominator:
    """Writes a ``NominationPlan``: pods first, then the Nodes' marks."""

    def __init__(
        self,
        *,
        client: Client,
        cached_pod: CachedPod,
        clock: clock_module.Clock,
        wall_clock: clock_module.WallClock,
        parallelism: int,
    ) -> None:
        self.client = client
        self.cached_pod = cached_pod
        self.clock = clock
        self.wall_clock = wall_clock
        self.parallelism = max(1, parallelism)
        self._waiting: dict[str, str] = {}  # pool -> why its Nodes wait, as last logged

    async def write(self, plan: NominationPlan) -> None:
        for pool, why in plan.waiting.items():
            if self._waiting.get(pool) != why:
                log.info("event=nominations-waiting pool=%s why=%r", pool, why)
        self._waiting = dict(plan.waiting)
        if not plan.release:
            return
        written = await self._write_all(plan.pods, again=False)
        for _ in range(CONFIRM_ROUNDS):
            if not written:
                break
            await self.clock.sleep(CONFIRM_SECONDS)
            cleared, unseen = self._cleared(written)
            if cleared:
                log.info(
                    "event=nominations-cleared pods=%s",
                    ",".join(f"{n.namespace}/{n.name}" for n in cleared),
                )
                for nomination in cleared:
                    del written[nomination.name, nomination.namespace]
                written.update(await self._write_all(cleared, again=True))
            elif not unseen:
                break
        stamp = conditions.rfc3339(self.wall_clock.time())
        for pool, names in sorted(plan.release.items()):
            # Every Node's mark is tried, whatever another's answer: one refused must not
            # leave the rest of the pool (or the next pools) waiting out their time.
            marked = await asyncio.gather(
                *(self._release(name, stamp) for name in names), return_exceptions=True
            )
            failed = [(n, m) for n, m in zip(names, marked, strict=True) if m is not None]
            for name, error in failed:
                log.warning("event=nominated-mark-failed node=%s error=%r", name, error)
            log.info(
                "event=nodes-nominated pool=%s nodes=%s pods=%d",
                pool,
                ",".join(names),
                sum(1 for n in plan.pods if n.node in names),
            )

    async def _write_all(
        self, pods: Sequence[Nomination], *, again: bool
    ) -> dict[tuple[str, str], _NominationWritten]:
        """Write ``pods``' nominations, ``parallelism`` at a time (``again``: each one
        kube-scheduler cleared); those written, by (name, namespace)."""
        limit = asyncio.Semaphore(self.parallelism)

        async def bounded(nomination: Nomination) -> _NominationWritten | None:
            async with limit:
                return await self._nominate(nomination, again=again)

        outcomes = await asyncio.gather(*(bounded(n) for n in pods), return_exceptions=True)
        written: dict[tuple[str, str], _NominationWritten] = {}
        for nomination, outcome in zip(pods, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                log.warning(
                    "event=nomination-failed pod=%s/%s node=%s error=%r",
                    nomination.namespace,
                    nomination.name,
                    nomination.node,
                    outcome,
                )
            elif outcome is not None:
                written[nomination.name, nomination.namespace] = outcome
        return written

    def _cleared(
        self, written: dict[tuple[str, str], _NominationWritten]
    ) -> tuple[list[Nomination], int]:
        """The nominations written whose pod, as cached now, is the same pod, unbound, and
        has lost its nomination since (kube-scheduler tried it and failed), each at the
        pod's resourceVersion now; and how many pods the cache still holds at a version
        read before the write (not heard of since: they are looked at again next round)."""
        cleared = []
        unseen = 0
        for record in written.values():
            nomination = record.nomination
            pod = self.cached_pod(nomination.namespace, nomination.name)
            if pod is None or not _waits_unnominated(pod, nomination.uid):
                continue
            now_at = str(pod["metadata"].get("resourceVersion") or "")
            if now_at in record.versions:
                unseen += 1  # the cache has not heard of the write yet
                continue
            cleared.append(dataclasses.replace(nomination, resource_version=now_at))
        return cleared, unseen

    async def _nominate(self, nomination: Nomination, *, again: bool) -> _NominationWritten | None:
        """Set the pod's nomination; what was written, or None if the pod no longer waits
        for one."""
        version = nomination.resource_version
        versions = {version}

        async def attempt() -> _NominationWritten | None:
            nonlocal version
            body = {
                "metadata": {"uid": nomination.uid, "resourceVersion": version},
                "status": {"nominatedNodeName": nomination.node},
            }
            try:
                written = await self.client.patch(
                    kinds.PODS,
                    nomination.name,
                    body,
                    namespace=nomination.namespace,
                    subresource="status",
                )
            except errors.Conflict:
                pod = await read_by_listing(
                    self.client, kinds.PODS, nomination.name, namespace=nomination.namespace
                )
                if pod is None or not _waits_unnominated(pod, nomination.uid):
                    return None  # gone, another pod now, bound, or nominated by the scheduler
                version = str(pod["metadata"]["resourceVersion"])
                versions.add(version)
                raise
            versions.add(str(written["metadata"].get("resourceVersion") or ""))
            return _NominationWritten(nomination, frozenset(versions))

        try:
            made = await retry.retry_on_conflict(attempt)
        except errors.NotFound:
            made = None
        result = "skipped" if made is None else "rewritten" if again else "written"
        metrics.nodepool_autoscaler_nominations_total.labels(result).inc()
        return made

    async def _release(self, node: str, stamp: str) -> None:
        """Mark ``node`` nominated: the NodePool controller may lift its unregistered
        taint. Only our annotation is written (a merge patch of one key)."""
        patch = {"metadata": {"annotations": {wellknown.NOMINATED_ANNOTATION: stamp}}}
        try:
            await self.client.patch(kinds.NODES, node, patch)
        except errors.NotFound:
            log.info("event=nominated-node-gone node=%s", node)


def _waits_unnominated(pod: Object, uid: str) -> bool:
    """Whether ``pod`` is the pod of ``uid``, still unbound and without a nomination."""
    return (
        pod["metadata"].get("uid") == uid
        and not (pod.get("spec") or {}).get("nodeName")
        and pending_pods.nominated_node(pod) is None
    )
