"""The Autoscaler's planner and status reconcile wired as setup() wires them, on the shared
fakes: the world the reconcile, consolidation and cannot-grow tests drive.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from typing import Any

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import disruption as disruption_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler.act.handoff import ScaleRequester
from nodepool_operator.controllers.autoscaler.act.notices import Notices
from nodepool_operator.controllers.autoscaler.config import AutoscalerConfig
from nodepool_operator.controllers.autoscaler.consolidator import Consolidator
from nodepool_operator.controllers.autoscaler.controller import (
    AutoscalerReconciler,
)
from nodepool_operator.controllers.autoscaler.decisions import PoolDecider
from nodepool_operator.controllers.autoscaler.plan_maker import PlanMaker
from nodepool_operator.controllers.autoscaler.planner import (
    PLAN,
    Planner,
)
from nodepool_operator.controllers.autoscaler.snapshot import volumes
from nodepool_operator.controllers.autoscaler.snapshot.scale_requests import RequestLedger
from nodepool_operator.controllers.autoscaler.verdicts import AutoscalerVerdicts
from nodepool_operator.runtime import conditions, errors, testing
from nodepool_operator.runtime.client import Object, Resource
from nodepool_operator.runtime.clock import FakeClock
from nodepool_operator.runtime.controller import Request, Result
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import keep_write_times
from nodepool_operator.runtime.testing import FakeInformer, FakeWallClock

POOL = "small"

NAS = "nas"

KEY = Request(name=NAS)


class FakeApi:
    """Creates and patches as the API server would answer them, recorded for asserts.

    Node patches reach ``nodes`` (the informer) only when ``show_node_writes`` is on, as
    the watch would deliver them; a stale resourceVersion is a 409. A status write that
    adds or changes a value is recorded with its time, as the API server records it in
    the object's managedFields."""

    field_manager = "autoscaler-controller"

    def __init__(self, wall_clock: Any) -> None:
        self.wall_clock = wall_clock
        self.status_written: dict[str, str] = {}  # Autoscaler -> its last status write
        self.versions = itertools.count(100)
        self.created: list[tuple[str, Object]] = []
        self.patches: list[tuple[str, str, Any, str | None]] = []
        self.nodes: FakeInformer | None = None

    async def create(
        self, resource: Resource, body: dict[str, Any], *, namespace: str | None = None
    ) -> Object:
        obj = copy.deepcopy(body)
        meta = obj["metadata"]
        meta.update(
            resourceVersion=str(next(self.versions)),
            uid=f"uid-{meta['name']}",
            creationTimestamp="2026-11-29T10:00:00Z",
            generation=1,
        )
        self.created.append((resource.plural, obj))
        return copy.deepcopy(obj)

    async def patch(self, resource: Resource, name: str, patch: Any, **kw: Any) -> Object:
        self.patches.append((resource.plural, name, copy.deepcopy(patch), kw.get("subresource")))
        status_write = resource.plural == "autoscalers" and kw.get("subresource") == "status"
        if status_write and testing.sets_a_value(patch["status"]):
            self.status_written[name] = conditions.rfc3339(self.wall_clock.time())
        version = str(next(self.versions))
        if resource.plural == "nodes" and self.nodes is not None:
            node = self.nodes.get(name)
            assert node is not None
            precondition = patch.get("metadata", {}).get("resourceVersion")
            if precondition is not None and precondition != node["metadata"]["resourceVersion"]:
                raise errors.Conflict(409, "the object has been modified")
            updated = copy.deepcopy(node)
            testing.merge(updated, patch)
            updated["metadata"]["resourceVersion"] = version
            self.nodes.put(updated)
            return updated
        return {"metadata": {"name": name, "resourceVersion": version}}

    def node_patches(self) -> list[Any]:
        return [p for kind, _, p, _ in self.patches if kind == "nodes"]

    async def get(self, resource: Resource, name: str, **kw: Any) -> Object:
        raise AssertionError("the reconciler reads caches, not the API")

    def made(self, plural: str) -> list[Object]:
        return [obj for kind, obj in self.created if kind == plural]

    def events(self, reason: str) -> list[Object]:
        return [e for e in self.made("events") if e["reason"] == reason]

    def status_writes(self) -> list[Any]:
        return [p for kind, _, p, sub in self.patches if kind == "autoscalers" and sub == "status"]


def status_entry(manager: str, time: str) -> dict[str, Any]:
    """The ``managedFields`` entry the API server keeps for ``manager``'s status writes."""
    return {
        "manager": manager,
        "operation": "Update",
        "subresource": "status",
        "apiVersion": "nodepool.dev/v1alpha1",
        "time": time,
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:status": {"f:pendingPods": {}}},
    }


class FollowingWallClock:
    """Wall time that moves with the fake clock (the timers on Nodes are wall times)."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def time(self) -> float:
        return 1_800_000_000.0 + self.clock.now()


#: TriggeredScaleUp events per request, as AutoscalerConfig's default.
TOLD_PER_REQUEST = AutoscalerConfig().triggered_events_per_request

#: Pools handed over at a time, as AutoscalerConfig's default.
HAND_OVER_PARALLELISM = AutoscalerConfig().hand_over_parallelism


class World:
    """Caches and a reconciler wired as in setup(), on fakes."""

    def __init__(self, *, count_writes_per_second: float = 5.0) -> None:
        self.clock = FakeClock()
        self.api = FakeApi(wall_clock=FollowingWallClock(self.clock))
        self.autoscalers, self.pools, self.nodes = FakeInformer(), FakeInformer(), FakeInformer()
        self.pods, self.requests = FakeInformer(), FakeInformer()
        self.daemon_sets, self.budgets = FakeInformer(), FakeInformer()
        self.claims, self.volumes, self.classes = FakeInformer(), FakeInformer(), FakeInformer()
        self.count_writes_per_second = count_writes_per_second
        self.reconciler = self.start()
        self.api.nodes = self.nodes
        self.versions = itertools.count(1)
        self.minutes = itertools.count(0)

    def start(self) -> AutoscalerReconciler:
        """A planner and a reconciler on these caches and this API: new ones are a
        restarted operator (nothing in memory, the world as it was left)."""
        ledger = RequestLedger()
        recorder = EventRecorder(
            self.api,  # type: ignore[arg-type]
            component="autoscaler-controller",
            clock=self.clock,
            wall_clock=FakeWallClock(),
        )
        verdicts = AutoscalerVerdicts()
        observer = PlanMaker(
            autoscalers=self.autoscalers,  # type: ignore[arg-type]
            daemon_sets=self.daemon_sets,  # type: ignore[arg-type]
            pools=self.pools,  # type: ignore[arg-type]
            nodes=self.nodes,  # type: ignore[arg-type]
            pods=self.pods,  # type: ignore[arg-type]
            requests=self.requests,  # type: ignore[arg-type]
            ledger=ledger,
            volume_reads=volumes.VolumeReads(
                claims=self.claims,  # type: ignore[arg-type]
                volumes=self.volumes,  # type: ignore[arg-type]
                classes=self.classes,  # type: ignore[arg-type]
            ),
        )
        decider = PoolDecider(
            consolidator=Consolidator(
                client=self.api,  # type: ignore[arg-type]
                nodes=self.nodes,  # type: ignore[arg-type]
                pods=self.pods,  # type: ignore[arg-type]
                budgets=self.budgets,  # type: ignore[arg-type]
                profile=observer.scheduling_profile,
                recorder=recorder,
                wall_clock=FollowingWallClock(self.clock),
            ),
            requester=ScaleRequester(
                client=self.api,  # type: ignore[arg-type]
                ledger=ledger,
                wall_clock=FakeWallClock(),
            ),
            notices=Notices(recorder, parallelism=4, triggered_per_request=TOLD_PER_REQUEST),
        )
        self.woken: list[str] = []
        reconciler = AutoscalerReconciler(
            client=self.api,  # type: ignore[arg-type]
            autoscalers=self.autoscalers,  # type: ignore[arg-type]
            verdicts=verdicts,
            recorder=recorder,
            clock=self.clock,
            wall_clock=FollowingWallClock(self.clock),
            count_writes_per_second=self.count_writes_per_second,
        )

        def wake(autoscaler: Object) -> None:
            if reconciler.needs_write(autoscaler):
                self.woken.append(str(autoscaler["metadata"]["name"]))

        self.planner = Planner(
            plan_maker=observer,
            decider=decider,
            verdicts=verdicts,
            wake=wake,
            clock=self.clock,
            parallelism=HAND_OVER_PARALLELISM,
        )
        return reconciler

    def _stamp(self, obj: Object) -> Object:
        obj["metadata"]["resourceVersion"] = str(next(self.versions))
        return obj

    def autoscaler(self, name: str = NAS, *, pool: str = POOL, **spec: Any) -> None:
        body = autoscaler_api.manifest(
            name, autoscaler_api.AutoscalerSpec(node_pool_name=pool, **spec)
        )
        body["metadata"].update(uid=f"uid-{name}", generation=1)
        self.autoscalers.put(self._stamp(body))

    def pool(
        self,
        *,
        target: int = 0,
        min_nodes: int = 0,
        max_nodes: int = 10,
        name: str = POOL,
        budgets: Sequence[disruption_api.Budget] | None = None,
    ) -> None:
        """The pool; ``budgets``: its spec.disruption.budgets (None: the default, 10%)."""
        spec = nodepool_api.NodePoolSpec(
            target_nodes=target,
            min_nodes=min_nodes,
            max_nodes=max_nodes,
            template=nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=110),
            disruption=(
                disruption_api.Disruption()
                if budgets is None
                else disruption_api.Disruption(budgets=tuple(budgets))
            ),
        )
        body = nodepool_api.manifest(name, spec)
        body["metadata"].update(uid="uid-pool" if name == POOL else f"uid-{name}", generation=1)
        self.pools.put(self._stamp(body))

    def node(
        self,
        name: str,
        *,
        ready: bool = True,
        pool: str = POOL,
        owned: bool = True,
        annotations: dict[str, str] | None = None,
        registered: bool = True,
    ) -> None:
        status = {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
        }
        labels = {wellknown.POOL_LABEL: pool}
        # Owned by the pool, as the NodePool controller makes them (``membership``).
        owner = {
            "kind": "NodePool",
            "name": pool,
            "uid": "uid-pool" if pool == POOL else f"uid-{pool}",
        }
        meta = {
            "name": name,
            "labels": labels,
            "ownerReferences": [owner] if owned else [],
            "annotations": dict(annotations or {}),
        }
        # A node still booting carries the NodePool controller's unregistered taint.
        unregistered = {"key": wellknown.UNREGISTERED_TAINT_KEY, "effect": "NoSchedule"}
        spec = {} if registered else {"taints": [unregistered]}
        self.nodes.put(self._stamp({"metadata": meta, "spec": spec, "status": status}))

    def pod(
        self,
        name: str,
        *,
        cpu: str = "1",
        node: str | None = None,
        pool: str | None = None,
        judged: bool = True,
        **meta: Any,
    ) -> Object:
        """A pod, bound to ``node`` or pending: marked unschedulable by the scheduler, or
        not ``judged`` yet; ``pool``: its nodeSelector names that pool."""
        spec: dict[str, Any] = {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]
        }
        if pool is not None:
            spec["nodeSelector"] = {wellknown.POOL_LABEL: pool}
        status: dict[str, Any] = {"phase": "Pending"}
        if node:
            spec["nodeName"] = node
            status["phase"] = "Running"
        elif judged:
            status["conditions"] = [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
            ]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "apps",
                "uid": f"uid-{name}",
                "creationTimestamp": f"2026-11-29T10:{next(self.minutes):02d}:00Z",
                **meta,
            },
            "spec": spec,
            "status": status,
        }
        self.pods.put(self._stamp(pod))
        return pod

    def show_requests(self, *, phase: str | None = None, applied: int | None = None) -> None:
        """The informer catches up with the requests we created (answered, maybe)."""
        for request in self.api.made("scalerequests"):
            shown = copy.deepcopy(request)
            if phase is not None:
                shown["status"] = {"phase": phase, "appliedTargetNodes": applied}
                shown["metadata"]["resourceVersion"] = str(
                    int(shown["metadata"]["resourceVersion"]) + 1
                )
            self.requests.put(shown)

    async def plan(self) -> Result:
        """A planner batch (its window already over), and its events written."""
        result = await self.planner.reconcile(PLAN)
        await self.planner.told()
        return result

    async def reconcile(self, key: Request = KEY) -> Result:
        """A planner batch, then the Autoscaler's status reconcile; the planner's result."""
        planned = await self.plan()
        await self.reconciler.reconcile(key)
        return planned

    async def batch(self) -> int:
        """A planner batch, then the reconcile of every Autoscaler it woke (as the runtime
        queues them), then the cache catching up with the writes; how many status writes
        there have been, of every Autoscaler."""
        self.woken.clear()
        await self.plan()
        for name in dict.fromkeys(self.woken):
            await self.reconciler.reconcile(Request(name=name))
        for obj in self.autoscalers.items():
            self.show_status(obj["metadata"]["name"])
        return len(self.api.status_writes())

    def show_status(self, name: str = NAS) -> None:
        """The cache catches up with our status writes, as the informer would: the status
        and the time the API server recorded for the last one (``managedFields``, cut as
        ``informer.keep_write_times`` cuts it)."""
        obj = self.autoscalers.get(name)
        assert obj is not None
        if not self.writes_to(name):
            return
        obj["status"] = copy.deepcopy(self.status(name))
        obj["metadata"]["managedFields"] = keep_write_times(
            {
                "metadata": {
                    "managedFields": [
                        {
                            "manager": "someone",
                            "operation": "Update",
                            "time": "2026-11-29T10:00:00Z",
                        },
                        status_entry(FakeApi.field_manager, self.api.status_written[name]),
                    ]
                }
            }
        )["metadata"]["managedFields"]
        self.autoscalers.put(obj)

    def writes_to(self, name: str) -> list[Any]:
        return [
            p
            for kind, target, p, sub in self.api.patches
            if kind == "autoscalers" and sub == "status" and target == name
        ]

    async def scan(self) -> int:
        """A pass, after which the cache catches up with our write (as the informer
        would); how many status writes there have been."""
        await self.reconcile()
        self.show_status()
        return len(self.api.status_writes())

    def status(self, name: str = NAS) -> dict[str, Any]:
        """Our last written status, as the cache will show it."""
        merged: dict[str, Any] = {}
        for write in self.writes_to(name):
            merged.update(write["status"])
        return merged


REPLICATED = [{"kind": "ReplicaSet", "name": "web-1", "uid": "rs", "controller": True}]


def half_and_quarter(world: World) -> None:
    """n1 half used (stays), n2 a quarter used by one replica that fits on n1."""
    world.autoscaler(scale_down=autoscaler_api.ScaleDownPolicy(unneeded_seconds=60))
    world.pool(target=2)
    world.node("n1")
    world.node("n2")
    for name in ("a", "b"):
        world.pod(name, node="n1", ownerReferences=REPLICATED)
    world.pod("c", node="n2", ownerReferences=REPLICATED)


def taints(world: World, name: str) -> list[str]:
    node = world.nodes.get(name)
    assert node is not None
    return [t["key"] for t in node["spec"].get("taints") or ()]


def stamp(world: World, name: str) -> str | None:
    node = world.nodes.get(name)
    assert node is not None
    return (node["metadata"].get("annotations") or {}).get(wellknown.UNNEEDED_SINCE_ANNOTATION)
