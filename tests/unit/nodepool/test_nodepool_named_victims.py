"""Named victims: a request that names Nodes removes exactly those (their drain mark is
written before the target is lowered), a request may only name Nodes the pool owns and
the Autoscaler still proposes, and a consolidation taint alone gives a Node no
precedence."""

from __future__ import annotations

import contextlib
from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud.provider import CloudError, VirtualMachine, VmName, VmState
from nodepool_operator.controllers.nodepool import answering, lifecycle, plan, request_facts
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.controllers.nodepool.controller import FINALIZER, NodePoolReconciler
from nodepool_operator.controllers.resources import NODES_BY_POOL, PODS_BY_NODE, REQUESTS_BY_POOL
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import testing
from nodepool_operator.runtime.client import Resource
from nodepool_operator.runtime.clock import FakeClock
from nodepool_operator.runtime.controller import Request
from nodepool_operator.runtime.events import EventRecorder

POOL_UID = "uid-p"


def vm(name: str) -> VirtualMachine:
    return VirtualMachine(
        name=VmName(name),
        pool="p",
        cpu="4",
        memory="16Gi",
        state=VmState.RUNNING,
        provider_id=f"simcloud:///{name}",
        created_at=0.0,
    )


def node(
    name: str, *, consolidating: bool = False, pool: str = "p", owner_uid: str | None = POOL_UID
) -> dict[str, Any]:
    taints = [{"key": wellknown.CONSOLIDATING_TAINT_KEY, "effect": "NoSchedule"}]
    meta: dict[str, Any] = {"name": name, "labels": {wellknown.POOL_LABEL: pool}}
    if owner_uid is not None:
        meta["ownerReferences"] = [
            {"kind": nodepool_api.KIND, "name": pool, "uid": owner_uid},
        ]
    return {
        "metadata": meta,
        "spec": {"taints": taints if consolidating else []},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


# --- the victim order ---------------------------------------------------------------------


def test_a_tainted_node_no_request_names_gets_no_precedence() -> None:
    # The taint is the Autoscaler's proposal; a plain scale-down stays cheapest first.
    view = plan.PoolView(
        vms=[vm("p-0"), vm("p-1"), vm("p-2")],
        nodes={"p-0": node("p-0"), "p-1": node("p-1", consolidating=True), "p-2": node("p-2")},
        pods_per_node={"p-0": 0, "p-1": 3, "p-2": 1},
    )
    assert plan.pick_victims(view, 1) == ["p-0"]
    assert plan.pick_victims(view, 2) == ["p-0", "p-2"]


def test_a_protected_node_is_not_preferred_for_its_taint() -> None:
    view = plan.PoolView(
        vms=[vm("p-0"), vm("p-1")],
        nodes={"p-0": node("p-0"), "p-1": node("p-1", consolidating=True)},
        pods_per_node={"p-0": 2, "p-1": 1},
        protected=frozenset({"p-1"}),
    )
    assert plan.pick_victims(view, 1) == ["p-0"]


# --- which Nodes a request may name -------------------------------------------------------


def refusal(name: str, found: dict[str, Any] | None) -> str | None:
    return request_facts.node_refusal("p", name, found, pool_uid=POOL_UID)


def test_a_request_may_name_only_live_nodes_of_its_pool() -> None:
    assert refusal("p-1", node("p-1", consolidating=True)) is None
    assert refusal("p-1", node("p-1")) == (
        "node p-1 named in removeNodes no longer carries nodepool.dev/consolidating; not applied"
    )
    assert refusal("p-1", None) == "node p-1 named in removeNodes is gone; not applied"
    assert refusal("q-1", node("q-1", consolidating=True, pool="q")) == (
        "node q-1 named in removeNodes is not in NodePool p; not applied"
    )
    leaving = node("p-1", consolidating=True)
    leaving["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    refused = refusal("p-1", leaving)
    assert refused is not None
    assert "being deleted" in refused


def test_a_request_may_not_name_a_labelled_node_the_pool_does_not_own() -> None:
    stranger = node("x-1", consolidating=True, owner_uid=None)
    assert refusal("x-1", stranger) == (
        "node x-1 named in removeNodes is not owned by NodePool p; not applied"
    )
    older = node("x-2", consolidating=True, owner_uid="uid-of-an-older-p")
    assert refusal("x-2", older) == (
        "node x-2 named in removeNodes is not owned by NodePool p; not applied"
    )


def test_a_request_may_not_name_a_node_draining_since_before_it_was_made() -> None:
    # Removed for another reason already (a user's scale-down took it): lowering the
    # target for it again would take another Node in its place.
    draining = node("p-1", consolidating=True)
    draining["metadata"]["annotations"] = {plan.SCALE_DOWN_ANNOTATION: "2027-01-15T08:00:00Z"}
    made_after = 1_800_000_060.0  # 08:01:00
    assert request_facts.node_refusal(
        "p", "p-1", draining, pool_uid=POOL_UID, requested_at=made_after
    ) == ("node p-1 named in removeNodes is being drained already; not applied")
    # Marked for this request (after it was made): it is the request's own removal.
    made_before = 1_799_999_940.0  # 07:59:00
    assert (
        request_facts.node_refusal(
            "p", "p-1", draining, pool_uid=POOL_UID, requested_at=made_before
        )
        is None
    )


async def test_a_request_naming_a_node_gone_is_rejected_and_the_target_kept() -> None:
    api = testing.FakeApiServer()
    pool_obj = api.put(
        "nodepools", nodepool_api.manifest("p", nodepool_api.NodePoolSpec(target_nodes=3))
    )
    api.put("nodes", node("p-1", consolidating=True, owner_uid=pool_obj["metadata"]["uid"]))
    names = {"p-0": "p-gone", "p-1": "p-1"}
    for request, named in names.items():
        spec = scalerequest_api.ScaleRequestSpec(
            node_pool_name="p", target_nodes=2, based_on_target_nodes=3, remove_nodes=(named,)
        )
        api.put("scalerequests", scalerequest_api.manifest(request, spec))
    requests = testing.FakeInformer(server=api, plural="scalerequests")
    requests.sync()
    answers = answering.RequestAnswers(
        client=api,  # type: ignore[arg-type]
        scale_requests=requests,  # type: ignore[arg-type]
        retention=60,
        controller="nodepool",
        recorder=EventRecorder(api, component="nodepool-controller", clock=FakeClock()),  # type: ignore[arg-type]
        wall_clock=api.wall_clock,
    )
    await answers.answer(pool_obj, requests.list())
    phases = {r["metadata"]["name"]: r.get("status", {}) for r in api.stored("scalerequests")}
    assert phases["p-0"]["phase"] == "Rejected"
    assert phases["p-0"]["message"] == "node p-gone named in removeNodes is gone; not applied"
    assert phases["p-1"]["phase"] == "Applied"
    [stored_pool] = api.stored("nodepools")
    assert stored_pool["spec"]["targetNodes"] == 2
    [event] = [e for e in api.stored("events") if e["reason"] == "ScaleRequestRejected"]
    assert "p-gone" in event["message"]


# --- a request's scale-down, through the reconciler ---------------------------------------


class Cloud:
    """The pool's VMs, all running; a deletion ends at once."""

    def __init__(self, names: list[str]) -> None:
        self.vms = {name: vm(name) for name in names}
        self.deleted: list[str] = []

    async def list_vms(self, *, pool: str) -> list[VirtualMachine]:
        return list(self.vms.values())

    async def get_vm(self, name: VmName) -> VirtualMachine | None:
        return self.vms.get(name)

    async def delete_vm(self, name: VmName) -> None:
        self.deleted.append(name)
        self.vms.pop(name, None)


class Api(testing.FakeApiServer):
    """Runs ``before_patch[node]`` just before the next patch of that Node (another
    writer getting in first)."""

    def __init__(self) -> None:
        super().__init__(wall_clock=testing.FakeWallClock(1_800_000_000.0))
        self.before_patch: dict[str, Any] = {}
        self.before_replace: Any = None  # run before the next update of the pool

    def before(self, verb: str, resource: Resource, name: str) -> None:
        if verb == "patch" and resource.plural == "nodes" and name in self.before_patch:
            self.before_patch.pop(name)()
        if verb == "replace" and resource.plural == "nodepools" and self.before_replace:
            self.before_replace()


class World:
    """A pool ``p`` at 3 Nodes (``p-0``, ``p-2``, ``p-10``: ``p-10`` sorts before ``p-2`` as
    text), the API server and the caches the controller reads, synced by hand."""

    def __init__(self, *, tainted: tuple[str, ...] = ("p-2", "p-10")) -> None:
        self.api = Api()
        self.pool = self.api.put(
            "nodepools",
            {
                **nodepool_api.manifest("p", nodepool_api.NodePoolSpec(target_nodes=3)),
                "metadata": {"name": "p", "uid": POOL_UID, "finalizers": [FINALIZER]},
            },
        )
        names = ["p-0", "p-2", "p-10"]
        for name in names:
            self.api.put("nodes", node(name, consolidating=name in tainted))
        self.cloud = Cloud(names)
        self.pools = testing.FakeInformer(server=self.api, plural="nodepools")
        self.nodes = testing.FakeInformer(
            {NODES_BY_POOL: lambda n: [wellknown.pool_of(n) or ""]},
            server=self.api,
            plural="nodes",
        )
        self.pods = testing.FakeInformer(
            {PODS_BY_NODE: lambda p: []}, server=self.api, plural="pods"
        )
        self.requests = testing.FakeInformer(
            {REQUESTS_BY_POOL: lambda r: [scalerequest_api.spec_of(r).node_pool_name]},
            server=self.api,
            plural="scalerequests",
        )
        self.sync()

    def sync(self) -> None:
        for cache in (self.pools, self.nodes, self.pods, self.requests):
            cache.sync()

    def reconciler(self) -> NodePoolReconciler:
        """A reconciler as a freshly started operator has it: nothing in memory."""
        wall = self.api.wall_clock
        recorder = EventRecorder(self.api, component="nodepool-controller", wall_clock=wall)  # type: ignore[arg-type]
        config = NodePoolConfig()
        clock = clock_module.FakeClock()
        return NodePoolReconciler(
            client=self.api,  # type: ignore[arg-type]
            pools=self.pools,  # type: ignore[arg-type]
            scale_requests=self.requests,  # type: ignore[arg-type]
            lifecycle=lifecycle.PoolLifecycle(
                client=self.api,  # type: ignore[arg-type]
                nodes=self.nodes,  # type: ignore[arg-type]
                pods=self.pods,  # type: ignore[arg-type]
                cloud=self.cloud,  # type: ignore[arg-type]
                recorder=recorder,
                config=config,
                clock=clock,
                wall_clock=wall,
                scale_requests=self.requests,  # type: ignore[arg-type]
            ),
            recorder=recorder,
            config=config,
            clock=clock,
            wall_clock=wall,
        )

    def request(self, name: str, *, remove: tuple[str, ...], target: int = 2) -> None:
        """As the Autoscaler makes it: the target lowered from the pool's, the Nodes named."""
        spec = scalerequest_api.ScaleRequestSpec(
            node_pool_name="p",
            target_nodes=target,
            based_on_target_nodes=3,
            requester="autoscaler/a",
            remove_nodes=remove,
        )
        self.api.put("scalerequests", scalerequest_api.manifest(name, spec, pool_uid=POOL_UID))
        self.requests.sync()

    def status_of(self, request: str) -> dict[str, Any]:
        return dict(self.api.objects[("scalerequests", request)].get("status") or {})

    def target(self) -> int:
        return int(self.api.objects[("nodepools", "p")]["spec"]["targetNodes"])

    def marked(self) -> list[str]:
        """The Nodes that carry a drain mark (or are gone)."""
        return sorted(
            name
            for name in ("p-0", "p-2", "p-10")
            if (found := self.api.objects.get(("nodes", name))) is None
            or plan.SCALE_DOWN_ANNOTATION in (found["metadata"].get("annotations") or {})
        )


async def test_a_request_removes_exactly_the_node_it_names_not_the_first_tainted_by_name() -> None:
    # p-2 and p-10 both carry the consolidation taint, and all three Nodes are empty: by
    # the taint, p-10 (first as text) would go; by cost, p-0. The request names p-2.
    world = World()
    world.request("r", remove=("p-2",))

    await world.reconciler().reconcile(Request(name="p"))

    assert world.status_of("r")["phase"] == "Applied"
    assert world.target() == 2
    assert world.cloud.deleted == ["p-2"]
    assert ("nodes", "p-2") not in world.api.objects
    for kept in ("p-0", "p-10"):
        stored = world.api.objects[("nodes", kept)]
        assert not stored["spec"].get("unschedulable")
        assert plan.SCALE_DOWN_ANNOTATION not in (stored["metadata"].get("annotations") or {})


async def test_a_restart_after_the_answer_removes_the_same_named_node() -> None:
    # The first pass wrote the mark and the target, then could not trust the cloud's
    # listing and stopped before its scale-down; a new operator's pass takes the marked
    # Node, though the cache shows p-10 tainted and p-0 emptiest as before.
    world = World()
    world.request("r", remove=("p-2",))

    async def listing_fails(*, pool: str) -> list[VirtualMachine]:
        raise CloudError("the listing failed", code="Unavailable")

    listing = world.cloud.list_vms
    world.cloud.list_vms = listing_fails  # type: ignore[method-assign]
    await world.reconciler().reconcile(Request(name="p"))
    world.cloud.list_vms = listing  # type: ignore[method-assign]
    assert world.target() == 2
    assert world.marked() == ["p-2"]
    assert world.cloud.deleted == []

    world.sync()
    await world.reconciler().reconcile(Request(name="p"))

    assert world.cloud.deleted == ["p-2"]
    assert world.marked() == ["p-2"]  # gone; p-0 and p-10 untouched


async def test_a_restart_between_the_mark_and_the_target_write_removes_the_named_node() -> None:
    # The operator stopped after marking p-2 and before lowering the target: the new one
    # finds the request Pending and its Node draining since the request was made, which
    # is the request's own mark, and applies it.
    world = World()
    world.request("r", remove=("p-2",))

    def stopped() -> None:
        world.api.before_replace = None
        raise ConnectionResetError("the operator stops here")

    world.api.before_replace = stopped
    with contextlib.suppress(ConnectionResetError):
        await world.reconciler().reconcile(Request(name="p"))
    assert world.target() == 3
    assert world.marked() == ["p-2"]

    world.sync()
    await world.reconciler().reconcile(Request(name="p"))

    assert world.status_of("r")["phase"] == "Applied"
    assert world.target() == 2
    assert world.cloud.deleted == ["p-2"]


async def test_a_named_node_called_off_before_its_mark_is_rejected_and_nothing_is_drained() -> None:
    # The answer read p-2 tainted; the Autoscaler takes the taint off (a pod that cannot
    # move arrived) before the mark is written: the mark's precondition fails, p-2 is read
    # again, and the request is Rejected naming it. No other Node goes in its place.
    world = World()
    world.request("r", remove=("p-2",))

    def called_off() -> None:
        world.api.edit("nodes", "p-2", lambda n: n["spec"].update(taints=[]))

    world.api.before_patch["p-2"] = called_off

    await world.reconciler().reconcile(Request(name="p"))

    status = world.status_of("r")
    assert status["phase"] == "Rejected"
    assert status["message"] == (
        "node p-2 named in removeNodes no longer carries nodepool.dev/consolidating; not applied"
    )
    assert world.target() == 3
    assert world.cloud.deleted == []
    assert world.marked() == []


async def test_a_request_naming_a_labelled_node_the_pool_does_not_own_is_rejected() -> None:
    world = World(tainted=("p-2",))
    world.api.put("nodes", node("x-1", consolidating=True, owner_uid=None))
    world.nodes.sync()
    world.request("r", remove=("x-1",))

    await world.reconciler().reconcile(Request(name="p"))

    status = world.status_of("r")
    assert status["phase"] == "Rejected"
    assert status["message"] == (
        "node x-1 named in removeNodes is not owned by NodePool p; not applied"
    )
    assert world.target() == 3
    assert world.cloud.deleted == []
    assert not world.api.objects[("nodes", "x-1")]["spec"].get("unschedulable")
    assert world.marked() == []


async def test_a_plain_scale_down_takes_the_cheapest_node_not_a_tainted_one() -> None:
    world = World()
    world.api.edit("nodepools", "p", lambda p: p["spec"].update(targetNodes=2))
    world.sync()

    await world.reconciler().reconcile(Request(name="p"))

    # All empty and Ready: the name decides among equals, as before.
    assert world.cloud.deleted == ["p-0"]
