"""Offerings on the NodePool side: which offering each new VM of a pool with requirements
is, and what a VM of such a pool looks like as a Node.

A launch gives each new VM the offering a ScaleRequest named for it
(``spec.newNodeOfferings``) while that request still lacks one, else the cheapest the
pool allows (``offerings.pool_offerings``: allowed, available, not backed off). A request's
offerings are claims that VMs made after it serve (the same rule as its zones,
``api.zones``): a VM of that instance type, zone and capacity type created at or after
the request's creation serves one of its claims, the oldest request first. Both sides
count from facts in the world (the VM's creation time and offering as the cloud reports
them, the request's creationTimestamp), so a restart between applying a request and
launching its VMs launches the offerings it named.

An offering a request named that the pool cannot use now (backed off after the cloud had
no capacity for it, unavailable, not allowed) is served by the cheapest one it can: that
is the fallback the request's answer and a ``FellBack`` event report.

``limits`` (the pool's total cpu and memory) are checked VM by VM: the launch stops
before the VM that would take the pool's nodes beyond them, and says so.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nodepool_operator import timestamps
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud import catalog
from nodepool_operator.cloud.provider import VirtualMachine, VmName
from nodepool_operator.controllers import offerings

__all__ = [
    "OfferingClaim",
    "OfferingPlacer",
    "claims_of",
    "machine_key",
    "unserved",
    "vm_template",
]

#: Requests whose offerings still count: Applied, or not answered as the cache shows them.
_LIVE_PHASES = frozenset({"Pending", "Applied"})


def machine_key(vm: VirtualMachine) -> offerings.OfferingKey | None:
    """The offering a VM was made as (None: a bare shape, or the cloud chose its zone)."""
    if vm.instance_type is None or vm.zone is None:
        return None
    return (vm.instance_type, vm.zone, vm.capacity_type or catalog.ON_DEMAND)


def vm_template(
    spec: nodepool_api.NodePoolSpec, vm: VirtualMachine, found: catalog.Catalog | None
) -> nodepool_api.NodeTemplate:
    """What ``vm``'s Node is: the pool's template for a pool without requirements (or a
    VM made as a bare shape); else the template with the VM's offering's shape and labels
    (``offerings.offering_template``), or, for a type the catalog no longer lists, the
    figures the cloud reports for the VM itself."""
    key = machine_key(vm)
    if not spec.requirements or key is None:
        return spec.template
    instance_type, zone, capacity_type = key
    kind = found.type(instance_type) if found is not None else None
    if kind is None:
        labels = {
            **spec.template.labels,
            wellknown.INSTANCE_TYPE_LABEL: instance_type,
            wellknown.CAPACITY_TYPE_LABEL: capacity_type,
            wellknown.KARPENTER_CAPACITY_TYPE_LABEL: capacity_type,
        }
        return dataclasses.replace(
            spec.template, cpu=vm.cpu, memory=vm.memory, zones=(zone,), labels=labels
        )
    offering = (
        found.offering(instance_type=instance_type, zone=zone, capacity_type=capacity_type)
        if found is not None
        else None
    ) or catalog.Offering(
        instance_type=instance_type,
        zone=zone,
        capacity_type=vm.capacity_type or catalog.ON_DEMAND,
        price_per_hour=0.0,
    )
    return offerings.offering_template(spec.template, kind, offering)


@dataclasses.dataclass(frozen=True)
class OfferingClaim:
    """A request's offerings: ``wanted[key]`` new nodes, asked at ``created`` (epoch s)."""

    request: str
    created: float
    wanted: Mapping[offerings.OfferingKey, int]


def claims_of(requests: Iterable[Mapping[str, Any]]) -> list[OfferingClaim]:
    """The offering claims of a pool's ScaleRequests that name offerings and still count:
    not being deleted, not refused or superseded, not served already (``zonesServed``:
    every node it named was launched, or fell back to another offering)."""
    claims = []
    for request in requests:
        meta = request.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        spec = scalerequest_api.spec_of(request)
        status = scalerequest_api.status_of(request)
        created = timestamps.parse_rfc3339(meta.get("creationTimestamp"))
        live = status.phase in _LIVE_PHASES and not status.zones_served
        if spec.new_node_offerings and live and created is not None:
            wanted: Counter[offerings.OfferingKey] = Counter()
            for asked in spec.new_node_offerings:
                wanted[asked.key] += asked.count
            claims.append(
                OfferingClaim(request=str(meta.get("name", "")), created=created, wanted=wanted)
            )
    return claims


def unserved(claims: Iterable[OfferingClaim], vms: Iterable[VirtualMachine]) -> list[OfferingClaim]:
    """What each claim still lacks, oldest claim first, once the VMs made after it (oldest
    first, each serving one claim at most) have served it; claims lacking nothing left out."""
    free = sorted((vm for vm in vms if machine_key(vm) is not None), key=lambda vm: vm.created_at)
    used = [False] * len(free)
    lacking_claims = []
    for claim in sorted(claims, key=lambda c: (c.created, c.request)):
        lacking: Counter[offerings.OfferingKey] = Counter()
        for key, count in sorted(claim.wanted.items()):
            left = count
            for i, vm in enumerate(free):
                if left == 0:
                    break
                if not used[i] and machine_key(vm) == key and vm.created_at >= claim.created:
                    used[i] = True
                    left -= 1
            if left > 0:
                lacking[key] = left
        if lacking:
            lacking_claims.append(dataclasses.replace(claim, wanted=lacking))
    return lacking_claims


@dataclasses.dataclass(frozen=True)
class Placement:
    """One new VM: its name, its offering, and the request it serves (if one)."""

    name: VmName
    offering: offerings.PricedOffering
    request: str | None = None
    #: The offering the request named that the pool could not use now.
    instead_of: offerings.OfferingKey | None = None


@dataclasses.dataclass(eq=False)
class OfferingPlacer:
    """Which offering each VM of one launch is: the requests' claims first (oldest
    first), then the cheapest allowed; within the pool's ``limits``."""

    claims: list[OfferingClaim]
    limits: nodepool_api.Limits | None
    cpu_millicores: int  # the pool's live VMs' total, those placed in this launch included
    memory_bytes: int
    limit_reached: str | None = None

    @classmethod
    def for_pool(
        cls,
        spec: nodepool_api.NodePoolSpec,
        vms: Sequence[VirtualMachine],
        requests: Iterable[Mapping[str, Any]],
        found: catalog.Catalog | None,
    ) -> OfferingPlacer:
        """For a pool whose live VMs are ``vms`` and whose ScaleRequests are ``requests``."""
        cpu = memory = 0
        for vm in vms:
            capacity = nodepool_api.template_capacity(vm_template(spec, vm, found))
            cpu += capacity["cpu"]
            memory += capacity["memory"]
        return cls(unserved(claims_of(requests), vms), spec.limits, cpu, memory)

    def place(
        self, names: Sequence[VmName], allowed: Sequence[offerings.PricedOffering]
    ) -> list[Placement]:
        """An offering for each of ``names``: fewer when nothing is allowed or a limit
        would be exceeded (``limit_reached`` then says which)."""
        by_key = {o.key: o for o in allowed}
        placed: list[Placement] = []
        for name in names:
            placement = self._next(name, by_key, allowed)
            if placement is None:
                break
            capacity = nodepool_api.template_capacity(placement.offering.template)
            cpu, memory = (
                self.cpu_millicores + capacity["cpu"],
                self.memory_bytes + capacity["memory"],
            )
            beyond = (
                self.limits.exceeded(cpu_millicores=cpu, memory_bytes=memory)
                if self.limits
                else None
            )
            if beyond is not None:
                self.limit_reached = beyond
                break
            self.cpu_millicores, self.memory_bytes = cpu, memory
            self._claim(placement, -1)
            placed.append(placement)
        return placed

    def served(self) -> list[str]:
        """The requests whose every claim this launch has placed."""
        return [c.request for c in self.claims if all(n <= 0 for n in c.wanted.values())]

    def wanting(self) -> list[str]:
        """The requests with a named node this launch has not placed."""
        return [c.request for c in self.claims if any(n > 0 for n in c.wanted.values())]

    def unplace(self, placement: Placement) -> None:
        """The VM of ``placement`` was not made: its claim wants it again."""
        capacity = nodepool_api.template_capacity(placement.offering.template)
        self.cpu_millicores -= capacity["cpu"]
        self.memory_bytes -= capacity["memory"]
        self._claim(placement, +1)

    def _next(
        self,
        name: VmName,
        by_key: Mapping[offerings.OfferingKey, offerings.PricedOffering],
        allowed: Sequence[offerings.PricedOffering],
    ) -> Placement | None:
        for claim in self.claims:
            for key, count in sorted(claim.wanted.items()):
                if count <= 0:
                    continue
                if key in by_key:
                    return Placement(name=name, offering=by_key[key], request=claim.request)
                if allowed:
                    return Placement(
                        name=name, offering=allowed[0], request=claim.request, instead_of=key
                    )
        return Placement(name=name, offering=allowed[0]) if allowed else None

    def _claim(self, placement: Placement, change: int) -> None:
        """The placement's request wants ``change`` more of what it asked."""
        if placement.request is None:
            return
        key = placement.instead_of or placement.offering.key
        for i, claim in enumerate(self.claims):
            if claim.request == placement.request:
                wanted = Counter(claim.wanted)
                wanted[key] += change
                self.claims[i] = dataclasses.replace(claim, wanted=+wanted)
                return
