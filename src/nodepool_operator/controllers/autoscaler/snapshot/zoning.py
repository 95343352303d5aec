"""Where a pool's nodes are, for the planner: registered Nodes by their zone label, VMs
still booting in the zones the NodePool controller will have put them (``api.zones``:
what the pool's ScaleRequests named and Nodes made since have not served, then the
least-filled zones), and the zones a new node may go to (those not backed off).

The Autoscaler has no cloud: it learns these from the world it shares with the NodePool
controller (Nodes, ScaleRequests, the pool's zone backoffs), by the same rule.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from nodepool_operator import timestamps
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.api import zones as zones_api
from nodepool_operator.controllers import capacity
from nodepool_operator.controllers.autoscaler.simulation import PoolZones

__all__ = ["pool_zones"]


def pool_zones(
    pool: Mapping[str, Any],
    *,
    nodes: Iterable[Mapping[str, Any]],
    requests: Iterable[Mapping[str, Any]],
    in_flight: int,
    now: float,
) -> PoolZones:
    """The zones of ``pool`` (its ``nodes`` are the Nodes labelled with it)."""
    spec = nodepool_api.spec_of(pool)
    template = spec.template
    if not template.zones:
        return PoolZones(in_flight=(None,) * in_flight)
    members = []
    for node in nodes:
        meta = node.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue  # going: the NodePool controller no longer counts its VM either
        zone = (meta.get("labels") or {}).get(wellknown.ZONE_LABEL)
        created = timestamps.parse_rfc3339(meta.get("creationTimestamp"))
        members.append(zones_api.Member(zone=zone, created=created or 0.0))
    counts = Counter(m.zone for m in members if m.zone is not None)
    wanted = zones_api.unserved(zones_api.claims_of(requests), members)
    blocked = capacity.blocked_zones(nodepool_api.status_of(pool).zone_backoffs, now=now)
    booting = zones_api.next_zones(
        template.zones, count=in_flight, counts=counts, wanted=wanted, blocked=blocked
    )
    # Every zone backed off: the pool cannot grow (the planner knows), any zone will do.
    open_zones = tuple(z for z in template.zones if z not in blocked) or template.zones
    return PoolZones(names=open_zones, counts=dict(counts), in_flight=tuple(booting))
