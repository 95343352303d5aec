"""Launch: the VMs a pool is short of are asked of the cloud.

Names are deterministic (``plan.names_to_create``: the lowest free indexes), so a retry
or a restarted operator asks for the same names and the cloud's idempotent create makes
no duplicate. Each VM goes to the zone ``zoning`` picks (the requests' zones, else the
least-filled), never one backed off (``backoff.ZoneLedger``); a zone the cloud says has no
capacity is backed off and its VMs asked for in the other zones within the same launch.
Creates run a bounded number at a time; a permanent refusal (quota) is raised before a
transient one, so the pool's pause starts even if a 503 came first.

A name is free only when neither the cloud nor the cluster has it (``nodepool.names_taken``).
A Node of that name the pool does not own (a hand-made one, another tool's) holds the index
for good; the shared Node cache holds every Node of the cluster, so no read is made for it,
and a Node created since the cache last heard is met at registration, whose create is
refused and whose VM is replaced once overdue. A VM of another pool (the cloud's
``VmConflict``) holds its index too. The next free index is used; the skip follows from
the foreign object's existence, so a restarted operator skips the same names. Past
``MAX_TAKEN_NAMES`` taken names in one launch the pool stops and says why
(``NamesTaken``: a pause, ``Degraded``, an event).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud import catalog
from nodepool_operator.cloud.provider import (
    CloudProvider,
    InsufficientCapacity,
    MachineSpec,
    PermanentCloudError,
    VirtualMachine,
    VmConflict,
    VmName,
)
from nodepool_operator.controllers import capacity, offerings
from nodepool_operator.controllers.nodepool import backoff, inventory, offering_plan, plan, zoning
from nodepool_operator.controllers.nodepool import nodes as node_ops
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.controllers.resources import REQUESTS_BY_POOL
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import Informer

__all__ = [
    "FELL_BACK",
    "FELL_BACK_TO_ON_DEMAND",
    "LIMIT_REACHED",
    "MAX_TAKEN_NAMES",
    "NO_OFFERING",
    "Launcher",
    "NamesTaken",
    "OfferingLaunch",
    "machine_spec",
]

log = logging.getLogger(__name__)

Zones = backoff.ZoneLedger | None  # the pool's zone backoffs for one pass, if kept

#: How many taken names one launch skips before the pool stops and says so: names are
#: taken by hand or by another tool, a few at a time; more means a naming clash to fix.
MAX_TAKEN_NAMES = 16
#: The reason of the event naming a skipped name.
NAME_TAKEN = "NameTaken"
#: A pool with requirements: the reason of the event (and the request's answer) when an
#: offering the cloud had no capacity for was replaced by the next cheapest allowed.
FELL_BACK = "FellBackToNextOffering"
#: ... when that was a spot offering and the one asked for instead is on-demand: the
#: pool pays the on-demand price for that node from now on.
FELL_BACK_TO_ON_DEMAND = "FellBackToOnDemand"
#: ... and the ``Degraded`` reasons when nothing was launched: no offering allowed, or the
#: next node would take the pool beyond its ``limits``.
NO_OFFERING = "NoOffering"
LIMIT_REACHED = "LimitReached"
#: The longest answer message a request keeps (the CRD's bound, with room to spare).
_MAX_ANSWER = 30000


class NamesTaken(PermanentCloudError):  # noqa: N818 (a verdict, named like the cloud's)
    """More names of the pool are held by others than a launch skips: the pool pauses
    its creations and shows this in ``Degraded`` until something changes."""

    code = "NamesTaken"


def node_owner(node: Mapping[str, Any]) -> str:
    """Who holds a Node's name, as a person would look it up."""
    meta = node.get("metadata") or {}
    refs = meta.get("ownerReferences") or ()
    if refs:
        return ", ".join(
            f"{ref.get('kind')}/{ref.get('name')} (uid {ref.get('uid')})" for ref in refs
        )
    pool = wellknown.pool_of(node)
    if pool is not None:
        return f"no owner, labelled {wellknown.POOL_LABEL}={pool}"
    return "no owner"


def machine_spec(
    pool: Object,
    template: nodepool_api.NodeTemplate,
    *,
    zone: str | None,
    offering: catalog.Offering | None = None,
) -> MachineSpec:
    """What the cloud is asked for: the template's shape (``offering``: that instance type
    bought as that capacity type; ``template`` is then the offering's,
    ``offerings.offering_template``)."""
    labels, taints = node_ops.kubelet_flags(str(pool["metadata"]["name"]), template, zone=zone)
    return MachineSpec(
        cpu=template.cpu,
        memory=template.memory,
        pods=template.pods,
        zone=zone,
        pool_uid=pool["metadata"].get("uid"),
        launch=template.provider,
        node_labels=labels,
        node_taints=taints,
        instance_type=None if offering is None else offering.instance_type,
        capacity_type=None if offering is None else offering.capacity_type,
    )


@dataclasses.dataclass(frozen=True)
class OfferingLaunch:
    """What one launch of a pool with requirements tells beyond its VMs: per request, the
    lines its answer gains (offerings launched, fallbacks, a limit); the requests whose
    every named node was placed; why nothing (more) could be launched, if so."""

    notes: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    served: tuple[str, ...] = ()
    held: tuple[str, str] | None = None


@dataclasses.dataclass(kw_only=True, eq=False)
class Launcher:
    cloud: CloudProvider
    client: Client
    inventory: inventory.Inventory
    recorder: EventRecorder
    config: NodePoolConfig
    clock: clock_module.Clock
    # The ScaleRequests, whose zones a launch follows; None: every VM goes balanced.
    requests: Informer | None = None
    # The cloud's catalog, for the pools with requirements (None: the empty catalog).
    offerings: offerings.OfferingsCatalog | None = None
    # pool -> taken names already evented
    _told: dict[str, set[str]] = dataclasses.field(default_factory=dict, init=False)

    async def launch(
        self,
        pool: Object,
        spec: nodepool_api.NodePoolSpec,
        *,
        live: int,
        every_vm: Sequence[VirtualMachine],
        missing: int,
        zones: backoff.ZoneLedger | None = None,
    ) -> list[VirtualMachine]:
        """Create ``missing`` VMs next to the ``live`` ones; those the cloud answered.

        Each goes to a zone ``zoning`` chooses; with ``zones``, backed-off zones are
        passed over, and a zone the cloud says has no capacity is backed off and its VMs
        asked for in the other zones.
        """
        await self._tell_scale_up(pool, live=live, missing=missing)
        started = self.clock.now()
        attempt = _Attempt(
            placer=zoning.ZonePlacer.for_pool(
                spec.template, plan.live_vms(every_vm), self._requests_of(pool)
            ),
            chosen={vm.name for vm in every_vm},
        )
        wanted = missing
        while wanted > 0:
            if zones is not None and zones.cannot_grow() is not None:
                break  # every zone is backed off: the status says so
            names = await self._free_names(pool, attempt.chosen, wanted, attempt.taken)
            if len(attempt.taken) > MAX_TAKEN_NAMES:
                attempt.failures.append(_too_many_taken(attempt.taken))
                break
            placed = attempt.place(names, spec.template, zones)
            if not placed:
                break
            wanted = await self._create(pool, spec, placed, attempt, zones)
        self.inventory.launched(attempt.launched)
        if zones is not None:
            zones.launched(vm.zone for vm in attempt.launched)
        attempt.report(seconds=self.clock.now() - started)
        return attempt.launched

    async def launch_offerings(
        self,
        pool: Object,
        spec: nodepool_api.NodePoolSpec,
        *,
        live: int,
        every_vm: Sequence[VirtualMachine],
        missing: int,
        zones: backoff.ZoneLedger | None = None,
    ) -> tuple[list[VirtualMachine], OfferingLaunch]:
        """``launch`` for a pool with requirements: each VM is an offering
        (``offering_plan``), the one a request named or the cheapest allowed. An offering
        the cloud has no capacity for is backed off (in ``zones``) and its VMs asked for as
        the next cheapest allowed within the same launch; the answers and a ``FellBack``
        event say so."""
        found = catalog.NOTHING if self.offerings is None else await self.offerings.current()
        await self._tell_scale_up(pool, live=live, missing=missing)
        started = self.clock.now()
        placer = offering_plan.OfferingPlacer.for_pool(
            spec, plan.live_vms(every_vm), self._requests_of(pool), found
        )
        attempt = _Attempt(placer=None, chosen={vm.name for vm in every_vm})
        told = _Told()
        wanted = missing
        while wanted > 0:
            allowed = [
                o
                for o in offerings.pool_offerings(
                    spec,
                    found,
                    () if zones is None else zones.entries,
                    now=None if zones is None else zones.now,
                )
                # Without a ledger to back them off in, the refused are skipped here.
                if o.key not in told.refused_keys
            ]
            if not allowed:
                told.held = (NO_OFFERING, _no_offering(spec, found))
                break
            names = await self._free_names(pool, attempt.chosen, wanted, attempt.taken)
            if len(attempt.taken) > MAX_TAKEN_NAMES:
                attempt.failures.append(_too_many_taken(attempt.taken))
                break
            placed = placer.place(names, allowed)
            told.pair_fallbacks(placed)
            if not placed:
                break
            attempt.chosen.update(p.name for p in placed)
            wanted = await self._create_offerings(pool, placed, attempt, zones, placer, told)
        if placer.limit_reached is not None:
            told.held = (LIMIT_REACHED, f"the next node would exceed {placer.limit_reached}")
        self.inventory.launched(attempt.launched)
        if zones is not None:
            zones.launched_offerings(attempt.launched)
        await self._tell_offerings(pool, told)
        outcome = told.outcome(served=placer.served(), wanting=placer.wanting())
        attempt.report(seconds=self.clock.now() - started)
        return attempt.launched, outcome

    async def _create_offerings(
        self,
        pool: Object,
        placed: Sequence[offering_plan.Placement],
        attempt: _Attempt,
        zones: Zones,
        placer: offering_plan.OfferingPlacer,
        told: _Told,
    ) -> int:
        """Ask the cloud for the ``placed`` VMs; how many must be asked for again."""
        limit = asyncio.Semaphore(self.config.create_parallelism)
        pool_name = pool["metadata"]["name"]

        async def create(placement: offering_plan.Placement) -> VirtualMachine:
            chosen = placement.offering
            async with limit:
                return await self.cloud.create_vm(
                    name=placement.name,
                    pool=pool_name,
                    spec=machine_spec(
                        pool, chosen.template, zone=chosen.zone, offering=chosen.offering
                    ),
                )

        attempt.tried += len(placed)
        results = await asyncio.gather(*(create(p) for p in placed), return_exceptions=True)
        again = 0
        for placement, result in zip(placed, results, strict=True):
            if isinstance(result, VmConflict):
                attempt.taken[placement.name] = (
                    f"a VM of another pool in the cloud ({result.message})"
                )
                await self._tell_taken(pool, placement.name, attempt.taken[placement.name])
                placer.unplace(placement)
                again += 1
            elif isinstance(result, InsufficientCapacity):
                chosen = placement.offering
                if zones is not None:
                    zones.refused(
                        chosen.zone,
                        shape=chosen.key[0],
                        reason=capacity.NO_CAPACITY,
                        message=str(result),
                        offering=(chosen.key[0], chosen.capacity_type),
                    )
                told.refused(placement, str(result))
                placer.unplace(placement)
                attempt.chosen.discard(placement.name)  # no VM was made: the name is free
                again += 1  # as the next cheapest offering, if one is left
            elif isinstance(result, BaseException):
                attempt.failures.append(result)
            elif isinstance(result, VirtualMachine):
                attempt.launched.append(result)
                told.launched(placement)
        return again

    async def _tell_offerings(self, pool: Object, told: _Told) -> None:
        """An event per fallback, and one when the launch stopped short (no offering, a
        limit)."""
        for reason, line in told.fallbacks:
            log.warning("event=offering-fell-back reason=%s %s", reason, line)
            await self.recorder.event(pool, type="Warning", reason=reason, message=line)
        if told.held is not None:
            reason, message = told.held
            log.warning("event=offering-launch-held reason=%s message=%r", reason, message)
            await self.recorder.event(pool, type="Warning", reason=reason, message=message)

    async def _tell_scale_up(self, pool: Object, *, live: int, missing: int) -> None:
        await self.recorder.event(
            pool,
            type="Normal",
            reason="ScaleUp",
            message=f"creating {missing} VMs ({live} -> {live + missing})",
        )

    def _requests_of(self, pool: Object) -> list[Object]:
        return self.requests_of(str(pool["metadata"]["name"]))

    def requests_of(self, pool: str) -> list[Object]:
        """The pool's ScaleRequests in the cache (none when no informer was given)."""
        if self.requests is None:
            return []
        return self.requests.by_index(REQUESTS_BY_POOL, pool)

    async def _create(
        self,
        pool: Object,
        spec: nodepool_api.NodePoolSpec,
        placed: Sequence[tuple[VmName, str | None]],
        attempt: _Attempt,
        zones: Zones,
    ) -> int:
        """Ask the cloud for the ``placed`` VMs; how many must be asked for again."""
        limit = asyncio.Semaphore(self.config.create_parallelism)
        pool_name = pool["metadata"]["name"]

        async def create(vm_name: VmName, zone: str | None) -> VirtualMachine:
            async with limit:
                return await self.cloud.create_vm(
                    name=vm_name,
                    pool=pool_name,
                    spec=machine_spec(pool, spec.template, zone=zone),
                )

        placer = attempt.placer
        assert placer is not None  # a zone launch has one
        attempt.tried += len(placed)
        results = await asyncio.gather(*(create(n, z) for n, z in placed), return_exceptions=True)
        again = 0
        for (vm_name, zone), result in zip(placed, results, strict=True):
            if isinstance(result, VmConflict):
                attempt.taken[vm_name] = f"a VM of another pool in the cloud ({result.message})"
                await self._tell_taken(pool, vm_name, attempt.taken[vm_name])
                placer.unplace(vm_name, zone)
                again += 1
            elif isinstance(result, InsufficientCapacity) and zones is not None:
                zones.refused(
                    zone or result.zone,
                    shape=result.shape or "",
                    reason=capacity.NO_CAPACITY,
                    message=str(result),
                )
                placer.unplace(vm_name, zone)
                attempt.chosen.discard(vm_name)  # no VM was made: the name is free again
                again += 1  # in another zone, if one is left
            elif isinstance(result, BaseException):
                attempt.failures.append(result)
            elif isinstance(result, VirtualMachine):
                attempt.launched.append(result)
        return again

    async def _free_names(
        self, pool: Object, chosen: set[str], count: int, taken: dict[str, str]
    ) -> list[VmName]:
        """The next ``count`` names, past ``chosen`` and ``taken``, that no foreign Node
        holds; those found held go to ``taken`` (with their holder), and the search stops
        past ``MAX_TAKEN_NAMES``."""
        free: list[VmName] = []
        limit = asyncio.Semaphore(self.config.create_parallelism)

        async def holder(candidate: str) -> str | None:
            async with limit:
                return await self._node_holder(pool, candidate)

        while len(free) < count and len(taken) <= MAX_TAKEN_NAMES:
            batch = plan.names_to_create(
                pool["metadata"]["name"],
                nodepool_api.names_taken(own=chosen, held=[*taken, *free]),
                count - len(free),
            )
            holders = await asyncio.gather(*(holder(c) for c in batch))
            for candidate, held_by in zip(batch, holders, strict=True):
                if held_by is None:
                    free.append(VmName(candidate))
                else:
                    taken[candidate] = held_by
                    await self._tell_taken(pool, candidate, held_by)
        return free

    async def _node_holder(self, pool: Object, name: str) -> str | None:
        """Who holds ``name`` in the cluster, if a Node the pool does not own has it."""
        node = self.inventory.nodes.get(name)
        if node is None or inventory.owned_by(node, pool["metadata"].get("uid")):
            return None
        return f"Node {name} ({node_owner(node)})"

    async def _tell_taken(self, pool: Object, name: str, holder: str) -> None:
        """One event per taken name and pool (memory only spares repeats: the skip itself
        follows from the holder's existence)."""
        told = self._told.setdefault(pool["metadata"]["name"], set())
        if name in told:
            return
        told.add(name)
        log.warning("event=name-taken name=%s holder=%r", name, holder)
        await self.recorder.event(
            pool,
            type="Warning",
            reason=NAME_TAKEN,
            message=f"name {name} is taken by {holder}; the pool uses the next free index",
        )

    def forget_pool(self, pool: str) -> None:
        self._told.pop(pool, None)


def _no_offering(spec: nodepool_api.NodePoolSpec, found: catalog.Catalog) -> str:
    if found.sells_any_shape:
        return (
            "the cloud has no catalog of instance types: a pool with requirements has no "
            "offering to launch"
        )
    return (
        "no offering of the cloud's catalog is allowed by the pool's requirements, "
        "available and not backed off"
    )


@dataclasses.dataclass(eq=False)
class _Told:
    """What one offering launch reports: what was launched for each request, the
    fallbacks (an offering refused for capacity, and the one launched in its place)."""

    held: tuple[str, str] | None = None
    fallbacks: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (reason, line)
    _refused: list[tuple[offering_plan.Placement, str]] = dataclasses.field(default_factory=list)
    _all_refused: list[tuple[offering_plan.Placement, str]] = dataclasses.field(
        default_factory=list
    )
    _notes: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    _launched: dict[str, Counter[str]] = dataclasses.field(default_factory=dict)

    @property
    def refused_keys(self) -> frozenset[offerings.OfferingKey]:
        """The offerings the cloud refused in this launch."""
        return frozenset(p.offering.key for p, _ in self._all_refused)

    def refused(self, placement: offering_plan.Placement, message: str) -> None:
        self._refused.append((placement, message))
        self._all_refused.append((placement, message))

    def pair_fallbacks(self, placed: Sequence[offering_plan.Placement]) -> None:
        """The VMs placed after refusals take their places, in order."""
        pairs = list(zip(self._refused, placed, strict=False))
        self._refused = self._refused[len(pairs) :]
        for (refused, message), instead in pairs:
            to_on_demand = (
                refused.offering.capacity_type == catalog.SPOT
                and instead.offering.capacity_type == catalog.ON_DEMAND
            )
            line = (
                f"{refused.offering.describe()} had no capacity ({message}); VM"
                f" {instead.name} is asked for as the next cheapest offering the pool"
                f" allows, {instead.offering.describe()}"
                + (": spot fell back to on-demand" if to_on_demand else "")
            )
            self.fallbacks.append((FELL_BACK_TO_ON_DEMAND if to_on_demand else FELL_BACK, line))
            for request in sorted({r for r in (refused.request, instead.request) if r}):
                self._notes.setdefault(request, []).append(f"fell back: {line}")
        for refused, message in self._refused:
            line = f"{refused.offering.describe()} had no capacity ({message}); no other offering"
            self.fallbacks.append((FELL_BACK, line))

    def launched(self, placement: offering_plan.Placement) -> None:
        if placement.request is not None:
            self._launched.setdefault(placement.request, Counter())[
                placement.offering.describe()
            ] += 1

    def outcome(self, *, served: Sequence[str], wanting: Sequence[str]) -> OfferingLaunch:
        """What the launch reports, ``served``: the requests it placed every named node of;
        ``wanting``: those it left short."""
        notes = {request: list(lines) for request, lines in self._notes.items()}
        for request, counts in self._launched.items():
            made = ", ".join(f"{n} x {what}" for what, n in sorted(counts.items()))
            notes.setdefault(request, []).insert(0, f"launched {made}")
        if self.held is not None:
            for request in wanting:
                notes.setdefault(request, []).append(f"not launched yet: {self.held[1]}")
        return OfferingLaunch(
            notes={request: tuple(lines) for request, lines in notes.items() if lines},
            served=tuple(served),
            held=self.held,
        )


@dataclasses.dataclass(eq=False)
class _Attempt:
    """One launch's working state: the names used, where VMs go, what came back."""

    placer: zoning.ZonePlacer | None  # None: an offering launch places its own VMs
    chosen: set[str]  # names asked for or owned
    taken: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> its holder
    launched: list[VirtualMachine] = dataclasses.field(default_factory=list)
    failures: list[BaseException] = dataclasses.field(default_factory=list)
    tried: int = 0

    def report(self, *, seconds: float) -> None:
        """Log the launch; raise a permanent failure before a transient one, if any."""
        log.info(
            "event=vms-created count=%d failed=%d skipped=%d seconds=%.2f",
            len(self.launched),
            self.tried - len(self.launched),
            len(self.taken),
            seconds,
        )
        if self.failures:
            permanent = [f for f in self.failures if isinstance(f, PermanentCloudError)]
            raise (permanent or self.failures)[0]

    def place(
        self, names: Sequence[VmName], template: nodepool_api.NodeTemplate, zones: Zones
    ) -> list[tuple[VmName, str | None]]:
        """A zone for each of ``names`` (fewer when every zone is backed off)."""
        assert self.placer is not None  # a zone launch has one
        blocked = frozenset(z for z in template.zones if zones is not None and zones.blocked(z))
        placed = self.placer.place(names, blocked=blocked)
        self.chosen.update(name for name, _ in placed)
        return placed


def _too_many_taken(taken: Mapping[str, str]) -> NamesTaken:
    shown = "; ".join(f"{name}: {holder}" for name, holder in list(taken.items())[:3])
    return NamesTaken(
        f"{len(taken)} names of the pool are taken by others ({shown}"
        f"{'; ...' if len(taken) > 3 else ''}); the pool creates no VM until they are freed"
        " or the pool is renamed"
    )
