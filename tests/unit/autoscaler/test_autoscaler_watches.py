"""Which events start a planner batch, and when the batch closes (fake clock)."""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.controllers.autoscaler import watches
from nodepool_operator.controllers.autoscaler.config import AutoscalerConfig
from nodepool_operator.controllers.autoscaler.planner import PLAN, Planner
from nodepool_operator.controllers.autoscaler.verdicts import AutoscalerVerdicts
from nodepool_operator.runtime import workqueue
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.clock import FakeClock
from nodepool_operator.runtime.controller import Controller, Request, Result
from nodepool_operator.runtime.testing import FakeInformer, informer_of

_names = itertools.count()


class _NeverCalled:
    async def reconcile(self, request: Request) -> Result:
        raise AssertionError("no worker runs in this test")


_never_called = _NeverCalled()


def autoscaler(name: str, *, pool: str, namespaces: tuple[str, ...], window: float) -> Object:
    spec = autoscaler_api.AutoscalerSpec(
        node_pool_name=pool, namespaces=namespaces, batch_window_seconds=window
    )
    return autoscaler_api.manifest(name, spec)


def pod(name: str, *, namespace: str = "apps", node: str | None = None, **status: Any) -> Object:
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": name},
        "spec": spec,
        "status": {"phase": "Pending", **status},
    }


UNSCHEDULABLE = {
    "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def queue(clock: FakeClock) -> AsyncIterator[workqueue.WorkQueue[Request]]:
    q: workqueue.WorkQueue[Request] = workqueue.WorkQueue(
        name=f"autoscaler-test-{next(_names)}", clock=clock
    )
    yield q
    q.shut_down()
    await asyncio.sleep(0)


@pytest.fixture
def planner(clock: FakeClock) -> Planner:
    autoscalers = informer_of(
        autoscaler("apps-only", pool="small", namespaces=("apps",), window=1.0),
        autoscaler("everything", pool="big", namespaces=(), window=0.2),
    )
    reads: Any = SimpleNamespace(autoscalers=autoscalers)  # all the batching reads
    return Planner(
        plan_maker=reads,
        decider=reads,
        verdicts=AutoscalerVerdicts(),
        wake=lambda _: None,
        clock=clock,
        parallelism=AutoscalerConfig().hand_over_parallelism,
    )


def test_every_change_is_the_planners_one_key_after_the_smallest_window(
    planner: Planner,
) -> None:
    assert list(planner.triggered(pod("p"))) == [PLAN]
    assert planner.window(PLAN) == 0.2


def test_a_taint_removed_from_a_node_is_a_change_that_matters() -> None:
    changed = watches.StateChanged(watches.node_state)
    tainted = {
        "metadata": {"name": "n"},
        "spec": {"taints": [{"key": "example.com/agent-not-ready", "effect": "NoSchedule"}]},
    }
    assert changed.update(tainted, {"metadata": {"name": "n"}, "spec": {}})


def test_a_pool_status_record_the_plan_reads_is_a_change_its_progress_is_not() -> None:
    changed = watches.StateChanged(watches.pool_state)
    pool: Object = {"metadata": {"name": "p", "generation": 1}, "status": {"currentNodes": 1}}
    progressed = copy.deepcopy(pool)
    progressed["status"]["currentNodes"] = 2
    assert not changed.update(pool, progressed)
    paused = copy.deepcopy(pool)
    paused["status"]["cloudPause"] = {"reason": "QuotaExceeded", "until": "2027-01-15T08:00:00Z"}
    assert changed.update(pool, paused)
    backed_off = copy.deepcopy(pool)
    backed_off["status"]["zoneBackoffs"] = [{"zone": "a", "reason": "InsufficientCapacity"}]
    assert changed.update(pool, backed_off)


def test_only_changes_that_matter_pass() -> None:
    changed = watches.StateChanged(watches.pod_state)
    marked = pod("p", **UNSCHEDULABLE)
    assert changed.update(pod("p"), marked)
    running = pod("p", node="n1")
    running["status"]["phase"] = "Running"
    churned = pod("p", node="n1", podIP="10.0.0.1")
    churned["status"]["phase"] = "Running"
    assert not changed.update(running, churned)  # kubelet/kwok status churn
    heartbeat = watches.StateChanged(watches.node_state)
    node = {
        "metadata": {"name": "n"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    beat = {**node, "status": {**node["status"], "lastHeartbeat": "now"}}
    assert not heartbeat.update(node, beat)


async def test_a_burst_of_events_is_one_plan_once_the_cluster_goes_quiet(
    planner: Planner, queue: workqueue.WorkQueue[Request], clock: FakeClock
) -> None:
    controller = Controller(name="batching", reconciler=_never_called, queue=queue, clock=clock)
    pods = FakeInformer()
    controller.watch(
        pods,  # type: ignore[arg-type]
        mapper=planner.pod_triggered,
        predicates=[watches.StateChanged(watches.pod_state)],
        delay=planner.window,
    )
    for i in range(100):  # a burst of new pods within 0.1 s
        pods.handlers[0].on_add(pod(f"p{i}"))
        await clock.advance(0.001)
    pods.handlers[0].on_update(pod("p0"), pod("p0", podIP="10.0.0.1"))  # churn: no event
    assert len(queue) == 0
    await clock.advance(0.1)  # the window the first event opened is over
    assert len(queue) == 1
    assert await queue.get() == PLAN
    # The last event was 0.1 s ago: the batch stays open until 0.2 s pass without one.
    waiting = await planner.reconcile(PLAN)
    assert waiting.requeue_after == pytest.approx(0.099)


async def test_only_a_pending_pod_holds_a_batch_open(
    planner: Planner, queue: workqueue.WorkQueue[Request], clock: FakeClock
) -> None:
    """In a burst kube-scheduler marks the pods for many seconds after they were made, and
    the first requests' Nodes register meanwhile: those changes open a batch, but only a
    new pod keeps it open."""
    controller = Controller(name="batching", reconciler=_never_called, queue=queue, clock=clock)
    informers = {
        name: FakeInformer()
        for name in ("autoscalers", "pods", "nodes", "pools", "requests", "daemon_sets")
    }
    watches.watch_dependencies(
        controller,
        mapper=planner.triggered,
        pod_mapper=planner.pod_triggered,
        window=planner.window,
        **informers,  # type: ignore[arg-type]
    )
    nodes, pods = informers["nodes"].handlers[0], informers["pods"].handlers[0]
    nodes.on_add({"metadata": {"name": "n1", "uid": "n1"}})  # opens the batch
    for i in range(2, 6):  # more Nodes register, a pod is bound: none holds it open
        await clock.advance(0.05)
        nodes.on_add({"metadata": {"name": f"n{i}", "uid": f"n{i}"}})
    pods.on_update(pod("bound"), pod("bound", node="n1"))
    pods.on_update(pod("made-before"), pod("made-before", **UNSCHEDULABLE))  # nor a mark
    assert planner.batch.wait(idle=0.2, longest=10.0) == 0.0  # 0.2 s since it opened
    await clock.advance(0.05)
    pods.on_add(pod("waiting"))  # a new pod does
    assert planner.batch.wait(idle=0.2, longest=10.0) == pytest.approx(0.2)
    await clock.advance(0.1)
    pods.on_update(pod("waiting"), pod("waiting", **UNSCHEDULABLE))  # the same pod again
    assert planner.batch.wait(idle=0.2, longest=10.0) == pytest.approx(0.1)


def test_a_pod_that_arrives_bound_wakes_nobody_but_its_later_changes_do() -> None:
    changed = watches.PodChanged()
    running = pod("r", node="n1")
    assert not changed.create(running)  # the initial list of a cluster: thousands of these
    assert changed.create(pod("p"))  # a new pod waiting for a node
    gone = copy.deepcopy(running)
    gone["metadata"]["deletionTimestamp"] = "2026-11-30T10:00:00Z"
    assert changed.update(running, gone)
    assert changed.delete(running)
