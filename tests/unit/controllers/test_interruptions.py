"""The interruptions controller: a cloud's notice for a VM of ours is stored on its Node
(annotations, NoSchedule taint, cordon) before the event is said handled; what is not ours
or not known is handled without a write."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from nodepool_operator.api import wellknown
from nodepool_operator.cloud import testing as cloud_testing
from nodepool_operator.cloud.provider import CloudEvent, PermanentCloudError, VmName
from nodepool_operator.controllers import cached
from nodepool_operator.controllers.nodepool.interruptions import controller, metrics, moves, notice
from nodepool_operator.controllers.resources import PODS_BY_NODE
from nodepool_operator.runtime import clock as runtime_clock
from nodepool_operator.runtime import conditions, errors, pods, testing
from nodepool_operator.runtime.client import Object, Resource
from nodepool_operator.runtime.controller import Controller
from nodepool_operator.runtime.events import EventRecorder

NOW = 1_800_000_000.0


def spot_node(name: str, *, pool: str = "p", zone: str = "sim-1a") -> Object:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "ownerReferences": [{"kind": "NodePool", "name": pool, "uid": f"uid-{pool}"}],
            "labels": {
                wellknown.POOL_LABEL: pool,
                wellknown.ZONE_LABEL: zone,
                wellknown.INSTANCE_TYPE_LABEL: "c4",
                wellknown.CAPACITY_TYPE_LABEL: "spot",
            },
        },
        "spec": {"taints": [{"key": "team", "value": "web", "effect": "NoSchedule"}]},
    }


def warning(name: str, *, pool: str = "p", kind: str = "SpotInterruptionWarning") -> CloudEvent:
    return CloudEvent(
        kind=kind, name=VmName(name), pool=pool, at=NOW - 5, terminate_at=NOW + 115, receipt="r"
    )


def pod(name: str, *, node: str, owner: str = "rs-1", phase: str = "Running") -> Object:
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "ownerReferences": [{"kind": "ReplicaSet", "uid": owner, "controller": True}],
        },
        "spec": {"nodeName": node},
        "status": {"phase": phase},
    }


class World:
    def __init__(self, *nodes: Object) -> None:
        self.wall = testing.FakeWallClock(NOW)
        self.api = self.server()
        for node in nodes:
            self.api.put("nodes", node)
        for pool in ("p", "q"):
            metadata = {"name": pool, "uid": f"uid-{pool}"}
            self.api.put("nodepools", {"kind": "NodePool", "metadata": metadata})
        self.nodes = testing.FakeInformer(server=self.api, plural="nodes")
        self.pools = testing.FakeInformer(server=self.api, plural="nodepools")
        self.pods = testing.FakeInformer({PODS_BY_NODE: pods.node_name_index})
        self.nodes.sync()
        self.pools.sync()
        self.source = cloud_testing.FakeEventSource()
        self.reconciler = controller.InterruptionReconciler(
            client=self.api,  # type: ignore[arg-type]
            nodes=self.nodes,  # type: ignore[arg-type]
            pools=self.pools,  # type: ignore[arg-type]
            pods=self.pods,  # type: ignore[arg-type]
            source=self.source,
            recorder=EventRecorder(
                self.api,  # type: ignore[arg-type]
                component="nodepool-controller",
                wall_clock=self.wall,
            ),
            wall_clock=self.wall,
        )

    def server(self) -> testing.FakeApiServer:
        return testing.FakeApiServer(wall_clock=self.wall)

    async def pass_(self) -> float | None:
        result = await self.reconciler.reconcile(controller.POLL)
        self.nodes.sync()
        return result.requeue_after

    def node(self, name: str) -> Object:
        [found] = [n for n in self.api.stored("nodes") if n["metadata"]["name"] == name]
        return found

    def events(self, reason: str) -> list[Object]:
        return [e for e in self.api.stored("events") if e.get("reason") == reason]

    def node_writes(self) -> list[tuple[str, str, str]]:
        return [w for w in self.api.writes() if w[1] == "nodes"]


def counted(kind: str, zone: str = "sim-1a", instance_type: str = "c4") -> float:
    sample = metrics.nodepool_interruptions_total.labels(kind, zone, instance_type)
    return float(sample._value.get())


async def test_a_spot_warning_taints_cordons_and_annotates_the_node_then_is_handled() -> None:
    world = World(spot_node("p-0"), spot_node("p-1"))
    before = counted("spot-interruption")
    event = warning("p-0")
    world.source.tell(event)

    await world.pass_()

    node = world.node("p-0")
    annotations = node["metadata"]["annotations"]
    assert annotations[notice.INTERRUPTION_ANNOTATION] == "spot-interruption"
    assert annotations[notice.NOTICED_AT_ANNOTATION] == conditions.rfc3339(NOW - 5)
    assert annotations[notice.TERMINATE_AT_ANNOTATION] == conditions.rfc3339(NOW + 115)
    assert node["spec"]["unschedulable"] is True
    assert {"key": notice.INTERRUPTED_TAINT_KEY, "effect": "NoSchedule"} in node["spec"]["taints"]
    assert {"key": "team", "value": "web", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert notice.read(node) == notice.Notice(
        kind="spot-interruption", noticed_at=NOW - 5, terminate_at=NOW + 115
    )
    assert world.source.handled_events == [event]
    assert "annotations" not in world.node("p-1")["metadata"]
    told = world.events("SpotInterrupted")
    assert sorted(e["involvedObject"]["kind"] for e in told) == ["Node", "NodePool"]
    assert "c4 in sim-1a" in told[0]["message"]
    assert "115s left" in told[0]["message"]
    assert counted("spot-interruption") == before + 1


async def test_the_event_is_not_handled_until_the_mark_is_stored() -> None:
    class Failing(testing.FakeApiServer):
        refuse = True

        def before(self, verb: str, resource: Resource, name: str) -> None:
            if verb == "patch" and resource.plural == "nodes" and self.refuse:
                raise errors.InternalError("etcd is away")

    class FailingWorld(World):
        def server(self) -> testing.FakeApiServer:
            return Failing(wall_clock=self.wall)

    world = FailingWorld(spot_node("p-0"))
    world.source.tell(warning("p-0"))

    retry_in = await world.pass_()

    assert world.source.handled_events == []
    assert notice.read(world.node("p-0")) is None
    assert retry_in == controller.RETRY_AFTER
    assert await world.pass_() == 2 * controller.RETRY_AFTER  # still failing: backs off
    assert isinstance(world.api, Failing)
    world.api.refuse = False
    await world.pass_()
    assert world.source.waits[-1] == 0.0  # an event left over: no waiting for new ones
    assert notice.read(world.node("p-0")) is not None
    assert [e.name for e in world.source.handled_events] == ["p-0"]
    assert await world.pass_() == 0.001  # the backoff is forgotten once the writes pass


async def test_a_conflict_is_tried_again_on_the_fresh_node_keeping_the_others_taint() -> None:
    class Racing(testing.FakeApiServer):
        raced = False

        def before(self, verb: str, resource: Resource, name: str) -> None:
            if verb == "patch" and not self.raced:
                self.raced = True  # another controller writes between our read and write

                def taint(node: Object) -> None:
                    node["spec"]["taints"].append({"key": "other", "effect": "NoExecute"})

                self.edit("nodes", name, taint)

    class RacingWorld(World):
        def server(self) -> testing.FakeApiServer:
            return Racing(wall_clock=self.wall)

    world = RacingWorld(spot_node("p-0"))
    world.source.tell(warning("p-0"))

    await world.pass_()
    assert world.source.handled_events == []  # 409: not stored, so not handled
    assert notice.read(world.node("p-0")) is None

    await world.pass_()  # the cache has caught up with the other writer
    keys = [t["key"] for t in world.node("p-0")["spec"]["taints"]]
    assert keys == ["team", "other", notice.INTERRUPTED_TAINT_KEY]
    assert [v for v, kind, _ in world.node_writes()] == ["patch", "patch"]
    assert len(world.source.handled_events) == 1


@pytest.mark.parametrize(
    ("event", "why"),
    [
        (warning("elsewhere-3"), "no-node"),  # another cluster's instance, or a Node gone
        (warning("p-0", pool="q"), "no-node"),  # a Node of that name in another pool
        (warning("p-0", pool="gone"), "no-node"),  # a pool deleted meanwhile
        (warning("p-0", kind="InstanceHibernated"), "unknown-kind"),
        (warning("p-0", kind="RebalanceRecommendation"), "rebalance-not-acted"),
    ],
    ids=["no-node", "other-pool", "no-pool", "unknown-kind", "rebalance"],
)
async def test_what_is_not_acted_on_is_handled_without_a_write(event: CloudEvent, why: str) -> None:
    world = World(spot_node("p-0"))
    sample = metrics.nodepool_interruption_messages_dropped_total.labels(why)
    before = sample._value.get()
    world.source.tell(event)

    await world.pass_()

    assert world.source.handled_events == [event]
    assert world.node_writes() == []
    assert world.api.stored("events") == []
    assert sample._value.get() == before + 1


async def test_a_node_with_the_pool_label_but_no_owner_reference_is_not_ours() -> None:
    handmade = spot_node("p-0")
    del handmade["metadata"]["ownerReferences"]
    world = World(handmade)
    world.source.tell(warning("p-0"))

    await world.pass_()

    assert world.node_writes() == []
    assert len(world.source.handled_events) == 1


async def test_a_node_whose_vm_we_delete_already_is_not_marked() -> None:
    leaving = spot_node("p-0")
    leaving["metadata"]["annotations"] = {wellknown.VM_DELETED_ANNOTATION: "2027-01-15T08:00:00Z"}
    world = World(leaving)
    stopping = warning("p-0", kind="InstanceStateChange")
    world.source.tell(stopping)

    await world.pass_()

    assert world.source.handled_events == [stopping]
    assert world.node_writes() == []


async def test_a_node_already_draining_is_marked() -> None:
    draining = spot_node("p-0")
    draining["metadata"]["annotations"] = {wellknown.SCALE_DOWN_ANNOTATION: "2027-01-15T08:00:00Z"}
    world = World(draining)
    world.source.tell(warning("p-0"))

    await world.pass_()

    assert notice.read(world.node("p-0")) is not None


async def test_a_notice_told_again_writes_nothing_and_an_earlier_deadline_moves_it() -> None:
    world = World(spot_node("p-0"))
    world.source.tell(warning("p-0"))
    await world.pass_()
    writes = len(world.node_writes())

    world.source.tell(warning("p-0"))  # SQS told it again after its visibility timeout
    await world.pass_()
    assert len(world.node_writes()) == writes
    assert len(world.source.handled_events) == 2

    stopping = CloudEvent(
        kind="InstanceStateChange", name=VmName("p-0"), pool="p", at=NOW, terminate_at=NOW + 30
    )
    world.source.tell(stopping)
    await world.pass_()
    found = notice.read(world.node("p-0"))
    assert found == notice.Notice(
        kind="spot-interruption", noticed_at=NOW - 5, terminate_at=NOW + 30
    )
    assert len(world.events("SpotInterrupted")) == 2  # the node and its pool, once


async def test_a_scheduled_change_is_stored_under_its_own_kind_and_reason() -> None:
    world = World(spot_node("p-0"))
    world.source.tell(warning("p-0", kind="ScheduledChange"))

    await world.pass_()

    assert notice.read(world.node("p-0")) == notice.Notice(
        kind="scheduled-change", noticed_at=NOW - 5, terminate_at=NOW + 115
    )
    assert len(world.events("ScheduledChange")) == 2


async def test_the_time_until_the_nodes_pods_run_elsewhere_is_observed_once() -> None:
    world = World(spot_node("p-0"), spot_node("p-1"))
    for name, node in (("a", "p-0"), ("b", "p-0"), ("c", "p-1")):
        world.pods.put(pod(name, node=node))
    world.pods.put(pod("lone", node="p-0", owner="rs-2"))
    histogram = metrics.nodepool_interruption_pods_moved_seconds.labels("spot-interruption")

    def observed() -> float:
        return float(histogram._sum.get())  # type: ignore[attr-defined]

    before = observed()
    world.source.tell(warning("p-0"))
    await world.pass_()
    assert world.source.waits[-1] == controller.QUIET_WAIT

    # Evicted: their replacements are Pending, then one runs, the other still Pending.
    for name in ("a", "b", "lone"):
        world.pods.remove(f"default/{name}")
    world.pods.put(pod("a2", node="p-1", phase="Running"))
    world.pods.put(pod("b2", node="", phase="Pending"))
    world.pods.put(pod("lone2", node="p-1", owner="rs-2"))
    world.wall.advance(20)
    await world.pass_()
    assert world.source.waits[-1] == controller.MOVING_WAIT
    assert observed() == before

    world.pods.put(pod("b2", node="p-1", phase="Running"))
    world.wall.advance(10)
    await world.pass_()
    assert observed() == before + 35  # noticed at NOW - 5, all Running at NOW + 30
    await world.pass_()
    assert observed() == before + 35
    assert world.source.waits[-1] == controller.QUIET_WAIT


def test_marks_on_a_node_read_back_as_the_notice() -> None:
    node: dict[str, Any] = spot_node("p-0")
    node["metadata"]["resourceVersion"] = "7"
    wanted = notice.Notice(kind="state-change", noticed_at=NOW, terminate_at=None)
    patch = notice.marks(node, wanted)
    assert patch["metadata"]["resourceVersion"] == "7"  # the taint list is replaced whole
    testing.merge(node, patch)
    assert notice.read(node) == wanted
    assert notice.is_marked(node, wanted)
    assert notice.drain_deadline(node) is None


def test_a_hand_made_mark_without_a_time_is_no_notice() -> None:
    node = spot_node("p-0")
    node["metadata"]["annotations"] = {notice.INTERRUPTION_ANNOTATION: "spot-interruption"}
    assert notice.read(node) is None
    node["metadata"]["annotations"][notice.INTERRUPTION_ANNOTATION] = "weather"
    node["metadata"]["annotations"][notice.NOTICED_AT_ANNOTATION] = conditions.rfc3339(NOW)
    assert notice.read(node) is None


def test_the_shared_caches_keep_what_the_controller_reads() -> None:
    node = spot_node("p-0")
    node["metadata"]["resourceVersion"] = "9"
    node["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{}"}
    wanted = notice.Notice(kind="spot-interruption", noticed_at=NOW, terminate_at=NOW + 120)
    testing.merge(node, notice.marks(node, wanted))
    node["metadata"]["resourceVersion"] = "10"
    kept = cached.node_fields(node)
    assert notice.is_marked(kept, wanted)
    assert kept["metadata"]["resourceVersion"] == "10"  # the patch's precondition
    assert kept["spec"]["taints"] == node["spec"]["taints"]  # the list is written back whole

    running = cached.pod_fields(pod("a", node="p-0"))
    assert moves.controller_of(running) == "rs-1"
    assert running["status"]["phase"] == "Running"
    assert running["spec"]["nodeName"] == "p-0"


class RefusingEventSource(cloud_testing.FakeEventSource):
    """An event stream whose cloud refuses the operator's credential, or answers another
    permanent error."""

    def __init__(self, code: str) -> None:
        super().__init__()
        self.code = code

    async def events(self, *, wait: float) -> list[CloudEvent]:
        raise PermanentCloudError("missing or wrong bearer token", code=self.code)


async def test_a_refused_credential_is_a_warning_looked_at_again_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The startup check names the refused credential once, at ERROR, with its fix: the
    # stream adds a warning, not a second ERROR line, and reads again after a long wait.
    world = World(spot_node("p-0"))
    world.reconciler.source = RefusingEventSource("Unauthorized")

    with caplog.at_level("WARNING"):
        requeue = await world.pass_()

    assert requeue == controller.UNAUTHORIZED_RECHECK
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "event=cloud-events-unauthorized code=Unauthorized" in caplog.records[0].getMessage()
    assert world.node_writes() == []


async def test_another_permanent_refusal_of_the_stream_is_a_refused_dependency() -> None:
    world = World(spot_node("p-0"))
    world.reconciler.source = RefusingEventSource("QueueDoesNotExist")

    with pytest.raises(errors.DependencyRefused, match="QueueDoesNotExist"):
        await world.pass_()


class WaitingEventSource(cloud_testing.FakeEventSource):
    """A stream with nothing to tell: each poll waits its whole ``wait``, as a long poll."""

    def __init__(self) -> None:
        super().__init__()
        self.cancelled = 0
        self.polling = asyncio.Event()

    async def events(self, *, wait: float) -> list[CloudEvent]:
        self.waits.append(wait)
        self.polling.set()
        try:
            await asyncio.sleep(wait)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return []


async def test_stopping_cancels_the_long_poll_rather_than_waiting_it_out() -> None:
    world = World(spot_node("p-0"))
    source = WaitingEventSource()
    stopping = asyncio.Event()
    world.reconciler.source = source
    world.reconciler.quiet_wait = 30.0
    world.reconciler.stopping = stopping
    running = Controller(
        name=controller.NAME, reconciler=world.reconciler, clock=runtime_clock.RealClock()
    )
    running.queue.add(controller.POLL)
    running.start()
    await asyncio.wait_for(source.polling.wait(), timeout=2.0)  # the first long poll

    started = time.monotonic()
    stopping.set()
    await asyncio.wait_for(running.stop(drain=True), timeout=2.0)

    assert time.monotonic() - started < 1.0
    assert source.waits == [30.0]
    assert source.cancelled == 1
    assert await world.pass_() == 0.001  # stopped: no new poll is started
    assert source.waits == [30.0]


async def test_without_a_stop_the_long_poll_runs_its_course() -> None:
    world = World(spot_node("p-0"))
    world.reconciler.source = source = WaitingEventSource()
    world.reconciler.quiet_wait = 0.05
    world.reconciler.stopping = asyncio.Event()
    await world.pass_()
    assert (source.waits, source.cancelled) == ([0.05], 0)


def opt_in(world: World, pool: str = "p") -> None:
    """The pool acts on rebalance recommendations (``Replace``)."""
    spec = {"disruption": {"rebalanceRecommendation": "Replace"}}
    world.api.put(
        "nodepools",
        {"kind": "NodePool", "metadata": {"name": pool, "uid": f"uid-{pool}"}, "spec": spec},
    )
    world.pools.sync()


def rebalance(name: str) -> CloudEvent:
    return CloudEvent(
        kind="RebalanceRecommendation", name=VmName(name), pool="p", at=NOW - 5, receipt="r"
    )


async def test_a_rebalance_where_the_pool_opts_in_cordons_and_marks_the_node_then_is_handled() -> (
    None
):
    world = World(spot_node("p-0"))
    opt_in(world)
    before = counted("rebalance")
    event = rebalance("p-0")
    world.source.tell(event)

    await world.pass_()

    node = world.node("p-0")
    assert notice.read(node) == notice.Notice(kind="rebalance", noticed_at=NOW - 5)
    assert node["spec"]["unschedulable"] is True
    assert {"key": notice.INTERRUPTED_TAINT_KEY, "effect": "NoSchedule"} in node["spec"]["taints"]
    assert world.source.handled_events == [event]
    told = world.events("RebalanceRecommended")
    assert sorted(e["involvedObject"]["kind"] for e in told) == ["Node", "NodePool"]
    assert "drained once a notice comes" in told[0]["message"]
    assert counted("rebalance") == before + 1
    assert world.reconciler._moving == {}  # its pods stay: nothing moves, nothing timed

    # Told again (SQS delivers at least once): nothing written, nothing told twice.
    world.source.tell(rebalance("p-0"))
    writes = len(world.node_writes())
    await world.pass_()
    assert len(world.node_writes()) == writes
    assert len(world.events("RebalanceRecommended")) == 2


async def test_a_notice_after_a_rebalance_takes_its_place_and_is_told_as_a_first_notice() -> None:
    world = World(spot_node("p-0"))
    opt_in(world)
    world.source.tell(rebalance("p-0"))
    await world.pass_()
    before = counted("spot-interruption")

    world.source.tell(warning("p-0"))
    await world.pass_()

    assert notice.read(world.node("p-0")) == notice.Notice(
        kind="spot-interruption", noticed_at=NOW - 5, terminate_at=NOW + 115
    )
    assert wellknown.interruption_terminate_at(world.node("p-0")) == NOW + 115
    assert len(world.events("SpotInterrupted")) == 2  # the Node and the pool
    assert counted("spot-interruption") == before + 1

    # A rebalance recommendation after the notice changes nothing.
    world.source.tell(rebalance("p-0"))
    writes = len(world.node_writes())
    await world.pass_()
    assert len(world.node_writes()) == writes
    assert notice.read(world.node("p-0")) is not None
    assert wellknown.interruption_kind(world.node("p-0")) == "spot-interruption"


def test_a_notice_replaces_a_rebalance_recommendation_but_not_the_other_way() -> None:
    recommended = notice.Notice(kind=notice.REBALANCE, noticed_at=NOW)
    warned = notice.Notice(kind=notice.SPOT_INTERRUPTION, noticed_at=NOW + 9, terminate_at=NOW + 99)
    assert recommended.merged(warned) == warned
    assert warned.merged(recommended) == warned
