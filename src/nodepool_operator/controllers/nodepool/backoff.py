"""Backing off from a refusal that asking again will not change.

Both kinds of backoff are recorded in the pool's status, so a restarted operator, or a
new leader, holds back exactly as the one before it would have:

- a zone that had no capacity, or whose VMs never registered, is backed off in
  ``status.zoneBackoffs`` (``ZoneLedger``, ``controllers.capacity``): launches skip the
  zone, and the Autoscaler plans a pool with every zone backed off as unable to grow;
- any other refusal pauses the whole pool's VM creations, in ``status.cloudPause``
  (``CloudPauses``): the cloud's (quota, invalid machine type), or the API server's 422
  on a Node create (a template label it refuses that the CRD could not catch). One pause
  per pool, whichever refused.

A pause lasts 10 s, then doubles up to 5 minutes with each refusal in a row. Other events
(a Node turning Ready, a label) still reconcile the pool and keep its status current,
but they do not reach the cloud's create API before the pause ends, so the request rate
to the cloud stays bounded however busy the cluster is. A new generation (the user
changed the spec) ends the pause at once: that is new information. A pass the cloud
accepts after the pause clears it; a refusal then records the next, longer one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from nodepool_operator import pacing
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud.provider import VirtualMachine
from nodepool_operator.controllers import capacity
from nodepool_operator.runtime import conditions
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.events import EventRecorder

__all__ = ["ZONES_BACKED_OFF", "CloudPauses", "ZoneLedger"]

log = logging.getLogger(__name__)

#: The reason ``Degraded`` gives while some zones (or several reasons) are backed off.
ZONES_BACKED_OFF = "ZonesBackedOff"
#: The longest reason a pause keeps (the CRD's bound).
_MAX_REASON = 253


@dataclass(frozen=True)
class CloudPauses:
    """The rule for a pool's cloud pause; the pause itself is the pool's
    ``status.cloudPause``, read at the start of a pass and written back at its end."""

    initial: float
    maximum: float

    def in_force(
        self, pause: nodepool_api.CloudPause | None, *, generation: int, now: float
    ) -> nodepool_api.CloudPause | None:
        """``pause`` if it still holds at ``now`` under ``generation``, else None."""
        if pause is None or not capacity.pause_holds(pause, generation=generation, now=now):
            return None
        return pause

    def refused(
        self,
        previous: nodepool_api.CloudPause | None,
        *,
        reason: str,
        message: str,
        generation: int,
        now: float,
    ) -> nodepool_api.CloudPause:
        """The pause a refusal at ``now`` starts, after ``previous`` (the status's)."""
        repeats = previous is not None and previous.generation == generation
        failures = previous.failures + 1 if previous is not None and repeats else 1
        delay = pacing.exponential(
            initial=self.initial, failures=failures - 1, maximum=self.maximum
        )
        return nodepool_api.CloudPause(
            reason=reason[:_MAX_REASON],
            message=message[: nodepool_api.MAX_PAUSE_MESSAGE],
            failures=failures,
            # Whole seconds, as the status keeps them: rounded up, never ending early.
            until=conditions.rfc3339(math.ceil(now + delay)),
            generation=generation,
        )


@dataclass(eq=False)
class ZoneLedger:
    """One pass's view of a pool's zone backoffs (``controllers.capacity``): read from the
    pool's status at the start, added to by refusals and cleared by launches during the
    pass, written back into the status at its end. The status is the record; this is
    only the pass's working copy."""

    template: nodepool_api.NodeTemplate
    entries: tuple[nodepool_api.ZoneBackoff, ...]
    now: float
    started: list[nodepool_api.ZoneBackoff] = field(default_factory=list)

    def blocked(self, zone: str | None) -> bool:
        return capacity.zone_blocked(
            zone, self.template, capacity.blocked_zones(self.entries, now=self.now)
        )

    def cannot_grow(self) -> str | None:
        return capacity.cannot_grow(self.entries, self.template, now=self.now)

    def refused(
        self,
        zone: str | None,
        *,
        shape: str,
        reason: nodepool_api.BackoffReason,
        message: str,
        offering: tuple[str, wellknown.CapacityType] | None = None,
    ) -> None:
        """A refusal in ``zone``; with ``offering`` (instance type, capacity type; a pool
        with requirements), of that offering in the zone only."""
        self.entries, started = capacity.record(
            self.entries,
            zone=zone or "" if offering is not None else capacity.zone_key(zone, self.template),
            shape=shape,
            reason=reason,
            message=message,
            now=self.now,
            offering=offering,
        )
        if started is not None:
            self.started.append(started)

    def launched(self, zones: Iterable[str | None]) -> None:
        keys = {capacity.zone_key(zone, self.template) for zone in zones}
        self.entries = capacity.forgotten(self.entries, now=self.now, succeeded=keys)

    def launched_offerings(self, vms: Iterable[VirtualMachine]) -> None:
        """VMs made as offerings (a pool with requirements): their offerings' backoffs end."""
        made = []
        for vm in vms:
            if vm.instance_type is not None and vm.zone is not None:
                made.append((vm.instance_type, vm.zone, vm.capacity_type or "on-demand"))
        self.entries = capacity.forgotten(self.entries, now=self.now, offerings_succeeded=made)

    def current(self) -> tuple[nodepool_api.ZoneBackoff, ...]:
        """What the status should hold after the pass."""
        return capacity.forgotten(self.entries, now=self.now)

    def degraded(self) -> tuple[str, str] | None:
        """(reason, message) for ``Degraded`` while a backoff is in force."""
        whole = self.cannot_grow()
        if whole is not None:
            reasons = {
                b.reason for b in self.entries if b.zone in self._blocked() and not b.is_offering
            }
            return (reasons.pop() if len(reasons) == 1 else ZONES_BACKED_OFF), whole
        blocked = sorted(self._blocked())
        if not blocked:
            return None
        shown = ", ".join(
            f"{b.zone} ({b.reason} until {b.until})"
            for b in self.entries
            if b.zone in blocked and not b.is_offering
        )
        return ZONES_BACKED_OFF, f"no VM is launched in zone {shown}; the other zones take them"

    async def tell(self, recorder: EventRecorder, pool: Object) -> None:
        """A Warning event (and a log line) for each backoff this pass started."""
        for started in self.started:
            where = f"zone {started.zone}" if started.zone else "the pool"
            if started.is_offering:
                where = (
                    f"offering {started.instance_type} ({started.capacity_type}) in zone"
                    f" {started.zone}"
                )
            message = (
                f"{started.reason} in {where} (refusal {started.failures} in a row): no VM"
                f" is launched there before {started.until}; {started.message}"
            )
            # An offering's backoff names its type and capacity type: the zone alone
            # would read as the whole zone being backed off.
            log.warning(
                "event=%s zone=%s%s reason=%s failures=%d until=%s",
                "offering-backoff" if started.is_offering else "zone-backoff",
                started.zone,
                f" instance_type={started.instance_type} capacity_type={started.capacity_type}"
                if started.is_offering
                else "",
                started.reason,
                started.failures,
                started.until,
            )
            await recorder.event(pool, type="Warning", reason=started.reason, message=message)

    def ends_in(self) -> float | None:
        return capacity.next_end(self.entries, now=self.now)

    def _blocked(self) -> frozenset[str]:
        return capacity.blocked_zones(self.entries, now=self.now)
