"""What a pool's kubelets report against its template: the record, its condition, and
the allocatable new Nodes are planned with."""

from __future__ import annotations

from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud.provider import VirtualMachine, VmName, VmState
from nodepool_operator.controllers import allocatable
from nodepool_operator.controllers.nodepool import plan
from unit.nodepool import reconcile_world as reconcile_test

NOW = "2026-11-29T10:00:00Z"
LATER = "2026-11-29T10:05:00Z"
GI = 2**30
TEMPLATE = nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=110)


def node(
    name: str,
    *,
    memory: str = str(16 * GI),
    cpu: str = "4000m",
    ready: bool = True,
    unregistered: bool = False,
    created: str = NOW,
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = LATER
    taints = [{"key": wellknown.UNREGISTERED_TAINT_KEY, "effect": "NoSchedule"}]
    return {
        "metadata": meta,
        "spec": {"taints": taints} if unregistered else {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
        },
    }


def test_a_node_reporting_less_memory_is_recorded_per_resource() -> None:
    record = allocatable.observe(
        None,
        TEMPLATE,
        [node("p-0", memory=str(int(15.2 * GI))), node("p-1", memory=str(15 * GI))],
        now=NOW,
    )
    assert record.lowest == {"memory": str(15 * GI)}
    assert record.template_allocatable == nodepool_api.quantity_texts(
        nodepool_api.template_allocatable(TEMPLATE)
    )
    assert record.since is None


def test_nodes_as_the_template_record_nothing_below() -> None:
    record = allocatable.observe(None, TEMPLATE, [node("p-0"), node("p-1")], now=NOW)
    assert record.lowest == {}
    assert allocatable.condition(record, TEMPLATE) == (
        False,
        "AsTemplate",
        "kubelets report the template's allocatable",
    )


def test_only_ready_nodes_that_stay_count() -> None:
    low = str(8 * GI)
    ignored = [node("p-0", memory=low, ready=False), node("p-2", memory=low, deleting=True)]
    assert allocatable.observe(None, TEMPLATE, ignored, now=NOW).lowest == {}


def test_a_ready_node_counts_before_its_unregistered_taint_goes() -> None:
    # Ready is the kubelet's report: its allocatable came with it.
    booted = node("p-1", memory=str(8 * GI), unregistered=True)
    assert allocatable.observe(None, TEMPLATE, [booted], now=NOW).lowest == {"memory": str(8 * GI)}


def test_the_record_outlives_its_nodes_while_no_other_node_reports() -> None:
    first = allocatable.observe(None, TEMPLATE, [node("p-0", memory=str(14 * GI))], now=NOW)
    gone = allocatable.observe(first, TEMPLATE, [], now=LATER)
    assert gone == first
    booting = allocatable.observe(first, TEMPLATE, [node("p-1", ready=False)], now=LATER)
    assert booting == first
    # Planned with it, as the pool's last Nodes reported, until a Node reports again.
    assert allocatable.planned(TEMPLATE, gone, [], now=LATER)["memory"] == 14 * GI


def test_the_record_rises_again_when_the_low_reporter_is_gone() -> None:
    sick = node("p-0", memory=str(12 * GI))
    first = allocatable.observe(None, TEMPLATE, [sick], now=NOW)
    assert first.lowest == {"memory": str(12 * GI)}

    replaced = allocatable.observe(first, TEMPLATE, [node("p-1", memory=str(15 * GI))], now=LATER)
    assert replaced.lowest == {"memory": str(15 * GI)}
    healthy = allocatable.observe(replaced, TEMPLATE, [node("p-1"), node("p-2")], now=LATER)
    assert healthy.lowest == {}
    assert allocatable.condition(healthy, TEMPLATE)[0] is False


def test_one_low_reporter_among_its_peers_does_not_plan_every_future_node() -> None:
    # One node's device plugin lost a GPU; the two others report all eight.
    gpus = nodepool_api.NodeTemplate(
        cpu="4", memory="16Gi", pods=110, extended_resources={"nvidia.com/gpu": "8"}
    )

    def gpu_node(name: str, count: str) -> dict[str, Any]:
        found = node(name)
        found["status"]["allocatable"]["nvidia.com/gpu"] = count
        return found

    three = [gpu_node("p-0", "7"), gpu_node("p-1", "8"), gpu_node("p-2", "8")]
    assert allocatable.observe(None, gpus, three, now=NOW).lowest == {}
    assert allocatable.planned(gpus, None, three, now=NOW)["nvidia.com/gpu"] == 8
    # Two to one the other way: most nodes of the template report 0, so new ones are
    # planned with it.
    down = [gpu_node("p-0", "0"), gpu_node("p-1", "0"), gpu_node("p-2", "8")]
    assert allocatable.observe(None, gpus, down, now=NOW).lowest == {"nvidia.com/gpu": "0"}
    # Two nodes cannot outvote each other: the lower figure stands.
    assert allocatable.planned(gpus, None, three[:2], now=NOW)["nvidia.com/gpu"] == 7


def test_a_template_change_starts_again_with_only_newer_nodes() -> None:
    first = allocatable.observe(None, TEMPLATE, [node("p-0", memory=str(14 * GI))], now=NOW)
    bigger = nodepool_api.NodeTemplate(cpu="4", memory="32Gi", pods=110)
    old_node = node("p-0", memory=str(14 * GI), created=NOW)
    after = allocatable.observe(first, bigger, [old_node], now=LATER)
    assert after.since == LATER
    assert after.lowest == {}  # the old Node is of the old template
    new_node = node("p-1", memory=str(31 * GI), created="2026-11-29T10:06:00Z")
    assert allocatable.observe(after, bigger, [old_node, new_node], now=LATER).lowest == {
        "memory": str(31 * GI)
    }


def test_the_condition_names_the_template_field_and_both_figures() -> None:
    record = allocatable.observe(
        None, TEMPLATE, [node("p-0", memory=str(int(15.2 * GI)), cpu="3900m")], now=NOW
    )
    holds, reason, message = allocatable.condition(record, TEMPLATE)
    assert (holds, reason) == (True, "KubeletsReportLess")
    assert "spec.template.cpu: template 4, kubelets report 3.9" in message
    assert "spec.template.memory: template 16Gi, kubelets report 15.2Gi" in message


def test_a_reserve_is_named_with_the_field_it_lowers() -> None:
    reserved = nodepool_api.NodeTemplate(cpu="4", memory="16Gi", reserved={"memory": "1Gi"})
    record = allocatable.observe(None, reserved, [node("p-0", memory=str(14 * GI))], now=NOW)
    _, _, message = allocatable.condition(record, reserved)
    assert message.startswith(
        "spec.template.memory - spec.template.reserved[memory]: template 15Gi, kubelets report 14Gi"
    )


def test_new_nodes_are_planned_with_the_lower_figure_of_the_same_template_only() -> None:
    record = allocatable.observe(None, TEMPLATE, [node("p-0", memory=str(15 * GI))], now=NOW)
    planned = allocatable.planned(TEMPLATE, record, [], now=LATER)
    assert planned == {"cpu": 4000, "memory": 15 * GI, "pods": 110}
    bigger = nodepool_api.NodeTemplate(cpu="4", memory="32Gi", pods=110)
    assert allocatable.planned(bigger, record, [], now=LATER)["memory"] == 32 * GI
    assert allocatable.planned(TEMPLATE, None, [], now=NOW) == (
        nodepool_api.template_allocatable(TEMPLATE)
    )


def test_a_report_not_yet_recorded_already_lowers_the_plan() -> None:
    # The Autoscaler may see a kubelet's report before the status records it.
    fresh = node("p-1", memory=str(13 * GI))
    record = allocatable.observe(None, TEMPLATE, [node("p-0", memory=str(15 * GI))], now=NOW)
    assert allocatable.planned(TEMPLATE, record, [fresh], now=LATER)["memory"] == 13 * GI
    assert allocatable.planned(TEMPLATE, None, [fresh], now=LATER)["memory"] == 13 * GI


def test_the_record_survives_the_status_round_trip() -> None:
    record = allocatable.observe(None, TEMPLATE, [node("p-0", memory=str(15 * GI))], now=NOW)
    status = nodepool_api.NodePoolStatus(reported_allocatable=record)
    assert nodepool_api.status_of({"status": status.to_dict()}) == status


def _vm(name: str) -> VirtualMachine:
    return VirtualMachine(
        name=VmName(name),
        pool="p",
        cpu="4",
        memory="16Gi",
        state=VmState.RUNNING,
        provider_id=f"simcloud:///{name}",
        created_at=0.0,
    )


def _status(record: nodepool_api.ReportedAllocatable, existing: dict[str, Any]) -> dict[str, Any]:
    pool = {
        "metadata": {"name": "p", "generation": 1},
        "spec": {"targetNodes": 1, "template": TEMPLATE.to_dict()},
        "status": existing,
    }
    view = plan.PoolView(
        vms=[_vm("p-0")], nodes={"p-0": node("p-0")}, pods_per_node={}, reported_allocatable=record
    )
    return plan.pool_status(pool=pool, desired=1, view=view, degraded=None, now=NOW)


def _condition(status: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in status["conditions"] if c["type"] == allocatable.CONDITION), None)


def test_pool_status_records_the_gap_and_shows_the_condition() -> None:
    low = allocatable.observe(None, TEMPLATE, [node("p-0", memory=str(15 * GI))], now=NOW)
    status = _status(low, {})
    assert status["reportedAllocatable"] == low.to_dict()
    shown = _condition(status)
    assert shown is not None
    assert (shown["status"], shown["reason"]) == ("True", "KubeletsReportLess")
    assert "spec.template.memory: template 16Gi, kubelets report 15Gi" in shown["message"]
    # Degraded is not set for it: pods that fit the reported figure still get nodes.
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "False"


def test_no_gap_adds_no_condition_and_a_gap_gone_turns_it_false() -> None:
    even = allocatable.observe(None, TEMPLATE, [node("p-0")], now=NOW)
    assert _condition(_status(even, {})) is None
    low = allocatable.observe(None, TEMPLATE, [node("p-0", memory=str(15 * GI))], now=NOW)
    before = _status(low, {})
    reset = nodepool_api.ReportedAllocatable(
        template_allocatable=low.template_allocatable, since=LATER
    )
    after = _condition(_status(reset, before))
    assert after is not None
    assert (after["status"], after["reason"]) == ("False", "AsTemplate")


# --- the reconciler: one event, the record in the status, the same after a restart ------


def _reporting_less(name: str, memory: int) -> dict[str, Any]:
    found = reconcile_test.fakes.node(name)
    figures = nodepool_api.template_allocatable(nodepool_api.NodeTemplate())
    found["status"]["allocatable"] = nodepool_api.quantity_texts({**figures, "memory": memory})
    return found


async def test_the_reconciler_records_the_gap_tells_it_once_and_a_restart_keeps_quiet() -> None:
    world = reconcile_test.World("p-0")
    figures = nodepool_api.template_allocatable(nodepool_api.NodeTemplate())
    low = figures["memory"] - GI
    world.nodes.put(_reporting_less("p-0", low))
    world.pool(1)

    await world.reconcile()
    status = world.api.status_patches[-1]
    assert status["reportedAllocatable"]["lowest"] == {"memory": str(low)}
    assert world.condition(allocatable.CONDITION)["status"] == "True"
    told = [m for t, r, m in world.recorder.events if r == allocatable.EVENT_REASON]
    assert len(told) == 1
    assert told[0].startswith("spec.template.memory: template ")

    writes = len(world.api.status_patches)
    await world.reconcile()
    assert len(world.api.status_patches) == writes  # nothing changed, nothing written

    # A restarted operator reads the record from the status: no second event, no write.
    restarted = world.reconciler_for(world.pools)
    world.pools.put({**world.pool(1), "status": status})
    await restarted.reconcile(reconcile_test.Request(name="p"))
    assert [r for _, r, _ in world.recorder.events].count(allocatable.EVENT_REASON) == 1
    assert len(world.api.status_patches) == writes


async def test_a_lower_report_later_is_told_again_with_the_new_figure() -> None:
    world = reconcile_test.World("p-0", "p-1")
    figures = nodepool_api.template_allocatable(nodepool_api.NodeTemplate())
    world.nodes.put(_reporting_less("p-0", figures["memory"] - GI))
    world.nodes.put(reconcile_test.fakes.node("p-1"))
    world.pool(2)
    await world.reconcile()
    world.nodes.put(_reporting_less("p-1", figures["memory"] - 2 * GI))
    await world.reconcile()
    told = [m for _, r, m in world.recorder.events if r == allocatable.EVENT_REASON]
    assert len(told) == 2
    lowest = world.api.status_patches[-1]["reportedAllocatable"]["lowest"]
    assert lowest == {"memory": str(figures["memory"] - 2 * GI)}
