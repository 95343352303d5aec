"""Events that explain the Autoscaler's decisions to people, once per fact, never per scan.

* a pod that no node of any pool planned for it can host gets one Warning
  ``NotTriggerScaleUp`` naming the constraint; another only if the reason changes;
* a pod that new nodes were requested for gets one Normal ``TriggeredScaleUp``, up to a
  number per request (``triggered_events_per_request``): a burst of a thousand pods is
  told through a few of them and the request's event, not a thousand writes;
* a pod sent to a pool because the pool ranked before it cannot grow (at maxNodes, or
  every zone backed off) is told so in its ``TriggeredScaleUp``, every such pod (not only
  the first few): it is where it did not expect to be;
* a pod only nodes beyond its pool's maxNodes could host gets ``NotTriggerScaleUp``
  naming the limit, as a pod no pool can host does;
* the Autoscaler gets an event per request it makes (its reason says how many pods wait)
  and per limit it starts hitting;
* a dry-run Autoscaler makes no request: it and its pods get ``WouldScaleUp`` (or
  ``WouldScaleDown``) and ``WouldTriggerScaleUp`` instead, once per would-be target;
* a request the API server refuses for good (422 Invalid, 403 Forbidden...) gets one
  Warning ``ScaleRequestRefused`` on the Autoscaler per refusal message: asking again
  cannot help until something changes, so saying it again would only cost writes.

What was already said to a pod is remembered once for the whole process, not per
Autoscaler (the plan is shared, so two Autoscalers watching one namespace must not say
it twice), in a bounded memory that forgets the pods it has not heard of for longest.
Events are best effort (the recorder logs and swallows failures), written after the
decision they explain, with bounded concurrency, so they never stall a reconcile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Final

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.controllers.autoscaler.decide import scaling
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.events import EventRecorder, EventType
from nodepool_operator.runtime.lru import Bounded

__all__ = [
    "NOT_TRIGGER_SCALE_UP",
    "SCALE_REQUEST_REFUSED",
    "SCALING_HELD",
    "TRIGGERED_SCALE_UP",
    "WOULD_TRIGGER_SCALE_UP",
    "Notices",
]

# cluster-autoscaler's reasons, so that people and tools that know them read these too.
NOT_TRIGGER_SCALE_UP = "NotTriggerScaleUp"
TRIGGERED_SCALE_UP = "TriggeredScaleUp"
#: A dry-run Autoscaler's TriggeredScaleUp: nothing was triggered, so not the same reason.
WOULD_TRIGGER_SCALE_UP = "WouldTriggerScaleUp"
SCALE_REQUEST_REFUSED = "ScaleRequestRefused"
SCALING_HELD = "ScalingHeld"
#: Pods remembered as told; beyond it the longest-unseen are forgotten.
MEMORY: Final = 100_000


def _uid(pod: Object) -> str:
    return str(pod["metadata"].get("uid", ""))


class Notices:
    """Events on pods and Autoscalers, with the memory that keeps them from repeating."""

    def __init__(
        self, recorder: EventRecorder, *, parallelism: int, triggered_per_request: int
    ) -> None:
        self.recorder = recorder
        self.parallelism = max(1, parallelism)
        self.triggered_per_request = max(0, triggered_per_request)
        self._warned: Bounded[str, str] = Bounded(MEMORY)  # pod uid -> reason told
        self._triggered: Bounded[str, str] = Bounded(MEMORY)  # pod uid -> request told
        self._would: Bounded[str, str] = Bounded(MEMORY)  # autoscaler uid -> change told
        self._refused: Bounded[str, str] = Bounded(MEMORY)  # autoscaler uid -> refusal told
        self._held: Bounded[str, bool] = Bounded(MEMORY)  # autoscaler uid -> hold told

    async def unfit(self, pods: Sequence[tuple[Object, str]]) -> int:
        """Warn each pod that no node can host, once per reason; returns how many were new."""
        new = [(pod, reason) for pod, reason in pods if self._warned.get(_uid(pod)) != reason]
        for pod, reason in new:
            self._warned[_uid(pod)] = reason
        await self._each(
            (pod, "Warning", NOT_TRIGGER_SCALE_UP, f"pod didn't trigger scale-up: {reason}")
            for pod, reason in new
        )
        return len(new)

    async def triggered(
        self,
        pods: Sequence[Object],
        *,
        request: str,
        message: str,
        reason: str = TRIGGERED_SCALE_UP,
        notes: Sequence[tuple[Object, str]] = (),
    ) -> None:
        """Tell pods, once per request and at most ``triggered_per_request`` of them, that
        new nodes were requested for them; the pods with a note (why they were sent to
        this pool) are all told, first, with it."""
        noted = {_uid(pod): note for pod, note in notes}
        ordered = [pod for pod in pods if _uid(pod) in noted]
        ordered += [pod for pod in pods if _uid(pod) not in noted]
        new = [pod for pod in ordered if self._triggered.get(_uid(pod)) != request]
        new = new[: max(self.triggered_per_request, len(noted))]
        for pod in new:
            self._triggered[_uid(pod)] = request
        await self._each(
            (
                pod,
                "Normal",
                reason,
                f"{message}; {noted[_uid(pod)]}" if _uid(pod) in noted else message,
            )
            for pod in new
        )

    async def would_request(
        self,
        autoscaler: Object,
        decision: scaling.ScalingDecision,
        *,
        pool: str,
        pods: Sequence[Object],
    ) -> None:
        """A dry run's decision: one event on the Autoscaler per would-be change, and
        WouldTriggerScaleUp on the pods it would be for."""
        up = decision.action == "scale-up"
        change = f"NodePool {pool}: {decision.current} -> {decision.target} nodes"
        told = f"{decision.action} {change}"
        if self._would.get(_uid(autoscaler)) != told:
            self._would[_uid(autoscaler)] = told
            await self.recorder.event(
                autoscaler,
                type="Normal",
                reason="WouldScaleUp" if up else "WouldScaleDown",
                message=f"dry run, no ScaleRequest created: would ask for {change}: "
                f"{decision.reason}",
            )
        if up:
            await self.triggered(
                pods,
                request=f"dry-run {told}",
                message=f"dry run: pod would trigger scale-up of {change} (no ScaleRequest made)",
                reason=WOULD_TRIGGER_SCALE_UP,
            )

    async def requested(
        self,
        autoscaler: Object,
        decision: scaling.ScalingDecision,
        *,
        pool: str,
        made: autoscaler_api.LastScaleRequest,
        pods: Sequence[Object],
        passed_over: Sequence[tuple[Object, str]] = (),
    ) -> None:
        """One event on the Autoscaler per request, and TriggeredScaleUp on its pods."""
        self._refused.pop(_uid(autoscaler))  # a request went through
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
            await self.triggered(pods, request=made.name, message=message, notes=passed_over)

    async def refused(self, autoscaler: Object, *, pool: str, said: str) -> None:
        """A ScaleRequest the API server refused for good: one Warning per refusal (told
        again if it comes back after a request went through)."""
        if self._refused.get(_uid(autoscaler)) == said:
            return
        self._refused[_uid(autoscaler)] = said
        await self.recorder.event(
            autoscaler,
            type="Warning",
            reason=SCALE_REQUEST_REFUSED,
            message=f"the ScaleRequest for NodePool {pool} was refused: {said}; the same "
            "request is not sent again for 5 minutes unless what it asks for changes",
        )

    async def held(self, autoscaler: Object, *, why: str | None) -> None:
        """The cluster-wide unready brake holds (``why``) or let go (None): one Warning
        each time it starts holding, none while it lasts."""
        key = _uid(autoscaler)
        if why is None:
            self._held.pop(key)
            return
        if self._held.get(key):
            return
        self._held[key] = True
        await self.recorder.event(
            autoscaler, type="Warning", reason=SCALING_HELD, message=f"no scale decision: {why}"
        )

    async def _each(self, events: Iterable[tuple[Object, EventType, str, str]]) -> None:
        limit = asyncio.Semaphore(self.parallelism)

        async def one(pod: Object, type_: EventType, reason: str, message: str) -> None:
            async with limit:
                await self.recorder.event(pod, type=type_, reason=reason, message=message)

        await asyncio.gather(*(one(*event) for event in events))
