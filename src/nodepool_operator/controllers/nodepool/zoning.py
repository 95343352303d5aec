"""Zones on the NodePool side: where a launch puts its VMs, which VMs a scale-down takes.

A launch asks for the zones the pool's ScaleRequests named (``api.zones``: what VMs made
since each request have not served yet), then for the zone with the fewest of the pool's
VMs; backed-off zones are skipped. The requests are read from the cache each launch, so a
restart between applying a request and launching its VMs launches them where it said.

A scale-down takes, past the VMs that go first anyway (draining, consolidating, without a
Node, not Ready), Ready VMs from the zone that has the most of the pool's VMs, then the
emptiest, then the newest (highest index): the pool stays balanced as it shrinks.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import zones as zones_api
from nodepool_operator.cloud.provider import VirtualMachine, VmName
from nodepool_operator.controllers.nodepool import plan

__all__ = ["ZonePlacer", "balanced_victims", "requested_zones", "zones_of"]


@dataclasses.dataclass(eq=False)
class ZonePlacer:
    """Where one launch's VMs go: the zones requests still want first, then the zones with
    the fewest of the pool's VMs, counting each VM as it is placed."""

    zones: tuple[str, ...]
    placed: Counter[str]  # the pool's VMs per zone, those placed in this launch included
    requested: Counter[str]  # what the pool's requests still want per zone
    _claimed: set[str] = dataclasses.field(default_factory=set)  # names placed for a request

    @classmethod
    def for_pool(
        cls,
        template: nodepool_api.NodeTemplate,
        vms: Sequence[VirtualMachine],
        requests: Iterable[Mapping[str, Any]],
    ) -> ZonePlacer:
        """For a pool whose live VMs are ``vms`` and whose ScaleRequests are ``requests``."""
        return cls(template.zones, zones_of(vms), requested_zones(requests, vms))

    def place(
        self, names: Sequence[VmName], *, blocked: frozenset[str]
    ) -> list[tuple[VmName, str | None]]:
        """A zone for each of ``names``, never a ``blocked`` one (fewer when all are)."""
        where = zones_api.next_zones(
            self.zones, count=len(names), counts=self.placed, wanted=self.requested, blocked=blocked
        )
        placed = list(zip(names, where, strict=False))
        for name, zone in placed:
            if zone is None:
                continue
            self.placed[zone] += 1
            if self.requested[zone] > 0:
                self.requested[zone] -= 1
                self._claimed.add(name)
        return placed

    def unplace(self, name: str, zone: str | None) -> None:
        """The VM ``name`` placed in ``zone`` was not made: its zone is free again."""
        if zone is None:
            return
        self.placed[zone] -= 1
        if name in self._claimed:
            self._claimed.discard(name)
            self.requested[zone] += 1


def requested_zones(
    requests: Iterable[Mapping[str, Any]], vms: Iterable[VirtualMachine]
) -> Counter[str]:
    """Where the pool's requests still want new VMs, given the VMs it has."""
    members = [zones_api.Member(zone=vm.zone, created=vm.created_at) for vm in vms]
    return zones_api.unserved(zones_api.claims_of(requests), members)


def balanced_victims(view: plan.PoolView, excess: int, *, zoned: bool) -> list[VmName]:
    """The ``excess`` VMs to remove: ``plan.pick_victims``'s order for those that go
    first anyway and for protected Nodes; among the Ready rest, most-populated zone first.
    Stable across reconciles: a victim starts draining, and draining Nodes go first."""
    if excess <= 0:
        return []
    if not zoned:
        return plan.pick_victims(view, excess)
    by_name = {vm.name: vm for vm in view.vms}
    costs = {vm.name: plan.victim_cost(view, vm) for vm in view.vms}
    ordered = sorted(costs, key=costs.__getitem__)
    first = [n for n in ordered if costs[n][0] < plan.READY_RANK]
    middle = [n for n in ordered if costs[n][0] == plan.READY_RANK]
    last = [n for n in ordered if costs[n][0] > plan.READY_RANK]
    count = Counter(vm.zone for vm in view.vms)
    for name in first:
        count[by_name[name].zone] -= 1
    balanced: list[VmName] = []
    while middle and len(first) + len(balanced) < excess:
        pick = min(middle, key=lambda n: _balance_cost(view, by_name[n], count))
        middle.remove(pick)
        count[by_name[pick].zone] -= 1
        balanced.append(pick)
    return [*first, *balanced, *middle, *last][:excess]


def _balance_cost(
    view: plan.PoolView, vm: VirtualMachine, count: Mapping[str | None, int]
) -> tuple[int, int, int, str]:
    _, _, suffix = vm.name.rpartition("-")
    index = int(suffix) if suffix.isdigit() else -1
    return (-count.get(vm.zone, 0), view.pods_per_node.get(vm.name, 0), -index, vm.name)


def zones_of(vms: Sequence[VirtualMachine]) -> Counter[str]:
    """The pool's VMs per zone."""
    return Counter(vm.zone for vm in vms if vm.zone is not None)
