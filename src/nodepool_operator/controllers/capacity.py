"""Zone backoffs: where a pool launches no VM for a while, and whether it can grow at all.

The NodePool controller records a backoff in the pool's status (``status.zoneBackoffs``)
when the cloud refuses a launch for capacity in a zone, or when a VM launched there never
gets a Ready Node within ``registrationTimeoutSeconds``; the Autoscaler reads the same
status to plan a pool whose every zone is backed off as unable to grow. Both read it
through these functions, so they never disagree on what a backoff means. The status is
the record: a restarted operator, or a new leader, skips the same zones until the same
moment.

Each refusal in a row doubles the wait (``INITIAL`` up to ``MAXIMUM``). A backoff past its
``until`` no longer blocks anything but is kept, so the next refusal there doubles the
wait; a launch that succeeds in the zone ends it, and one left alone for ``MAXIMUM``
after its end is forgotten.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from nodepool_operator import pacing, timestamps
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.runtime import conditions

__all__ = [
    "INITIAL",
    "MAXIMUM",
    "NO_CAPACITY",
    "REGISTRATION_TIMEOUT",
    "backed_off_offerings",
    "blocked_zones",
    "cannot_grow",
    "forgotten",
    "in_force",
    "listing_doubtful",
    "next_end",
    "pause_ends_in",
    "pause_holds",
    "paused",
    "record",
    "zone_blocked",
    "zone_key",
]

#: The first wait after a refusal, and the longest (as cluster-autoscaler's node group
#: backoff: 5 minutes up to 30; Karpenter caches an offering's capacity error for 3).
INITIAL = 60.0
MAXIMUM = 1800.0
#: The reasons a zone is backed off (``nodepool_api.BACKOFF_REASONS``).
NO_CAPACITY: Final = "InsufficientCapacity"
REGISTRATION_TIMEOUT: Final = "RegistrationTimeout"
#: Longest message kept per backoff (the CRD's bound).
MAX_MESSAGE = 1024
#: The ``Degraded`` reasons under which the NodePool controller acts on nothing because
#: the cloud's listing of the pool's VMs cannot be trusted (docs/api.md): no VM is
#: launched, so nothing the pool was asked for is on its way.
DOUBTFUL_LISTING: Final = frozenset({"CloudListFailed", "CloudListEmpty"})
#: How long such a ``Degraded`` must have held (its ``lastTransitionTime``) before the
#: Autoscaler plans the pool as unable to grow: one failed listing is retried within
#: seconds, and sending pods to another pool for that would be a scale-up for nothing.
DOUBTFUL_LISTING_GRACE = 30.0


def zone_key(zone: str | None, template: nodepool_api.NodeTemplate) -> str:
    """The zone a backoff is recorded under: "" (the whole pool) for a pool without zones,
    whatever zone the cloud chose for it."""
    return (zone or "") if template.zones else ""


def _until(backoff: nodepool_api.ZoneBackoff) -> float:
    until = timestamps.parse_rfc3339(backoff.until)
    return 0.0 if until is None else until


def in_force(
    backoffs: Iterable[nodepool_api.ZoneBackoff], *, now: float
) -> tuple[nodepool_api.ZoneBackoff, ...]:
    """Those of ``backoffs`` that still hold at ``now``."""
    return tuple(b for b in backoffs if _until(b) > now)


def blocked_zones(backoffs: Iterable[nodepool_api.ZoneBackoff], *, now: float) -> frozenset[str]:
    """The zones (by ``zone_key``) where no VM is launched at ``now``. An offering's
    backoff (a pool with requirements) closes only that offering, not its zone."""
    return frozenset(b.zone for b in in_force(backoffs, now=now) if not b.is_offering)


def backed_off_offerings(
    backoffs: Iterable[nodepool_api.ZoneBackoff],
) -> frozenset[tuple[str, str, str]]:
    """The offerings (instance type, zone, capacity type) ``backoffs`` close (the caller
    keeps those ``in_force``)."""
    return frozenset(
        (b.instance_type, b.zone, b.capacity_type or "on-demand")
        for b in backoffs
        if b.instance_type is not None
    )


def zone_blocked(
    zone: str | None, template: nodepool_api.NodeTemplate, blocked: frozenset[str]
) -> bool:
    return "" in blocked or zone_key(zone, template) in blocked


def cannot_grow(
    backoffs: Sequence[nodepool_api.ZoneBackoff],
    template: nodepool_api.NodeTemplate,
    *,
    now: float,
) -> str | None:
    """Why the pool can launch no VM at ``now`` (every zone it uses is backed off), in
    words for a person; None when some zone may still take a VM."""
    blocked = blocked_zones(backoffs, now=now)
    zones = template.zones or ("",)
    if not blocked or not ("" in blocked or all(z in blocked for z in zones)):
        return None
    active = [b for b in backoffs if b.zone in blocked and not b.is_offering]
    reasons = sorted({b.reason for b in active})
    until = max(b.until for b in active)
    where = " in all its zones" if template.zones else ""
    return f"{' and '.join(reasons)}{where}; no VM is launched before {until}"


def pause_ends_in(pause: nodepool_api.CloudPause, *, now: float) -> float:
    """Seconds from ``now`` until the pool's cloud pause ends (negative once it has)."""
    until = timestamps.parse_rfc3339(pause.until)
    return (0.0 if until is None else until) - now


def paused(pool: Mapping[str, Any], *, now: float) -> str | None:
    """Why the pool launches no VM at ``now`` because the cloud refused in a way asking
    again will not change (``status.cloudPause``, under the pool's current generation),
    in words for a person; None when no pause holds."""
    pause = nodepool_api.status_of(pool).cloud_pause
    generation = int((pool.get("metadata") or {}).get("generation") or 0)
    if pause is None or not pause_holds(pause, generation=generation, now=now):
        return None
    return f"the cloud refused ({pause.reason}); no VM is launched before {pause.until}"


def listing_doubtful(pool: Mapping[str, Any], *, now: float) -> str | None:
    """Why the pool launches no VM at ``now`` because its VMs cannot be listed (``Degraded``
    with a ``DOUBTFUL_LISTING`` reason for ``DOUBTFUL_LISTING_GRACE`` seconds or more), in
    words for a person; None otherwise. A wrong cloud credential looks like this: the
    VMs the pool was asked for are never made, so none of them is capacity on its way."""
    for condition in (pool.get("status") or {}).get("conditions") or ():
        if condition.get("type") != "Degraded" or condition.get("status") != "True":
            continue
        reason = str(condition.get("reason", ""))
        since = timestamps.parse_rfc3339(str(condition.get("lastTransitionTime", "")))
        if reason not in DOUBTFUL_LISTING or since is None:
            return None
        if now - since < DOUBTFUL_LISTING_GRACE:
            return None
        message = str(condition.get("message", ""))
        return f"its VMs cannot be listed ({reason}: {message}); no VM is launched until they can"
    return None


def pause_holds(pause: nodepool_api.CloudPause, *, generation: int, now: float) -> bool:
    """Whether ``pause`` still holds at ``now`` for a pool at ``generation``: a new
    generation (the user changed the spec) ends it, and so does its ``until``."""
    return pause.generation == generation and pause_ends_in(pause, now=now) > 0


def _key(backoff: nodepool_api.ZoneBackoff) -> tuple[str, str, str]:
    """What one backoff is about: its zone, and the offering in it if it is one's."""
    return (backoff.zone, backoff.instance_type or "", backoff.capacity_type or "")


def next_end(backoffs: Iterable[nodepool_api.ZoneBackoff], *, now: float) -> float | None:
    """Seconds until the first backoff in force ends, if one is."""
    ends = [_until(b) - now for b in backoffs if _until(b) > now]
    return min(ends) if ends else None


def record(
    backoffs: Sequence[nodepool_api.ZoneBackoff],
    *,
    zone: str,
    shape: str,
    reason: nodepool_api.BackoffReason,
    message: str,
    now: float,
    offering: tuple[str, wellknown.CapacityType] | None = None,
) -> tuple[tuple[nodepool_api.ZoneBackoff, ...], nodepool_api.ZoneBackoff | None]:
    """``backoffs`` with a refusal in ``zone`` recorded, and the backoff it started (None
    when the zone was already backed off at ``now``: one refusal per wait, however many
    VMs of one pass it refused). With ``offering`` (instance type, capacity type), only
    that offering in the zone is backed off."""
    instance_type, capacity_type = offering if offering is not None else (None, None)
    key = (zone, instance_type or "", capacity_type or "")
    found = next((b for b in backoffs if _key(b) == key), None)
    if found is not None and _until(found) > now:
        return tuple(backoffs), None
    failures = 1 if found is None else found.failures + 1
    delay = pacing.exponential(initial=INITIAL, failures=failures - 1, maximum=MAXIMUM)
    started = nodepool_api.ZoneBackoff(
        zone=zone,
        shape=shape,
        reason=reason,
        failures=failures,
        until=conditions.rfc3339(now + delay),
        message=message[:MAX_MESSAGE],
        instance_type=instance_type,
        capacity_type=capacity_type,
    )
    others = [b for b in backoffs if _key(b) != key]
    return tuple(sorted([*others, started], key=_key)), started


def forgotten(
    backoffs: Iterable[nodepool_api.ZoneBackoff],
    *,
    now: float,
    succeeded: Iterable[str] = (),
    offerings_succeeded: Iterable[tuple[str, str, str]] = (),
) -> tuple[nodepool_api.ZoneBackoff, ...]:
    """``backoffs`` without those of the zones where a launch ``succeeded`` (and of the
    offerings, instance type, zone and capacity type, launched: ``offerings_succeeded``)
    and those over for longer than ``MAXIMUM`` (not tried since: the streak is over)."""
    done = set(succeeded)
    launched = set(offerings_succeeded)
    return tuple(b for b in backoffs if _kept(b, done, launched, now=now))


def _kept(
    backoff: nodepool_api.ZoneBackoff,
    zones_done: set[str],
    offerings_done: set[tuple[str, str, str]],
    *,
    now: float,
) -> bool:
    if _until(backoff) <= now - MAXIMUM:
        return False
    if backoff.instance_type is None:
        return backoff.zone not in zones_done
    offering = (backoff.instance_type, backoff.zone, backoff.capacity_type or "on-demand")
    return offering not in offerings_done
