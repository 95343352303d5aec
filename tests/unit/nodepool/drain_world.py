"""The NodePool controller's world on fakes, for the drain, reconcile, repair and capacity
tests: a fake wall clock, an API that answers evictions as told and records status
writes, an event recorder, a cloud of VMs by state, informers, and Node and Pod builders."""

import copy
from typing import Any

from nodepool_operator.api import drift, wellknown
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud.testing import FakeCloud
from nodepool_operator.controllers.nodepool import drain, lifecycle, plan
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.controllers.nodepool.controller import FINALIZER, NodePoolReconciler
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import conditions, errors, testing
from nodepool_operator.runtime.client import Object, Resource

START = 1_800_000_000.0
CONFIG = NodePoolConfig(
    poll_interval=1.0,
    eviction_backoff=1.0,
    eviction_backoff_max=8.0,
    stuck_terminating_seconds=60.0,
)
POOL: Object = {
    "apiVersion": "nodepool.dev/v1alpha1",
    "kind": "NodePool",
    "metadata": {"name": "p", "uid": "uid-p"},
}


class Clock(testing.FakeWallClock):
    def __init__(self) -> None:
        super().__init__(START)


FakeInformer = testing.FakeInformer


def too_many_requests(budget: str | None) -> errors.TooManyRequests:
    causes = (
        [
            {
                "reason": "DisruptionBudget",
                "message": f"The disruption budget {budget} needs 1 healthy pods and has 1",
            }
        ]
        if budget
        else []
    )
    return errors.TooManyRequests(
        "Cannot evict pod as it would violate the pod's disruption budget.",
        details={"causes": causes},
    )


class FakeNodePoolApi:
    """Answers evictions as configured (accept, or refuse with a budget); records writes.

    A status patch that sets a value is recorded as the API server records it: the time
    of our field manager's ``status`` entry in ``managedFields`` (``status_records``),
    which the reply carries and ``World.show_status`` brings into a cache."""

    field_manager = "nodepool-controller"

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.status_records: dict[str, list[dict[str, Any]]] = {}  # name -> managedFields
        self.calls: list[tuple[str, str, str]] = []
        self.refuse: dict[str, str | None] = {}  # pod name -> budget named in the 429
        self.terminating: set[str] = set()  # pods whose namespace is being deleted
        self.deleted_with: dict[str, int | None] = {}
        self.status_patches: list[dict[str, Any]] = []
        self.objects: dict[tuple[str, str], Object] = {}  # (plural, name) -> object

    async def patch(self, resource: Resource, name: str, patch: Any, **kw: Any) -> Object:
        self.calls.append(("patch", resource.plural, name))
        if kw.get("subresource") == "status":
            self.status_patches.append(copy.deepcopy(patch["status"]))
            if testing.sets_a_value(patch["status"]):
                self.status_records[name] = [
                    {
                        "manager": self.field_manager,
                        "operation": "Update",
                        "subresource": "status",
                        "time": conditions.rfc3339(self.clock.time()),
                    }
                ]
        return {
            "metadata": {
                "name": name,
                "resourceVersion": "100",
                "managedFields": copy.deepcopy(self.status_records.get(name, [])),
            }
        }

    async def create_subresource(
        self, resource: Resource, name: str, sub: str, body: Any, **_: Any
    ) -> Object:
        self.calls.append(("create", f"{resource.plural}/{sub}", name))
        if name in self.refuse:
            raise too_many_requests(self.refuse[name])
        if name in self.terminating:
            raise errors.Forbidden(
                f"pods {name} is forbidden: unable to create new content in namespace ns "
                "because it is being terminated",
                # As the API server sends it (checked on the real one).
                details={
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": "namespace ns is being terminated",
                            "field": "metadata.namespace",
                        }
                    ]
                },
            )
        return {}

    async def delete(self, resource: Resource, name: str, **kw: Any) -> Object:
        self.calls.append(("delete", resource.plural, name))
        if resource.plural == "pods":
            self.deleted_with[name] = kw.get("grace_period_seconds")
        return {}

    async def create(self, resource: Resource, body: Object, **_: Any) -> Object:
        name = body["metadata"].get("name", "")
        self.calls.append(("create", resource.plural, name))
        if (resource.plural, name) in self.objects:
            raise errors.AlreadyExists(f"{resource.plural} {name!r} already exists")
        return copy.deepcopy(body)

    async def list_page(
        self, resource: Resource, *, field_selector: str | None = None, **kw: Any
    ) -> Object:
        """Objects put in ``objects`` (those no cache of the controller holds), by name."""
        name = (field_selector or "").removeprefix("metadata.name=")
        self.calls.append(("list", resource.plural, name))
        return {
            "items": [
                copy.deepcopy(found)
                for (plural, key), found in self.objects.items()
                if plural == resource.plural and (not name or key == name)
            ]
        }

    def evictions(self, pod: str | None = None) -> int:
        return sum(
            1 for c in self.calls if c[1] == "pods/eviction" and (pod is None or c[2] == pod)
        )

    def writes(self) -> list[tuple[str, str, str]]:
        return [c for c in self.calls if c[1] != "events"]


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    async def event(self, obj: Object, *, type: str, reason: str, message: str) -> None:
        self.events.append((type, reason, message))


#: What the operator records on the Nodes it makes from a pool of the default template.
DEFAULT_SPEC_HASH = drift.spec_hash(nodepool_api.NodePoolSpec()).text


def node(name: str, *, annotations: dict[str, str] | None = None) -> Object:
    return {
        "metadata": {
            "name": name,
            "labels": {wellknown.POOL_LABEL: "p"},
            "annotations": {
                wellknown.SPEC_HASH_ANNOTATION: DEFAULT_SPEC_HASH,
                **(annotations or {}),
            },
            "ownerReferences": [{"kind": "NodePool", "name": "p", "uid": "uid-p"}],
        },
        "spec": {"providerID": f"simcloud:///{name}"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def draining_since(name: str, started: float) -> Object:
    return node(name, annotations={plan.SCALE_DOWN_ANNOTATION: conditions.rfc3339(started)})


def pod(
    name: str,
    node_name: str = "p-0",
    *,
    grace: int | None = None,
    annotations: dict[str, str] | None = None,
    owner: str = "ReplicaSet",
    deleting_at: float | None = None,
) -> Object:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "annotations": dict(annotations or {}),
        "ownerReferences": [{"kind": owner, "name": "owner", "controller": True}],
    }
    if deleting_at is not None:
        meta["deletionTimestamp"] = conditions.rfc3339(deleting_at)
    spec: dict[str, Any] = {"nodeName": node_name, "containers": [{"name": "c"}]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running"}}


class World:
    def __init__(self, *vm_names: str) -> None:
        self.clock = Clock()
        self.api = FakeNodePoolApi(self.clock)
        self.recorder = FakeRecorder()
        self.cloud = FakeCloud(self.clock, vm_names)
        self.nodes = FakeInformer(
            {"pool": lambda n: [p] if (p := wellknown.pool_of(n)) else []},
        )
        self.pods = FakeInformer(
            {"node": lambda p: [n] if (n := p.get("spec", {}).get("nodeName")) else []}
        )
        self.mono = clock_module.FakeClock()
        self.run_steps_on(self.cloud, CONFIG)

    def run_steps_on(self, cloud: FakeCloud, config: NodePoolConfig) -> None:
        """The pool steps (and their drainer) over ``cloud`` and ``config``: a subclass's."""
        self.cloud = cloud
        self.lifecycle = lifecycle.PoolLifecycle(
            client=self.api,  # type: ignore[arg-type]
            nodes=self.nodes,  # type: ignore[arg-type]
            pods=self.pods,  # type: ignore[arg-type]
            cloud=cloud,  # type: ignore[arg-type]
            recorder=self.recorder,  # type: ignore[arg-type]
            config=config,
            clock=self.mono,
            wall_clock=self.clock,
        )
        self.drainer = self.lifecycle.drainer

    def reconciler_for(
        self, pools: FakeInformer, scale_requests: FakeInformer | None = None
    ) -> NodePoolReconciler:
        """A reconciler over this world's fakes and its pool steps."""
        return NodePoolReconciler(
            client=self.api,  # type: ignore[arg-type]
            pools=pools,  # type: ignore[arg-type]
            scale_requests=scale_requests or NoRequests(),  # type: ignore[arg-type]
            lifecycle=self.lifecycle,
            recorder=self.recorder,  # type: ignore[arg-type]
            config=self.lifecycle.config,
            clock=self.mono,
            wall_clock=self.clock,
        )

    async def drain(self, name: str = "p-0", limit: int | None = None) -> drain.DrainProgress:
        found = self.nodes.get(name) or node(name)
        return await self.drainer.drain(POOL, found, timeout_seconds=limit)

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    def show_status(self, pools: FakeInformer, name: str = "p") -> Object:
        """The cache catches up with our status writes to pool ``name``, as the informer
        would: the status they made and the time the API server recorded for the last
        one (``managedFields``, cut as ``informer.keep_write_times`` cuts it)."""
        cached = pools.get(name)
        assert cached is not None
        status = copy.deepcopy(cached.get("status") or {})
        for patch in self.api.status_patches:
            testing.merge(status, patch)
        cached["status"] = status
        cached["metadata"]["managedFields"] = copy.deepcopy(self.api.status_records.get(name, []))
        cached["metadata"]["resourceVersion"] = "100"
        pools.put(cached)
        return cached

    def warnings(self, reason: str) -> list[str]:
        return [m for t, r, m in self.recorder.events if t == "Warning" and r == reason]


class NoRequests(FakeInformer):
    def __init__(self) -> None:
        super().__init__({"pool": lambda r: []})


def pool_object(spec: nodepool_api.NodePoolSpec, *, name: str = "p", **metadata: Any) -> Object:
    """Pool ``name`` as the controller's cache holds it: ours (the finalizer), at generation
    1 and resourceVersion 5 unless ``metadata`` says otherwise."""
    return {
        **nodepool_api.manifest(name, spec),
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "generation": 1,
            "resourceVersion": "5",
            "finalizers": [FINALIZER],
            **metadata,
        },
    }
