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
"""

from __future__ import annotations

import asyncio
import logging

from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler import metrics
from nodepool_operator.controllers.autoscaler.constraints import pending_pods
from nodepool_operator.controllers.autoscaler.decide.nominations import Nomination, NominationPlan
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import conditions, errors, kinds, retry
from nodepool_operator.runtime.client import Client, read_by_listing

__all__ = ["Nominator"]

log = logging.getLogger(__name__)


class Nominator:
    """Writes a ``NominationPlan``: pods first, then the Nodes' marks."""

    def __init__(
        self, *, client: Client, wall_clock: clock_module.WallClock, parallelism: int
    ) -> None:
        self.client = client
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
        limit = asyncio.Semaphore(self.parallelism)

        async def bounded(nomination: Nomination) -> bool:
            async with limit:
                return await self._nominate(nomination)

        written = await asyncio.gather(*(bounded(n) for n in plan.pods), return_exceptions=True)
        for nomination, outcome in zip(plan.pods, written, strict=True):
            if isinstance(outcome, BaseException):
                log.warning(
                    "event=nomination-failed pod=%s/%s node=%s error=%r",
                    nomination.namespace,
                    nomination.name,
                    nomination.node,
                    outcome,
                )
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

    async def _nominate(self, nomination: Nomination) -> bool:
        """Set the pod's nomination; False if it no longer waits for one."""
        version = nomination.resource_version

        async def attempt() -> bool:
            nonlocal version
            body = {
                "metadata": {"uid": nomination.uid, "resourceVersion": version},
                "status": {"nominatedNodeName": nomination.node},
            }
            try:
                await self.client.patch(
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
                if (
                    pod is None
                    or pod["metadata"].get("uid") != nomination.uid
                    or (pod.get("spec") or {}).get("nodeName")
                    or pending_pods.nominated_node(pod)
                ):
                    return False  # gone, another pod now, bound, or nominated by the scheduler
                version = str(pod["metadata"]["resourceVersion"])
                raise
            return True

        try:
            done = await retry.retry_on_conflict(attempt)
        except errors.NotFound:
            done = False
        metrics.nodepool_autoscaler_nominations_total.labels("written" if done else "skipped").inc()
        return done

    async def _release(self, node: str, stamp: str) -> None:
        """Mark ``node`` nominated: the NodePool controller may lift its unregistered
        taint. Only our annotation is written (a merge patch of one key)."""
        patch = {"metadata": {"annotations": {wellknown.NOMINATED_ANNOTATION: stamp}}}
        try:
            await self.client.patch(kinds.NODES, node, patch)
        except errors.NotFound:
            log.info("event=nominated-node-gone node=%s", node)
