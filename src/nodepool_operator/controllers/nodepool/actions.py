"""The steps that move a pool towards its desired size; each is safe to repeat.

Every step is idempotent, so a crash (or SIGKILL) between any two of them is repaired by
the next reconcile: VM names are deterministic (a repeated create finds the VM), a Node
that already exists is left alone, a Node whose VM is gone is deleted, a VM that never
became a Node is removed after a timeout, and the victims of a scale-down are marked on
their Nodes (with when their drain started), so a restarted operator finishes the same
drain, with the same deadline, instead of picking others. A VM goes only once its
Node's drain is done (``drain``), and its Node after it; a deleted pool's Nodes too.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud.provider import (
    CloudError,
    CloudProvider,
    MachineSpec,
    PermanentCloudError,
    VirtualMachine,
    VmName,
    VmState,
)
from nodepool_operator.controllers.nodepool import drain, plan
from nodepool_operator.controllers.nodepool import nodes as node_ops
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.controllers.resources import NODES_BY_POOL
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import conditions, errors, kinds, nodes, ratelimit
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import Informer

__all__ = ["NODE_REFUSED", "ListingDoubtful", "PoolActions", "owned_by"]

#: The reason of a pause (and of ``Degraded``) when the API server refused a Node (422).
NODE_REFUSED = "NodeInvalid"

log = logging.getLogger(__name__)

#: How long a Node we created may take to appear in the cache before we stop waiting.
NODE_EXPECTATION_SECONDS = 30.0
#: How long a VM the cloud answered a create for may stay out of its listings (an
#: eventually consistent cloud) before we stop counting it.
VM_EXPECTATION_SECONDS = 60.0


class ListingDoubtful(Exception):  # noqa: N818 (a verdict, not a failure of ours)
    """The cloud's listing of a pool cannot be acted on: it failed, or it is empty while
    the pool owns Nodes (a cloud that lost its state, a wrong endpoint). Nothing is
    deleted on it; ``reason`` and ``message`` go to the pool's ``Degraded`` condition."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def owned_by(node: Mapping[str, Any], uid: str | None) -> bool:
    """The Node's owner reference names the pool by uid: the pool label alone is not
    enough (anyone can set a label; a Node of an older pool of the same name has another
    uid), and a Node we do not own is never changed or deleted."""
    if not uid:
        return False
    refs = (node.get("metadata") or {}).get("ownerReferences") or ()
    return any(ref.get("uid") == uid for ref in refs)


class PoolActions:
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
    ) -> None:
        self.client = client
        self.nodes = nodes
        self.pods = pods
        self.cloud = cloud
        self.recorder = recorder
        self.config = config
        self.wall_clock = wall_clock
        self.drainer = drain.Drainer(
            client=client, pods=pods, recorder=recorder, config=config, wall_clock=wall_clock
        )
        # Nodes we created that the cache has not shown yet (client-go's "expectations"):
        # without this, a reconcile in that window creates them again and meets 409s.
        self._expected_nodes: dict[str, float] = {}
        self.clock = clock
        # Per pool: the runtime's token bucket for Node removals of our own initiative,
        # and when the token it reserved (if any) is ours to use.
        self._deletions: dict[str, ratelimit.BucketRateLimiter[str]] = {}
        self._deletion_at: dict[str, float] = {}
        self._told: dict[str, set[str]] = {}  # pool -> Nodes not ours already evented
        # VM -> (pool, when we first asked for its Node), until the Node shows: the
        # registration timeout counts from there (a Node deleted by hand starts it anew).
        self._registering: dict[str, tuple[str, float]] = {}
        # VMs whose create the cloud answered, until a listing shows them: a listing that
        # lags behind the creates must not make us create others in their place.
        self._launched: dict[str, tuple[VirtualMachine, float]] = {}

    def forget_pool(self, pool: str) -> None:
        """Drop what is remembered of a pool that is gone (a new one may take its name)."""
        self._deletions.pop(pool, None)
        self._deletion_at.pop(pool, None)
        self._told.pop(pool, None)
        self._launched = {n: seen for n, seen in self._launched.items() if seen[0].pool != pool}
        self._registering = {
            vm: asked for vm, asked in self._registering.items() if asked[0] != pool
        }
        self.drainer.forget_pool(pool)

    def owned_nodes(self, pool: Object) -> list[Object]:
        name = pool["metadata"]["name"]
        uid = pool["metadata"].get("uid")
        return [n for n in self.nodes.by_index(NODES_BY_POOL, name) if owned_by(n, uid)]

    async def list_vms(self, pool: Object, owned: Sequence[Object]) -> list[VirtualMachine]:
        """The pool's VMs, or ``ListingDoubtful`` when the answer cannot be acted on."""
        name = pool["metadata"]["name"]
        try:
            vms = await self.cloud.list_vms(pool=name)
        except CloudError as error:
            raise ListingDoubtful(
                "CloudListFailed", f"listing the pool's VMs failed ({error.code}): {error}"
            ) from error
        # Nodes whose VM we deleted ourselves (marked before asking the cloud) are expected
        # to be missing: a crash between the VM's deletion and the Node's leaves one, and
        # an empty listing then is the truth, not a doubtful answer. Any other Node makes
        # an empty listing a reason to act on nothing.
        unaccounted = [n for n in owned if not plan.vm_deletion_requested(n)]
        if not vms and unaccounted:
            raise ListingDoubtful(
                "CloudListEmpty",
                f"the cloud listed no VM for the pool, which owns {len(unaccounted)} Nodes; "
                "nothing is deleted until it lists them again",
            )
        return vms + self._launched_unlisted(name, vms)

    def _launched_unlisted(
        self, pool: str, listed: Sequence[VirtualMachine]
    ) -> list[VirtualMachine]:
        """VMs of ``pool`` created a moment ago that the listing does not show yet."""
        now = self.clock.now()
        shown = {vm.name for vm in listed}
        self._launched = {
            name: (vm, deadline)
            for name, (vm, deadline) in self._launched.items()
            if deadline > now and not (vm.pool == pool and name in shown)
        }
        return [vm for vm, _ in self._launched.values() if vm.pool == pool]

    def deletion_wait(self, pool: str) -> float:
        """0 when a Node of ``pool`` may be removed now (a token is taken), else the
        seconds until the token reserved for the next removal is there."""
        now = self.clock.now()
        reserved = self._deletion_at.get(pool)
        if reserved is not None:
            if reserved > now:
                return reserved - now
            del self._deletion_at[pool]
            return 0.0
        bucket = self._deletions.get(pool)
        if bucket is None:
            bucket = ratelimit.BucketRateLimiter[str](
                clock=self.clock,
                qps=self.config.node_deletions_per_minute / 60.0,
                burst=self.config.node_deletion_burst,
            )
            self._deletions[pool] = bucket
        delay = bucket.when(pool)
        if delay > 0:
            # The bucket kept the reservation: used when it comes due, never asked again.
            self._deletion_at[pool] = now + delay
        return delay

    async def _note_strangers(self, pool: Object) -> None:
        """Nodes with the pool's label that the pool does not own: left alone, told once."""
        name = pool["metadata"]["name"]
        uid = pool["metadata"].get("uid")
        strangers = {
            n["metadata"]["name"]
            for n in self.nodes.by_index(NODES_BY_POOL, name)
            if not owned_by(n, uid)
        }
        told = self._told.setdefault(name, set())
        for node_name in sorted(strangers - told):
            await self.recorder.event(
                pool,
                type="Warning",
                reason="NodeNotOwned",
                message=(
                    f"node {node_name} carries the label {nodepool_api.POOL_LABEL}={name} "
                    "but is not owned by this pool; it is left alone"
                ),
            )
        told.intersection_update(strangers)
        told.update(strangers)

    async def observe(
        self, pool: Object, vms: Sequence[VirtualMachine] | None = None
    ) -> plan.PoolView:
        owned = self.owned_nodes(pool)
        if vms is None:
            vms = await self.list_vms(pool, owned)
        live = plan.live_vms(vms)
        names = {vm.name for vm in live}
        pool_nodes = {n["metadata"]["name"]: n for n in owned if n["metadata"]["name"] in names}
        on_node = {node: self.drainer.pods_to_move(node) for node in pool_nodes}
        return plan.PoolView(
            vms=live,
            nodes=pool_nodes,
            pods_per_node={node: len(found) for node, found in on_node.items()},
            protected=frozenset(
                node
                for node, found in on_node.items()
                if drain.node_is_protected(pool_nodes[node], found)
            ),
        )

    async def converge(
        self,
        pool: Object,
        spec: nodepool_api.NodePoolSpec,
        desired: int,
        *,
        may_create: bool = True,
        may_register: bool = True,
    ) -> plan.PoolView:
        """One step towards ``desired``; returns what it observed before acting.

        With ``may_create`` false (the cloud or the API server refused us and we are
        pausing) no VM is created; with ``may_register`` false (the API server refused a
        Node) no Node is registered either. Everything else (removing what is not
        wanted, repairs, drains) goes on: a refusal never blocks a scale-down.
        """
        owned = self.owned_nodes(pool)
        await self._note_strangers(pool)
        every_vm = await self.list_vms(pool, owned)
        view = await self._tend(pool, spec, owned, every_vm, may_register=may_register)
        now = self.wall_clock.time()
        view = dataclasses.replace(view, unhealthy=_unhealthy(view, spec, now=now))
        victims = plan.pick_victims(view, len(view.vms) - desired)
        progress = [
            await self._repair(pool, spec, view, vm.name)
            for vm in view.vms
            if vm.name not in victims
            and (
                vm.name in view.unhealthy
                or (may_register and self._unregistered(vm, view, spec, now=now))
            )
        ]
        live = len(view.vms)
        if live < desired and may_create:
            view = await self._launch(
                pool, spec, view, every_vm, desired - live, may_register=may_register
            )
        elif live > desired:
            progress.append(await self._scale_down(pool, spec, view, live - desired))
        elif view.cancellable:
            await self._cancel_drains(view, view.cancellable)
        combined = _combined(progress)
        retry = [
            t
            for t in (combined.retry_in, view.recheck_in, _turns_unhealthy_in(view, spec, now))
            if t is not None
        ]
        return dataclasses.replace(
            view, blocked=combined.blocked, recheck_in=min(retry) if retry else None
        )

    async def _tend(
        self,
        pool: Object,
        spec: nodepool_api.NodePoolSpec,
        owned: Sequence[Object],
        every_vm: Sequence[VirtualMachine],
        *,
        may_register: bool,
    ) -> plan.PoolView:
        """Pair VMs and Nodes before sizing: remove Nodes whose VM is confirmed gone,
        register running VMs that have no Node, delete VMs stuck provisioning."""
        view = await self.observe(pool, every_vm)
        deletion_wait = await self._remove_nodes_without_vm(pool, owned, view)
        if deletion_wait is not None:
            view = dataclasses.replace(view, recheck_in=deletion_wait)
        if may_register:
            refused = await self._register_nodes(pool, spec, view)
            view = dataclasses.replace(view, refused=refused)
        await self._remove_stuck_vms(view)
        return view

    async def _launch(
        self,
        pool: Object,
        spec: nodepool_api.NodePoolSpec,
        view: plan.PoolView,
        every_vm: Sequence[VirtualMachine],
        missing: int,
        *,
        may_register: bool,
    ) -> plan.PoolView:
        """Scale up by ``missing``; the view says which new VMs still boot."""
        launched = await self._scale_up(pool, spec, view, every_vm, missing)
        booting = tuple(vm.name for vm in launched if vm.state != VmState.RUNNING)
        view = dataclasses.replace(view, launching=booting)
        if may_register and view.refused is None:
            # A VM the create call already reports running gets its Node now, not a poll
            # interval later: the pods waiting for it are scheduled that much sooner.
            fresh = [vm for vm in launched if vm.name not in view.nodes]
            view = dataclasses.replace(view, refused=await self._register(pool, spec, fresh))
        return view

    def _unregistered(
        self,
        vm: VirtualMachine,
        view: plan.PoolView,
        spec: nodepool_api.NodePoolSpec,
        *,
        now: float,
    ) -> bool:
        """Running, its Node asked for more than the registration timeout ago, and still
        no Node (its create keeps being refused, or it is removed over and over)."""
        asked = self._registering.get(vm.name)
        return (
            vm.state == VmState.RUNNING
            and vm.name not in view.nodes
            and asked is not None
            and now - asked[1] >= spec.registration_timeout_seconds
        )

    async def _repair(
        self, pool: Object, spec: nodepool_api.NodePoolSpec, view: plan.PoolView, vm: VmName
    ) -> drain.DrainProgress:
        """Replace a broken Node: drained as far as the drain rules allow, then its VM and
        the Node go; the size check then creates a new VM under the normal naming."""
        name = pool["metadata"]["name"]
        node = view.nodes.get(vm)
        if node is None or not plan.is_draining(node):
            wait = self.deletion_wait(name)  # a repair starts only within the budget
            if wait > 0:
                return drain.DrainProgress(done=False, retry_in=wait)
            why = (
                f"VM {vm} has had no Node for more than registrationTimeoutSeconds="
                f"{spec.registration_timeout_seconds}"
                if node is None
                else f"node {vm} is not Ready past notReadyTimeoutSeconds="
                f"{spec.not_ready_timeout_seconds} (or registrationTimeoutSeconds="
                f"{spec.registration_timeout_seconds} if it never was)"
            )
            await self.recorder.event(
                pool, type="Warning", reason="NodeRepair", message=f"{why}; replacing it"
            )
            log.warning("event=node-repair vm=%s", vm)
        if node is None:
            await self.cloud.delete_vm(vm)
            return drain.DrainProgress(done=True)
        return await self._remove_drained(pool, spec, node, vm=vm)

    async def _remove_nodes_without_vm(
        self, pool: Object, owned: Sequence[Object], view: plan.PoolView
    ) -> float | None:
        """Remove our Nodes whose VM the cloud confirms gone, within the pool's deletion
        budget; the seconds until the next token when one had to wait."""
        name = pool["metadata"]["name"]
        live = {vm.name for vm in view.vms}
        for node in owned:
            node_name = node["metadata"]["name"]
            if node_name in live:
                continue
            reserved = self._deletion_at.get(name)
            if reserved is not None and reserved > self.clock.now():
                return reserved - self.clock.now()  # no cloud call before the token is due
            if not await self._vm_confirmed_gone(node):
                continue
            wait = self.deletion_wait(name)
            if wait > 0:
                return wait
            log.info(
                "event=delete-node-without-vm node=%s",
                node_name,
            )
            await self.recorder.event(
                pool,
                type="Warning",
                reason="NodeWithoutVm",
                message=f"node {node_name}: the cloud confirms its VM is gone; removing it",
            )
            await self._delete_node(node_name)
        return None

    async def _vm_confirmed_gone(self, node: Mapping[str, Any]) -> bool:
        """The cloud, asked for this one VM, says it is gone (or going): no VM of that
        name, or one with another provider ID (a new VM took the name), or one deleting.
        A listing that left it out is not enough, nor is a failed get."""
        name = VmName(str(node["metadata"]["name"]))
        provider_id = (node.get("spec") or {}).get("providerID")
        try:
            vm = await self.cloud.get_vm(name)
        except CloudError as error:
            log.warning("event=vm-get-failed vm=%s error=%s", name, error)
            return False
        if vm is None:
            return True
        if provider_id and vm.provider_id != provider_id:
            return True
        return vm.state == VmState.DELETING

    async def _register_nodes(
        self, pool: Object, spec: nodepool_api.NodePoolSpec, view: plan.PoolView
    ) -> tuple[str, str] | None:
        """Create the Node of each running VM that has none; (reason, message) when the
        API server refuses one for good (422)."""
        name = pool["metadata"]["name"]
        waiting = {vm.name for vm in view.vms if vm.name not in view.nodes}
        self._registering = {
            vm: asked
            for vm, asked in self._registering.items()
            if asked[0] != name or vm in waiting
        }
        return await self._register(pool, spec, [vm for vm in view.vms if vm.name in waiting])

    async def _register(
        self, pool: Object, spec: nodepool_api.NodePoolSpec, vms: Sequence[VirtualMachine]
    ) -> tuple[str, str] | None:
        """Create the Nodes of the running VMs among ``vms`` (which have none) unless
        created a moment ago (an expectation), a bounded number at a time, so
        that the Nodes of one decision reach the scheduler together. The first goes
        alone: the Nodes share the pool's template, so a 422 refuses them all, and is met
        once rather than once per Node; the others are then not tried."""
        now = self.wall_clock.time()
        self._expected_nodes = {
            name: deadline
            for name, deadline in self._expected_nodes.items()
            if deadline > now and self.nodes.get(name) is None
        }
        name = pool["metadata"]["name"]
        due = []
        for vm in vms:
            if vm.state != VmState.RUNNING:
                continue
            self._registering.setdefault(vm.name, (name, now))
            if vm.name not in self._expected_nodes:
                due.append(vm)
        if not due:
            return None
        refused = await self._create_node(pool, spec, due[0], now=now)
        if refused is not None or len(due) == 1:
            return refused
        limit = asyncio.Semaphore(self.config.create_parallelism)

        async def create(vm: VirtualMachine) -> tuple[str, str] | None:
            async with limit:
                return await self._create_node(pool, spec, vm, now=now)

        answers = await asyncio.gather(*(create(vm) for vm in due[1:]))
        return next((answer for answer in answers if answer is not None), None)

    async def _create_node(
        self, pool: Object, spec: nodepool_api.NodePoolSpec, vm: VirtualMachine, *, now: float
    ) -> tuple[str, str] | None:
        """Register ``vm`` as a Node; (reason, message) if the API server refuses it."""
        body = node_ops.node_manifest(
            pool=pool, vm=vm, template=spec.template, simulated=self.config.simulated_nodes
        )
        try:
            await self.client.create(kinds.NODES, body)
        except errors.AlreadyExists:
            pass  # created by an earlier run of the operator, just as good
        except errors.Invalid as error:
            log.warning(
                "event=node-refused node=%s error=%r",
                vm.name,
                error.message,
            )
            return NODE_REFUSED, f"the API server refused Node {vm.name}: {error.message}"
        self._expected_nodes[vm.name] = now + NODE_EXPECTATION_SECONDS
        log.info("event=node-registered node=%s", vm.name)
        return None

    async def _remove_stuck_vms(self, view: plan.PoolView) -> None:
        now = self.wall_clock.time()
        for vm in view.vms:
            stuck = (
                vm.state == VmState.PROVISIONING
                and now - vm.created_at > self.config.provisioning_timeout
            )
            if stuck:
                log.warning("event=delete-stuck-vm vm=%s", vm.name)
                await self.cloud.delete_vm(vm.name)

    async def _scale_up(
        self,
        pool: Object,
        spec: nodepool_api.NodePoolSpec,
        view: plan.PoolView,
        every_vm: Sequence[VirtualMachine],
        missing: int,
    ) -> list[VirtualMachine]:
        """Create ``missing`` VMs (fewer if draining Nodes can be given back); the VMs the
        cloud answered with."""
        # A scale-down being undone: nodes still draining are the fastest capacity there is.
        revived = view.cancellable[:missing]
        if revived:
            await self._cancel_drains(view, revived)
            missing -= len(revived)
        if missing <= 0:
            return []
        name = pool["metadata"]["name"]
        names = plan.names_to_create(name, (vm.name for vm in every_vm), missing)
        await self.recorder.event(
            pool,
            type="Normal",
            reason="ScaleUp",
            message=f"creating {missing} VMs ({len(view.vms)} -> {len(view.vms) + missing})",
        )
        template = spec.template
        limit = asyncio.Semaphore(self.config.create_parallelism)

        async def create(vm_name: VmName) -> VirtualMachine:
            # Each VM in the zone its name gives it, which its Node will be labelled with.
            machine = MachineSpec(
                cpu=template.cpu,
                memory=template.memory,
                pods=template.pods,
                zone=nodepool_api.zone_of(vm_name, template),
                pool_uid=pool["metadata"].get("uid"),
                launch=template.provider,
            )
            async with limit:
                return await self.cloud.create_vm(name=vm_name, pool=name, spec=machine)

        started = self.clock.now()
        results = await asyncio.gather(*(create(n) for n in names), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        launched = [vm for vm in results if isinstance(vm, VirtualMachine)]
        deadline = self.clock.now() + VM_EXPECTATION_SECONDS
        self._launched.update((vm.name, (vm, deadline)) for vm in launched)
        log.info(
            "event=vms-created count=%d failed=%d seconds=%.2f",
            len(names) - len(failures),
            len(failures),
            self.clock.now() - started,
        )
        if failures:
            # A permanent refusal (quota) must start the pause even if a 503 came first.
            permanent = [f for f in failures if isinstance(f, PermanentCloudError)]
            raise (permanent or failures)[0]
        return launched

    async def _scale_down(
        self, pool: Object, spec: nodepool_api.NodePoolSpec, view: plan.PoolView, excess: int
    ) -> drain.DrainProgress:
        victims = plan.pick_victims(view, excess)
        fresh = [v for v in victims if v not in view.draining]
        if fresh:
            await self.recorder.event(
                pool,
                type="Normal",
                reason="ScaleDown",
                message=f"removing {len(victims)} nodes: {', '.join(victims)}",
            )
        extra = [n for n in view.cancellable if n not in victims]
        if extra:
            await self._cancel_drains(view, extra)
        progress = []
        for victim in victims:
            node = view.nodes.get(victim)
            if node is None:
                await self.cloud.delete_vm(victim)
                continue
            progress.append(await self._remove_drained(pool, spec, node, vm=victim))
        return _combined(progress)

    async def _remove_drained(
        self,
        pool: Object,
        spec: nodepool_api.NodePoolSpec,
        node: Mapping[str, Any],
        *,
        vm: VmName | None,
    ) -> drain.DrainProgress:
        """One drain pass over ``node``; once it is done, its VM and then the Node go."""
        node_name = str(node["metadata"]["name"])
        progress = await self.drainer.drain(pool, node, timeout_seconds=spec.drain_timeout_seconds)
        if not progress.done:
            return progress
        # The VM first: once it is DELETING, a crash here leaves a Node that the next
        # pass removes as "Node without VM", never a VM that looks like it needs one. The
        # Node says so before the cloud is asked, so that pass can tell an empty listing
        # (the pool's last VM gone) from a cloud that lost its VMs.
        if vm is not None:
            if not plan.vm_deletion_requested(node):
                await node_ops.mark_vm_deleted(self.client, node, at=self.wall_clock.time())
            await self.cloud.delete_vm(vm)
        await self._delete_node(node_name)
        log.info(
            "event=node-removed node=%s",
            node_name,
        )
        return progress

    async def _cancel_drains(self, view: plan.PoolView, names: Sequence[str]) -> None:
        for node_name in names:
            await node_ops.uncordon(self.client, view.nodes[node_name])
            self.drainer.forget_node(node_name)

    async def _delete_node(self, name: str) -> None:
        with contextlib.suppress(errors.NotFound):
            await self.client.delete(kinds.NODES, name)

    async def tear_down(self, pool: Object) -> tuple[int, drain.DrainProgress]:
        """Drain and remove every Node and VM of a pool being deleted: how many remain,
        and how the drains stand."""
        spec = nodepool_api.spec_of(pool)
        owned = self.owned_nodes(pool)
        vms = {vm.name: vm for vm in await self.list_vms(pool, owned)}
        progress = []
        for node in owned:
            node_name = node["metadata"]["name"]
            vm = vms.get(node_name)
            target = vm.name if vm is not None and vm.state != VmState.DELETING else None
            progress.append(await self._remove_drained(pool, spec, node, vm=target))
        for vm in vms.values():
            if vm.state != VmState.DELETING and self.nodes.get(vm.name) is None:
                await self.cloud.delete_vm(vm.name)
        return len(vms) + len(self.owned_nodes(pool)), _combined(progress)


def _unhealthy(
    view: plan.PoolView, spec: nodepool_api.NodePoolSpec, *, now: float
) -> frozenset[str]:
    return frozenset(
        name
        for name, node in view.nodes.items()
        if nodes.is_unhealthy(
            node,
            now=now,
            not_ready_seconds=spec.not_ready_timeout_seconds,
            registration_seconds=spec.registration_timeout_seconds,
        )
    )


def _turns_unhealthy_in(
    view: plan.PoolView, spec: nodepool_api.NodePoolSpec, now: float
) -> float | None:
    """Seconds until a Node not Ready now passes its timeout by time alone (no event
    comes then), so the repair is not left to the next resync."""
    waits = []
    for name, node in view.nodes.items():
        if name in view.unhealthy or nodes.is_ready(node):
            continue
        ready = [
            c
            for c in (node.get("status") or {}).get("conditions") or ()
            if c.get("type") == "Ready"
        ]
        if ready:
            since = conditions.parse_rfc3339(str(ready[0].get("lastTransitionTime", "")))
            timeout = spec.not_ready_timeout_seconds
        else:
            since = conditions.parse_rfc3339(str(node["metadata"].get("creationTimestamp", "")))
            timeout = spec.registration_timeout_seconds
        if since is not None:
            waits.append(max(since + timeout - now, 0.01))
    return min(waits) if waits else None


def _combined(progress: Sequence[drain.DrainProgress]) -> drain.DrainProgress:
    """Several Nodes' drains as one: done when all are, the soonest retry, every block."""
    retries = [p.retry_in for p in progress if p.retry_in is not None]
    return drain.DrainProgress(
        done=all(p.done for p in progress),
        retry_in=min(retries) if retries else None,
        blocked=tuple(sorted(b for p in progress for b in p.blocked)),
    )
