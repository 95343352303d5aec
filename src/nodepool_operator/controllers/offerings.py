"""The catalog offerings a pool may use: the one rule both controllers apply.

A pool with ``requirements`` (``api.requirements``) takes each node's shape from one
catalog offering (an instance type sold in a zone as a capacity type). The NodePool
controller launches offerings and registers their Nodes; the Autoscaler plans new nodes
as offerings. Both read the cloud's catalog through one ``OfferingsCatalog`` (the
operator builds one and hands it to both), and both ask ``pool_offerings`` which
offerings a pool may use now, so they never disagree on a node's shape, labels or price.

The catalog is the cloud's fact, read from its ``CatalogSource`` and kept for ``ttl``
seconds (prices and availability change, slowly). A read that fails keeps the catalog
last read, and is tried again ``retry`` seconds later; with none read yet it raises, so
the pass is retried as for any cloud error. A cloud that is no ``CatalogSource`` has the
empty catalog: a pool without requirements works as it always did, and a pool with them
has no offering to launch and says so.

An offering's node is the pool's template with the offering's shape
(``offering_template``): the type's cpu, memory, pods, ephemeral storage and extended
resources, the template's ``reserved`` plus the type's overhead kept from them, the
offering's zone, and its labels (``catalog.offering_labels``) over the template's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import quantity, wellknown
from nodepool_operator.cloud import catalog, provider
from nodepool_operator.controllers import allocatable, capacity
from nodepool_operator.runtime import clock as clock_module

__all__ = [
    "DEFAULT_RETRY_SECONDS",
    "DEFAULT_TTL_SECONDS",
    "OfferingKey",
    "OfferingsCatalog",
    "PricedOffering",
    "cost_per_hour",
    "offering_template",
    "pool_offerings",
    "priced",
]

log = logging.getLogger(__name__)

#: How long a catalog read is used before the cloud is asked again (Karpenter caches its
#: instance types for 5 minutes too).
DEFAULT_TTL_SECONDS: Final = 300.0
#: After a failed read, how long the catalog last read is used before asking again.
DEFAULT_RETRY_SECONDS: Final = 30.0

#: An offering without its price: (instance type, zone, capacity type).
OfferingKey = tuple[str, str, str]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PricedOffering:
    """One offering a pool may use, with the node it makes.

    ``template``: the pool's template with the offering's shape (``offering_template``):
    ``nodepool_api.template_capacity`` / ``template_allocatable`` / ``node_labels`` of it
    are the Node's. ``labels``: what the pool's requirements were judged over.
    """

    instance_type: catalog.InstanceType
    offering: catalog.Offering
    template: nodepool_api.NodeTemplate
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]

    @property
    def key(self) -> OfferingKey:
        o = self.offering
        return (o.instance_type, o.zone, o.capacity_type)

    @property
    def price_per_hour(self) -> float:
        return self.offering.price_per_hour

    @property
    def zone(self) -> str:
        return self.offering.zone

    @property
    def capacity_type(self) -> wellknown.CapacityType:
        return self.offering.capacity_type

    def describe(self) -> str:
        """The offering as events and answers name it."""
        o = self.offering
        return f"{o.instance_type} in {o.zone} ({o.capacity_type}, {o.price_per_hour:g}/h)"


def _valid_extended(name: str) -> bool:
    # Only what a Node accepts as an extended resource (the CRD's rule for a template's).
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def offering_template(
    template: nodepool_api.NodeTemplate,
    instance_type: catalog.InstanceType,
    offering: catalog.Offering,
) -> nodepool_api.NodeTemplate:
    """The pool's ``template`` with the shape, zone and labels of ``offering``."""
    reserved = dict(template.reserved)
    if instance_type.overhead_cpu_millis:
        kept = quantity.parse_cpu_millicores(reserved.get("cpu", "0"))
        reserved["cpu"] = f"{kept + instance_type.overhead_cpu_millis}m"
    if instance_type.overhead_memory_bytes:
        kept = quantity.parse_memory_bytes(reserved.get("memory", "0"))
        reserved["memory"] = str(kept + instance_type.overhead_memory_bytes)
    labels = {
        **template.labels,
        **{
            key: value
            for key, value in catalog.offering_labels(instance_type, offering).items()
            if key not in wellknown.OPERATOR_LABELS  # the zone comes from ``zones``
        },
    }
    storage = instance_type.ephemeral_storage_bytes
    return dataclasses.replace(
        template,
        cpu=f"{instance_type.cpu_millis}m",
        memory=str(instance_type.memory_bytes),
        pods=instance_type.pods,
        ephemeral_storage=str(storage) if storage else None,
        extended_resources={
            name: str(amount)
            for name, amount in instance_type.extended.items()
            if _valid_extended(name)
        },
        reserved=reserved,
        zones=(offering.zone,),
        labels=labels,
    )


def priced(
    template: nodepool_api.NodeTemplate,
    instance_type: catalog.InstanceType,
    offering: catalog.Offering,
) -> PricedOffering:
    """``offering`` with the node it makes for a pool of ``template``."""
    shaped = offering_template(template, instance_type, offering)
    return PricedOffering(
        instance_type=instance_type,
        offering=offering,
        template=shaped,
        labels={**template.labels, **catalog.offering_labels(instance_type, offering)},
        allocatable=nodepool_api.template_allocatable(shaped),
    )


def pool_offerings(
    spec: nodepool_api.NodePoolSpec,
    found: catalog.Catalog,
    backoffs: Iterable[nodepool_api.ZoneBackoff] = (),
    *,
    now: float | None = None,
) -> list[PricedOffering]:
    """The offerings of ``found`` the pool may use now, cheapest first (the catalog's
    order: price, then type, zone and capacity type).

    Those its requirements allow (over the offering's labels and the template's), that
    the cloud has available, that are not backed off (``backoffs``: the pool's
    ``status.zoneBackoffs``; an offering's own backoff or its whole zone's, in force at
    ``now``; ``now`` None: every one given is), and whose node has room for a pod after
    the reserve. Empty for a pool without requirements: its nodes are its template.
    """
    if not spec.requirements:
        return []
    entries = tuple(backoffs)
    in_force = entries if now is None else capacity.in_force(entries, now=now)
    refused = capacity.backed_off_offerings(in_force)
    closed = {b.zone for b in in_force if not b.is_offering}
    chosen: list[PricedOffering] = []
    for offering in found.offerings:
        kind = found.type(offering.instance_type)
        key = (offering.instance_type, offering.zone, offering.capacity_type)
        if kind is None or not offering.available or key in refused:
            continue
        if offering.zone in closed or "" in closed:
            continue
        labels = {**spec.template.labels, **catalog.offering_labels(kind, offering)}
        if not spec.requirements.allows(labels):
            continue
        candidate = priced(spec.template, kind, offering)
        if candidate.allocatable.get("cpu", 0) <= 0 or candidate.allocatable.get("memory", 0) <= 0:
            continue
        chosen.append(candidate)
    return chosen


def as_reported(
    allowed: Sequence[PricedOffering], nodes: Iterable[Mapping[str, Any]]
) -> list[PricedOffering]:
    """``allowed`` with each offering's allocatable lowered to what the pool's Ready
    ``nodes`` of its instance type report (``allocatable.as_reported``). A Node is what
    its kubelet reports: a catalog that overstates a type (a machine's real memory, a
    kubelet's reserve) would otherwise have the type bought again and again for a pod
    that fits none of its Nodes."""
    by_type: dict[str, list[Mapping[str, Any]]] = {}
    for node in nodes:
        kind = ((node.get("metadata") or {}).get("labels") or {}).get(wellknown.INSTANCE_TYPE_LABEL)
        if kind:
            by_type.setdefault(str(kind), []).append(node)
    reported: list[PricedOffering] = []
    for offering in allowed:
        peers = by_type.get(offering.instance_type.name)
        lowered = allocatable.as_reported(offering.allocatable, peers) if peers else None
        if lowered is None or lowered == dict(offering.allocatable):
            reported.append(offering)
        else:
            reported.append(dataclasses.replace(offering, allocatable=lowered))
    return reported


def cost_per_hour(
    found: catalog.Catalog, machines: Iterable[tuple[str | None, str | None, str | None]]
) -> float | None:
    """What ``machines`` (instance type, zone, capacity type) cost per hour by the
    catalog's prices; None when one of them has no price there (made as a bare shape, or
    an offering the catalog no longer lists): a partial sum would understate it."""
    total = 0.0
    for instance_type, zone, capacity_type in machines:
        if instance_type is None or zone is None:
            return None
        offering = found.offering(
            instance_type=instance_type,
            zone=zone,
            capacity_type=capacity_type or catalog.ON_DEMAND,
        )
        if offering is None:
            return None
        total += offering.price_per_hour
    return round(total, 6)


class OfferingsCatalog:
    """The cloud's catalog, read at most once per ``ttl`` seconds (module doc).

    Shared by both controllers: one read serves every pool of both. ``known`` gives the
    catalog last read without asking, for code that cannot wait (it is read at the start
    of each pass that needs it)."""

    def __init__(
        self,
        source: provider.CatalogSource | None,
        *,
        clock: clock_module.Clock,
        ttl: float = DEFAULT_TTL_SECONDS,
        retry: float = DEFAULT_RETRY_SECONDS,
    ) -> None:
        self.source = source
        self.clock = clock
        self.ttl = ttl
        self.retry = retry
        self._catalog: catalog.Catalog | None = None if source is not None else catalog.NOTHING
        self._next_read = 0.0
        self._lock = asyncio.Lock()

    @classmethod
    def of_cloud(
        cls, cloud: object, *, clock: clock_module.Clock, ttl: float = DEFAULT_TTL_SECONDS
    ) -> OfferingsCatalog:
        """The catalog of ``cloud`` if it is a ``CatalogSource``, else the empty one."""
        source = cloud if callable(getattr(cloud, "catalog", None)) else None
        return cls(source, clock=clock, ttl=ttl)  # type: ignore[arg-type]

    async def current(self) -> catalog.Catalog:
        """The catalog, asked of the cloud when the one held is older than ``ttl``;
        ``provider.CloudError`` when it cannot be read and none was read before."""
        if self.source is None:
            return catalog.NOTHING
        async with self._lock:  # one read at a time: the others get its answer
            held = self._catalog
            if held is not None and self.clock.now() < self._next_read:
                return held
            try:
                read = await self.source.catalog()
            except provider.CloudError as error:
                if held is None:
                    raise
                self._next_read = self.clock.now() + self.retry
                log.warning("event=catalog-read-failed kept=previous error=%r", str(error))
                return held
            self._catalog = read
            self._next_read = self.clock.now() + self.ttl
            log.info(
                "event=catalog-read types=%d offerings=%d", len(read.types), len(read.offerings)
            )
            return read

    def known(self) -> catalog.Catalog | None:
        """The catalog last read, without asking (None before the first read)."""
        return self._catalog
