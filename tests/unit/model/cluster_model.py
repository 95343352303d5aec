"""A model of what the NodePool controller talks to, small enough to reason about and strict
where the real ones are strict: an API server with resourceVersions, generations, 409s,
finalizers and answers that can be lost after the write took effect; caches that lag
behind it until told to catch up; a cloud whose creates can fail, be refused for quota, or
succeed and lose their answer, whose listings can fail or come back empty, and whose VMs
boot, die and finish deleting when the test says so.

The model also watches what the operator does and records what must never happen
(``violations``): a NodePool update without a resourceVersion, a Node deleted while its
VM is still running, a target written from a ScaleRequest based on another target.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud.provider import (
    MachineSpec,
    QuotaExceeded,
    TransientCloudError,
    VirtualMachine,
    VmConflict,
    VmName,
    VmState,
)
from nodepool_operator.controllers.nodepool import lifecycle
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.controllers.nodepool.controller import NodePoolReconciler
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import conditions, errors, testing
from nodepool_operator.runtime.client import Object, Resource

START = 1_800_000_000.0

#: What the model-based tests tried, printed at the end of the session (``conftest.py``).
TRIED = {
    "sequences": 0,
    "steps": 0,
    "crashes": 0,
    "faults": 0,
    "passes": 0,
    "on-call": 0,
    "restart-checks": 0,
}


#: What the roll model (``test_model_roll.py``) tried, printed beside ``TRIED``.
ROLL_TRIED = {
    "sequences": 0,
    "steps": 0,
    "template-edits": 0,
    "budget-edits": 0,
    "expiry-edits": 0,
    "crashes": 0,
    "faults": 0,
    "passes": 0,
    "restart-checks": 0,
    "replaced": 0,
    "most-disrupted-at-once": 0,
}


class Crash(BaseException):  # a BaseException: the operator process dies, nothing catches it
    """The operator is killed between two calls: everything it remembered is lost."""


class WallClock(testing.FakeWallClock):
    def __init__(self) -> None:
        super().__init__(START)


@dataclass
class Tripwire:
    """Kills the operator at its ``calls_left``-th call to the API server or the cloud."""

    calls_left: int | None = None

    def tick(self) -> None:
        if self.calls_left is None:
            return
        self.calls_left -= 1
        if self.calls_left <= 0:
            self.calls_left = None
            raise Crash


class ApiServer(testing.FakeApiServer):
    """The shared fake API server, with faults: the operator killed at a call
    (``tripwire``), answers lost after the write took effect (``lose_answers``), and kwok's
    Nodes Ready at once; and with what must never happen recorded in ``violations``."""

    def __init__(self, *, clock: WallClock, tripwire: Tripwire) -> None:
        super().__init__(wall_clock=clock)
        self.clock = clock
        self.tripwire = tripwire
        self.lose_answers = 0  # the next N operator writes take effect, then their answer is lost
        self.violations: list[str] = []
        self.operator_writes = 0
        self.vm_alive: Callable[[str, str | None], bool] = lambda name, provider_id: False
        # Per pool, the last copy the operator got from the server itself (a GET, or its
        # own update's answer): it knows that one even before its cache does.
        self.seen: dict[str, Object] = {}

    def before(self, verb: str, resource: Resource, name: str) -> None:
        self.tripwire.tick()
        if verb not in ("get", "list"):
            self.operator_writes += 1

    def answer(self, obj: Object) -> Object:
        if self.lose_answers > 0:
            self.lose_answers -= 1
            raise errors.ServerTimeout("the answer was lost after the write took effect")
        return super().answer(obj)

    async def create(self, resource: Resource, body: Object, **kw: Any) -> Object:
        if resource.plural == "nodes":
            # kwok: the Node reports Ready as soon as it exists.
            body = copy.deepcopy(body)
            body.setdefault("status", {})["conditions"] = [
                {
                    "type": "Ready",
                    "status": "True",
                    "lastTransitionTime": conditions.rfc3339(self.clock.time()),
                }
            ]
        return await super().create(resource, body, **kw)

    async def replace(self, resource: Resource, body: Object, **kw: Any) -> Object:
        name = body["metadata"]["name"]
        before = copy.deepcopy(self.objects.get((resource.plural, name)))
        if not body["metadata"].get("resourceVersion"):
            self.violations.append(f"update of {resource.plural}/{name} without resourceVersion")
        try:
            answer = await super().replace(resource, body, **kw)
        finally:
            if resource.plural == "nodepools" and before is not None and self._changed(before):
                self._check_target_write(before, body)
        if resource.plural == "nodepools":
            self.seen[name] = copy.deepcopy(answer)
        return answer

    async def get(self, resource: Resource, name: str, **kw: Any) -> Object:
        found = await super().get(resource, name, **kw)
        if resource.plural == "nodepools":
            self.seen[name] = copy.deepcopy(found)
        return found

    async def delete(self, resource: Resource, name: str, **kw: Any) -> Object:
        before = copy.deepcopy(self.objects.get((resource.plural, name)))
        try:
            return await super().delete(resource, name, **kw)
        finally:
            gone = (resource.plural, name) not in self.objects
            if resource.plural == "nodes" and before is not None and gone:
                provider_id = (before.get("spec") or {}).get("providerID")
                if self.vm_alive(name, provider_id):
                    self.violations.append(f"Node {name} deleted while its VM still runs")

    def _changed(self, before: Object) -> bool:
        """The write of ``before`` took effect (the stored copy has moved on)."""
        now = self.objects.get(("nodepools", before["metadata"]["name"]))
        return now is not None and (
            now["metadata"]["resourceVersion"] != before["metadata"]["resourceVersion"]
        )

    async def create_subresource(self, resource: Resource, name: str, *_: Any, **__: Any) -> Object:
        raise AssertionError(f"no pods in the model, nothing to evict ({name})")

    def _check_target_write(self, stored: Object, body: Object) -> None:
        before = stored["spec"].get("targetNodes")
        after = (body.get("spec") or {}).get("targetNodes")
        if before == after:
            return
        name = stored["metadata"]["name"]
        asked = [
            r
            for r in self.stored("scalerequests")
            if scalerequest_api.spec_of(r).node_pool_name == name
            and scalerequest_api.status_of(r).phase == "Pending"
            and scalerequest_api.spec_of(r).based_on_target_nodes in (None, before)
        ]
        if not asked:
            self.violations.append(
                f"targetNodes of {name} moved {before} -> {after} with no request based on {before}"
            )


def caches(api: ApiServer) -> dict[str, testing.FakeInformer]:
    def cache(
        plural: str, indexes: dict[str, Callable[[Object], list[str]]]
    ) -> testing.FakeInformer:
        return testing.FakeInformer(indexes, server=api, plural=plural)

    return {
        "nodepools": cache("nodepools", {}),
        "nodes": cache("nodes", {"pool": lambda n: [p] if (p := wellknown.pool_of(n)) else []}),
        "pods": cache("pods", {"node": lambda p: []}),
        "scalerequests": cache(
            "scalerequests", {"pool": lambda r: [scalerequest_api.spec_of(r).node_pool_name]}
        ),
    }


@dataclass
class Vm:
    pool: str
    state: VmState
    provider_id: str
    created_at: float


@dataclass
class Cloud:
    """VMs by name; faults are set by the test and consumed by the operator's calls."""

    clock: WallClock
    tripwire: Tripwire
    vms: dict[str, Vm] = field(default_factory=dict)
    boot_at_once: bool = True
    create_faults: list[str] = field(default_factory=list)  # "transient" or "lost", in order
    quota: int | None = None
    listing: str = "ok"  # or "fails", or "empty"
    # Eventually consistent listings (as EC2's): while lagging, VMs created since are not
    # listed yet; a get by name finds them. Only the idempotent name saves a second VM.
    lagging: bool = False
    unlisted: set[str] = field(default_factory=set)
    creations: dict[str, int] = field(default_factory=dict)  # name -> creates that made a VM
    create_calls: int = 0  # every create asked for, refused or not
    incarnations: Iterable[int] = field(default_factory=lambda: itertools.count(1))
    wanted: Callable[[str], int] = lambda pool: 0
    # VMs whose create this operator process got an answer for: it can know of them even
    # when listings do not show them.
    answered: set[str] = field(default_factory=set)
    violations: list[str] = field(default_factory=list)

    async def create_vm(self, *, name: VmName, pool: str, spec: MachineSpec) -> VirtualMachine:
        self.tripwire.tick()
        self.create_calls += 1
        fault = self.create_faults.pop(0) if self.create_faults else None
        if fault == "transient":
            raise TransientCloudError("503 from the cloud; nothing was created")
        found = self.vms.get(name)
        if found is not None:
            if found.pool != pool:
                raise VmConflict(f"VM {name} belongs to {found.pool}")
        else:
            if self.quota is not None and len(self.vms) >= self.quota:
                raise QuotaExceeded(f"quota of {self.quota} VMs reached")
            known = self.known_live(pool)
            if len(known) >= self.wanted(pool):
                self.violations.append(
                    f"VM {name} created while {pool} has {sorted(known)} of {self.wanted(pool)}"
                )
            state = VmState.RUNNING if self.boot_at_once else VmState.PROVISIONING
            provider_id = f"simcloud:///{name}#{next(iter(self.incarnations))}"
            found = self.vms[name] = Vm(pool, state, provider_id, self.clock.time())
            self.creations[name] = self.creations.get(name, 0) + 1
            if self.lagging:
                self.unlisted.add(name)
        if fault != "lost":
            self.answered.add(name)
        if fault == "lost":
            # The answer timed out; the VM exists, and as in an eventually consistent
            # cloud, listings may not show it yet.
            self.unlisted.add(name)
            raise TransientCloudError("timeout; the VM was created all the same")
        return self._seen(name, found)

    async def delete_vm(self, name: VmName) -> None:
        self.tripwire.tick()
        found = self.vms.get(name)
        if found is not None:
            found.state = VmState.DELETING

    async def list_vms(self, *, pool: str) -> list[VirtualMachine]:
        self.tripwire.tick()
        if self.listing == "fails":
            raise TransientCloudError("listing failed")
        if self.listing == "empty":
            return []
        return [
            self._seen(n, vm)
            for n, vm in sorted(self.vms.items())
            if vm.pool == pool and n not in self.unlisted
        ]

    async def get_vm(self, name: VmName) -> VirtualMachine | None:
        self.tripwire.tick()
        found = self.vms.get(name)
        return None if found is None else self._seen(name, found)

    async def close(self) -> None:
        pass

    def known_live(self, pool: str) -> set[str]:
        """The pool's live VMs the operator can know of: those a listing shows, and those
        whose create it got an answer for. A VM whose answer was lost and that listings do
        not show yet is unknown: the idempotent name is what keeps it from a twin."""
        shown = self.listing == "ok"
        return {
            name
            for name, vm in self.vms.items()
            if vm.pool == pool
            and vm.state != VmState.DELETING
            and ((shown and name not in self.unlisted) or name in self.answered)
        }

    def alive(self, name: str, provider_id: str | None) -> bool:
        """A VM of that name (and provider ID, when the Node says) that is not going."""
        found = self.vms.get(name)
        if found is None or found.state == VmState.DELETING:
            return False
        return provider_id is None or found.provider_id == provider_id

    def boot(self) -> None:
        for vm in self.vms.values():
            if vm.state == VmState.PROVISIONING:
                vm.state = VmState.RUNNING

    def finish_deletions(self) -> None:
        self.vms = {n: vm for n, vm in self.vms.items() if vm.state != VmState.DELETING}

    def listing_catches_up(self) -> None:
        self.unlisted.clear()

    def heal(self) -> None:
        self.lagging = False
        self.listing_catches_up()
        self.create_faults.clear()
        self.quota = None
        self.listing = "ok"

    @staticmethod
    def _seen(name: str, vm: Vm) -> VirtualMachine:
        return VirtualMachine(
            name=VmName(name),
            pool=vm.pool,
            cpu="4",
            memory="16Gi",
            state=vm.state,
            provider_id=vm.provider_id,
            created_at=vm.created_at,
        )


class Recorder:
    """Events are best effort and the model does not judge them: kept for reading."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    async def event(self, obj: Any, *, type: str, reason: str, message: str) -> None:
        self.events.append((type, reason))


def new_operator(
    *,
    api: ApiServer,
    caches: dict[str, testing.FakeInformer],
    cloud: Cloud,
    config: NodePoolConfig,
    clock: clock_module.FakeClock,
    wall_clock: WallClock,
) -> NodePoolReconciler:
    """A new operator process over the model's API server, caches and cloud."""
    recorder = Recorder()
    return NodePoolReconciler(
        client=api,  # type: ignore[arg-type]
        pools=caches["nodepools"],  # type: ignore[arg-type]
        scale_requests=caches["scalerequests"],  # type: ignore[arg-type]
        lifecycle=lifecycle.PoolLifecycle(
            client=api,  # type: ignore[arg-type]
            nodes=caches["nodes"],  # type: ignore[arg-type]
            pods=caches["pods"],  # type: ignore[arg-type]
            cloud=cloud,
            recorder=recorder,  # type: ignore[arg-type]
            config=config,
            clock=clock,
            wall_clock=wall_clock,
        ),
        recorder=recorder,  # type: ignore[arg-type]
        config=config,
        clock=clock,
        wall_clock=wall_clock,
    )
