"""The NodePool controller's pure decisions."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud.provider import VirtualMachine, VmName, VmState
from nodepool_operator.controllers.nodepool import plan

NOW = "2026-11-29T10:00:00Z"
LATER = "2026-11-29T10:05:00Z"


def vm(name: str, state: VmState = VmState.RUNNING) -> VirtualMachine:
    return VirtualMachine(
        name=VmName(name),
        pool="p",
        cpu="4",
        memory="16Gi",
        state=state,
        provider_id=f"simcloud:///{name}",
        created_at=0.0,
    )


def node(name: str, *, ready: bool = True, draining: bool = False) -> dict[str, Any]:
    annotations = {plan.SCALE_DOWN_ANNOTATION: "true"} if draining else {}
    return {
        "metadata": {"name": name, "annotations": annotations},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def pool(generation: int = 1, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p", "generation": generation}, "status": status or {}}


def spec(target: int, *, min_nodes: int = 0, max_nodes: int = 10) -> nodepool_api.NodePoolSpec:
    return nodepool_api.NodePoolSpec(target_nodes=target, min_nodes=min_nodes, max_nodes=max_nodes)


def test_names_fill_the_lowest_free_indexes_deterministically() -> None:
    assert plan.names_to_create("p", ["p-0", "p-2"], 3) == ["p-1", "p-3", "p-4"]
    assert plan.names_to_create("p", ["p-0", "p-2"], 3) == plan.names_to_create(
        "p", ["p-2", "p-0"], 3
    )


@given(st.sets(st.integers(0, 30)), st.integers(0, 20))
def test_new_names_never_collide_with_existing_ones(taken: set[int], count: int) -> None:
    existing = [f"p-{i}" for i in taken]
    names = plan.names_to_create("p", existing, count)
    assert len(names) == len(set(names)) == count
    assert not set(names) & set(existing)


def test_desired_nodes_stays_within_min_and_max() -> None:
    assert plan.desired_nodes(spec(0, min_nodes=2)) == 2
    assert plan.desired_nodes(spec(5)) == 5
    assert plan.desired_nodes(spec(12, max_nodes=10)) == 10


def test_victims_prefer_draining_then_nodeless_then_emptiest() -> None:
    view = plan.PoolView(
        vms=[vm("p-0"), vm("p-1"), vm("p-2"), vm("p-3", VmState.PROVISIONING)],
        nodes={"p-0": node("p-0"), "p-1": node("p-1", draining=True), "p-2": node("p-2")},
        pods_per_node={"p-0": 3, "p-1": 5, "p-2": 1},
    )
    assert plan.pick_victims(view, 1) == ["p-1"]
    assert plan.pick_victims(view, 2) == ["p-1", "p-3"]
    assert plan.pick_victims(view, 3) == ["p-1", "p-3", "p-2"]
    assert plan.pick_victims(view, 0) == []


def test_victims_take_not_ready_nodes_before_the_emptiest_ready_ones() -> None:
    view = plan.PoolView(
        vms=[vm("p-0"), vm("p-1"), vm("p-2")],
        nodes={"p-0": node("p-0"), "p-1": node("p-1", ready=False), "p-2": node("p-2")},
        pods_per_node={"p-0": 0, "p-1": 7, "p-2": 2},
    )
    assert plan.pick_victims(view, 3) == ["p-1", "p-0", "p-2"]


def test_victims_take_nodes_with_do_not_disrupt_pods_last_even_when_emptiest() -> None:
    view = plan.PoolView(
        vms=[vm("p-0"), vm("p-1"), vm("p-2"), vm("p-3")],
        nodes={
            "p-0": node("p-0"),
            "p-1": node("p-1"),
            "p-2": node("p-2", ready=False),
            "p-3": node("p-3"),
        },
        pods_per_node={"p-0": 1, "p-1": 9, "p-2": 0, "p-3": 5},
        protected=frozenset({"p-0", "p-2"}),
    )
    assert plan.pick_victims(view, 2) == ["p-3", "p-1"]
    assert plan.pick_victims(view, 4)[2:] == ["p-2", "p-0"]


def test_a_node_already_draining_stays_the_victim_even_if_protected() -> None:
    view = plan.PoolView(
        vms=[vm("p-0"), vm("p-1")],
        nodes={"p-0": node("p-0", draining=True), "p-1": node("p-1")},
        pods_per_node={"p-0": 5, "p-1": 0},
        protected=frozenset({"p-0"}),
    )
    assert plan.pick_victims(view, 1) == ["p-0"]


def test_the_drain_start_is_read_from_the_annotation() -> None:
    draining = node("p-0")
    draining["metadata"]["annotations"] = {plan.SCALE_DOWN_ANNOTATION: "2026-11-29T10:00:00Z"}
    assert plan.drain_started(draining) == 1_795_946_400.0
    assert plan.drain_started(node("p-0", draining=True)) is None  # "true": no start known
    assert plan.drain_started(node("p-0")) is None


def test_a_blocked_drain_is_the_scaling_reason_and_names_what_blocks_it() -> None:
    view = plan.PoolView(
        vms=[vm("p-0"), vm("p-1")],
        nodes={"p-0": node("p-0"), "p-1": node("p-1", draining=True)},
        pods_per_node={},
        blocked=("node p-1: eviction of pod ns/a refused by PodDisruptionBudget ns/web",),
    )
    status = _status_for(1, view)
    [scaling] = [c for c in status["conditions"] if c["type"] == "Scaling"]
    assert scaling["reason"] == "DrainBlocked"
    assert scaling["message"] == (
        "2 VMs, 2 nodes, 1 wanted; "
        "node p-1: eviction of pod ns/a refused by PodDisruptionBudget ns/web"
    )


def test_the_scaling_message_names_a_few_blocked_pods_and_counts_the_rest() -> None:
    view = plan.PoolView(
        vms=[vm("p-0")],
        nodes={"p-0": node("p-0", draining=True)},
        pods_per_node={},
        blocked=tuple(f"pod {i}" for i in range(5)),
    )
    [scaling] = [c for c in _status_for(0, view)["conditions"] if c["type"] == "Scaling"]
    assert scaling["message"].endswith("pod 0; pod 1; pod 2; and 2 more")


def _status_for(desired: int, view: plan.PoolView, **kw: Any) -> dict[str, Any]:
    return plan.pool_status(
        pool=kw.get("pool", pool()),
        desired=desired,
        view=view,
        degraded=kw.get("degraded"),
        now=kw.get("now", NOW),
    )


def test_stable_pool_status_is_inactive_and_ready() -> None:
    view = plan.PoolView(vms=[vm("p-0")], nodes={"p-0": node("p-0")}, pods_per_node={})
    status = _status_for(1, view)
    assert status["scaleOperation"] == "inactive"
    assert (status["currentNodes"], status["readyNodes"]) == (1, 1)
    assert status["selector"] == "nodepool.dev/pool=p"
    assert status["observedGeneration"] == 1
    kinds = {c["type"]: c["status"] for c in status["conditions"]}
    assert kinds == {"Ready": "True", "Scaling": "False", "Degraded": "False"}


def test_status_is_identical_on_a_later_pass_when_nothing_changed() -> None:
    view = plan.PoolView(vms=[vm("p-0")], nodes={"p-0": node("p-0")}, pods_per_node={})
    first = _status_for(1, view)
    second = _status_for(1, view, pool=pool(status=first), now=LATER)
    assert second == first  # no timestamp or counter that moves on every pass


def test_booting_vms_make_the_pool_active_and_not_ready() -> None:
    view = plan.PoolView(
        vms=[vm("p-0"), vm("p-1", VmState.PROVISIONING)],
        nodes={"p-0": node("p-0")},
        pods_per_node={},
    )
    status = _status_for(2, view)
    assert status["scaleOperation"] == "active"
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "False"
    assert conditions["Scaling"]["reason"] == "ScalingUp"


def test_degraded_names_the_cloud_error() -> None:
    view = plan.PoolView(vms=[], nodes={}, pods_per_node={})
    status = _status_for(2, view, degraded=("QuotaExceeded", "quota of 0 VMs reached"))
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "QuotaExceeded")


def _conditions(status: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}


def _settled_at(nodes: int) -> dict[str, Any]:
    """The status of a pool that had all of its ``nodes`` Ready and nothing to do."""
    return plan.pool_status(
        pool=pool(),
        desired=nodes,
        view=plan.PoolView(
            vms=[vm(f"p-{i}") for i in range(nodes)],
            nodes={f"p-{i}": node(f"p-{i}") for i in range(nodes)},
            pods_per_node={},
        ),
        degraded=None,
        now=NOW,
    )


def test_a_listing_in_doubt_never_leaves_an_unmet_target_shown_ready_or_stable() -> None:
    # Settled at 1 node; the target went to 3; the cloud refuses the listing (a wrong
    # token): nothing can move, and no condition may say all is well.
    status = plan.degraded_status(
        pool=pool(generation=2, status=_settled_at(1)),
        desired=3,
        reason="CloudListFailed",
        message="listing the pool's VMs failed (Unauthorized): missing or wrong bearer token",
        now=LATER,
    )

    found = _conditions(status)
    assert found["Degraded"][:2] == ("True", "CloudListFailed")
    assert found["Ready"] == ("False", "NodesNotReady", "1/3 nodes ready")
    assert found["Scaling"] == (
        "True",
        plan.WAITING_FOR_CLOUD,
        "1 nodes, 3 wanted; waiting for the cloud: CloudListFailed",
    )
    assert status["scaleOperation"] == "active"
    assert (status["currentNodes"], status["readyNodes"]) == (1, 1)


def test_a_listing_in_doubt_leaves_a_met_target_as_it_was_but_degraded() -> None:
    before = _settled_at(2)

    status = plan.degraded_status(
        pool=pool(status=before), desired=2, reason="CloudListFailed", message="m", now=LATER
    )

    assert status["scaleOperation"] == "inactive"
    found = _conditions(status)
    assert found["Ready"] == _conditions(before)["Ready"]
    assert found["Scaling"] == _conditions(before)["Scaling"]
    assert found["Degraded"][:2] == ("True", "CloudListFailed")
