"""Never deleting on a guess, and repairing what broke, on fakes and fake clocks: a Node
goes for a missing VM only once the cloud confirms that VM gone, an empty or failed
listing deletes nothing, removals are rate limited per pool, and only Nodes the pool
owns are touched."""

from __future__ import annotations

from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud.provider import VmState
from nodepool_operator.controllers import health
from nodepool_operator.controllers.nodepool import plan, repair
from nodepool_operator.runtime import conditions, errors
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.controller import Request
from unit.nodepool import drain_world as fakes
from unit.nodepool.repair_world import CONFIG, World, not_ready, pool_of_nodes, refuse_nodes


def stranger(name: str) -> Object:
    found = fakes.node(name)
    found["metadata"]["ownerReferences"] = [{"kind": "NodePool", "name": "p", "uid": "old"}]
    return found


# --- never delete on a guess -------------------------------------------------------------


async def test_a_node_missing_from_the_listing_stays_while_a_get_still_finds_its_vm() -> None:
    world = World("p-0", "p-1")
    world.nodes.put(fakes.node("p-0"))
    world.nodes.put(fakes.node("p-1"))
    world.cloud.hidden = {"p-1"}

    await world.converge(1)

    assert world.cloud.gets == ["p-1"]
    assert world.nodes_deleted() == []


async def test_a_node_goes_once_a_get_confirms_its_vm_is_gone() -> None:
    world = World("p-0", "p-1")
    world.nodes.put(fakes.node("p-0"))
    world.nodes.put(fakes.node("p-1"))
    world.cloud.remove("p-1")

    await world.converge(2)

    assert world.nodes_deleted() == ["p-1"]
    [warning] = world.warnings("NodeWithoutVm")
    assert "p-1" in warning


async def test_a_vm_of_the_same_name_but_another_provider_id_is_not_the_nodes_vm() -> None:
    world = World("p-0")
    world.nodes.put(fakes.node("p-0"))
    world.cloud.provider_ids["p-0"] = "simcloud:///p-0-recreated"
    world.cloud.hidden = {"p-0"}
    world.nodes.put(fakes.node("p-1"))
    world.cloud.vms["p-1"] = VmState.RUNNING  # keeps the listing non-empty

    await world.converge(2)

    assert world.nodes_deleted() == ["p-0"]


async def test_a_failed_get_deletes_nothing() -> None:
    world = World("p-0")
    world.nodes.put(fakes.node("p-0"))
    world.nodes.put(fakes.node("p-1"))
    world.cloud.get_fails = True

    await world.converge(1)

    assert world.nodes_deleted() == []


async def test_an_empty_listing_deletes_nothing_and_says_so_once() -> None:
    world = World("p-0", "p-1")
    world.nodes.put(fakes.node("p-0"))
    world.nodes.put(fakes.node("p-1"))
    world.pool(2)
    world.cloud.list_empty = True

    delays = []
    for _ in range(3):
        result = await world.reconciler.reconcile(Request(name="p"))
        delays.append(result.requeue_after)

    assert world.nodes_deleted() == []
    assert world.cloud.deleted_at == {}
    assert world.cloud.gets == []
    assert delays == [1.0, 2.0, 4.0]  # asked again on a backoff, not every poll
    [warning] = world.warnings("CloudListEmpty")
    assert "owns 2 Nodes" in warning
    degraded = [c for c in world.api.status_patches[-1]["conditions"] if c["type"] == "Degraded"]
    assert degraded[0]["status"] == "True"
    assert degraded[0]["reason"] == "CloudListEmpty"

    world.cloud.list_empty = False  # the cloud lists them again: all is as it was
    result = await world.reconciler.reconcile(Request(name="p"))
    assert world.nodes_deleted() == []


async def test_a_failed_listing_deletes_nothing_and_sets_degraded() -> None:
    world = World("p-0")
    world.nodes.put(fakes.node("p-0"))
    world.pool(1)
    world.cloud.list_fails = True

    await world.reconciler.reconcile(Request(name="p"))
    await world.reconciler.reconcile(Request(name="p"))  # the retry fails too

    assert world.nodes_deleted() == []
    assert len(world.warnings("CloudListFailed")) == 1


async def test_one_failed_listing_that_the_retry_clears_writes_nothing_and_says_nothing() -> None:
    # A cloud that answers a 5xx now and then (the soak's idle resync in minute 40): one
    # doubtful listing is asked again, and only a second in a row is Degraded.
    world = World("p-0")
    world.nodes.put(fakes.node("p-0"))
    world.pool(1)
    await world.reconciler.reconcile(Request(name="p"))
    written = len(world.api.status_patches)
    world.cloud.list_fails = True

    await world.reconciler.reconcile(Request(name="p"))
    world.cloud.list_fails = False
    await world.reconciler.reconcile(Request(name="p"))

    assert world.warnings("CloudListFailed") == []
    assert len(world.api.status_patches) == written
    assert world.nodes_deleted() == []


async def test_a_failed_listing_of_a_pool_short_of_its_target_shows_it_waiting() -> None:
    world = World("p-0")
    world.nodes.put(fakes.node("p-0"))
    world.pool(3)
    world.cloud.list_fails = True

    await world.reconciler.reconcile(Request(name="p"))
    await world.reconciler.reconcile(Request(name="p"))

    status = world.api.status_patches[-1]
    found = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert found["Degraded"] == ("True", "CloudListFailed")
    assert found["Ready"] == ("False", "NodesNotReady")
    assert found["Scaling"] == ("True", plan.WAITING_FOR_CLOUD)
    assert status["scaleOperation"] == "active"


async def test_an_empty_listing_for_a_pool_owning_no_nodes_is_believed() -> None:
    world = World()
    world.pool(0)

    await world.reconciler.reconcile(Request(name="p"))

    assert world.warnings("CloudListEmpty") == []


async def test_node_removals_are_rate_limited_per_pool() -> None:
    world = World("p-9")
    for index in range(5):
        world.nodes.put(fakes.node(f"p-{index}"))  # their VMs are gone
    world.nodes.put(fakes.node("p-9"))

    view = await world.converge(1)
    assert world.nodes_deleted() == ["p-0", "p-1"]  # the burst
    assert view.recheck_in == 10.0  # 6 a minute
    for name in ("p-0", "p-1"):
        world.nodes.remove(name)

    gets = len(world.cloud.gets)
    await world.mono.advance(5)
    await world.converge(1)
    assert world.nodes_deleted() == ["p-0", "p-1"]
    assert len(world.cloud.gets) == gets  # nothing asked of the cloud before the token

    await world.mono.advance(5)
    await world.converge(1)
    assert world.nodes_deleted() == ["p-0", "p-1", "p-2"]


async def test_a_node_with_the_pool_label_but_another_owner_is_left_alone() -> None:
    world = World("p-0")
    world.nodes.put(fakes.node("p-0"))
    world.nodes.put(stranger("p-7"))

    for _ in range(2):
        view = await world.converge(1)

    assert "p-7" not in view.nodes
    assert all(name != "p-7" for _, _, name in world.api.calls)
    assert world.cloud.gets == []
    [warning] = world.warnings("NodeNotOwned")
    assert "p-7" in warning


async def test_a_node_its_kubelet_registered_first_is_adopted_not_warned_about() -> None:
    world = World("p-0")
    vm = (await world.cloud.list_vms(pool="p"))[0]
    kubelets = fakes.node("p-0")
    del kubelets["metadata"]["ownerReferences"]
    kubelets["spec"]["providerID"] = vm.provider_id
    kubelets["metadata"]["resourceVersion"] = "7"
    world.api.objects[("nodes", "p-0")] = kubelets
    world.nodes.put(kubelets)  # the cache holds it as its kubelet registered it

    await world.converge(1)

    assert ("patch", "nodes", "p-0") in world.api.calls  # the adoption
    assert world.warnings("NodeNotOwned") == []  # not a stranger, though the cache says so
    assert world.nodes_deleted() == []


async def test_a_pool_being_deleted_leaves_nodes_it_does_not_own() -> None:
    world = World("p-0")
    world.nodes.put(stranger("p-0"))

    remaining, _ = await world.lifecycle.tear_down(world.pool(1))

    assert world.nodes_deleted() == []
    assert remaining == 1  # its VM; the stranger Node is not counted


# --- repair ------------------------------------------------------------------------------


async def test_a_node_not_ready_past_its_timeout_is_drained_then_replaced() -> None:
    world = World("p-0", "p-1")
    world.nodes.put(fakes.node("p-0"))
    world.nodes.put(not_ready("p-1", since=fakes.START - 600))
    world.pods.put(fakes.pod("a", node_name="p-1"))

    await world.converge(2)
    [warning] = world.warnings("NodeRepair")
    assert "p-1" in warning
    assert world.api.evictions("a") == 1
    assert world.cloud.deleted_at == {}  # its pod first

    world.pods.remove("ns/a")
    world.nodes.put(
        {
            **not_ready("p-1", since=fakes.START - 600),
            "metadata": {**fakes.draining_since("p-1", fakes.START)["metadata"]},
        }
    )
    await world.converge(2)
    assert world.cloud.deleted_at == {"p-1": fakes.START}
    assert world.nodes_deleted() == ["p-1"]

    world.nodes.remove("p-1")
    world.cloud.remove("p-1")  # the cloud finished deleting it
    await world.converge(2)
    assert world.cloud.order[-1] == "create p-1"  # a new VM, under the normal naming
    assert len(world.warnings("NodeRepair")) == 1


async def test_a_node_not_ready_within_its_timeout_is_looked_at_when_it_expires() -> None:
    world = World("p-0")
    world.nodes.put(not_ready("p-0", since=fakes.START - 100))

    view = await world.converge(1)

    assert world.warnings("NodeRepair") == []
    assert world.api.writes() == []
    assert view.recheck_in == 500.0


async def test_a_repair_drain_is_not_cancelled_when_the_pool_is_at_its_size() -> None:
    world = World("p-0")
    broken = not_ready("p-0", since=fakes.START - 900)
    broken["metadata"]["annotations"] = fakes.draining_since("p-0", fakes.START)["metadata"][
        "annotations"
    ]
    world.nodes.put(broken)
    world.pods.put(fakes.pod("a"))

    await world.converge(1)

    assert ("patch", "nodes", "p-0") not in world.api.writes()  # not uncordoned
    assert world.api.evictions("a") == 1


async def test_a_vm_running_without_a_node_past_registration_since_its_creation_is_replaced() -> (
    None
):
    world = World("p-0")
    world.cloud.created_at["p-0"] = fakes.START  # the timer counts from the cloud's record
    creates = refuse_nodes(world)

    await world.converge(1)
    world.clock.now += 899
    await world.converge(1)
    assert world.warnings("NodeRepair") == []
    world.clock.now += 1
    await world.converge(1)

    assert creates == ["p-0"] * 3
    assert world.cloud.deleted_at == {"p-0": fakes.START + 900}
    assert "registrationTimeoutSeconds=900" in world.warnings("NodeRepair")[0]


async def test_an_old_vm_whose_node_was_deleted_by_hand_gets_it_back_not_a_repair() -> None:
    world = World("p-0")
    world.cloud.created_at["p-0"] = fakes.START - 10_000

    await world.converge(1)

    assert ("create", "nodes", "p-0") in world.api.calls
    assert world.cloud.deleted_at == {}
    assert world.warnings("NodeRepair") == []


async def test_a_node_deleted_by_hand_is_registered_again() -> None:
    world = World("p-0")

    await world.converge(1)

    assert ("create", "nodes", "p-0") in world.api.calls
    assert world.cloud.deleted_at == {}


async def test_a_vm_deleted_in_the_cloud_is_replaced_and_its_node_removed() -> None:
    world = World("p-0", "p-1")
    world.nodes.put(fakes.node("p-0"))
    world.nodes.put(fakes.node("p-1"))
    world.cloud.remove("p-1")

    await world.converge(2)

    assert world.nodes_deleted() == ["p-1"]
    assert world.cloud.order[-1] == "create p-1"


async def test_a_stable_pool_lists_its_vms_again_after_the_resync_interval() -> None:
    world = World("p-0")
    world.nodes.put(fakes.node("p-0"))
    world.pool(1)

    result = await world.reconciler.reconcile(Request(name="p"))

    interval = CONFIG.cloud_resync_interval
    assert result.requeue_after is not None
    assert 0.75 * interval <= result.requeue_after <= 1.25 * interval


# --- a Node the API server refuses -------------------------------------------------------


async def test_a_refused_node_create_sets_degraded_backs_off_and_scale_down_still_works() -> None:
    world = World("p-0", "p-1")
    world.nodes.put(fakes.node("p-0"))
    creates: list[str] = []

    async def refuse(resource: Any, body: Object, **_: Any) -> Object:
        creates.append(body["metadata"]["name"])
        raise errors.Invalid('Node "p-1" is invalid: metadata.labels: Invalid value: "x"')

    world.api.create = refuse  # type: ignore[method-assign]
    world.pool(2)
    result = await world.reconciler.reconcile(Request(name="p"))

    assert creates == ["p-1"]
    [warning] = world.warnings("NodeInvalid")
    assert "metadata.labels" in warning
    [degraded] = [c for c in world.api.status_patches[-1]["conditions"] if c["type"] == "Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "NodeInvalid")
    assert "metadata.labels" in degraded["message"]
    assert result.requeue_after is not None
    assert result.requeue_after <= CONFIG.degraded_backoff

    await world.reconciler.reconcile(Request(name="p"))  # within the pause: not asked again
    assert creates == ["p-1"]

    world.pool(1)  # a scale-down meanwhile goes on
    await world.reconciler.reconcile(Request(name="p"))
    assert "p-1" in world.cloud.deleted_at


# --- bounded memory and wake-ups ---------------------------------------------------------


async def test_what_is_remembered_of_a_pool_is_dropped_when_it_is_gone() -> None:
    world = World("p-9")
    for index in range(4):
        world.nodes.put(fakes.node(f"p-{index}"))
    world.nodes.put(stranger("p-7"))
    world.pool(1)
    world.cloud.list_empty = False
    await world.reconciler.reconcile(Request(name="p"))
    assert world.lifecycle.repairer.budget.reserved_in("p")  # a reservation is waiting

    world.pools.remove("p")
    await world.reconciler.reconcile(Request(name="p"))

    assert world.lifecycle.repairer.budget.reserved_in("p") is None
    assert world.lifecycle.repairer.budget._buckets == {}
    assert world.lifecycle.inventory._told == {}
    assert world.reconciler.reporter.status._written == {}


def test_node_heartbeats_do_not_wake_the_pool_but_readiness_and_cordon_do() -> None:
    from nodepool_operator.controllers.nodepool import setup
    from nodepool_operator.runtime.controller import StateChanged

    predicate = StateChanged(setup.node_state)
    before = fakes.node("p-0")
    heartbeat = fakes.node("p-0")
    heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = "2030-01-01T00:00:00Z"
    heartbeat["metadata"]["resourceVersion"] = "9"
    assert not predicate.update(before, heartbeat)
    cordoned = fakes.node("p-0")
    cordoned["spec"]["unschedulable"] = True
    assert predicate.update(before, cordoned)
    assert predicate.update(before, not_ready("p-0", since=fakes.START))
    labelled = fakes.node("p-0")
    labelled["metadata"]["labels"]["x"] = "y"
    assert predicate.update(before, labelled)


# --- a crash between a VM's deletion and its Node's ----------------------------------------


def vm_deleted(name: str) -> Object:
    """A drained Node whose VM this operator asked the cloud to delete."""
    return fakes.node(
        name,
        annotations={
            plan.SCALE_DOWN_ANNOTATION: conditions.rfc3339(0),
            plan.VM_DELETED_ANNOTATION: conditions.rfc3339(0),
        },
    )


async def test_a_drained_node_is_marked_before_its_vm_is_deleted() -> None:
    world = World("p-0")
    world.nodes.put(fakes.node("p-0"))

    await world.lifecycle.tear_down(world.pool(0))

    marked = [c for c in world.api.calls if c == ("patch", "nodes", "p-0")]
    assert marked
    assert world.cloud.order == ["vm p-0"]
    assert world.api.calls.index(("patch", "nodes", "p-0")) < world.api.calls.index(
        ("delete", "nodes", "p-0")
    )


async def test_an_empty_listing_is_believed_when_every_node_left_had_its_vm_deleted_by_us() -> None:
    # The operator deleted the pool's last VM and was killed before deleting its Node.
    world = World()
    world.nodes.put(vm_deleted("p-0"))

    await world.lifecycle.tear_down(world.pool(0))

    assert world.warnings("CloudListEmpty") == []
    assert world.nodes_deleted() == ["p-0"]


async def test_an_empty_listing_with_any_node_not_marked_by_us_still_deletes_nothing() -> None:
    world = World("p-1")
    world.nodes.put(vm_deleted("p-0"))
    world.nodes.put(fakes.node("p-1"))
    world.pool(1)
    world.cloud.list_empty = True

    await world.reconciler.reconcile(Request(name="p"))
    await world.reconciler.reconcile(Request(name="p"))

    assert world.nodes_deleted() == []
    [warning] = world.warnings("CloudListEmpty")
    assert "owns 1 Nodes" in warning


async def test_a_node_marked_vm_deleted_is_removed_not_given_back_when_it_is_healthy_again() -> (
    None
):
    # The roll model's find: a replacement that had not registered in time was drained
    # for repair, marked vm-deleted, and the operator was killed before asking the cloud.
    # Its kubelet then reported: the Node is healthy, the pool at its size. Giving it back
    # left the mark on, the Node counted as leaving for ever and its VM never deleted.
    world = World("p-0", "p-1")
    world.nodes.put(fakes.node("p-0"))
    world.nodes.put(vm_deleted("p-1"))

    await world.converge(2)

    assert ("patch", "nodes", "p-1") not in world.api.writes()  # not uncordoned
    assert "p-1" in world.cloud.deleted_at
    assert world.nodes_deleted() == ["p-1"]


# --- the repair brake ----------------------------------------------------------------------


async def test_a_pool_all_not_ready_at_once_looks_partitioned_and_nothing_is_replaced() -> None:
    world = pool_of_nodes(5, not_ready_names={f"p-{i}" for i in range(5)})

    view = await world.converge(5)

    assert world.warnings("NodeRepair") == []
    assert world.cloud.deleted_at == {}
    assert world.api.writes() == []  # no Node cordoned or drained
    [held] = world.warnings("RepairHeld")
    assert "5 of 5 nodes are NotReady at once" in held
    assert view.repair_held == held

    await world.converge(5)  # the same brake: told once
    assert len(world.warnings("RepairHeld")) == 1


async def test_repairs_resume_on_their_own_when_the_nodes_come_back() -> None:
    world = pool_of_nodes(5, not_ready_names={f"p-{i}" for i in range(5)})
    await world.converge(5)

    for i in range(1, 5):  # four come back, one stays broken
        world.nodes.put(fakes.node(f"p-{i}"))
    view = await world.converge(5)

    assert view.repair_held is None
    [warning] = world.warnings("NodeRepair")
    assert "p-0" in warning


async def test_at_most_a_fifth_of_the_pool_is_replaced_at_once() -> None:
    broken = {"p-1", "p-4", "p-7"}
    world = pool_of_nodes(10, not_ready_names=broken)

    view = await world.converge(10)

    repaired = world.warnings("NodeRepair")
    assert len(repaired) == 2  # max(1, 20% of 10)
    assert all(any(name in w for name in ("p-1", "p-4")) for w in repaired)
    assert (
        view.repair_held == "3 of 10 nodes are unhealthy: at most 2 replaced at a time, 1 waiting"
    )
    assert world.warnings("RepairHeld") == [view.repair_held]


async def test_a_repair_under_way_counts_against_the_brake_after_a_restart() -> None:
    world = pool_of_nodes(5, not_ready_names={"p-2"})
    draining = not_ready("p-3", since=fakes.START - 900)
    draining["metadata"]["annotations"] = fakes.draining_since("p-3", fakes.START)["metadata"][
        "annotations"
    ]
    world.nodes.put(draining)  # a repair an earlier run started, marked on the Node

    view = await world.converge(5)

    assert world.warnings("NodeRepair") == []  # p-2 waits for p-3's repair to end
    assert view.repair_held is not None
    assert "1 waiting" in view.repair_held


async def test_the_one_node_of_a_pool_not_ready_is_replaced() -> None:
    world = pool_of_nodes(1, not_ready_names={"p-0"})

    view = await world.converge(1)

    assert len(world.warnings("NodeRepair")) == 1
    assert view.repair_held is None


async def test_the_brake_shows_in_degraded() -> None:
    world = pool_of_nodes(5, not_ready_names={f"p-{i}" for i in range(5)})
    world.pool(5)

    await world.reconciler.reconcile(Request(name="p"))

    [degraded] = [c for c in world.api.status_patches[-1]["conditions"] if c["type"] == "Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "RepairHeld")
    assert "looks cut off from the control plane" in degraded["message"]


def in_zone(node: Object, zone: str) -> Object:
    node["metadata"]["labels"][wellknown.ZONE_LABEL] = zone
    return node


async def test_a_zone_whose_every_node_is_not_ready_looks_cut_off_and_waits() -> None:
    names = [f"p-{i}" for i in range(6)]
    world = World(*names)
    for i, name in enumerate(names):
        zone = "abc"[i // 2]
        found = not_ready(name, since=fakes.START - 900) if zone == "a" else fakes.node(name)
        world.nodes.put(in_zone(found, zone))

    view = await world.converge(6)

    assert world.warnings("NodeRepair") == []
    assert world.cloud.deleted_at == {}
    assert view.repair_held is not None
    assert "every node of zone a is NotReady at once" in view.repair_held

    world.nodes.put(in_zone(fakes.node("p-0"), "a"))  # one comes back: an ordinary failure
    view = await world.converge(6)

    [repaired] = world.warnings("NodeRepair")
    assert "p-1" in repaired
    assert view.repair_held is None


async def test_a_zone_of_one_node_not_ready_is_an_ordinary_failure() -> None:
    names = ["p-0", "p-1", "p-2"]
    world = World(*names)
    world.nodes.put(in_zone(not_ready("p-0", since=fakes.START - 900), "a"))
    world.nodes.put(in_zone(fakes.node("p-1"), "b"))
    world.nodes.put(in_zone(fakes.node("p-2"), "b"))

    view = await world.converge(3)

    [repaired] = world.warnings("NodeRepair")
    assert "p-0" in repaired
    assert view.repair_held is None


# --- startup taints ------------------------------------------------------------------------

CNI = nodepool_api.Taint(key="example.com/cni-not-ready", effect="NoSchedule")


def with_startup_taint(name: str, *, created: float) -> Object:
    """A Ready Node whose CNI agent never removed its startup taint."""
    found = fakes.node(name)
    found["metadata"]["creationTimestamp"] = conditions.rfc3339(created)
    found["spec"]["taints"] = [CNI.to_dict()]
    return found


def startup_spec(*, registration: int = 300) -> nodepool_api.NodePoolSpec:
    template = nodepool_api.NodeTemplate(startup_taints=(CNI,))
    return nodepool_api.NodePoolSpec(
        target_nodes=2, template=template, registration_timeout_seconds=registration
    )


def test_a_startup_taint_left_past_registration_makes_the_node_unhealthy() -> None:
    spec = startup_spec()
    stuck = with_startup_taint("p-0", created=fakes.START - 301)
    recent = with_startup_taint("p-1", created=fakes.START - 100)
    done = fakes.node("p-2")  # its agent removed the taint
    done["metadata"]["creationTimestamp"] = conditions.rfc3339(fakes.START - 1_000)
    view = plan.PoolView(
        vms=(),
        nodes={"p-0": stuck, "p-1": recent, "p-2": done},
        pods_per_node={},
    )

    assert repair.unhealthy(view, spec, now=fakes.START) == {"p-0"}
    # The recent one is looked at again when its deadline comes, with no event to wake it.
    assert repair.unhealthy_in(view, spec, now=fakes.START) == 200.0
    assert health.startup_taints_left(stuck, spec.template) == [CNI.key]
    # A taint of the same key with another effect is not the template's startup taint.
    other = with_startup_taint("p-3", created=fakes.START - 301)
    other["spec"]["taints"] = [{"key": CNI.key, "effect": "NoExecute"}]
    assert health.startup_taints_left(other, spec.template) == []


async def test_a_node_whose_startup_taint_stays_is_replaced_with_an_event_naming_it() -> None:
    world = World("p-0", "p-1")
    world.nodes.put(fakes.node("p-0"))
    world.nodes.put(with_startup_taint("p-1", created=fakes.START - 301))
    spec = startup_spec()
    pool = world.pool(2)
    pool["spec"] = {**pool["spec"], **nodepool_api.manifest("p", spec)["spec"]}

    await world.lifecycle.converge(pool, nodepool_api.spec_of(pool), 2)

    [warning] = world.warnings("NodeRepair")
    assert "node p-1 still carries the startup taint example.com/cni-not-ready" in warning
    assert ("patch", "nodes", "p-1") in world.api.writes()  # cordoned: its drain begins
    assert ("patch", "nodes", "p-0") not in world.api.writes()
