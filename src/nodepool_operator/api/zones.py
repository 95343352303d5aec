"""Where a pool's new nodes go: the one rule both controllers apply.

A VM's zone is the cloud's fact (``VirtualMachine.zone``, and the Node's zone label made
from it), never a function of its name. A new node goes where a ScaleRequest asked for it
(``spec.newNodeZones``), else to the zone of the template holding the fewest of the pool's
nodes (ties by the template's order), so the pool stays balanced.

A request's zones are claims that VMs made after it serve: a VM in zone z created at or
after the request's creation serves one of the request's claims on z (the oldest request
first). What the claims still lack is where the next VMs go. Once Nodes made after it
serve every claim of a request, the NodePool controller marks it so
(``status.zonesServed``) and its zones count no more: otherwise, when one of those Nodes
went (scaled down, consolidated, repaired) while the finished request was still kept,
its claim would want a VM again and send the next launch, for another request or none,
to a zone only the finished one needed. Both sides count from facts
in the world (a VM's creation time in the cloud, a Node's creationTimestamp, a request's
creationTimestamp), so a restart between applying a request and launching its VMs launches
them in the zones it named, and the Autoscaler predicts the zones of VMs still booting the
same way, for as long as the request is kept (a finished request naming zones is kept
the pool's registration timeout longer than others, ``request_facts.expired_requests``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from nodepool_operator import timestamps
from nodepool_operator.api import scalerequest

__all__ = [
    "Claim",
    "Member",
    "balanced_order",
    "claims_of",
    "next_zones",
    "served",
    "unserved",
]

#: Requests whose zones still count: Applied, or not answered as the cache shows them
#: (answered in this very pass, the status write not seen yet).
_LIVE_PHASES: Final = frozenset({"Pending", "Applied"})


@dataclasses.dataclass(frozen=True)
class Claim:
    """A request's zones: ``zones[z]`` new nodes in zone z, asked at ``created`` (epoch s)."""

    created: float
    zones: Mapping[str, int]


@dataclasses.dataclass(frozen=True)
class Member:
    """One of the pool's VMs (or Nodes): its zone and when it was made (epoch s)."""

    zone: str | None
    created: float


def claims_of(requests: Iterable[Mapping[str, Any]]) -> list[Claim]:
    """The zone claims of a pool's ScaleRequests that name zones and still count: not
    being deleted, not refused or superseded, not served already (``zonesServed``)."""
    claims = []
    for request in requests:
        meta = request.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        spec = scalerequest.spec_of(request)
        status = scalerequest.status_of(request)
        created = timestamps.parse_rfc3339(meta.get("creationTimestamp"))
        live = status.phase in _LIVE_PHASES and not status.zones_served
        if spec.new_node_zones and live and created is not None:
            claims.append(Claim(created=created, zones=spec.new_node_zones))
    return claims


def balanced_order(zones: Sequence[str], counts: Mapping[str, int]) -> list[str]:
    """``zones`` fewest-first by ``counts`` (the pool's nodes per zone); ties keep the
    template's order (the sort is stable, and a template's zones are a set)."""
    return sorted(zones, key=lambda zone: counts.get(zone, 0))


def unserved(claims: Iterable[Claim], members: Iterable[Member]) -> Counter[str]:
    """What ``claims`` still ask per zone once the ``members`` made after each one have
    served it, oldest claim first; a member serves one claim at most."""
    wanted: Counter[str] = Counter()
    for _, lacking in _match(claims, members):
        wanted.update(lacking)
    return wanted


def served(claims: Iterable[Claim], members: Iterable[Member]) -> list[Claim]:
    """The ``claims`` the ``members`` serve whole, by ``unserved``'s matching."""
    return [claim for claim, lacking in _match(claims, members) if not lacking]


def _match(claims: Iterable[Claim], members: Iterable[Member]) -> list[tuple[Claim, Counter[str]]]:
    """Each claim, oldest first, with what it lacks per zone once the members made after
    it (oldest first, each serving one claim at most) have served it."""
    free = sorted(members, key=lambda m: m.created)
    used = [False] * len(free)
    matched: list[tuple[Claim, Counter[str]]] = []
    for claim in sorted(claims, key=lambda c: c.created):
        lacking: Counter[str] = Counter()
        for zone, count in sorted(claim.zones.items()):
            left = count
            for i, member in enumerate(free):
                if left == 0:
                    break
                if not used[i] and member.zone == zone and member.created >= claim.created:
                    used[i] = True
                    left -= 1
            if left > 0:
                lacking[zone] += left
        matched.append((claim, lacking))
    return matched


def next_zones(
    zones: Sequence[str],
    *,
    count: int,
    counts: Mapping[str, int],
    wanted: Mapping[str, int] | None = None,
    blocked: frozenset[str] = frozenset(),
) -> list[str | None]:
    """The zones of the next ``count`` nodes of a pool whose template names ``zones``:
    first those ``wanted`` (in the template's order), then balanced over ``counts``, each
    node counted as it is placed; ``blocked`` zones are skipped. None per node for a pool
    without zones; fewer than ``count`` when every zone is blocked."""
    if not zones:
        return [None] * count
    open_zones = [z for z in zones if z not in blocked]
    tally = Counter({z: counts.get(z, 0) for z in zones})
    claims = Counter({z: n for z, n in (wanted or {}).items() if z in open_zones and n > 0})
    chosen: list[str | None] = []
    while len(chosen) < count and open_zones:
        asked = [z for z in open_zones if claims[z] > 0]
        zone = asked[0] if asked else balanced_order(open_zones, tally)[0]
        claims[zone] -= 1
        tally[zone] += 1
        chosen.append(zone)
    return chosen
