"""Which events wake which Autoscaler, and after its own batch window (fake clock)."""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import pytest

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.controllers.autoscaler import watches
from nodepool_operator.runtime import workqueue
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.clock import FakeClock
from nodepool_operator.runtime.controller import Controller, Request, Result
from nodepool_operator.runtime.informer import object_key

_names = itertools.count()


class FakeInformer:
    def __init__(self, *objects: Object) -> None:
        self.store = {object_key(o): o for o in objects}
        self.indexes: dict[str, Callable[[Object], Iterable[str]]] = {}

    def add_index(self, name: str, func: Callable[[Object], Iterable[str]]) -> None:
        self.indexes[name] = func

    def get(self, name: str, namespace: str | None = None) -> Object | None:
        return self.store.get(f"{namespace}/{name}" if namespace else name)

    def by_index(self, index: str, value: str) -> list[Object]:
        return [o for o in self.store.values() if value in self.indexes[index](o)]

    def items(self) -> list[Object]:
        return list(self.store.values())


class FakePodInformer:
    """Only what Controller.watch needs: somewhere to register the event handler."""

    def __init__(self) -> None:
        self.handler: Any = None

    def add_handler(self, handler: Any) -> None:
        self.handler = handler


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
def triggers() -> watches.Triggers:
    autoscalers = FakeInformer(
        autoscaler("apps-only", pool="small", namespaces=("apps",), window=1.0),
        autoscaler("everything", pool="big", namespaces=(), window=0.2),
    )
    node = {"metadata": {"name": "n1", "labels": {nodepool_api.POOL_LABEL: "small"}}}
    return watches.Triggers(autoscalers=autoscalers, nodes=FakeInformer(node))  # type: ignore[arg-type]


def test_pods_map_to_autoscalers_of_their_namespace_and_of_their_node_pool(
    triggers: watches.Triggers,
) -> None:
    assert triggers.of_pod(pod("p")) == [Request("apps-only"), Request("everything")]
    assert triggers.of_pod(pod("p", namespace="other")) == [Request("everything")]
    on_small = pod("p", namespace="other", node="n1")
    assert triggers.of_pod(on_small) == [Request("apps-only"), Request("everything")]
    assert triggers.window(Request("everything")) == 0.2
    assert triggers.window(Request("gone")) == autoscaler_api.DEFAULT_BATCH_WINDOW_SECONDS


def test_a_pool_node_wakes_its_pools_autoscalers_and_a_node_of_no_pool_wakes_all(
    triggers: watches.Triggers,
) -> None:
    pooled = {"metadata": {"name": "n1", "labels": {nodepool_api.POOL_LABEL: "small"}}}
    system = {"metadata": {"name": "system-0", "labels": {"role": "system"}}}
    assert triggers.of_node(pooled) == [Request("apps-only")]
    assert triggers.of_node(system) == [Request("apps-only"), Request("everything")]


def test_a_taint_removed_from_a_node_is_a_change_that_matters() -> None:
    changed = watches.StateChanged(watches.node_state)
    tainted = {
        "metadata": {"name": "n"},
        "spec": {"taints": [{"key": "example.com/agent-not-ready", "effect": "NoSchedule"}]},
    }
    assert changed.update(tainted, {"metadata": {"name": "n"}, "spec": {}})


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


async def test_a_burst_of_events_makes_one_reconcile_at_the_end_of_the_first_window(
    triggers: watches.Triggers, queue: workqueue.WorkQueue[Request], clock: FakeClock
) -> None:
    controller = Controller(name="batching", reconciler=_never_called, queue=queue, clock=clock)
    pods = FakePodInformer()
    controller.watch(
        pods,  # type: ignore[arg-type]
        mapper=triggers.of_pod,
        predicates=[watches.StateChanged(watches.pod_state)],
        delay=triggers.window,
    )
    for i in range(100):  # a burst within 0.1 s
        pods.handler.on_update(pod(f"p{i}"), pod(f"p{i}", **UNSCHEDULABLE))
        await clock.advance(0.001)
    # "everything" has a 0.2 s window, "apps-only" 1 s: each gets one reconcile at the end
    # of the window its first event opened.
    assert len(queue) == 0
    await clock.advance(0.1)
    assert len(queue) == 1
    assert await queue.get() == Request("everything")
    await clock.advance(0.7)
    assert len(queue) == 0
    await clock.advance(0.1)
    assert len(queue) == 1
    assert await queue.get() == Request("apps-only")


def test_a_pod_that_arrives_bound_wakes_nobody_but_its_later_changes_do() -> None:
    changed = watches.PodChanged()
    running = pod("r", node="n1")
    assert not changed.create(running)  # the initial list of a cluster: thousands of these
    assert changed.create(pod("p"))  # a new pod waiting for a node
    gone = copy.deepcopy(running)
    gone["metadata"]["deletionTimestamp"] = "2026-11-30T10:00:00Z"
    assert changed.update(running, gone)
    assert changed.delete(running)
