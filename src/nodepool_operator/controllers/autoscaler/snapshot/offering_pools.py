"""A pool with requirements as the simulation runs it (``simulation.offering_plan``): its
offerings, one template per instance type and capacity type, and the offering of each VM
still on its way.

The offerings are ``offerings.pool_offerings``'s, the rule the NodePool controller
launches by (allowed, available, not backed off, cheapest first), read from the catalog
the operator shares between both controllers. A VM requested and not registered yet is
the offering a ScaleRequest named for it (``spec.newNodeOfferings``: claims that Nodes
of that offering created since have not served, the newest request's first), else the
cheapest one: what the NodePool controller launches for it. A request is read whether or
not its ``status.zonesServed`` says its VMs were all launched: launched is not
registered, and until their Nodes come the request is the record of what they are.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from nodepool_operator import timestamps
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import quantity, wellknown
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.controllers import offerings as offerings_module
from nodepool_operator.controllers.autoscaler import simulation
from nodepool_operator.controllers.autoscaler.simulation import offering_plan

__all__ = ["blocked_pool", "in_flight_offerings", "limits_left", "offering_pool"]

_LIVE_PHASES = frozenset({"Pending", "Applied"})


def in_flight_offerings(
    count: int,
    *,
    requests: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    allowed: Sequence[offering_plan.OfferingKey],
) -> list[offering_plan.OfferingKey]:
    """The offering of each of ``count`` VMs requested and not registered: the offerings
    requests named that no Node created since serves (a Node serves the oldest request
    it can; the VMs on their way are the newest requests'), then the cheapest allowed
    (``allowed``, cheapest first; a claim the pool may no longer use falls back to it, as
    the NodePool controller falls back)."""
    if count <= 0 or not allowed:
        return []
    members: list[tuple[float, offering_plan.OfferingKey]] = []
    for node in nodes:
        meta = node.get("metadata") or {}
        key = offering_plan.node_offering(node)
        created = timestamps.parse_rfc3339(meta.get("creationTimestamp"))
        if key is not None and created is not None and not meta.get("deletionTimestamp"):
            members.append((created, key))
    members.sort()
    used = [False] * len(members)
    claims = []
    for request in requests:
        meta = request.get("metadata") or {}
        spec, status = scalerequest_api.spec_of(request), scalerequest_api.status_of(request)
        created = timestamps.parse_rfc3339(meta.get("creationTimestamp"))
        live = status.phase in _LIVE_PHASES
        if (
            spec.new_node_offerings
            and live
            and created is not None
            and not meta.get("deletionTimestamp")
        ):
            claims.append((created, str(meta.get("name", "")), spec.new_node_offerings))
    unserved: list[list[offering_plan.OfferingKey]] = []
    usable = set(allowed)
    for created, _, asked in sorted(claims):
        lacking: list[offering_plan.OfferingKey] = []
        unserved.append(lacking)
        for entry in asked:
            for _ in range(entry.count):
                served = next(
                    (
                        k
                        for k, (made, key) in enumerate(members)
                        if not used[k] and key == entry.key and made >= created
                    ),
                    None,
                )
                if served is not None:
                    used[served] = True
                else:
                    lacking.append(entry.key if entry.key in usable else allowed[0])
    found = [key for lacking in reversed(unserved) for key in lacking][:count]
    return found + [allowed[0]] * (count - len(found))


def limits_left(
    limits: nodepool_api.Limits | None,
    *,
    nodes: Iterable[Mapping[str, Any]],
    in_flight: Iterable[Mapping[str, int]],
) -> dict[str, int] | None:
    """What the pool may still add under its ``limits`` (cpu in millicores, memory in
    bytes), None without any: the limits less the capacity of its Nodes (as each reports
    it) and of its VMs in flight (their offering's). The NodePool controller counts its
    live VMs the same way (by their offering's type), so a Node that reports another
    capacity than its type's can make the two differ by that node; it refuses past the
    limits either way (``LimitReached``)."""
    if limits is None or (limits.cpu is None and limits.memory is None):
        return None
    used = {"cpu": 0, "memory": 0}
    for node in nodes:
        if (node.get("metadata") or {}).get("deletionTimestamp"):
            continue
        status = node.get("status") or {}
        capacity = status.get("capacity") or status.get("allocatable") or {}
        used["cpu"] += quantity.parse_cpu_millicores(str(capacity.get("cpu", "0")))
        used["memory"] += quantity.parse_memory_bytes(str(capacity.get("memory", "0")))
    for capacity in in_flight:
        for name in used:
            used[name] += capacity.get(name, 0)
    left: dict[str, int] = {}
    if limits.cpu is not None:
        left["cpu"] = quantity.parse_cpu_millicores(limits.cpu) - used["cpu"]
    if limits.memory is not None:
        left["memory"] = quantity.parse_memory_bytes(limits.memory) - used["memory"]
    return left


def _limits_text(limits: nodepool_api.Limits | None) -> str:
    if limits is None:
        return ""
    told = (("cpu", limits.cpu), ("memory", limits.memory))
    return ", ".join(f"limits.{name}={value}" for name, value in told if value is not None)


def _capacity(offering: offerings_module.PricedOffering) -> dict[str, int]:
    capacity = nodepool_api.template_capacity(offering.template)
    return {"cpu": capacity["cpu"], "memory": capacity["memory"]}


def offering_pool(
    pool: str,
    template: simulation.PoolTemplate,
    priced: Sequence[offerings_module.PricedOffering],
    *,
    in_flight: Sequence[offering_plan.OfferingKey],
    limits: nodepool_api.Limits | None = None,
    nodes: Iterable[Mapping[str, Any]] = (),
) -> offering_plan.OfferingPool:
    """``template`` (the pool as a single shape) as an ``OfferingPool`` of ``priced``;
    ``limits`` (the pool's) judged against its Nodes ``nodes`` and the VMs in flight."""
    by_key = {o.key: o for o in priced}
    kinds: dict[tuple[str, str], list[offerings_module.PricedOffering]] = {}
    for offering in priced:
        kinds.setdefault((offering.instance_type.name, offering.capacity_type), []).append(offering)
    booting = Counter((kind, capacity_type) for kind, _, capacity_type in in_flight)
    found = offering_plan.OfferingPool(
        pool=pool,
        offerings=tuple(
            offering_plan.PlannedOffering(
                key=o.key,
                price=o.price_per_hour,
                allocatable=dict(o.allocatable),
                labels=nodepool_api.node_labels(pool, o.template, zone=o.zone),
                capacity=_capacity(o),
            )
            for o in priced
        ),
        taints=template.taints,
        weight=template.weight,
        headroom=template.headroom,
        templates=(),
        limits_left=limits_left(
            limits,
            nodes=nodes,
            in_flight=[_capacity(by_key[key]) for key in in_flight if key in by_key],
        ),
        limits=_limits_text(limits),
    )
    templates = []
    in_flight_nodes: dict[str, offering_plan.OfferingKey] = {}
    for (kind, capacity_type), sold in sorted(kinds.items()):
        zones = tuple(dict.fromkeys(o.zone for o in sold))
        by_zone = {o.zone: o for o in sold}
        booting_zones = tuple(zone for k, zone, c in in_flight if (k, c) == (kind, capacity_type))
        # The names the simulation gives the VMs on their way (its first nodes of the
        # template, in these zones): the plan places the pods waiting for them there first.
        for k, zone in enumerate(booting_zones):
            offering = by_zone.get(zone, sold[0])
            in_flight_nodes[_node_name(pool, offering.key, k)] = offering.key
        templates.append(
            dataclasses.replace(
                template,
                name=f"{pool}/{kind}/{capacity_type}",
                allocatable=dict(sold[0].allocatable),
                price=sold[0].price_per_hour,
                upcoming=_upcoming(pool, by_zone, found.node_offerings),
                in_flight=booting[(kind, capacity_type)],
                zones=len(zones),
                zoning=simulation.PoolZones(
                    names=zones,
                    counts={z: n for z, n in template.zoning.counts.items() if z in zones},
                    in_flight=booting_zones,
                ),
            )
        )
    return dataclasses.replace(found, templates=tuple(templates), in_flight_nodes=in_flight_nodes)


def blocked_pool(
    pool: str, spec: nodepool_api.NodePoolSpec, template: simulation.PoolTemplate, *, why: str
) -> offering_plan.OfferingPool:
    """A pool with requirements and no offering to plan with: not simulated (its
    template's shape is not what would be launched); its pods wait, told ``why``."""
    return offering_plan.OfferingPool(
        pool=pool,
        offerings=(),
        taints=template.taints,
        weight=template.weight,
        headroom=0,
        templates=(),
        blocked=why,
        namespaces=template.namespaces,
        labels=nodepool_api.node_labels(pool, spec.template),
    )


def _upcoming(
    pool: str,
    by_zone: Mapping[str, offerings_module.PricedOffering],
    named: dict[str, offering_plan.OfferingKey],
) -> Callable[[int, str | None], tuple[str, Mapping[str, str]]]:
    """Names and labels of the k-th node of one instance type in a zone, as the simulation
    opens them; each name is recorded with its offering (``OfferingPool.node_offerings``).
    These nodes exist only in the plan: what is launched is ``offering_plan``'s choice."""
    first = next(iter(by_zone.values()))

    def upcoming(k: int, zone: str | None) -> tuple[str, Mapping[str, str]]:
        offering = by_zone.get(zone or "", first)
        name = _node_name(pool, offering.key, k)
        named[name] = offering.key
        labels = nodepool_api.node_labels(pool, offering.template, zone=offering.zone)
        return name, {**labels, wellknown.HOSTNAME_LABEL: name}

    return upcoming


def _node_name(pool: str, key: offering_plan.OfferingKey, k: int) -> str:
    """The simulation's name of the k-th node of an instance type and capacity type."""
    kind, zone, capacity_type = key
    return f"{pool}/{kind}/{capacity_type}/{zone}/{k}"
