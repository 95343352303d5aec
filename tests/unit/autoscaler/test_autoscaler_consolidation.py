"""Consolidation's pure rules: which pods can move, what the budgets allow, how underused a
node is, and which candidates go together."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from nodepool_operator.api import disruption as disruption_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler.constraints import profile_of
from nodepool_operator.controllers.autoscaler.decide import consolidation_rules
from nodepool_operator.controllers.autoscaler.snapshot import consolidation_views
from nodepool_operator.controllers.autoscaler.snapshot.consolidation_views import NodeView

OWNED = [{"kind": "ReplicaSet", "name": "web-1", "uid": "rs", "controller": True}]


def pod(name: str = "p", *, namespace: str = "apps", owners: Any = OWNED, **extra: Any) -> Any:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "ownerReferences": owners}
    meta.update(extra.pop("meta", {}))
    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}], **extra}
    return {"metadata": meta, "spec": spec}


def annotated(**annotations: str) -> Any:
    return pod(meta={"annotations": annotations})


def test_a_replicated_pod_without_local_data_may_move() -> None:
    assert consolidation_rules.movable_problem(pod()) is None


def test_each_rule_that_keeps_a_pod_is_named() -> None:
    cases = {
        "do-not-disrupt": annotated(**{wellknown.DO_NOT_DISRUPT_ANNOTATION: "true"}),
        "not-replicated": pod(owners=[]),
        "local-storage": pod(volumes=[{"name": "scratch", "emptyDir": {}}]),
    }
    for rule, case in cases.items():
        found = consolidation_rules.movable_problem(case)
        assert found is not None, rule
        assert found[0] == rule
    refused = annotated(**{wellknown.SAFE_TO_EVICT_ANNOTATION: "false"})
    assert consolidation_rules.movable_problem(refused) == (
        "do-not-disrupt",
        f'{wellknown.SAFE_TO_EVICT_ANNOTATION}: "false"',
    )
    host = consolidation_rules.movable_problem(
        pod(volumes=[{"name": "h", "hostPath": {"path": "/"}}])
    )
    assert host == ("local-storage", "hostPath volume 'h'")


def test_memory_backed_scratch_moves_and_safe_to_evict_waives_the_data_and_owner_rules() -> None:
    in_memory = pod(volumes=[{"name": "tmp", "emptyDir": {"medium": "Memory"}}])
    assert consolidation_rules.movable_problem(in_memory) is None
    safe = pod(
        owners=[],
        volumes=[{"name": "scratch", "emptyDir": {}}],
        meta={"annotations": {wellknown.SAFE_TO_EVICT_ANNOTATION: "true"}},
    )
    assert consolidation_rules.movable_problem(safe) is None


def budget(name: str, allowed: int, *, labels: dict[str, str], namespace: str = "apps") -> Any:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": labels}},
        "status": {"disruptionsAllowed": allowed},
    }


def labelled(name: str, namespace: str = "apps", **labels: str) -> Any:
    return pod(name, namespace=namespace, meta={"labels": labels})


def test_a_budget_counts_every_pod_it_covers_on_the_node() -> None:
    pods = [labelled("a", app="web"), labelled("b", app="web")]
    assert (
        consolidation_rules.budget_problem(pods, [budget("web", 2, labels={"app": "web"})]) is None
    )
    assert consolidation_rules.budget_problem(pods, [budget("web", 1, labels={"app": "web"})]) == (
        "apps/b",
        "pod-disruption-budget",
        "PodDisruptionBudget apps/web allows 1 disruptions now",
    )


def test_a_budget_of_another_namespace_or_selector_does_not_count() -> None:
    pods = [labelled("a", app="web")]
    elsewhere = budget("web", 0, labels={"app": "web"}, namespace="other")
    unrelated = budget("db", 0, labels={"app": "db"})
    assert consolidation_rules.budget_problem(pods, [elsewhere, unrelated]) is None


def test_a_kube_system_pod_needs_a_budget() -> None:
    system = [labelled("dns", namespace="kube-system", app="dns")]
    found = consolidation_rules.budget_problem(system, [])
    assert found is not None
    assert found[1] == "kube-system"
    covered = budget("dns", 1, labels={"app": "dns"}, namespace="kube-system")
    assert consolidation_rules.budget_problem(system, [covered]) is None


def node(cpu: str = "4", memory: str = "16Gi") -> Any:
    return {"status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}}


def test_usage_is_the_larger_of_the_cpu_and_memory_shares() -> None:
    one_cpu = profile_of(pod())
    assert consolidation_views.usage_of(node(), [one_cpu]) == 0.25
    heavy = pod()
    heavy["spec"]["containers"][0]["resources"]["requests"]["memory"] = "12Gi"
    assert consolidation_views.usage_of(node(), [profile_of(heavy)]) == 0.75
    assert consolidation_views.usage_of(node(cpu="bad"), [one_cpu]) == 1.0  # never underused


def view(name: str, usage: float, *pods: Any, tainted: bool = False) -> NodeView:
    return NodeView(
        name=name,
        obj={"metadata": {"name": name}},
        to_move=tuple(pods),
        usage=usage,
        since=None,
        tainted=tainted,
        eligible=True,
    )


def test_candidates_are_checked_together_so_two_never_count_on_the_same_room() -> None:
    views = [view("a", 0.25, pod("pa")), view("b", 0.25, pod("pb")), view("c", 0.3, pod("pc"))]
    asked: list[list[str]] = []

    def fits(chosen: Sequence[NodeView]) -> tuple[str, str] | None:
        asked.append([v.name for v in chosen])
        return None if len(chosen) <= 2 else ("apps/pc", "Insufficient cpu")

    chosen, kept = consolidation_rules.choose(views, threshold=0.5, fits=fits)
    assert [v.name for v in chosen] == ["a", "b"]
    assert asked == [["a"], ["a", "b"], ["a", "b", "c"]]
    assert kept == [
        consolidation_rules.Kept(
            "c", "no-room", "apps/pc", "pod apps/pc fits on no other node: Insufficient cpu"
        )
    ]


def test_empty_nodes_need_no_simulation_and_busy_ones_are_not_underused() -> None:
    def fits(chosen: Sequence[NodeView]) -> tuple[str, str] | None:
        raise AssertionError("an empty node needs no simulation")

    views = [view("empty", 0.1), view("busy", 0.5, pod())]
    chosen, kept = consolidation_rules.choose(views, threshold=0.5, fits=fits)
    assert [v.name for v in chosen] == ["empty"]
    assert kept == []


def test_an_unmovable_pod_keeps_its_node_before_any_simulation() -> None:
    bare = pod("lonely", owners=[])

    def fits(chosen: Sequence[NodeView]) -> tuple[str, str] | None:
        raise AssertionError("not simulated: the pod cannot move anyway")

    chosen, kept = consolidation_rules.choose([view("n", 0.25, bare)], threshold=0.5, fits=fits)
    assert chosen == []
    [why] = kept
    assert (why.node, why.rule, why.pod) == ("n", "not-replicated", "apps/lonely")


def test_the_longest_stamped_goes_first_so_a_removal_does_not_restart_the_others() -> None:
    older = dataclasses.replace(view("z", 0.3, pod("pz")), since=100.0)
    newer = dataclasses.replace(view("a", 0.2, pod("pa")), since=200.0)
    fresh = view("b", 0.1, pod("pb"))

    def fits(chosen: Sequence[NodeView]) -> tuple[str, str] | None:
        return None if len(chosen) == 1 else ("apps/x", "Insufficient cpu")

    chosen, _ = consolidation_rules.choose([fresh, newer, older], threshold=0.5, fits=fits)
    assert [v.name for v in chosen] == ["z"]


def test_a_node_goes_once_unneeded_for_the_whole_time_and_the_next_check_is_the_soonest() -> None:
    now = 1_800_000_000.0
    long_ago = dataclasses.replace(view("a", 0.1), since=now - 600)
    lately = dataclasses.replace(view("b", 0.1), since=now - 200)
    fresh = view("c", 0.1)  # stamped in this pass

    expired, next_check = consolidation_rules.unneeded_timers(
        [long_ago, lately, fresh], now=now, unneeded_seconds=600
    )
    assert [v.name for v in expired] == ["a"]
    assert next_check == 400  # b's turn comes before c's

    assert consolidation_rules.unneeded_timers([fresh], now=now, unneeded_seconds=600) == ([], 600)
    assert consolidation_rules.unneeded_timers([long_ago], now=now, unneeded_seconds=600) == (
        [long_ago],
        None,
    )


def test_a_budget_percentage_is_of_the_registered_nodes() -> None:
    """50% of the 2 registered Nodes is one, and one is being disrupted already: the
    replacement still booting does not make it 50% of 3, two."""
    booting = dataclasses.replace(
        view("booting", 0.0),
        obj={
            "metadata": {"name": "booting"},
            "spec": {"taints": [{"key": wellknown.UNREGISTERED_TAINT_KEY, "effect": "NoSchedule"}]},
        },
        eligible=False,
    )
    going = dataclasses.replace(view("going", 0.9), disrupting=True)
    idle = view("idle", 0.1)
    budgets = (disruption_api.Budget(nodes="50%"),)

    allowed, held = consolidation_rules.within_budgets(
        [idle], views=[going, idle, booting], budgets=budgets, now=0.0
    )

    assert allowed == []
    assert [k.node for k in held] == ["idle"]
