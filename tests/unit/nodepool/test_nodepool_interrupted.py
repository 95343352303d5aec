"""A Node the cloud gave notice for is replaced through the one disruption path: tainted
``Interrupted``, its replacement launched at once (not once the VM is gone), drained at
once through the Eviction API with the notice's ``terminateAt`` as the drain's deadline,
then its VM and the Node go. No budget holds it, but it counts against the budget of the
voluntary disruptions; repair (its brake, its NotReady wording) never sees it. The notice
is written under the NodePool controller's own identity."""

from __future__ import annotations

from typing import Any

from nodepool_operator.api import disruption as disruption_api
from nodepool_operator.api import drift, wellknown
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud import testing as cloud_testing
from nodepool_operator.cloud.provider import VmState
from nodepool_operator.cloud.testing import virtual_machine
from nodepool_operator.controllers.nodepool import disruption, plan
from nodepool_operator.controllers.nodepool.interruptions import notice
from nodepool_operator.controllers.nodepool.interruptions import setup as interruptions_setup
from nodepool_operator.controllers.nodepool.interruptions.controller import InterruptionReconciler
from nodepool_operator.runtime import conditions, testing
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.manager import Manager
from unit.nodepool import drain_world as fakes
from unit.nodepool.repair_world import World, not_ready


def interrupted(
    name: str,
    *,
    kind: str = notice.SPOT_INTERRUPTION,
    terminate_in: float | None = 120,
    extra: Object | None = None,
) -> Object:
    node = fakes.node(name)
    warning = notice.Notice(
        kind=kind,
        noticed_at=fakes.START,
        terminate_at=None if terminate_in is None else fakes.START + terminate_in,
    )
    testing.merge(node, notice.marks(node, warning))
    if extra is not None:
        testing.merge(node, extra)
    node["metadata"].pop("resourceVersion", None)
    return node


def infos(world: World, reason: str) -> list[str]:
    return [m for t, r, m in world.recorder.events if t == "Normal" and r == reason]


async def test_a_noticed_node_is_drained_at_once_and_its_replacement_launched_at_once() -> None:
    world = World("p-0", "p-1")
    world.nodes.put(fakes.node("p-0"))
    world.nodes.put(interrupted("p-1"))
    world.pods.put(fakes.pod("a", node_name="p-1"))

    await world.converge(2)

    # The same pass: its pod evicted through the Eviction API, and a new VM asked for,
    # while the noticed VM is still there (replacement first, not after it is gone).
    assert world.api.evictions("a") == 1
    assert [c for c in world.cloud.order if c.startswith("create")] == ["create p-2"]
    assert world.cloud.deleted_at == {}
    assert world.warnings("NodeRepair") == []
    [chosen] = infos(world, "DisruptingInterrupted")
    assert "p-1" in chosen
    assert "spot-interruption, 120s left" in chosen
    [draining] = infos(world, "DisruptionDraining")
    assert "the cloud takes its VM back" in draining
    assert "its replacement launched beside it" in draining

    # Its pod gone: drained, but its VM stays while the replacement is not Ready (the
    # pool would be short of a Node), and the replacement is not launched twice.
    world.pods.remove("ns/a")
    world.nodes.put(tainted_and_draining("p-1"))
    await world.converge(2)
    assert "p-1" not in world.cloud.deleted_at
    assert world.nodes_deleted() == []
    assert [c for c in world.cloud.order if c.startswith("create")] == ["create p-2"]

    # The replacement Ready: the VM, then the Node go.
    world.cloud.vms["p-2"] = VmState.RUNNING
    world.nodes.put(fakes.node("p-2"))
    await world.converge(2)
    assert world.cloud.deleted_at.get("p-1") == fakes.START
    assert world.nodes_deleted() == ["p-1"]
    assert [c for c in world.cloud.order if c.startswith("create")] == ["create p-2"]


async def test_a_drained_noticed_node_waits_for_its_replacement_no_later_than_terminate_at() -> (
    None
):
    world = World("p-0", "p-1")
    world.nodes.put(fakes.node("p-0"))
    world.nodes.put(tainted_and_draining("p-1"))
    await world.converge(2)
    assert "p-1" not in world.cloud.deleted_at  # its replacement is not Ready yet

    world.clock.now = fakes.START + 120  # the notice's terminateAt: the cloud takes it now
    await world.converge(2)
    assert "p-1" in world.cloud.deleted_at
    assert world.nodes_deleted() == ["p-1"]


def tainted_and_draining(name: str) -> Object:
    """A noticed Node as our first pass left it: tainted Interrupted, its drain started."""
    started = fakes.draining_since(name, fakes.START)
    taint = {"key": wellknown.DISRUPTED_TAINT_KEY, "value": "Interrupted", "effect": "NoSchedule"}
    return interrupted(
        name,
        extra={
            "metadata": started["metadata"],
            "spec": {"taints": [*interrupted(name)["spec"]["taints"], taint]},
        },
    )


async def test_a_notice_is_not_held_by_a_zero_budget() -> None:
    world = World("p-0", "p-1")
    world.nodes.put(fakes.node("p-0"))
    world.nodes.put(interrupted("p-1"))
    budgets = (disruption_api.Budget(nodes="0"),)
    pool = world.pool(2, disruption=disruption_api.Disruption(budgets=budgets))

    await world.lifecycle.converge(pool, nodepool_api.spec_of(pool), 2)

    assert infos(world, "DisruptingInterrupted")
    assert infos(world, "DisruptionBlocked") == []
    assert "create p-2" in world.cloud.order


async def test_without_room_under_max_nodes_the_noticed_node_drains_before_its_replacement() -> (
    None
):
    world = World("p-0", "p-1")
    world.nodes.put(fakes.node("p-0"))
    world.nodes.put(interrupted("p-1"))
    world.pods.put(fakes.pod("a", node_name="p-1"))
    pool = world.pool(2, max_nodes=2)

    await world.lifecycle.converge(pool, nodepool_api.spec_of(pool), 2)

    assert world.api.evictions("a") == 1  # the deadline is short: drained now anyway
    assert not [c for c in world.cloud.order if c.startswith("create")]
    [draining] = infos(world, "DisruptionDraining")
    assert "its replacement launched once it is gone (no room under maxNodes=2)" in draining


async def test_many_noticed_nodes_are_not_held_by_the_repair_brake_nor_told_as_not_ready() -> None:
    names = [f"p-{i}" for i in range(5)]
    world = World(*names)
    for name in names[:2]:
        world.nodes.put(fakes.node(name))
    # Three noticed, one of them NotReady for long: repair's brake would replace one.
    world.nodes.put(interrupted("p-2"))
    world.nodes.put(interrupted("p-3"))
    late = not_ready("p-4", since=fakes.START - 900)
    world.nodes.put(interrupted("p-4", extra={"status": late["status"]}))
    for name in names[2:]:
        world.pods.put(fakes.pod(f"pod-{name}", node_name=name))

    await world.converge(5)

    assert sorted(m.split()[2].rstrip(":") for m in infos(world, "DisruptingInterrupted")) == [
        "p-2",
        "p-3",
        "p-4",
    ]
    assert all(world.api.evictions(f"pod-{n}") == 1 for n in names[2:])
    assert world.warnings("NodeRepair") == []
    assert world.warnings("RepairHeld") == []
    assert sum(1 for c in world.cloud.order if c.startswith("create")) == 3


def _drifted_ready(name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "creationTimestamp": conditions.rfc3339(fakes.START),
            "labels": {wellknown.POOL_LABEL: "p", "v": "1"},
            "annotations": {
                wellknown.SPEC_HASH_ANNOTATION: drift.spec_hash(
                    nodepool_api.NodePoolSpec.from_dict(
                        {"targetNodes": 3, "template": {"labels": {"v": "1"}}}
                    )
                ).text
            },
        },
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def _three_drifted_first_marked(
    marked: notice.Notice,
) -> tuple[plan.PoolView, nodepool_api.NodePoolSpec]:
    """Three Ready Nodes drifted from the spec, under a budget of one Node, the first
    carrying ``marked``."""
    found = {name: _drifted_ready(name) for name in ("p-0", "p-1", "p-2")}
    testing.merge(found["p-0"], notice.marks(found["p-0"], marked))
    view = plan.PoolView(
        vms=[virtual_machine(name, pool="p") for name in found], nodes=found, pods_per_node={}
    )
    drifted = nodepool_api.NodePoolSpec.from_dict(
        {
            "targetNodes": 3,
            "maxNodes": 10,
            "template": {"labels": {"v": "2"}},
            "disruption": {"budgets": [{"nodes": "1"}]},
        }
    )
    return view, drifted


def test_a_notice_is_counted_against_the_budget_of_voluntary_disruption() -> None:
    warning = notice.Notice(
        kind=notice.SPOT_INTERRUPTION, noticed_at=fakes.START, terminate_at=fakes.START + 120
    )
    view, drifted = _three_drifted_first_marked(warning)

    decided = disruption.plan(view, drifted, desired=3, now=fakes.START)

    assert [(c.node, c.reason) for c in decided.taint] == [("p-0", "Interrupted")]
    assert sorted(c.node for c, _ in decided.held) == ["p-1", "p-2"]
    assert all("1 of 1 in use" in why for _, why in decided.held)
    # Drained at once, and the pool sized one larger at once for its replacement.
    assert decided.drain == ("p-0",)
    assert disruption.sized_target(drifted, 3, decided) == 3
    assert len(disruption.sized(view, decided.drain).vms) == 2


async def test_a_drain_ends_at_the_notices_terminate_at_and_says_so() -> None:
    world = fakes.World("p-0")
    world.nodes.put(interrupted("p-0", terminate_in=20, extra={"metadata": {}}))
    world.pods.put(fakes.pod("slow", node_name="p-0", grace=30))
    world.pods.put(fakes.pod("quick", node_name="p-0", grace=5))

    # No drainTimeoutSeconds: the notice alone sets the deadline. A pod whose grace would
    # outlast it is deleted with what is left; the other is evicted.
    progress = await world.drain("p-0", limit=None)
    assert not progress.done
    assert world.api.deleted_with == {"slow": 20}
    assert world.api.evictions("quick") == 1

    world.advance(21)
    progress = await world.drain("p-0", limit=None)
    assert progress.done
    [forced] = world.warnings("DrainTimeout")
    assert "the cloud's notice (spot-interruption) takes its VM back at" in forced
    assert "drain timeout expired" not in forced


async def test_a_shorter_drain_timeout_than_the_notice_is_the_deadline() -> None:
    world = fakes.World("p-0")
    world.nodes.put(interrupted("p-0", terminate_in=600, extra={"metadata": {}}))
    world.pods.put(fakes.pod("a", node_name="p-0", grace=5))
    await world.drain("p-0", limit=10)
    world.advance(11)
    world.nodes.put(
        interrupted("p-0", terminate_in=600, extra=fakes.draining_since("p-0", fakes.START))
    )
    assert (await world.drain("p-0", limit=10)).done
    [forced] = world.warnings("DrainTimeout")
    assert "drain timeout expired" in forced


def test_the_notice_is_written_as_the_nodepool_controller() -> None:
    manager = Manager(Client(api=None, field_manager="test"))  # no request is made here
    controller = interruptions_setup.setup(manager, source=cloud_testing.FakeEventSource())
    reconciler = controller.reconciler
    assert isinstance(reconciler, InterruptionReconciler)
    assert reconciler.client.field_manager == "nodepool-controller"
    assert reconciler.recorder.component == "nodepool-controller"


def rebalancing(name: str, *, extra: Object | None = None) -> Object:
    """A Node as the interruptions controller marks it for a rebalance recommendation
    where its pool opts in: annotated, tainted, cordoned; no deadline."""
    node = fakes.node(name)
    rebalance = notice.Notice(kind=notice.REBALANCE, noticed_at=fakes.START)
    testing.merge(node, notice.marks(node, rebalance))
    if extra is not None:
        testing.merge(node, extra)
    node["metadata"].pop("resourceVersion", None)
    return node


def creates(world: World) -> list[str]:
    return [c for c in world.cloud.order if c.startswith("create")]


async def test_a_rebalance_node_is_replaced_beside_it_and_not_drained_nor_repaired() -> None:
    world = World("p-0", "p-1")
    world.nodes.put(fakes.node("p-0"))
    world.nodes.put(rebalancing("p-1"))
    world.pods.put(fakes.pod("a", node_name="p-1"))

    await world.converge(2)

    assert creates(world) == ["create p-2"]  # at once, the pool one larger
    assert world.api.evictions() == 0  # its pods stay: no notice yet
    assert world.warnings("NodeRepair") == []
    assert infos(world, "DisruptingInterrupted") == []
    assert infos(world, "DisruptionDraining") == []

    # Its replacement Ready: the cordoned Node stays, with its pods; nothing launched
    # twice, nothing removed (the pool runs one over its target until a notice comes).
    world.cloud.vms["p-2"] = VmState.RUNNING
    world.nodes.put(fakes.node("p-2"))
    await world.converge(2)
    await world.converge(2)
    assert creates(world) == ["create p-2"]
    assert world.cloud.deleted_at == {}
    assert world.api.evictions() == 0


async def test_a_notice_after_a_rebalance_drains_the_node_with_its_replacement_already_up() -> None:
    world = World("p-0", "p-1", "p-2")
    world.nodes.put(fakes.node("p-0"))
    world.nodes.put(fakes.node("p-2"))  # launched for the rebalance recommendation, Ready
    world.pods.put(fakes.pod("a", node_name="p-1"))
    marked = rebalancing("p-1")
    warning = notice.Notice(
        kind=notice.SPOT_INTERRUPTION, noticed_at=fakes.START + 60, terminate_at=fakes.START + 180
    )
    stored = notice.read(marked)
    assert stored is not None
    testing.merge(marked, notice.marks(marked, stored.merged(warning)))
    marked["metadata"].pop("resourceVersion", None)
    world.nodes.put(marked)

    await world.converge(2)

    assert world.api.evictions("a") == 1  # drained at once, as any noticed Node
    assert creates(world) == []  # its replacement is the one already there
    [chosen] = infos(world, "DisruptingInterrupted")
    assert "spot-interruption" in chosen

    world.pods.remove("ns/a")
    world.nodes.put(tainted_and_draining("p-1"))
    await world.converge(2)
    assert "p-1" in world.cloud.deleted_at  # drained, its replacement Ready: gone now
    assert creates(world) == []


def test_a_rebalance_node_is_counted_against_the_budget_and_sizes_the_pool_one_larger() -> None:
    rebalance = notice.Notice(kind=notice.REBALANCE, noticed_at=fakes.START)
    view, drifted = _three_drifted_first_marked(rebalance)

    decided = disruption.plan(view, drifted, desired=3, now=fakes.START)

    assert decided.rebalancing == ("p-0",)  # replaced beside it, not drained
    assert decided.drain == ()
    # It uses the one Node the budget allows: the other drifted Nodes wait. Drifted
    # itself, it goes first, in the room it holds already (its replacement is up).
    assert [(c.node, c.reason) for c in decided.taint] == [("p-0", "Drifted")]
    assert sorted(c.node for c, _ in decided.held) == ["p-1", "p-2"]
    assert all("1 of 1 in use" in why for _, why in decided.held)
    assert disruption.sized_target(drifted, 3, decided) == 4


def test_a_rebalance_node_not_drifted_holds_the_budget_of_those_that_are() -> None:
    rebalance = notice.Notice(kind=notice.REBALANCE, noticed_at=fakes.START)
    view, drifted = _three_drifted_first_marked(rebalance)
    current = drift.spec_hash(drifted).text  # p-0 made from the spec as it is now
    view.nodes["p-0"]["metadata"]["annotations"][wellknown.SPEC_HASH_ANNOTATION] = current

    decided = disruption.plan(view, drifted, desired=3, now=fakes.START)

    assert (decided.taint, decided.drain, decided.rebalancing) == ((), (), ("p-0",))
    assert sorted(c.node for c, _ in decided.held) == ["p-1", "p-2"]
    assert all("1 of 1 in use" in why for _, why in decided.held)
    assert disruption.sized_target(drifted, 3, decided) == 4


def test_a_rebalance_node_without_room_under_max_nodes_or_uncordoned_gets_no_replacement() -> None:
    found = {name: fakes.node(name) for name in ("p-0", "p-1")}
    rebalance = notice.Notice(kind=notice.REBALANCE, noticed_at=fakes.START)
    testing.merge(found["p-0"], notice.marks(found["p-0"], rebalance))
    view = plan.PoolView(
        vms=[virtual_machine(name, pool="p") for name in found], nodes=found, pods_per_node={}
    )
    full = nodepool_api.NodePoolSpec(target_nodes=2, max_nodes=2)
    roomy = nodepool_api.NodePoolSpec(target_nodes=2, max_nodes=5)

    no_room = disruption.plan(view, full, desired=2, now=fakes.START)
    assert (no_room.rebalancing, disruption.sized_target(full, 2, no_room)) == ((), 2)
    assert (no_room.drain, no_room.taint) == ((), ())

    assert disruption.is_rebalancing(found["p-0"])
    found["p-0"]["spec"]["unschedulable"] = False  # uncordoned by hand: the mark no longer counts
    assert not disruption.is_rebalancing(found["p-0"])
    decided = disruption.plan(view, roomy, desired=2, now=fakes.START)
    assert (decided.rebalancing, disruption.sized_target(roomy, 2, decided)) == ((), 2)
