"""The NodePool reconciler on fakes for the ScaleRequest tests: the shared fake API server
recording events and status writes, a cloud whose VMs take a while to show, and the world
that wires them."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.cloud.provider import MachineSpec, VirtualMachine, VmName, VmState
from nodepool_operator.controllers import offerings
from nodepool_operator.controllers.nodepool import lifecycle
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.controllers.nodepool.controller import NodePoolReconciler
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import testing
from nodepool_operator.runtime.client import Object, Resource
from nodepool_operator.runtime.controller import Request
from nodepool_operator.runtime.events import EventRecorder
from unit.nodepool.drain_world import pool_object

NOW = 1_800_000_000.0
CREATED = "2027-01-15T08:00:00Z"  # NOW


class RecordingApi(testing.FakeApiServer):
    """The shared fake API server; events and status writes kept for reading, and hooks
    run before the next update of a pool (another writer getting in first)."""

    def __init__(self) -> None:
        super().__init__(wall_clock=testing.FakeWallClock(NOW))
        self.created: list[tuple[str, Object]] = []
        self.status_patches: list[tuple[str, dict[str, Any]]] = []
        self.before_replace: list[Callable[[], None]] = []

    def hold(self, plural: str, obj: Object) -> None:
        """Store ``obj`` as it is (its resourceVersion included)."""
        self.objects[(plural, obj["metadata"]["name"])] = copy.deepcopy(obj)

    def before(self, verb: str, resource: Resource, name: str) -> None:
        while verb == "replace" and self.before_replace:
            self.before_replace.pop(0)()

    async def create(self, resource: Resource, body: Object, **kw: Any) -> Object:
        self.created.append((resource.plural, copy.deepcopy(body)))
        if resource.plural == "events":
            self.calls.append(("create", "events", body["metadata"].get("name", "")))
            return copy.deepcopy(body)
        return await super().create(resource, body, **kw)

    async def patch(self, resource: Resource, name: str, patch: Any, **kw: Any) -> Object:
        if kw.get("subresource") == "status":
            self.status_patches.append((name, copy.deepcopy(patch["status"])))
        return await super().patch(resource, name, patch, **kw)

    def events(self, reason: str) -> list[Object]:
        return [b for plural, b in self.created if plural == "events" and b["reason"] == reason]

    def request_status(self, name: str) -> dict[str, Any]:
        found = [status for n, status in self.status_patches if n == name]
        assert found, f"no status written for {name}"
        return found[-1]


class LaggingCloud:
    """A cloud whose listings lag: they show nothing, a get finds what was created."""

    #: The state a created VM is in.
    boot_state = VmState.PROVISIONING

    def __init__(self) -> None:
        self.created: list[tuple[str, MachineSpec]] = []
        self.vms: dict[str, VirtualMachine] = {}

    async def get_vm(self, name: VmName) -> VirtualMachine | None:
        return self.vms.get(name)

    async def list_vms(self, *, pool: str) -> list[VirtualMachine]:
        return []

    async def create_vm(self, *, name: VmName, pool: str, spec: MachineSpec) -> VirtualMachine:
        self.created.append((name, spec))
        self.vms[name] = VirtualMachine(
            name=name,
            pool=pool,
            cpu=spec.cpu,
            memory=spec.memory,
            state=self.boot_state,
            provider_id=f"simcloud:///{name}",
            created_at=NOW,
            zone=spec.zone,
            instance_type=spec.instance_type,
            capacity_type=spec.capacity_type,
        )
        return self.vms[name]

    async def delete_vm(self, name: VmName) -> None:
        raise AssertionError("nothing is deleted in these tests")


class World:
    def __init__(
        self,
        *,
        cloud: LaggingCloud | None = None,
        offerings_catalog: offerings.OfferingsCatalog | None = None,
    ) -> None:
        self.api = RecordingApi()
        self.cloud = cloud or LaggingCloud()
        self.pools = testing.FakeInformer({})
        self.requests = testing.FakeInformer(
            {"pool": lambda r: [scalerequest_api.spec_of(r).node_pool_name]}
        )
        self.request_versions = itertools.count(10)
        recorder = EventRecorder(
            self.api,  # type: ignore[arg-type]
            component="nodepool-controller",
            wall_clock=testing.FakeWallClock(NOW),
        )
        config = NodePoolConfig()
        clock = clock_module.FakeClock()
        self.reconciler = NodePoolReconciler(
            client=self.api,  # type: ignore[arg-type]
            pools=self.pools,  # type: ignore[arg-type]
            scale_requests=self.requests,  # type: ignore[arg-type]
            lifecycle=lifecycle.PoolLifecycle(
                client=self.api,  # type: ignore[arg-type]
                nodes=testing.FakeInformer({"pool": lambda n: []}),  # type: ignore[arg-type]
                pods=testing.FakeInformer({"node": lambda p: []}),  # type: ignore[arg-type]
                cloud=self.cloud,  # type: ignore[arg-type]
                recorder=recorder,
                config=config,
                clock=clock,
                wall_clock=testing.FakeWallClock(NOW),
                scale_requests=self.requests,  # type: ignore[arg-type]
                offerings_catalog=offerings_catalog,
            ),
            recorder=recorder,
            config=config,
            clock=clock,
            wall_clock=testing.FakeWallClock(NOW),
        )

    def pool(self, name: str, spec: nodepool_api.NodePoolSpec, *, in_cache: bool = True) -> Object:
        obj = pool_object(spec, name=name)
        self.api.hold("nodepools", obj)
        if in_cache:
            self.pools.put(obj)
        return obj

    def request(
        self,
        name: str,
        *,
        pool: str,
        target: int,
        based_on: int | None = None,
        created: str = CREATED,
        version: str | None = None,
        zones: dict[str, int] | None = None,
        offerings: tuple[scalerequest_api.OfferingCount, ...] = (),
    ) -> Object:
        spec = scalerequest_api.ScaleRequestSpec(
            node_pool_name=pool,
            target_nodes=target,
            based_on_target_nodes=based_on,
            new_node_zones=zones or {},
            new_node_offerings=offerings,
        )
        obj = scalerequest_api.manifest(name, spec)
        obj["metadata"].update(
            uid=f"uid-{name}",
            generation=1,
            creationTimestamp=created,
            resourceVersion=version or str(next(self.request_versions)),
        )
        self.requests.put(obj)
        self.api.hold("scalerequests", obj)
        return obj

    async def reconcile(self, name: str) -> None:
        await self.reconciler.reconcile(Request(name=name))

    def target_of(self, pool: str) -> int:
        return int(self.api.objects[("nodepools", pool)]["spec"]["targetNodes"])
