"""Named victims: the Nodes an Autoscaler tainted for consolidation go first, and a
request may only name Nodes that are still the pool's."""

from __future__ import annotations

from typing import Any

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.cloud.provider import VirtualMachine, VmName, VmState
from nodepool_operator.controllers.nodepool import answering, plan, request_facts
from nodepool_operator.runtime import testing
from nodepool_operator.runtime.clock import FakeClock
from nodepool_operator.runtime.events import EventRecorder


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


def node(name: str, *, consolidating: bool = False, pool: str = "p") -> dict[str, Any]:
    taints = [{"key": autoscaler_api.CONSOLIDATING_TAINT_KEY, "effect": "NoSchedule"}]
    return {
        "metadata": {"name": name, "labels": {nodepool_api.POOL_LABEL: pool}},
        "spec": {"taints": taints if consolidating else []},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_the_tainted_node_goes_before_emptier_ones() -> None:
    view = plan.PoolView(
        vms=[vm("p-0"), vm("p-1"), vm("p-2")],
        nodes={"p-0": node("p-0"), "p-1": node("p-1", consolidating=True), "p-2": node("p-2")},
        pods_per_node={"p-0": 0, "p-1": 3, "p-2": 1},
    )
    assert plan.pick_victims(view, 1) == ["p-1"]
    assert plan.pick_victims(view, 2) == ["p-1", "p-0"]


def test_a_protected_node_is_not_preferred_for_its_taint() -> None:
    view = plan.PoolView(
        vms=[vm("p-0"), vm("p-1")],
        nodes={"p-0": node("p-0"), "p-1": node("p-1", consolidating=True)},
        pods_per_node={"p-0": 2, "p-1": 1},
        protected=frozenset({"p-1"}),
    )
    assert plan.pick_victims(view, 1) == ["p-0"]


def test_a_request_may_name_only_live_nodes_of_its_pool() -> None:
    assert request_facts.node_refusal("p", "p-1", node("p-1", consolidating=True)) is None
    assert request_facts.node_refusal("p", "p-1", node("p-1")) == (
        "node p-1 named in removeNodes no longer carries nodepool.dev/consolidating; not applied"
    )
    assert request_facts.node_refusal("p", "p-1", None) == (
        "node p-1 named in removeNodes is gone; not applied"
    )
    assert request_facts.node_refusal("p", "q-1", node("q-1", consolidating=True, pool="q")) == (
        "node q-1 named in removeNodes is not in NodePool p; not applied"
    )
    leaving = node("p-1", consolidating=True)
    leaving["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    refusal = request_facts.node_refusal("p", "p-1", leaving)
    assert refusal is not None
    assert "being deleted" in refusal


async def test_a_request_naming_a_node_gone_is_rejected_and_the_target_kept() -> None:
    api = testing.FakeApiServer()
    pool_obj = api.put(
        "nodepools", nodepool_api.manifest("p", nodepool_api.NodePoolSpec(target_nodes=3))
    )
    api.put("nodes", node("p-1", consolidating=True))
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
