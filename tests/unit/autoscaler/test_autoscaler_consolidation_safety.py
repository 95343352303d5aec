"""Consolidation never strands a node: every mark it writes is undone when its reason
goes, it marks only its pool's own Nodes, no more than one request can name, and it
honours the annotations users migrate with."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers import cached
from nodepool_operator.controllers.autoscaler.decide import (
    batch_plan,
    consolidation_choice,
    consolidation_rules,
)
from nodepool_operator.runtime import conditions
from unit.autoscaler.reconcile_world import (
    NAS,
    POOL,
    REPLICATED,
    World,
    half_and_quarter,
    stamp,
    taints,
)

CONSOLIDATING = wellknown.CONSOLIDATING_TAINT_KEY


@pytest.fixture
def world() -> World:
    made = World()
    made.autoscaler(scan_interval_seconds=5)
    made.pool()
    return made


async def tainted(world: World) -> None:
    """n2 stamped, then tainted once its minute is up (not yet named)."""
    half_and_quarter(world)
    await world.reconcile()
    await world.clock.advance(60)
    await world.reconcile()
    assert taints(world, "n2") == [CONSOLIDATING]


def marks(world: World, name: str) -> tuple[list[str], str | None]:
    return taints(world, name), stamp(world, name)


async def test_a_node_labelled_with_the_pool_but_not_owned_by_it_is_never_marked() -> None:
    world = World()
    world.autoscaler(scale_down=autoscaler_api.ScaleDownPolicy(unneeded_seconds=60))
    world.pool(target=2)
    world.node("n1")
    world.node("stranger", owned=False)  # labelled by someone, not the pool's
    for name in ("a", "b"):
        world.pod(name, node="n1", ownerReferences=REPLICATED)
    await world.reconcile()
    await world.clock.advance(61)
    await world.reconcile()
    await world.reconcile()
    assert marks(world, "stranger") == ([], None)
    assert all(p["metadata"].get("name") != "stranger" for p in world.api.node_patches())
    for request in world.api.made("scalerequests"):
        assert "stranger" not in request["spec"].get("removeNodes", [])


async def test_no_more_empty_nodes_are_tainted_than_one_request_may_name() -> None:
    world = World()
    world.autoscaler(scale_down=autoscaler_api.ScaleDownPolicy(unneeded_seconds=60))
    world.pool(target=120, max_nodes=200, budgets=())  # no disruption budget: no cap
    for index in range(120):
        world.node(f"n{index}")
    await world.reconcile()
    await world.clock.advance(60)
    await world.reconcile()
    limit = scalerequest_api.MAX_REMOVE_NODES
    assert sum(1 for i in range(120) if taints(world, f"n{i}")) == limit
    await world.reconcile()
    [request] = world.api.made("scalerequests")
    assert len(request["spec"]["removeNodes"]) == limit
    assert request["spec"]["targetNodes"] == 120 - limit


async def test_dry_run_turned_on_mid_consolidation_takes_every_mark_off_at_once(
    world: World,
) -> None:
    await tainted(world)
    world.autoscaler(scale_down=autoscaler_api.ScaleDownPolicy(unneeded_seconds=60), dry_run=True)
    await world.reconcile()
    assert marks(world, "n2") == ([], None)
    assert world.api.made("scalerequests") == []


async def test_a_dry_run_previews_the_scale_down_and_writes_no_mark() -> None:
    world = World()
    half_and_quarter(world)
    world.autoscaler(scale_down=autoscaler_api.ScaleDownPolicy(unneeded_seconds=60), dry_run=True)
    await world.reconcile()
    assert world.api.node_patches() == []
    [would] = world.api.events("WouldScaleDown")
    assert "2 -> 1 nodes" in would["message"]
    status = world.status()
    assert status["wouldRequest"]["targetNodes"] == 1
    assert "n2" in status["wouldRequest"]["reason"]
    assert world.api.made("scalerequests") == []


async def test_a_deleted_autoscaler_leaves_no_mark_behind(world: World) -> None:
    await tainted(world)
    world.autoscalers.remove(NAS)
    await world.plan()
    assert marks(world, "n2") == ([], None)


async def test_an_autoscaler_pointed_at_another_pool_takes_its_marks_off_the_old_one(
    world: World,
) -> None:
    await tainted(world)
    world.pool(name="other", target=0)
    world.autoscaler(pool="other")
    await world.plan()
    assert marks(world, "n2") == ([], None)


async def test_pods_waiting_for_room_take_the_taint_off_and_keep_the_stamp(
    world: World,
) -> None:
    await tainted(world)
    stamped = stamp(world, "n2")
    world.pod("waiting", cpu="2500m")  # only n2's room holds it, once n2 takes pods again
    await world.reconcile()
    assert marks(world, "n2") == ([], stamped)
    assert world.api.made("scalerequests") == []  # no new node for room the pool has


async def test_a_stamp_older_than_the_end_of_a_dry_run_starts_over(world: World) -> None:
    half_and_quarter(world)
    world.nodes.store["n2"]["metadata"]["annotations"] = {
        wellknown.UNNEEDED_SINCE_ANNOTATION: "2027-01-15T06:00:00Z"  # two hours ago
    }
    world.autoscalers.store[NAS]["status"] = {
        "conditions": [
            {
                "type": "DryRun",
                "status": "False",
                "reason": "Acting",
                "message": "decisions become ScaleRequests",
                "lastTransitionTime": "2027-01-15T07:59:30Z",  # dry run ended 30 s ago
            }
        ]
    }
    await world.reconcile()
    assert marks(world, "n2") == ([], "2027-01-15T08:00:00Z")  # restarted, not tainted
    await world.clock.advance(60)
    await world.reconcile()
    assert taints(world, "n2") == [CONSOLIDATING]


def _half_and_quarter_with(world: World, **pod_meta: Any) -> None:
    world.autoscaler(scale_down=autoscaler_api.ScaleDownPolicy(unneeded_seconds=60))
    world.pool(target=2)
    world.node("n1")
    world.node("n2")
    for name in ("a", "b"):
        world.pod(name, node="n1", ownerReferences=REPLICATED)
    world.pod("c", node="n2", ownerReferences=REPLICATED, **pod_meta)


async def test_karpenters_do_not_disrupt_on_a_pod_keeps_its_node() -> None:
    world = World()
    refusal = {wellknown.KARPENTER_DO_NOT_DISRUPT_ANNOTATION: "true"}
    _half_and_quarter_with(world, annotations=refusal)
    await world.reconcile()
    assert marks(world, "n2") == ([], None)
    told = [e["message"] for e in world.api.events("ConsolidationKept")]
    assert told
    assert all("karpenter.sh/do-not-disrupt" in m for m in told)


async def test_node_annotations_of_karpenter_and_cluster_autoscaler_keep_the_node() -> None:
    for annotation in (
        wellknown.KARPENTER_DO_NOT_DISRUPT_ANNOTATION,
        wellknown.SCALE_DOWN_DISABLED_ANNOTATION,
    ):
        world = World()
        half_and_quarter(world)
        world.node("n2", annotations={annotation: "true"})
        await world.reconcile()
        await world.clock.advance(61)
        await world.reconcile()
        assert marks(world, "n2") == ([], None), annotation
        assert world.api.made("scalerequests") == []


def test_the_disruption_annotations_survive_the_cache_trim() -> None:
    for key in wellknown.DISRUPTION_ANNOTATIONS:
        assert key in cached.ANNOTATIONS


async def test_candidates_of_two_pools_that_only_fit_on_each_other_are_not_both_removed() -> None:
    world = World()
    policy = autoscaler_api.ScaleDownPolicy(unneeded_seconds=60)
    world.autoscaler(scale_down=policy)
    world.autoscaler("nas-other", pool="other", scale_down=policy)
    world.pool(target=1)
    world.pool(name="other", target=1)
    world.node("a1")
    world.node("b1", pool="other")
    world.pod("on-a", node="a1", ownerReferences=REPLICATED)  # a quarter of each node
    world.pod("on-b", node="b1", ownerReferences=REPLICATED)
    await world.plan()
    stamped = [n for n in ("a1", "b1") if stamp(world, n) is not None]
    assert len(stamped) == 1  # each fits on the other, not both at once
    await world.clock.advance(60)
    for _ in range(3):
        await world.plan()
    removed = [n for r in world.api.made("scalerequests") for n in r["spec"]["removeNodes"]]
    assert removed == stamped


async def test_a_batch_with_no_node_or_pod_changed_reuses_the_last_choice(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    half_and_quarter(world)
    made: list[int] = []
    choose = consolidation_rules.choose_together

    def counted(*args: Any, **kwargs: Any) -> Any:
        made.append(1)
        return choose(*args, **kwargs)

    monkeypatch.setattr(consolidation_rules, "choose_together", counted)
    await world.reconcile()  # chooses, and stamps n2 (a Node changed)
    await world.reconcile()  # chooses again after its own write
    before = len(made)
    await world.clock.advance(10)
    await world.reconcile()  # nothing changed: the last choice stands
    assert len(made) == before
    world.pod("d", node="n1", ownerReferences=REPLICATED)
    await world.reconcile()
    assert len(made) == before + 1


def _request(phase: str, *names: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"r-{phase}"}
    if deleting:
        meta["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    spec = {"nodePoolName": POOL, "targetNodes": 1, "removeNodes": list(names)}
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def test_the_nodes_open_requests_name_are_on_their_way_out_and_no_others() -> None:
    requests = [
        _request("Pending", "a"),
        _request("Applied", "b"),
        _request("Rejected", "c"),
        _request("Superseded", "d"),
        _request("Applied", "e", deleting=True),
    ]
    assert consolidation_choice.named_by_open_requests(requests) == {"a", "b"}


async def test_a_node_an_open_request_names_is_never_chosen_again(world: World) -> None:
    await tainted(world)
    await world.reconcile()
    [request] = world.api.made("scalerequests")
    world.show_requests(phase="Applied", applied=1)
    turn = world.planner._leaving(POOL)
    assert turn == {"n2"}
    views = world.planner.decider.consolidator.views.of_pool(
        POOL, pool_uid="uid-pool", leaving=turn
    )
    assert [v.name for v in views if v.eligible] == ["n1"]
    assert request["spec"]["removeNodes"] == ["n2"]


def test_a_later_node_given_the_name_an_applied_request_named_is_not_on_its_way_out() -> None:
    # The NodePool controller gives a new Node the lowest free name: once n2 is gone, the
    # next Node is n2 again while the request that named the old n2 is still Applied
    # (kept until its retention is over). That new Node is room, not leaving.
    applied = _request("Applied", "n1", "n2", "n3")
    applied["metadata"]["creationTimestamp"] = "2026-12-06T13:28:52Z"
    nodes = {
        "n1": {"metadata": {"name": "n1", "creationTimestamp": "2026-12-06T13:28:33Z"}},
        "n2": {"metadata": {"name": "n2", "creationTimestamp": "2026-12-06T13:29:08Z"}},
        "n3": {"metadata": {"name": "n3"}},  # no creationTimestamp: cannot tell, named
    }
    found = consolidation_choice.named_by_open_requests([applied], node=nodes.get)
    assert found == {"n1", "n3"}
    # Without the Nodes (or with a request without its timestamp) every name counts.
    assert consolidation_choice.named_by_open_requests([applied]) == {"n1", "n2", "n3"}
    del applied["metadata"]["creationTimestamp"]
    assert consolidation_choice.named_by_open_requests([applied], node=nodes.get) == {
        "n1",
        "n2",
        "n3",
    }


async def test_a_new_node_reusing_a_removed_nodes_name_is_room_for_consolidation(
    world: World,
) -> None:
    await tainted(world)
    await world.reconcile()
    world.show_requests(phase="Applied", applied=1)
    assert world.planner._leaving(POOL) == {"n2"}
    # n2 drained and deleted; a minute later a new Node registers under its name while
    # the request is still Applied.
    await world.clock.advance(60)
    world.nodes.remove("n2")
    world.node("n2")
    new = copy.deepcopy(world.nodes.get("n2"))
    new["metadata"]["creationTimestamp"] = conditions.rfc3339(world.api.wall_clock.time())
    world.nodes.put(new)
    assert world.planner._leaving(POOL) == frozenset()
    views = world.planner.decider.consolidator.views.of_pool(
        POOL, pool_uid="uid-pool", leaving=world.planner._leaving(POOL)
    )
    assert {v.name: v.gives_room for v in views} == {"n1": True, "n2": True}


async def test_a_not_ready_blip_resets_only_the_timer_of_the_node_it_touches(
    world: World,
) -> None:
    half_and_quarter(world)
    world.pool(target=3)
    world.node("n3")  # empty
    await world.reconcile()
    assert stamp(world, "n2") is not None
    assert stamp(world, "n3") is not None
    world.node("n3", ready=False, annotations=world.nodes.store["n3"]["metadata"]["annotations"])
    await world.clock.advance(10)
    await world.reconcile()
    assert stamp(world, "n3") is None  # its own timer starts over
    assert stamp(world, "n2") == "2027-01-15T08:00:00Z"  # the others run on


async def test_a_node_preemption_is_making_room_on_is_never_a_candidate(world: World) -> None:
    half_and_quarter(world)
    preemptor = world.pod("preemptor", cpu="3500m")
    preemptor["status"]["nominatedNodeName"] = "n2"
    world.pods.put(preemptor)
    await world.reconcile()
    await world.clock.advance(61)
    await world.reconcile()
    assert marks(world, "n2") == ([], None)
    for request in world.api.made("scalerequests"):
        assert "n2" not in request["spec"].get("removeNodes", [])


async def test_a_node_kept_from_going_is_still_room_for_the_pods_of_another() -> None:
    world = World()
    half_and_quarter(world)
    world.node("n1", annotations={wellknown.DO_NOT_DISRUPT_ANNOTATION: "true"})
    await world.reconcile()
    assert stamp(world, "n2") is not None  # its pod fits on n1, which itself stays
    assert stamp(world, "n1") is None


async def test_a_victim_a_scale_up_brought_back_loses_its_taint(world: World) -> None:
    await tainted(world)
    await world.reconcile()
    [request] = world.api.made("scalerequests")
    assert request["spec"]["removeNodes"] == ["n2"]
    world.show_requests(phase="Applied", applied=1)
    # Pods came before the drain ended: the NodePool controller called n2's drain off
    # (the pool back at 2, n2 schedulable again), and they wait for n2's room.
    world.pool(target=2)
    world.pools.store[POOL]["metadata"]["resourceVersion"] = "100000"  # after the answer
    world.pod("waiting", cpu="2500m")
    await world.reconcile()
    assert taints(world, "n2") == []
    assert len(world.api.made("scalerequests")) == 1  # and no node for room n2 has


async def test_a_pass_is_proposed_without_a_write_and_its_marks_written_by_apply(
    world: World,
) -> None:
    """Consolidation acts after the decision: ``propose`` reads and decides (the taint it
    wants is in its marks, nothing is sent), ``apply`` writes those marks."""
    half_and_quarter(world)
    await world.reconcile()  # n2 stamped
    await world.clock.advance(60)
    [autoscaler] = world.autoscalers.items()
    made = await world.planner.plan_maker.plan()
    seen = batch_plan.part_of(made, NAS, autoscaler_api.spec_of(autoscaler))
    assert isinstance(seen, batch_plan.Observation)
    decider = world.planner.decider
    turn = decider.turn(autoscaler, seen)
    choices = await decider.consolidator.choose(
        [turn], cluster=seen.cluster, daemon_sets=seen.daemon_sets
    )
    patches = len(world.api.patches)
    proposal = decider.consolidator.propose(autoscaler, turn, choices[turn.pool])
    assert [v.name for v in proposal.marks.taint] == ["n2"]
    assert len(world.api.patches) == patches  # decided, nothing written
    assert taints(world, "n2") == []
    await decider.consolidator.apply(proposal)
    assert taints(world, "n2") == [wellknown.CONSOLIDATING_TAINT_KEY]
