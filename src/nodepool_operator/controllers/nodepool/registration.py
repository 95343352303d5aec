"""Registration: each RUNNING VM of a pool gets its Node.

A Node is created with everything a kubelet would report (``nodes.node_manifest``); one
that exists already (an earlier run made it) is just as good. The API server may refuse
one for good (422: a template label it will not take): the pass says so and the pool
pauses its creations (``backoff``).

A Node we created shows in the cache a moment later; until then it is expected
(client-go's "expectations"), so a pass in between does not create it again nor takes
its VM for one that never registered. The expectation ends as soon as the cache has
caught up with the create's resourceVersion: from then on the cache alone answers, as it
does for a restarted operator that listed the Nodes first.

A Node is created with ``nodes.UNREGISTERED_TAINT``; ``initialise`` removes it once the
kubelet (or kwok) has reported (``nodes.kubelet_reported``). The Node's Ready change
wakes the pool, so no polling waits for it. A Node that keeps the taint past
``registrationTimeoutSeconds`` since its creation is replaced as one that never turned
Ready (``repair``).

A real kubelet may register its Node before the operator does (the operator was down or
failing over while the VM booted, or was just slower). Such a Node is the VM's, and is
adopted (``adoptable``, ``_adopt``): an owner reference to the pool (by uid) and the
pool's labels and template taints, with the resourceVersion it was read at, so nothing
another writer added meanwhile is lost. It is the VM's if its provider ID names the VM or,
where the kubelet sets none (hollow kubelets), if it was created no earlier than the VM
(the Node's creationTimestamp against the VM's creation time; both are records of the
world, so a restarted operator judges alike). A Node older than its VM is someone
else's that took the name first: left alone, as a taken name. So is one owned by another
NodePool, labelled for another pool, or being deleted. Either order of registration thus
ends with one owned Node per VM; the unregistered taint, which the launch asks the
kubelet to register with, is lifted on the kubelet's own readiness as for any Node.

A VM RUNNING without a Node for longer than ``registrationTimeoutSeconds`` since the
cloud created it (its Node keeps being removed, or never shows) is overdue and replaced
(``repair``). The clock is the VM's creation time as the cloud records it, so a restarted
operator reaches the same verdict at the same time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from nodepool_operator import timestamps
from nodepool_operator.api import drift, nominations, wellknown
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud.provider import VirtualMachine, VmState
from nodepool_operator.controllers import offerings
from nodepool_operator.controllers.nodepool import inventory, offering_plan, plan
from nodepool_operator.controllers.nodepool import metrics as pool_metrics
from nodepool_operator.controllers.nodepool import nodes as node_ops
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import errors, kinds, versions
from nodepool_operator.runtime import nodes as k8s_nodes
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.informer import Informer

__all__ = ["NODE_EXPECTATION_SECONDS", "NODE_REFUSED", "Refusal", "Registrar", "adoptable"]

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

#: The reason of a pause (and of ``Degraded``) when the API server refused a Node (422).
NODE_REFUSED = "NodeInvalid"
#: How long a Node we created may take to appear in the cache before we stop waiting.
NODE_EXPECTATION_SECONDS = 30.0

#: (reason, message) of a Node the API server refused for good.
Refusal = tuple[str, str]


@dataclasses.dataclass(kw_only=True, eq=False)
class Registrar:
    client: Client
    nodes: Informer
    config: NodePoolConfig
    wall_clock: clock_module.WallClock
    # The cloud's catalog: a VM of a pool with requirements is registered with its
    # offering's shape and labels (``offering_plan.vm_template``).
    offerings: offerings.OfferingsCatalog | None = None
    # Node created -> (until when we wait for it, its resourceVersion)
    _expected: dict[str, tuple[float, str]] = dataclasses.field(default_factory=dict, init=False)

    def overdue(
        self,
        vm: VirtualMachine,
        view: plan.PoolView,
        spec: nodepool_api.NodePoolSpec,
        *,
        now: float,
    ) -> bool:
        """RUNNING, created by the cloud more than the registration timeout ago, and no
        Node in the cache nor one created a moment ago."""
        return (
            vm.state == VmState.RUNNING
            and vm.name not in view.nodes
            and vm.name not in self._expected
            and now - vm.created_at >= spec.registration_timeout_seconds
        )

    def overdue_in(
        self, view: plan.PoolView, spec: nodepool_api.NodePoolSpec, *, now: float
    ) -> float | None:
        """Seconds until a VM without a Node becomes overdue by time alone."""
        waits = [
            vm.created_at + spec.registration_timeout_seconds - now
            for vm in view.vms
            if vm.name not in view.nodes
        ]
        return min((w for w in waits if w > 0), default=None)

    def expected(self) -> frozenset[str]:
        """The Nodes created or adopted a moment ago that the cache may not show yet."""
        return frozenset(self._expected)

    def forget_seen(self) -> None:
        """Drop the expectations the cache has met: it shows the Node, or it has caught up
        with the Node's creation (and the Node was deleted since), or we waited long enough."""
        now = self.wall_clock.time()
        cache_version = self.nodes.resource_version
        self._expected = {
            name: (until, version)
            for name, (until, version) in self._expected.items()
            if until > now
            and self.nodes.get(name) is None
            and not _caught_up(cache_version, version)
        }

    async def register(
        self, pool: Object, spec: nodepool_api.NodePoolSpec, vms: Sequence[VirtualMachine]
    ) -> Refusal | None:
        """Create the Nodes of the running VMs among ``vms`` (which have none) unless
        created a moment ago, a bounded number at a time, so that the Nodes of one
        decision reach the scheduler together. The first goes alone: the Nodes share the
        pool's template, so a 422 refuses them all, and is met once rather than once per
        Node; the others are then not tried. A refusal is the answer even when another
        create failed (that error is logged); without one, the first error is raised."""
        now = self.wall_clock.time()
        self.forget_seen()
        due = [vm for vm in vms if vm.state == VmState.RUNNING and vm.name not in self._expected]
        if not due:
            return None
        answers, failures = await _first_alone_then_bounded(
            due,
            lambda vm: self._create_node(pool, spec, vm, now=now),
            parallelism=self.config.create_parallelism,
            go_on=lambda refused: refused is None,
        )
        refusal = next((answer for answer in answers if answer is not None), None)
        # Only the API server's answers give way to a refusal: a fault of ours is raised.
        faults = [f for f in failures if not isinstance(f, errors.ApiError)]
        if faults or (refusal is None and failures):
            raise (faults or failures)[0]
        for failure in failures:
            # The refusal is the pass's answer (the pool pauses its creations and says
            # why); the Nodes these creates were for are tried again after the pause.
            log.warning("event=node-create-failed error=%r", failure)
        return refusal

    async def initialise(
        self,
        view: plan.PoolView,
        *,
        pool: str,
        requests: Sequence[Object] = (),
        registration_seconds: float = math.inf,
    ) -> float | None:
        """Remove the unregistered taint from the Nodes of ``view`` whose kubelet has
        reported, a bounded number at a time (as ``register``): the Nodes of one decision
        then turn schedulable together, and kube-scheduler, which retries a waiting pod on
        each Node that turns and backs it off longer after each miss, finds them all at
        once. Only Nodes the cache shows Ready are read again: the others cannot be.

        A Node a request of the pool (``requests``) asked to hold for nominations keeps the
        taint until the Autoscaler has nominated its pods there (and those of the Nodes
        released with it) or the wait runs out, never past half ``registration_seconds``
        (``api.nominations.holds``); the seconds until the first such wait ends are
        returned (None: none ends without an event), so the pool is looked at again then."""
        created: dict[str, float] = {vm.name: vm.created_at for vm in view.vms}
        now = self.wall_clock.time()
        held = nominations.holds(
            view.nodes,
            requests,
            now=now,
            is_ready=k8s_nodes.is_ready,
            registration_seconds=registration_seconds,
        )
        due = [
            name
            for name, node in view.nodes.items()
            if not node["metadata"].get("deletionTimestamp")
            and node_ops.is_unregistered(node)
            and k8s_nodes.is_ready(node)
            and name not in held
        ]

        async def one(name: str, read: Object) -> None:
            if not await node_ops.remove_unregistered_taint(self.client, name, read=read):
                return
            if name not in created:
                log.info("event=node-initialised node=%s", name)
                return
            since = max(0.0, self.wall_clock.time() - created[name])
            pool_metrics.nodepool_node_initialization_seconds.labels(pool=pool).observe(since)
            log.info("event=node-initialised node=%s vm_age=%.1fs", name, since)

        if due:
            # Every Node read first, then every patch sent at once (bounded), not one Node
            # after another: the Nodes of one plan, released together after their
            # nominations, must turn schedulable as close together as they can, or
            # kube-scheduler tries the pods nominated on the later ones while those are
            # still tainted and clears the nominations.
            limit = asyncio.Semaphore(self.config.create_parallelism)

            async def bounded(work: Awaitable[T]) -> T:
                async with limit:
                    return await work

            reads = await asyncio.gather(
                *(bounded(node_ops.reported_and_tainted(self.client, n)) for n in due),
                return_exceptions=True,
            )
            failures = [r for r in reads if isinstance(r, BaseException)]
            patches = [
                bounded(one(name, read))
                for name, read in zip(due, reads, strict=True)
                if read is not None and not isinstance(read, BaseException)
            ]
            outcomes = await asyncio.gather(*patches, return_exceptions=True)
            failures += [o for o in outcomes if isinstance(o, BaseException)]
            if failures:
                raise failures[0]
        ends = [until for until in held.values() if until != math.inf]
        return max(0.0, min(ends) - now) if ends else None

    async def _adopt(
        self,
        pool: Object,
        spec: nodepool_api.NodePoolSpec,
        vm: VirtualMachine,
        node: Object,
    ) -> Object | None:
        """Make ``node`` (``adoptable``) the pool's: owner reference, pool labels, template
        taints it lacks. Patched at the resourceVersion it was read at; on a conflict or
        if it is gone, None (the next pass reads it again)."""
        ours = node_ops.owner_reference(pool)
        meta = node["metadata"]
        template = self._template(spec, vm)
        zone = vm.zone if template.zones else None
        labels = {
            **nodepool_api.node_labels(str(pool["metadata"]["name"]), template, zone=zone),
            wellknown.HOSTNAME_LABEL: vm.name,
        }
        taints = list((node.get("spec") or {}).get("taints") or ())
        present = {(t.get("key"), t.get("effect")) for t in taints}
        # Only the template's own taints: a startup taint its agent already removed is
        # never put back, and the unregistered one is the launch's to ask for.
        taints += [t.to_dict() for t in template.taints if (t.key, t.effect) not in present]
        patch: dict[str, Any] = {
            "metadata": {
                "resourceVersion": meta["resourceVersion"],
                "labels": labels,
                "ownerReferences": [*(meta.get("ownerReferences") or ()), ours],
            },
        }
        if taints:
            patch["spec"] = {"taints": taints}
        try:
            adopted = await self.client.patch(kinds.NODES, vm.name, patch)
        except (errors.Conflict, errors.NotFound) as error:
            log.info("event=node-adoption-deferred node=%s error=%r", vm.name, error.message)
            return None
        log.info(
            "event=node-adopted node=%s provider_id=%s created=%s",
            vm.name,
            (node.get("spec") or {}).get("providerID") or "-",
            meta.get("creationTimestamp"),
        )
        return adopted

    def _template(
        self, spec: nodepool_api.NodePoolSpec, vm: VirtualMachine
    ) -> nodepool_api.NodeTemplate:
        """What ``vm``'s Node is: the pool's template, or its offering's shape and labels."""
        known = None if self.offerings is None else self.offerings.known()
        return offering_plan.vm_template(spec, vm, known)

    async def _create_node(
        self, pool: Object, spec: nodepool_api.NodePoolSpec, vm: VirtualMachine, *, now: float
    ) -> Refusal | None:
        """Register ``vm`` as a Node; (reason, message) if the API server refuses it."""
        body = node_ops.node_manifest(
            pool=pool,
            vm=vm,
            template=self._template(spec, vm),
            simulated=self.config.simulated_nodes,
            unregistered=True,
            spec_hash=drift.spec_hash(spec).text,
        )
        try:
            created = await self.client.create(kinds.NODES, body)
        except errors.AlreadyExists:
            # Created by an earlier run (or a create whose answer was lost): just as good.
            # Its version, so the expectation ends once the cache has seen that far.
            found = await node_ops.node_named(self.client, vm.name)
            if found is None:
                return None  # deleted since: the next pass creates it again
            created = found
            if not inventory.owned_by(created, pool["metadata"].get("uid")):
                if not adoptable(created, vm, pool=str(pool["metadata"]["name"])):
                    # Someone else's Node holds the name (taken before the VM was made):
                    # it is left alone, and the VM, never registered, is replaced once
                    # overdue by one whose name is free (``launch`` skips held names).
                    log.warning("event=node-name-taken node=%s", vm.name)
                    return None
                adopted = await self._adopt(pool, spec, vm, created)
                if adopted is None:
                    return None  # changed or gone meanwhile: the next pass looks again
                created = adopted
        except errors.Invalid as error:
            log.warning("event=node-refused node=%s error=%r", vm.name, error.message)
            return NODE_REFUSED, f"the API server refused Node {vm.name}: {error.message}"
        version = str(created.get("metadata", {}).get("resourceVersion", ""))
        self._expected[vm.name] = (now + NODE_EXPECTATION_SECONDS, version)
        log.info("event=node-registered node=%s", vm.name)
        return None


def adoptable(node: Mapping[str, Any], vm: VirtualMachine, *, pool: str) -> bool:
    """Whether ``node``, not owned by the pool, is the one ``vm``'s kubelet registered:
    its provider ID names the VM or, without one, it was created no earlier than the VM;
    never a Node being deleted, owned by a NodePool, or labelled for another pool."""
    meta = node.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return False
    if any(ref.get("kind") == nodepool_api.KIND for ref in meta.get("ownerReferences") or ()):
        return False
    if wellknown.pool_of(node) not in (None, pool):
        return False
    provider_id = (node.get("spec") or {}).get("providerID")
    if provider_id:
        return bool(provider_id == vm.provider_id)
    created = timestamps.parse_rfc3339(meta.get("creationTimestamp"))
    # creationTimestamp has whole seconds: a Node made in the VM's second is after it.
    return created is not None and created >= math.floor(vm.created_at)


async def _first_alone_then_bounded(
    items: Sequence[T],
    work: Callable[[T], Awaitable[R]],
    *,
    parallelism: int,
    go_on: Callable[[R], bool],
) -> tuple[list[R], list[Exception]]:
    """``work`` on the first item alone, then, if ``go_on`` its answer, on the rest at most
    ``parallelism`` at a time; the answers in order, and the errors of those that failed.

    The items are one pool's Nodes, which share its template: an answer for good (a 422
    on a create, a 403 on a patch) is met once rather than once per Node. The rest all run
    to their end, and an error of one does not hide the answers of the others (a refusal
    among them is still the pass's to report); the first item's error is raised at once,
    as there are no others.
    """
    first = await work(items[0])
    if len(items) == 1 or not go_on(first):
        return [first], []
    limit = asyncio.Semaphore(parallelism)

    async def bounded(item: T) -> R:
        async with limit:
            return await work(item)

    rest = await asyncio.gather(*(bounded(item) for item in items[1:]), return_exceptions=True)
    answers, failures = [first], []
    for answer in rest:
        if isinstance(answer, Exception):
            failures.append(answer)
        elif isinstance(answer, BaseException):
            raise answer  # cancelled, or the process is stopping: not an answer
        else:
            answers.append(answer)
    return answers, failures


def _caught_up(cache_version: str, created_version: str) -> bool:
    order = versions.compare(cache_version, created_version) if created_version else None
    return order is not None and order >= 0
