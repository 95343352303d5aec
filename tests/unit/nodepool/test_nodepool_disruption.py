"""Drift and expiry: a pool's Nodes follow its spec, replaced one budget's worth at a
time, the replacement first when there is room, through the one drain, and a restarted
operator goes on with the same roll from the marks on the Nodes."""

from __future__ import annotations

import copy
from typing import Any

from nodepool_operator.api import disruption as disruption_api
from nodepool_operator.api import drift, wellknown
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud.provider import VmState
from nodepool_operator.cloud.testing import virtual_machine
from nodepool_operator.controllers.nodepool import disruption, lifecycle, plan
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.controllers.nodepool.controller import FINALIZER, NodePoolReconciler
from nodepool_operator.controllers.resources import NODES_BY_POOL, PODS_BY_NODE
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import conditions, testing
from nodepool_operator.runtime.controller import Request
from nodepool_operator.runtime.events import EventRecorder
from unit.nodepool import reconcile_world

START = 1_800_000_000.0


class World:
    """Pool ``p`` on the shared fake API server; kwok's part (a new Node turns Ready) and
    the informers' catching up are played by ``settle``."""

    def __init__(self, spec: nodepool_api.NodePoolSpec) -> None:
        self.api = testing.FakeApiServer(wall_clock=testing.FakeWallClock(START))
        self.api.put(
            "nodepools",
            {
                **nodepool_api.manifest("p", spec),
                "metadata": {"name": "p", "uid": "uid-p", "finalizers": [FINALIZER]},
            },
        )
        self.cloud = reconcile_world.Cloud(self.api.wall_clock)  # type: ignore[arg-type]
        self.pools = testing.FakeInformer(server=self.api, plural="nodepools")
        self.nodes = testing.FakeInformer(
            {NODES_BY_POOL: lambda n: [wellknown.pool_of(n) or ""]}, server=self.api, plural="nodes"
        )
        self.pods = testing.FakeInformer(
            {PODS_BY_NODE: lambda p: []}, server=self.api, plural="pods"
        )
        self.reconciler = self.restarted()
        self.most_disrupted = 0

    def restarted(self) -> NodePoolReconciler:
        """A reconciler as a freshly started operator has it: nothing in memory."""
        wall = self.api.wall_clock
        recorder = EventRecorder(self.api, component="nodepool-controller", wall_clock=wall)  # type: ignore[arg-type]
        config = NodePoolConfig(poll_interval=1.0)
        clock = clock_module.FakeClock()
        return NodePoolReconciler(
            client=self.api,  # type: ignore[arg-type]
            pools=self.pools,  # type: ignore[arg-type]
            scale_requests=testing.FakeInformer({"pool": lambda r: []}),  # type: ignore[arg-type]
            lifecycle=lifecycle.PoolLifecycle(
                client=self.api,  # type: ignore[arg-type]
                nodes=self.nodes,  # type: ignore[arg-type]
                pods=self.pods,  # type: ignore[arg-type]
                cloud=self.cloud,  # type: ignore[arg-type]
                recorder=recorder,
                config=config,
                clock=clock,
                wall_clock=wall,
            ),
            recorder=recorder,
            config=config,
            clock=clock,
            wall_clock=wall,
        )

    def settle(self) -> None:
        """Every Node's kubelet reports Ready with its capacity; the caches catch up."""
        for (plural, _), obj in self.api.objects.items():
            if plural == "nodes" and not obj.get("status", {}).get("conditions"):
                beat = conditions.rfc3339(self.api.wall_clock.time())
                obj["status"]["conditions"] = [
                    {"type": "Ready", "status": "True", "lastHeartbeatTime": beat}
                ]
        for cache in (self.pools, self.nodes, self.pods):
            cache.sync()
        self.most_disrupted = max(self.most_disrupted, len(self.disrupted()))

    async def step(self, seconds: float = 1.0) -> None:
        await self.reconciler.reconcile(Request(name="p"))
        self.settle()
        self.api.wall_clock.now += seconds

    def change_spec(self, **template: Any) -> None:
        pool = self.api.objects[("nodepools", "p")]
        pool["spec"]["template"].update(template)
        pool["metadata"]["generation"] += 1
        self.pools.sync()

    def set_spec(self, **fields: Any) -> None:
        pool = self.api.objects[("nodepools", "p")]
        pool["spec"].update(fields)
        pool["metadata"]["generation"] += 1
        self.pools.sync()

    def pool_nodes(self) -> dict[str, dict[str, Any]]:
        return {name: obj for (plural, name), obj in self.api.objects.items() if plural == "nodes"}

    def live_vms(self) -> int:
        return sum(1 for state in self.cloud.vms.values() if state != VmState.DELETING)

    def uids(self) -> set[str]:
        """The Nodes by uid: VM names are reused once free, a Node's uid never is."""
        return {str(n["metadata"]["uid"]) for n in self.pool_nodes().values()}

    def disrupted(self) -> list[str]:
        return sorted(
            name
            for name, node in self.pool_nodes().items()
            if disruption.disruption_reason(node) is not None
        )

    def events(self, reason: str) -> list[str]:
        return [
            str(obj.get("message"))
            for (plural, _), obj in self.api.objects.items()
            if plural == "events" and obj.get("reason") == reason
        ]


def spec(**fields: Any) -> nodepool_api.NodePoolSpec:
    return nodepool_api.NodePoolSpec.from_dict(
        {"targetNodes": 3, "maxNodes": 10, "template": {"labels": {"v": "1"}}, **fields}
    )


async def grown(world: World, steps: int = 6) -> None:
    for _ in range(steps):
        await world.step()


async def test_nodes_record_the_spec_they_were_made_from() -> None:
    world = World(spec())
    await grown(world)

    current = drift.spec_hash(nodepool_api.spec_of(world.api.objects[("nodepools", "p")])).text
    assert sorted(world.pool_nodes()) == ["p-0", "p-1", "p-2"]
    for node in world.pool_nodes().values():
        assert node["metadata"]["annotations"][wellknown.SPEC_HASH_ANNOTATION] == current
    assert world.disrupted() == []


async def test_a_change_that_shapes_no_node_replaces_nothing() -> None:
    world = World(spec())
    await grown(world)

    world.set_spec(maxNodes=20, weight=5, drainTimeoutSeconds=30)
    await grown(world, 10)

    assert sorted(world.pool_nodes()) == ["p-0", "p-1", "p-2"]
    assert world.cloud.deleted_at == {}
    assert world.most_disrupted == 0


async def test_a_label_change_rolls_every_node_one_at_a_time_replacement_first() -> None:
    world = World(spec(disruption={"budgets": [{"nodes": "1"}]}))
    await grown(world)
    old = world.uids()

    world.change_spec(labels={"v": "2"})
    for _ in range(80):
        await world.step()
        # Replacement first: a drifted Node goes only once the pool has its size without it.
        live = [n for n in world.pool_nodes().values() if not plan.is_draining(n)]
        assert len(live) >= 3
        # Never shown short of Nodes, nor NotReady with more Ready than wanted.
        found = world.api.objects[("nodepools", "p")]["status"]["conditions"]
        assert [c["status"] for c in found if c["type"] == "Ready"] == ["True"]
        if not old & world.uids():
            break

    nodes = world.pool_nodes()
    assert len(nodes) == 3
    assert not old & world.uids()
    assert all(n["metadata"]["labels"]["v"] == "2" for n in nodes.values())
    assert world.most_disrupted == 1
    assert len(world.cloud.deleted_at) == 3
    assert all("changed: labels" in m for m in world.events("DisruptingDrifted"))
    assert any("budget nodes=1: 1 of 1 in use" in m for m in world.events("DisruptionBlocked"))


async def test_a_drifted_node_shows_what_changed_before_it_is_replaced() -> None:
    world = World(spec(disruption={"budgets": [{"nodes": "0"}]}))
    await grown(world)

    world.change_spec(labels={"v": "2"}, cpu="8")
    await grown(world, 5)

    nodes = world.pool_nodes()
    assert sorted(nodes) == ["p-0", "p-1", "p-2"]  # nodes: 0 blocks
    assert world.disrupted() == []
    for node in nodes.values():
        assert node["metadata"]["annotations"][wellknown.DRIFTED_ANNOTATION] == "capacity,labels"
    assert world.api.objects[("nodepools", "p")]["status"]["driftedNodes"] == 3
    held = world.events("DisruptionBlocked")
    assert held
    assert all("budget nodes=0: 0 of 0 in use" in m for m in held)

    # The spec goes back: nothing has drifted any more, and the mark goes.
    world.change_spec(labels={"v": "1"}, cpu="4")
    await grown(world, 2)
    for node in world.pool_nodes().values():
        assert wellknown.DRIFTED_ANNOTATION not in node["metadata"]["annotations"]
    assert "driftedNodes" not in world.api.objects[("nodepools", "p")]["status"]


async def test_without_room_under_max_nodes_a_node_is_removed_before_its_replacement() -> None:
    world = World(spec(maxNodes=3, disruption={"budgets": [{"nodes": "1"}]}))
    await grown(world)
    old = world.uids()

    world.change_spec(labels={"v": "2"})
    for _ in range(80):
        await world.step()
        assert world.live_vms() <= 3  # never past maxNodes
        if not old & world.uids():
            break

    assert not old & world.uids()
    await grown(world, 3)  # the last one's replacement, once it is gone
    assert len(world.pool_nodes()) == 3
    assert world.live_vms() == 3
    draining = world.events("DisruptionDraining")
    assert draining
    assert all("no room under maxNodes=3: removing it before launching" in m for m in draining)


async def test_a_consolidating_node_uses_the_same_budget() -> None:
    world = World(spec(disruption={"budgets": [{"nodes": "1"}]}))
    await grown(world)
    taints = [{"key": wellknown.CONSOLIDATING_TAINT_KEY, "effect": "NoSchedule"}]
    world.api.objects[("nodes", "p-0")]["spec"]["taints"] = taints
    world.settle()

    world.change_spec(labels={"v": "2"})
    await grown(world, 5)

    assert world.disrupted() == []
    assert any("1 of 1 in use" in m for m in world.events("DisruptionBlocked"))


async def test_expired_nodes_are_replaced_after_expire_after() -> None:
    world = World(spec(expireAfter="60s", disruption={"budgets": [{"nodes": "1"}]}))
    await grown(world)
    old = world.uids()
    await grown(world, 40)
    assert world.uids() == old  # not a minute old yet

    for _ in range(80):
        await world.step()
        if not old & world.uids():
            break
    assert not old & world.uids()
    assert world.most_disrupted == 1
    assert all("created" in m for m in world.events("DisruptingExpired"))


async def test_a_restarted_operator_goes_on_with_the_roll_within_the_budget() -> None:
    world = World(spec(disruption={"budgets": [{"nodes": "1"}]}))
    await grown(world)
    old = world.uids()
    world.change_spec(labels={"v": "2"})
    for i in range(80):
        if i % 3 == 0:
            world.reconciler = world.restarted()  # nothing in memory
        await world.step()
        if not old & world.uids():
            break
    assert not old & world.uids()
    assert world.most_disrupted == 1


def test_a_scheduled_zero_budget_holds_until_its_window_ends() -> None:
    budgets = (disruption_api.Budget(nodes="0", schedule="0 * * * *", duration="30m"),)
    node = copy.deepcopy(_ready_node("p-0", labels={"v": "1"}))
    view = plan.PoolView(
        vms=[virtual_machine("p-0", pool="p")], nodes={"p-0": node}, pods_per_node={}
    )
    drifted = spec(
        template={"labels": {"v": "2"}}, disruption={"budgets": [b.to_dict() for b in budgets]}
    )
    node["metadata"]["annotations"][wellknown.SPEC_HASH_ANNOTATION] = drift.spec_hash(spec()).text
    within = disruption.plan(view, drifted, desired=1, now=START + 60)  # a minute into the window
    after = disruption.plan(view, drifted, desired=1, now=START + 40 * 60)
    assert within.taint == ()
    assert [c.node for c, _ in within.held] == ["p-0"]
    assert within.recheck_in is not None
    assert [c.node for c in after.taint] == ["p-0"]


def _ready_node(name: str, *, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "creationTimestamp": conditions.rfc3339(START),
            "labels": {wellknown.POOL_LABEL: "p", **labels},
            "annotations": {},
        },
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def _rolling_pool(
    current: nodepool_api.NodePoolSpec, *, drifted: int, fresh: int, tainted: tuple[str, ...]
) -> dict[str, dict[str, Any]]:
    """Ready Nodes p-0.. : ``drifted`` made from an older spec, then ``fresh`` from
    ``current``; those ``tainted`` being replaced for drift."""
    old = drift.spec_hash(spec(template={"labels": {"v": "0"}})).text
    nodes: dict[str, dict[str, Any]] = {}
    for i in range(drifted + fresh):
        node = _ready_node(f"p-{i}", labels={"v": "1"})
        node["metadata"]["annotations"][wellknown.SPEC_HASH_ANNOTATION] = (
            old if i < drifted else drift.spec_hash(current).text
        )
        nodes[node["metadata"]["name"]] = node
    for name in tainted:
        nodes[name]["spec"]["taints"] = [
            {"key": wellknown.DISRUPTED_TAINT_KEY, "value": "Drifted", "effect": "NoSchedule"}
        ]
    return nodes


def test_a_node_drained_for_want_of_room_takes_no_room_from_those_waiting() -> None:
    """The roll model's find: 4 Nodes, ``maxNodes: 6``, ``50%`` of 6. p-0 and p-1 wait
    for their replacements (p-4, p-5, booting), p-2 had no room and drains. Its VM is one
    of the 4, not one beyond: counting it against the room moved p-1 to "no room" and
    drained it too, before p-5 served, two short with room for two replacements."""
    current = spec(targetNodes=4, maxNodes=6, disruption={"budgets": [{"nodes": "50%"}]})
    nodes = _rolling_pool(current, drifted=4, fresh=2, tainted=("p-0", "p-1", "p-2"))
    nodes["p-2"]["metadata"]["annotations"][plan.SCALE_DOWN_ANNOTATION] = conditions.rfc3339(START)
    for name in ("p-4", "p-5"):  # launched for p-0 and p-1, not registered yet
        nodes[name]["spec"]["taints"] = [
            {"key": wellknown.UNREGISTERED_TAINT_KEY, "effect": "NoSchedule"}
        ]
    view = plan.PoolView(
        vms=[virtual_machine(name, pool="p") for name in nodes], nodes=nodes, pods_per_node={}
    )

    decided = disruption.plan(view, current, desired=4, now=START + 60)

    assert decided.drain == ("p-2",)
    assert decided.waiting == ("p-0", "p-1")
    assert disruption.sized_target(current, 4, decided) == 5  # no VM beyond maxNodes


def test_a_percentage_is_of_the_registered_nodes_not_a_replacement_still_booting() -> None:
    """10% of a pool of 10: one at a time. p-0 is being replaced and its replacement p-10
    boots (unregistered): counting p-10 made it 10% of 11, two, and tainted p-1 before p-10
    served."""
    current = spec(targetNodes=10, maxNodes=12, disruption={"budgets": [{"nodes": "10%"}]})
    nodes = _rolling_pool(current, drifted=10, fresh=1, tainted=("p-0",))
    nodes["p-10"]["spec"]["taints"] = [
        {"key": wellknown.UNREGISTERED_TAINT_KEY, "effect": "NoSchedule"}
    ]
    view = plan.PoolView(
        vms=[virtual_machine(name, pool="p") for name in nodes], nodes=nodes, pods_per_node={}
    )

    decided = disruption.plan(view, current, desired=10, now=START + 60)

    assert decided.taint == ()
    assert "p-1" in [c.node for c, _ in decided.held]
    # Once p-10 registers (and p-0 is still on its way out), 10% of 11 is two: p-1 goes.
    nodes["p-10"]["spec"]["taints"] = []
    registered = disruption.plan(view, current, desired=10, now=START + 60)
    assert [c.node for c in registered.taint] == ["p-1"]
