"""The Autoscaler controller: one Autoscaler per reconcile, its status only.

The planner (``planner``) decides for every pool once per batch and records each
Autoscaler's verdict (``verdicts``); this reconcile reports an Autoscaler's verdict in its
status through the status writer, which sends nothing when nothing changed. It runs when
the Autoscaler's spec changes and when the planner finds its status has something new to
say (``needs_write``).

Status writes do not grow with pods or with the requests of a burst: the conditions and
the first request of a scale-up are written at once; the pod counts and each further
request of the scale-up (``status_report.progress_fields``) are held while the pool's nodes are
in flight, and while it is otherwise not settled (``status_report.pool_settled``) for up to
``PROGRESS_HOLD_SCANS`` scan intervals after the last write; a write that carries nothing
but such progress waits until the Autoscaler's last write is a scan interval old (counts
only: and takes a token from one budget shared by all Autoscalers,
``count_writes_per_second``). The last write's time is the one the API server records
for it (our field manager's ``status`` entry in ``metadata.managedFields``, read by the
status writer, ``StatusWriter.written_at``), so a restarted operator or a new leader
holds what an uninterrupted run would.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from nodepool_operator import pacing
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.controllers.autoscaler.decide import status_report
from nodepool_operator.controllers.autoscaler.decide.batch_plan import Part
from nodepool_operator.controllers.autoscaler.verdicts import AutoscalerVerdicts, Verdict
from nodepool_operator.controllers.resources import AUTOSCALERS
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import conditions, errors
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.controller import Request, Result
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import Informer
from nodepool_operator.runtime.status import StatusWriter

__all__ = ["NAME", "PROGRESS_HOLD_SCANS", "AutoscalerReconciler"]

log = logging.getLogger(__name__)

NAME = "autoscaler"
#: Progress of a pool that is not settled, nodes in flight aside, is written at the latest
#: this many scan intervals after the Autoscaler's last write: a pool whose pods never
#: all land (the scheduler disagrees with the plan, or the scheduler is down) shows its
#: counts that late, and a long burst costs a pool one more write per this many.
PROGRESS_HOLD_SCANS: Final = 12


class AutoscalerReconciler:
    """Reports, one Autoscaler per pass, the planner's verdict for it in its status."""

    def __init__(
        self,
        *,
        client: Client,
        autoscalers: Informer,
        verdicts: AutoscalerVerdicts,
        recorder: EventRecorder,
        clock: clock_module.Clock,
        wall_clock: clock_module.WallClock,
        count_writes_per_second: float = 5.0,
    ) -> None:
        self.autoscalers = autoscalers
        self.verdicts = verdicts
        self.recorder = recorder
        self.clock = clock
        self.wall_clock = wall_clock
        self.status = StatusWriter(client, AUTOSCALERS, controller=NAME, wall_clock=wall_clock)
        # One budget for every Autoscaler's counts-only writes: their total stays bounded
        # however many Autoscalers watch the pods that move.
        self._count_writes = pacing.TokenBucket(
            now=clock.now,
            rate=count_writes_per_second,
            burst=max(1, round(2 * count_writes_per_second)),
        )

    async def reconcile(self, request: Request) -> Result:
        autoscaler = self.autoscalers.get(request.name)
        if autoscaler is None:
            self.status.forget({"metadata": {"name": request.name}})
            return Result()
        verdict = self._verdict(autoscaler)
        if verdict is None:
            return Result()  # the planner's next batch (its spec woke it too) wakes us
        current = self.status.current(autoscaler)
        spec = autoscaler_api.spec_of(autoscaler)
        status = self._desired(autoscaler, verdict, current=current, spec=spec)
        held = self._held_for(autoscaler, current=current, status=status, spec=spec)
        if held is not None:
            return Result(requeue_after=held)
        try:
            if await self.status.update(autoscaler, status) is None:
                return Result()
        except errors.NotFound:
            return Result()  # deleted meanwhile: nobody left to tell
        for reason, message in status_report.alarms(
            current.get("conditions"), status["conditions"]
        ):
            log.info("event=%s message=%r", reason, message)
            await self.recorder.event(autoscaler, type="Warning", reason=reason, message=message)
        return Result()

    def needs_write(self, autoscaler: Object) -> bool:
        """The status the planner's verdict gives differs from the stored one."""
        verdict = self._verdict(autoscaler)
        if verdict is None:
            return False
        current = self.status.current(autoscaler)
        spec = autoscaler_api.spec_of(autoscaler)
        desired = self._desired(autoscaler, verdict, current=current, spec=spec)
        return any(desired.get(k) != current.get(k) for k in desired.keys() | current.keys())

    def _verdict(self, autoscaler: Object) -> Verdict | None:
        """The planner's verdict, if made from this generation of the Autoscaler."""
        verdict = self.verdicts.get(str(autoscaler["metadata"]["name"]))
        generation = int(autoscaler["metadata"].get("generation", 0))
        return verdict if verdict is not None and verdict.generation == generation else None

    def _desired(
        self,
        autoscaler: Object,
        verdict: Verdict,
        *,
        current: Mapping[str, Any],
        spec: autoscaler_api.AutoscalerSpec,
    ) -> dict[str, Any]:
        """The status ``verdict`` gives the Autoscaler whose stored status is ``current``."""
        stored = autoscaler_api.AutoscalerStatus.from_dict(current).last_request
        return status_report.autoscaler_status(
            generation=int(autoscaler["metadata"].get("generation", 0)),
            spec=spec,
            current=current,
            seen=verdict.part,
            decision=verdict.decision,
            last_request=verdict.last_request or stored,
            now=conditions.rfc3339(self.wall_clock.time()),
            hold_progress=self._holds_progress(
                autoscaler, verdict.part, interval=spec.scan_interval_seconds
            ),
        )

    def _since_last_write(self, autoscaler: Object) -> float | None:
        """Seconds since we last wrote the Autoscaler's status; None if we never did.

        The status writer tells (``StatusWriter.written_at``): the API server's record of
        our writes, kept by the Autoscaler cache, so a restarted operator, or a new
        leader, holds what the one before it would have; its memory of its last write
        until the cache shows that write."""
        written = self.status.written_at(autoscaler)
        if written is None:
            return None
        # Never negative: the API server's clock may run ahead of ours.
        return max(0.0, self.wall_clock.time() - written)

    def _holds_progress(self, autoscaler: Object, part: Part, *, interval: float) -> bool:
        """The pool's progress stays as stored: while nodes it asked for are in flight
        (they land, or the pool is found unable to grow, which ends the flight), and while
        it is otherwise not settled for up to ``PROGRESS_HOLD_SCANS`` scan intervals after
        the last write. In a burst a pool asks again while its first nodes land and its
        counts move with every pod they take; written once it has settled, the burst
        costs it one write more than its first request."""
        if status_report.nodes_in_flight(part):
            return True
        if status_report.pool_settled(part):
            return False
        since = self._since_last_write(autoscaler)
        return since is not None and since < PROGRESS_HOLD_SCANS * interval

    def _held_for(
        self,
        autoscaler: Object,
        *,
        current: Mapping[str, Any],
        status: Mapping[str, Any],
        spec: autoscaler_api.AutoscalerSpec,
    ) -> float | None:
        """Seconds to hold a write that moves only progress (``status_report.progress_fields``);
        None to write now.

        Held while the status was written less than a scan interval ago; a counts-only
        write also while the budget shared by all Autoscalers is spent (the counts of
        every Autoscaler of a namespace move with the pods no pool can host there). A
        condition, a new generation, a first request or one in the other direction is
        written at once."""
        moved = {k for k in status.keys() | current.keys() if status.get(k) != current.get(k)}
        if not moved or not moved <= status_report.progress_fields(current, status):
            return None
        interval = spec.scan_interval_seconds
        since = self._since_last_write(autoscaler)
        if since is not None and (wait := interval - since) > 0:
            return wait
        if status_report.LAST_REQUEST in moved:
            return None  # a request, however held, never waits on the counts' budget
        return None if self._count_writes.allow() else float(interval)
