"""Draining one Node: cordon, evict, wait until its pods are gone; only then may it go.

A drain is a sequence of passes, each safe to repeat and each writing only what moves it
on. A pass:

* cordons the Node and stamps the start of the drain on it (``plan.SCALE_DOWN_ANNOTATION``
  holds the moment, so a restarted operator keeps counting the drain timeout from there);
* asks the Eviction API to evict every pod still there (DaemonSet and mirror pods stay:
  they go with the Node), so PodDisruptionBudgets are honoured;
* leaves alone the pods annotated ``do-not-disrupt`` (or ``safe-to-evict: "false"``):
  they block the drain, visibly, until the pool's drain timeout;
* waits for pods being deleted until their own grace period is over (kubelet, or kwok,
  removes them then); one still there a minute past its deletion deadline is stuck
  (its node cannot finish it) and no longer waited for, as Karpenter does;
* reports the drain done only when nothing is left to wait for.

A 429 (a budget that allows no disruption now) backs the pod off exponentially (the
runtime's per-key limiter, capped), and is told once per pod and budget: a Warning
event on the pool and a line in its ``Scaling`` condition, not one per retry.

Nothing is forced unless the pool sets ``drainTimeoutSeconds`` or the Node carries the
cloud's notice with a ``terminateAt`` (``wellknown.interruption_terminate_at``): the
deadline is the sooner of the two, and the event that tells of the forced end names the
notice when it is the deadline. With it, as Karpenter's
``terminationGracePeriod``: a pod whose own grace period would end past the deadline is
deleted (not evicted) with its grace period capped to what is left (never below 0), so
it has as long as the deadline allows; once the deadline has passed the pods left are
deleted with no grace and the Node goes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodepool_operator import timestamps
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.nodepool import evictions, plan
from nodepool_operator.controllers.nodepool import nodes as node_ops
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.controllers.resources import PODS_BY_NODE
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import conditions, errors, pods, ratelimit
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import Informer

__all__ = [
    "DrainProgress",
    "Drainer",
    "drain_deadline",
    "is_do_not_disrupt",
    "node_is_protected",
]

log = logging.getLogger(__name__)


def is_do_not_disrupt(obj: Mapping[str, Any]) -> bool:
    """A pod (or Node) its owner asked us not to disrupt: ours, or cluster-autoscaler's."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return (
        annotations.get(wellknown.DO_NOT_DISRUPT_ANNOTATION) == "true"
        or annotations.get(wellknown.SAFE_TO_EVICT_ANNOTATION) == "false"
    )


def node_is_protected(node: Mapping[str, Any], node_pods: Sequence[Mapping[str, Any]]) -> bool:
    """The Node, or a pod a drain would have to move off it, is do-not-disrupt."""
    return is_do_not_disrupt(node) or any(is_do_not_disrupt(p) for p in node_pods)


def drain_deadline(
    node: Mapping[str, Any], *, started: float, timeout_seconds: int | None
) -> tuple[float | None, str | None]:
    """When the drain of ``node`` stops waiting: ``drainTimeoutSeconds`` after its start,
    or the cloud's ``terminateAt`` if the Node carries a notice that ends sooner (past it
    there is nothing left to wait on). With the kind of notice when that is the deadline
    (None: the timeout, or no deadline at all)."""
    timeout = None if timeout_seconds is None else started + timeout_seconds
    terminate_at = wellknown.interruption_terminate_at(node)
    if terminate_at is not None and (timeout is None or terminate_at < timeout):
        return terminate_at, wellknown.interruption_kind(node)
    return timeout, None


@dataclass(frozen=True)
class DrainProgress:
    """Where one Node's drain stands after a pass."""

    done: bool  # nothing left to wait for: the VM, then the Node, may go
    retry_in: float | None = None  # when another pass can make progress (None: on events)
    blocked: tuple[str, ...] = ()  # why it cannot go on, one line per pod, stable


@dataclass(frozen=True)
class _Block:
    pool: str
    node: str
    message: str


class Drainer:
    """Drains Nodes pass by pass; remembers per pod only what the API cannot tell it again
    cheaply (its eviction backoff, and what has been said about it already)."""

    def __init__(
        self,
        *,
        client: Client,
        pods: Informer,
        recorder: EventRecorder,
        config: NodePoolConfig,
        wall_clock: clock_module.WallClock,
    ) -> None:
        self.client = client
        self.pods = pods
        self.recorder = recorder
        self.config = config
        self.wall_clock = wall_clock
        # The runtime's one per-key exponential backoff, keyed by pod uid.
        self._backoff = ratelimit.ItemExponentialFailureRateLimiter[str](
            base_delay=config.eviction_backoff, max_delay=config.eviction_backoff_max
        )
        self._retry_at: dict[str, float] = {}
        self._blocks: dict[str, _Block] = {}  # pod uid -> why it blocks its Node's drain
        self._told: set[tuple[str, str]] = set()  # (pod uid, budget or reason) evented
        self._forced: dict[str, str] = {}  # Node whose deadline was announced -> its pool

    def pods_to_move(self, node_name: str) -> list[Object]:
        """Pods a drain must see gone: not DaemonSet or mirror pods, not finished."""
        return [
            pod
            for pod in self.pods.by_index(PODS_BY_NODE, node_name)
            if not pods.is_daemon_or_mirror(pod) and not pods.is_terminal(pod)
        ]

    async def drain(
        self, pool: Object, node: Mapping[str, Any], *, timeout_seconds: int | None
    ) -> DrainProgress:
        """One pass of the drain of ``node``; see the module docstring."""
        name = str(node["metadata"]["name"])
        now = self.wall_clock.time()
        started = plan.drain_started(node)
        if started is None:
            # Not cordoned yet, or marked without a time: now is the start, written on
            # the Node, where a restart finds it.
            try:
                await node_ops.cordon(self.client, node, started=now)
            except errors.NotFound:
                return DrainProgress(done=True)  # removed already; the cache lags
            started = now
        deadline, noticed = drain_deadline(node, started=started, timeout_seconds=timeout_seconds)
        remaining = self.pods_to_move(name)
        if deadline is not None and now >= deadline:
            await self._force(pool, name, remaining, deadline=deadline, now=now, noticed=noticed)
            return DrainProgress(done=True)
        waits: list[float] = []
        waiting = False
        for pod in remaining:
            wait = await self._step(pool, name, pod, now=now, deadline=deadline)
            if wait is not None:
                waiting = True
                if wait != math.inf:
                    waits.append(wait)
        if deadline is not None and waiting:
            waits.append(max(deadline - now, 0.0))
        if not waiting:
            self.forget_node(name)
            return DrainProgress(done=True)
        blocked = tuple(sorted(b.message for b in self._blocks.values() if b.node == name))
        return DrainProgress(done=False, retry_in=min(waits) if waits else None, blocked=blocked)

    async def _step(
        self, pool: Object, node: str, pod: Object, *, now: float, deadline: float | None
    ) -> float | None:
        """Move one pod on; seconds until it is worth looking again (inf: only on an event),
        or None when it no longer holds the drain up."""
        meta = pod["metadata"]
        uid = str(meta.get("uid") or evictions.pod_key(pod))
        leaving = timestamps.parse_rfc3339(str(meta.get("deletionTimestamp") or ""))
        if leaving is not None:
            self._clear(uid)
            # Waited for until its grace period is over, never cut short; past that and a
            # slack it is stuck on a node that cannot finish it.
            stuck_at = leaving + self.config.stuck_terminating_seconds
            if now >= stuck_at:
                return None
            return min(self.config.poll_interval, stuck_at - now)
        if deadline is not None and now + evictions.grace_seconds(pod) >= deadline:
            # Karpenter's terminationGracePeriod: deleted now, it still ends by the deadline.
            await evictions.delete_pod(self.client, pod, grace=max(0, math.floor(deadline - now)))
            return self.config.poll_interval
        if is_do_not_disrupt(pod):
            reason = "do-not-disrupt"
            message = (
                f"node {node}: pod {evictions.pod_key(pod)} is annotated do-not-disrupt; "
                "it is not evicted until the drain timeout"
            )
            await self._block(pool, uid=uid, node=node, reason=reason, message=message)
            return math.inf
        retry_at = self._retry_at.get(uid)
        if retry_at is not None and retry_at > now:
            return retry_at - now
        return await self._evict(pool, node, pod, uid=uid, now=now)

    async def _evict(self, pool: Object, node: str, pod: Object, *, uid: str, now: float) -> float:
        try:
            await node_ops.evict_one(self.client, pod)
        except errors.NotFound:
            self._clear(uid)
            return self.config.poll_interval
        except errors.Forbidden as error:
            if not error.namespace_terminating:
                raise
            # Its namespace is being deleted, and the pod with it: waited for as leaving.
            self._clear(uid)
            log.info(
                "event=pod-namespace-terminating node=%s pod=%s",
                node,
                evictions.pod_key(pod),
            )
            return self.config.poll_interval
        except errors.TooManyRequests as error:
            budget = evictions.budget_named_in(error)
            delay = max(self._backoff.when(uid), error.retry_after or 0.0)
            self._retry_at[uid] = now + delay
            named = f"PodDisruptionBudget {pod['metadata'].get('namespace')}/{budget}"
            message = (
                f"node {node}: eviction of pod {evictions.pod_key(pod)} refused by "
                f"{named if budget else 'the API server (429)'}"
            )
            await self._block(pool, uid=uid, node=node, reason=budget or "429", message=message)
            log.info(
                "event=eviction-blocked node=%s pod=%s budget=%s retry_in=%.1f",
                node,
                evictions.pod_key(pod),
                budget,
                delay,
            )
            return delay
        self._clear(uid)
        log.info("event=pod-evicted node=%s pod=%s", node, evictions.pod_key(pod))
        # Its deletion shows in the cache soon; from then on it is waited for as leaving.
        return self.config.poll_interval

    async def _block(self, pool: Object, *, uid: str, node: str, reason: str, message: str) -> None:
        self._blocks[uid] = _Block(pool=str(pool["metadata"]["name"]), node=node, message=message)
        if (uid, reason) in self._told:
            return
        self._told.add((uid, reason))
        await self.recorder.event(pool, type="Warning", reason="DrainBlocked", message=message)

    def _clear(self, uid: str) -> None:
        self._backoff.forget(uid)
        self._retry_at.pop(uid, None)
        self._blocks.pop(uid, None)
        self._told = {told for told in self._told if told[0] != uid}

    async def _force(
        self,
        pool: Object,
        node: str,
        remaining: list[Object],
        *,
        deadline: float,
        now: float,
        noticed: str | None,
    ) -> None:
        if node not in self._forced:
            self._forced[node] = str(pool["metadata"]["name"])
            why = (
                "drain timeout expired"
                if noticed is None
                else f"the cloud's notice ({noticed}) takes its VM back at "
                f"{conditions.rfc3339(deadline)}"
            )
            await self.recorder.event(
                pool,
                type="Warning",
                reason="DrainTimeout",
                message=(
                    f"node {node}: {why}; deleting {len(remaining)} pods "
                    "still on it and removing the node"
                ),
            )
        for pod in remaining:
            current = pod["metadata"].get("deletionGracePeriodSeconds")
            if current is None or int(current) > 0:
                await evictions.delete_pod(
                    self.client, pod, grace=max(0, math.floor(deadline - now))
                )
        self.forget_node(node)

    def forget_node(self, node: str) -> None:
        """Drop what is remembered of a drain that is over (done, cancelled, Node gone)."""
        for uid in [uid for uid, block in self._blocks.items() if block.node == node]:
            self._clear(uid)
        self._forced.pop(node, None)

    def forget_pool(self, pool: str) -> None:
        """Drop what is remembered of the drains of a pool that is gone."""
        for uid in [uid for uid, block in self._blocks.items() if block.pool == pool]:
            self._clear(uid)
        self._forced = {node: owner for node, owner in self._forced.items() if owner != pool}
