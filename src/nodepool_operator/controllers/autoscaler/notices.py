"""Events that explain the Autoscaler's decisions to people, once per fact, never per scan.

* a pod that can never fit a node of the pool gets one Warning ``NotTriggerScaleUp``
  saying why; it gets another only if the reason changes (the pool's template changed);
* a pod that new nodes were requested for gets one Normal ``TriggeredScaleUp``;
* the Autoscaler gets an event per request it makes and per limit it starts hitting.

What was already said is remembered per Autoscaler for the pods still pending, so the
memory shrinks as pods get scheduled or go away. Events are best effort (the recorder
logs and swallows failures) and are written with bounded concurrency, so a burst of a
thousand pods costs a thousand small writes in parallel batches, not a stalled reconcile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from nodepool_operator.api import autoscaler as nas
from nodepool_operator.controllers.autoscaler import plan
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.events import EventRecorder, EventType

__all__ = ["NOT_TRIGGER_SCALE_UP", "TRIGGERED_SCALE_UP", "Notices"]

# cluster-autoscaler's reasons, so that people and tools that know them read these too.
NOT_TRIGGER_SCALE_UP = "NotTriggerScaleUp"
TRIGGERED_SCALE_UP = "TriggeredScaleUp"


def _uid(pod: Object) -> str:
    return str(pod["metadata"].get("uid", ""))


class Notices:
    """Events on pods and Autoscalers, with the memory that keeps them from repeating."""

    def __init__(self, recorder: EventRecorder, *, parallelism: int) -> None:
        self.recorder = recorder
        self.parallelism = max(1, parallelism)
        self._warned: dict[str, dict[str, str]] = {}  # autoscaler -> pod uid -> reason
        self._triggered: dict[str, set[str]] = {}  # autoscaler -> pod uids

    async def unfit(self, key: str, *, pool: str, pods: Sequence[tuple[Object, str]]) -> int:
        """Warn each pod that can never fit, once per reason; returns how many were new."""
        before = self._warned.get(key, {})
        now = {_uid(pod): reason for pod, reason in pods}
        self._warned[key] = now
        new = [(pod, reason) for pod, reason in pods if before.get(_uid(pod)) != reason]
        await self._each(
            (
                pod,
                "Warning",
                NOT_TRIGGER_SCALE_UP,
                f"pod can never fit on a node of pool {pool}: {reason}",
            )
            for pod, reason in new
        )
        return len(new)

    async def triggered(self, key: str, pods: Sequence[Object], *, message: str) -> None:
        """Tell each pod, once, that new nodes were requested for it."""
        told = self._triggered.setdefault(key, set())
        new = [pod for pod in pods if _uid(pod) not in told]
        told.update(_uid(pod) for pod in new)
        await self._each((pod, "Normal", TRIGGERED_SCALE_UP, message) for pod in new)

    async def requested(
        self,
        autoscaler: Object,
        decision: plan.Decision,
        *,
        pool: str,
        made: nas.LastScaleRequest,
        pods: Sequence[Object],
    ) -> None:
        """One event on the Autoscaler per request, and TriggeredScaleUp on its pods."""
        key = str(autoscaler["metadata"]["name"])
        up = decision.action == "scale-up"
        change = f"NodePool {pool}: {decision.current} -> {decision.target} nodes"
        await self.recorder.event(
            autoscaler,
            type="Normal",
            reason="ScaleUpRequested" if up else "ScaleDownRequested",
            message=f"{made.name} for {change}: {decision.reason}",
        )
        if up:
            message = f"pod triggered scale-up of {change} ({made.name})"
            await self.triggered(key, pods, message=message)

    def keep_only(self, key: str, pending: Iterable[Object]) -> None:
        """Forget what was said to pods that are no longer unschedulable."""
        told = self._triggered.get(key)
        if told:
            self._triggered[key] = told & {_uid(pod) for pod in pending}

    def forget(self, key: str) -> None:
        self._warned.pop(key, None)
        self._triggered.pop(key, None)

    async def _each(self, events: Iterable[tuple[Object, EventType, str, str]]) -> None:
        limit = asyncio.Semaphore(self.parallelism)

        async def one(pod: Object, type_: EventType, reason: str, message: str) -> None:
            async with limit:
                await self.recorder.event(pod, type=type_, reason=reason, message=message)

        await asyncio.gather(*(one(*event) for event in events))
