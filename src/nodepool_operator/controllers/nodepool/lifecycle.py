"""A pool's node lifecycle, one pass at a time, by stage (as Karpenter's NodeClaim):

``inventory``     what the cloud and the cluster hold of the pool
``registration``  each RUNNING VM gets its Node
``repair``        what broke is replaced; nothing is removed on a guess
``disruption``    drifted and expired Nodes are replaced, within the pool's budgets
``launch``        the VMs the pool is short of are created
``termination``   victims are drained, then their VM and their Node go

Every step is idempotent and every timer counts from a time stored in the world (the
VM's creation in the cloud, the Node's creationTimestamp and Ready condition, the drain
mark on the Node), so a crash, a SIGKILL or a new leader between any two steps is
repaired by the next pass, which makes the decisions an uninterrupted run would have.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud import catalog
from nodepool_operator.cloud.provider import CloudProvider, VirtualMachine, VmState
from nodepool_operator.controllers import capacity, offerings, readiness
from nodepool_operator.controllers.nodepool import (
    backoff,
    disruption,
    drain,
    inventory,
    launch,
    offering_plan,
    plan,
    registration,
    repair,
    termination,
    zoning,
)
from nodepool_operator.controllers.nodepool import nodes as node_ops
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.controllers.nodepool.local_data import LocalData
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import Informer

__all__ = ["PoolLifecycle"]


class PoolLifecycle:
    """The stages wired together; what ``controller.Lifecycle`` asks of the world."""

    def __init__(
        self,
        *,
        client: Client,
        nodes: Informer,
        pods: Informer,
        cloud: CloudProvider,
        recorder: EventRecorder,
        config: NodePoolConfig,
        clock: clock_module.Clock,
        wall_clock: clock_module.WallClock,
        scale_requests: Informer | None = None,
        offerings_catalog: offerings.OfferingsCatalog | None = None,
        local_data: LocalData | None = None,
    ) -> None:
        """``scale_requests``: where new VMs go (None: to the least-filled zones).
        ``offerings_catalog``: the cloud's catalog, for pools with requirements (None: the
        empty one). ``local_data``: which pods keep their data on their Node's disk, so
        drift and expiry wait for them (None: not read)."""
        self.config = config
        self.offerings = offerings_catalog
        self.wall_clock = wall_clock
        self.drainer = drain.Drainer(
            client=client, pods=pods, recorder=recorder, config=config, wall_clock=wall_clock
        )
        self.inventory = inventory.Inventory(
            nodes=nodes,
            cloud=cloud,
            drainer=self.drainer,
            recorder=recorder,
            clock=clock,
            local_data=local_data,
        )
        self.registrar = registration.Registrar(
            client=client,
            nodes=nodes,
            config=config,
            wall_clock=wall_clock,
            offerings=offerings_catalog,
        )
        self.launcher = launch.Launcher(
            cloud=cloud,
            client=client,
            inventory=self.inventory,
            recorder=recorder,
            config=config,
            clock=clock,
            requests=scale_requests,
            offerings=offerings_catalog,
        )
        self.terminator = termination.Terminator(
            client=client,
            cloud=cloud,
            inventory=self.inventory,
            drainer=self.drainer,
            recorder=recorder,
            wall_clock=wall_clock,
        )
        self.disrupter = disruption.Disrupter(
            client=client, recorder=recorder, terminator=self.terminator, wall_clock=wall_clock
        )
        self.repairer = repair.Repairer(
            cloud=cloud,
            terminator=self.terminator,
            recorder=recorder,
            config=config,
            clock=clock,
            wall_clock=wall_clock,
        )

    def forget_pool(self, pool: str) -> None:
        """Drop what is remembered of a pool that is gone (a new one may take its name)."""
        self.inventory.forget_pool(pool)
        self.launcher.forget_pool(pool)
        self.repairer.forget_pool(pool)
        self.drainer.forget_pool(pool)
        self.disrupter.forget_pool(pool)

    def wrote_nodes(self, nodes: Sequence[Object]) -> None:
        """``nodes`` as our writes left them: read so until the cache shows as much."""
        self.inventory.wrote_nodes(nodes)

    async def observe(self, pool: Object) -> plan.PoolView:
        return await self.inventory.observe(pool)

    async def tear_down(self, pool: Object) -> tuple[int, drain.DrainProgress]:
        return await self.terminator.tear_down(pool)

    async def converge(
        self,
        pool: Object,
        spec: nodepool_api.NodePoolSpec,
        desired: int,
        *,
        may_create: bool = True,
        may_register: bool = True,
        zones: backoff.ZoneLedger | None = None,
    ) -> plan.PoolView:
        """One step towards ``desired``; returns what it observed before acting.

        With ``may_create`` false (the cloud or the API server refused us and we are
        pausing) no VM is created; with ``may_register`` false (the API server refused a
        Node) no Node is registered either. Everything else (removing what is not
        wanted, repairs, drains) goes on: a refusal never blocks a scale-down. ``zones``
        (the pool's zone backoffs) gains the zones whose VMs never registered or had no
        capacity, and loses those where a launch succeeded.
        """
        # A pool with requirements registers and launches by the catalog: read (or kept
        # from a read less than its TTL ago) before anything else.
        found = await self.offerings.current() if spec.requirements and self.offerings else None
        owned = self.inventory.owned_nodes(pool)
        every_vm = await self.inventory.list_vms(pool, owned)
        view = await self._pair(pool, spec, owned, every_vm, may_register=may_register)
        # After registration: a Node its kubelet registered first is adopted there.
        await self.inventory.note_strangers(pool, ours=self.registrar.expected())
        now = self.wall_clock.time()
        view = dataclasses.replace(view, unhealthy=repair.unhealthy(view, spec, now=now))
        # Drifted and expired Nodes: the pool is sized without those draining for it, and
        # one larger per replacement launched first (``disruption``).
        decided = disruption.plan(view, spec, desired=desired, now=now)
        target = disruption.sized_target(spec, desired, decided)
        verdicts = self._verdicts(disruption.sized(view, decided.drain), spec, target, now=now)
        if zones is not None:
            self._note_unregistered(view, spec, verdicts, zones, may_register=may_register)
        view, progress = await self._repair(pool, spec, view, verdicts, may_register=may_register)
        written, disrupting = await self.disrupter.act(pool, spec, view, decided)
        self.inventory.wrote_nodes(written)
        progress.extend(disrupting)
        sizing = disruption.sized(view, decided.drain)
        live = len(sizing.vms)
        if live < target and may_create:
            grown = await self._scale_up(
                pool, spec, sizing, every_vm, target - live, may_register=may_register, zones=zones
            )
            view = dataclasses.replace(grown, vms=view.vms, nodes=view.nodes)
        elif live > target:
            progress.append(await self.terminator.scale_down(pool, spec, sizing, live - target))
        elif sizing.cancellable:
            await self.terminator.cancel_drains(sizing, sizing.cancellable)
        view = dataclasses.replace(view, drifted=decided.drifted_nodes)
        if decided.recheck_in is not None:
            soonest = decided.recheck_in
            if view.recheck_in is not None:
                soonest = min(soonest, view.recheck_in)
            view = dataclasses.replace(view, recheck_in=soonest)
        drains = termination.combined(progress)
        retry = [
            t for t in (drains.retry_in, view.recheck_in, verdicts.changes_in) if t is not None
        ]
        if found is not None:
            # The VMs this pass found: those it launched count from the next pass on.
            keys = [offering_plan.machine_key(vm) for vm in view.vms]
            cost = offerings.cost_per_hour(
                found, [key if key is not None else (None, None, None) for key in keys]
            )
            view = dataclasses.replace(view, cost_per_hour=cost)
        return dataclasses.replace(
            view, blocked=drains.blocked, recheck_in=min(retry) if retry else None
        )

    async def _repair(
        self,
        pool: Object,
        spec: nodepool_api.NodePoolSpec,
        view: plan.PoolView,
        verdicts: plan.Verdicts,
        *,
        may_register: bool,
    ) -> tuple[plan.PoolView, list[drain.DrainProgress]]:
        """Replace the unhealthy VMs the brake lets through, and those whose Node is
        overdue; the view then carries the ones the brake holds."""
        repairing, held = repair.braked(
            view,
            verdicts.unhealthy - set(verdicts.victims),
            cluster=readiness.cluster_readiness(self.inventory.nodes.items()),
            limits=readiness.UnreadyLimits(
                ok_count=self.config.ok_total_unready_count,
                max_percentage=self.config.max_total_unready_percentage,
            ),
        )
        await self.repairer.tell_held(pool, held)
        view = dataclasses.replace(view, repair_held=held)
        if held is not None:
            recheck = self.config.repair_held_recheck
            soonest = recheck if view.recheck_in is None else min(view.recheck_in, recheck)
            view = dataclasses.replace(view, recheck_in=soonest)
        progress = [
            await self.repairer.repair(pool, spec, view, vm.name)
            for vm in view.vms
            if vm.name not in verdicts.victims
            and (vm.name in repairing or (may_register and vm.name in verdicts.overdue))
        ]
        return view, progress

    def _note_unregistered(
        self,
        view: plan.PoolView,
        spec: nodepool_api.NodePoolSpec,
        verdicts: plan.Verdicts,
        zones: backoff.ZoneLedger,
        *,
        may_register: bool,
    ) -> None:
        """A VM past registration without a Node, or whose Node never reported, is a
        launch that failed in its zone: the zone is backed off, as for no capacity."""
        never = {n for n in verdicts.unhealthy if node_ops.is_unregistered(view.nodes[n])}
        late = verdicts.overdue if may_register else frozenset()
        by_name: dict[str, VirtualMachine] = {vm.name: vm for vm in view.vms}
        for name in sorted(never | late):
            vm = by_name.get(name)
            key = None if vm is None else offering_plan.machine_key(vm)
            # A pool with requirements backs off the VM's offering, not every zone of it.
            offering = (
                (key[0], vm.capacity_type or catalog.ON_DEMAND)
                if key is not None and vm is not None
                else None
            )
            zones.refused(
                None if vm is None else vm.zone,
                shape="" if key is None else key[0],
                reason=capacity.REGISTRATION_TIMEOUT,
                message=f"VM {name} had no Ready Node within registrationTimeoutSeconds="
                f"{spec.registration_timeout_seconds}",
                offering=offering if spec.requirements else None,
            )

    async def judge(
        self, pool: Object, spec: nodepool_api.NodePoolSpec, desired: int, *, now: float
    ) -> plan.Verdicts:
        """The verdicts a pass at ``now`` would reach on the pool as the world shows it,
        without acting on them."""
        self.registrar.forget_seen()
        owned = self.inventory.owned_nodes(pool)
        view = self.inventory.view(owned, await self.inventory.list_vms(pool, owned))
        view = dataclasses.replace(view, unhealthy=repair.unhealthy(view, spec, now=now))
        return self._verdicts(view, spec, desired, now=now)

    def _verdicts(
        self, view: plan.PoolView, spec: nodepool_api.NodePoolSpec, desired: int, *, now: float
    ) -> plan.Verdicts:
        timers = (
            repair.unhealthy_in(view, spec, now=now),
            self.registrar.overdue_in(view, spec, now=now),
        )
        waits = [t for t in timers if t is not None]
        return plan.Verdicts(
            victims=tuple(
                zoning.balanced_victims(
                    view, len(view.vms) - desired, zoned=bool(spec.template.zones)
                )
            ),
            unhealthy=view.unhealthy,
            overdue=frozenset(
                vm.name for vm in view.vms if self.registrar.overdue(vm, view, spec, now=now)
            ),
            stuck=frozenset(self.repairer.stuck(view, now=now)),
            changes_in=max(min(waits), 0.01) if waits else None,
        )

    async def _pair(
        self,
        pool: Object,
        spec: nodepool_api.NodePoolSpec,
        owned: Sequence[Object],
        every_vm: Sequence[VirtualMachine],
        *,
        may_register: bool,
    ) -> plan.PoolView:
        """Pair VMs and Nodes before sizing: remove Nodes whose VM is confirmed gone,
        register running VMs that have no Node, untaint the Nodes whose kubelet has
        reported, delete VMs stuck provisioning."""
        view = self.inventory.view(owned, every_vm)
        deletion_wait = await self.repairer.remove_nodes_without_vm(pool, owned, view)
        if deletion_wait is not None:
            view = dataclasses.replace(view, recheck_in=deletion_wait)
        if may_register:
            waiting = [vm for vm in view.vms if vm.name not in view.nodes]
            refused = await self.registrar.register(pool, spec, waiting)
            view = dataclasses.replace(view, refused=refused)
        name = str(pool["metadata"]["name"])
        held_for = await self.registrar.initialise(
            view,
            pool=name,
            requests=self.launcher.requests_of(name),
            registration_seconds=spec.registration_timeout_seconds,
        )
        if held_for is not None:
            # A Node waiting for nominations: its wait ends without an event.
            soonest = min(held_for, view.recheck_in or held_for)
            view = dataclasses.replace(view, recheck_in=max(soonest, 0.01))
        await self.repairer.remove_stuck_vms(view)
        return view

    async def _launch(
        self,
        pool: Object,
        spec: nodepool_api.NodePoolSpec,
        *,
        live: int,
        every_vm: Sequence[VirtualMachine],
        missing: int,
        zones: backoff.ZoneLedger | None,
    ) -> tuple[list[VirtualMachine], launch.OfferingLaunch]:
        """A pool of the template's shape: its launch tells nothing more."""
        launched = await self.launcher.launch(
            pool, spec, live=live, every_vm=every_vm, missing=missing, zones=zones
        )
        return launched, launch.OfferingLaunch()

    async def _scale_up(
        self,
        pool: Object,
        spec: nodepool_api.NodePoolSpec,
        view: plan.PoolView,
        every_vm: Sequence[VirtualMachine],
        missing: int,
        *,
        may_register: bool,
        zones: backoff.ZoneLedger | None,
    ) -> plan.PoolView:
        """Give back draining Nodes first (the fastest capacity there is), then create
        the VMs still missing; the view says which new VMs still boot."""
        revived = view.cancellable[:missing]
        if revived:
            await self.terminator.cancel_drains(view, revived)
        if missing <= len(revived) or (zones is not None and zones.cannot_grow()):
            return view  # every zone backed off: the status says so, no launch is tried
        launch_one = self.launcher.launch_offerings if spec.requirements else self._launch
        launched, told = await launch_one(
            pool,
            spec,
            live=len(view.vms),
            every_vm=every_vm,
            missing=missing - len(revived),
            zones=zones,
        )
        view = dataclasses.replace(
            view, launch_notes=told.notes, offerings_served=told.served, launch_held=told.held
        )
        booting = tuple(vm.name for vm in launched if vm.state != VmState.RUNNING)
        view = dataclasses.replace(view, launching=booting)
        if may_register and view.refused is None:
            # A VM the create call already reports running gets its Node now, not a poll
            # interval later: the pods waiting for it are scheduled that much sooner.
            fresh = [vm for vm in launched if vm.name not in view.nodes]
            refused = await self.registrar.register(pool, spec, fresh)
            view = dataclasses.replace(view, refused=refused)
        return view
