"""A pool's consolidation pass with a replacement by one cheaper Node
(``consolidation_choice.decide`` and ``judge_budgets``, pure): the victims are stamped and
timed as any candidate, tainted and marked together once their time is up (never one
without the others), keep their marks while their new Node is asked for and boots, the
new Node is asked for, the victims named once it is Ready and proved, or kept when it
is called off."""

from __future__ import annotations

import dataclasses
from typing import Any

from nodepool_operator.api.disruption import Budget
from nodepool_operator.controllers.autoscaler.decide import consolidation_choice as choice_module
from nodepool_operator.controllers.autoscaler.decide import consolidation_replace as replace
from nodepool_operator.controllers.autoscaler.decide.consolidation_choice import (
    Choice,
    PoolBudgets,
)
from nodepool_operator.controllers.autoscaler.decide.consolidation_rules import Kept
from nodepool_operator.controllers.autoscaler.snapshot.consolidation_views import NodeView
from nodepool_operator.controllers.autoscaler.snapshot.pool_facts import PoolFacts

OWNED = [{"kind": "ReplicaSet", "name": "web-1", "uid": "rs", "controller": True}]
NOW = 10_000.0
UNNEEDED = 60.0
REPLACEMENT = replace.Replacement(("large-1", "large-2"), ("small", "z", "on-demand"), 0.1, 0.8)


def pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "apps",
            "ownerReferences": OWNED,
            "labels": {"app": "web"},
        },
        "spec": {"containers": [{"name": "c"}]},
    }


def view(name: str, *, since: float | None = None, tainted: bool = False) -> NodeView:
    return NodeView(
        name=name,
        obj={"metadata": {"name": name}},
        to_move=(pod(f"{name}-a"), pod(f"{name}-b")),
        usage=0.1,
        since=since,
        tainted=tainted,
        eligible=True,
        disrupting=tainted,
    )


def no_room(*names: str) -> tuple[Kept, ...]:
    return tuple(
        Kept(n, "no-room", f"apps/{n}-a", f"pod apps/{n}-a fits on no other node") for n in names
    )


def decide(
    choice: Choice, *, blocked: str | None = None, budgets: PoolBudgets | None = None
) -> Any:
    return choice_module.decide(
        choice,
        now=NOW,
        unneeded_seconds=UNNEEDED,
        max_concurrent=1,
        room=3,
        per_request=100,
        blocked=blocked,
        active_since=None,
        budgets=budgets or PoolBudgets(),
    )


def settle(decided: Any, pdbs: list[Any] | None = None) -> Any:
    return choice_module.judge_budgets(decided, pdbs or [], now=NOW, recheck_seconds=1.0)


def test_victims_are_stamped_and_not_told_kept_when_a_cheaper_node_replaces_them() -> None:
    views = (view("large-1"), view("large-2"), view("busy"))
    found = Choice(views, (), no_room("large-1", "large-2"), replacement=REPLACEMENT)
    marks, _ = settle(decide(found))
    assert [v.name for v in marks.stamp] == ["large-1", "large-2"]
    assert marks.kept == ()
    assert marks.replace == ()  # their time is not up yet


def test_victims_are_tainted_and_marked_together_once_their_time_is_up() -> None:
    old = NOW - UNNEEDED - 1
    views = (view("large-1", since=old), view("large-2", since=old))
    found = Choice(views, (), no_room(*REPLACEMENT.victims), replacement=REPLACEMENT)
    decided = decide(found)
    assert [v.name for v in decided.replacing] == ["large-1", "large-2"]
    marks, review = settle(decided)
    # Tainted and marked in one write each, though maxConcurrent is 1: one replacement.
    assert [(v.name, r) for v, r in marks.replace] == [
        ("large-1", REPLACEMENT),
        ("large-2", REPLACEMENT),
    ]
    assert marks.taint == ()
    assert review.victims == ()  # named only once the new Node is Ready
    assert review.next_check == 1.0


def test_a_disruption_budget_for_one_node_holds_both_victims() -> None:
    old = NOW - UNNEEDED - 1
    views = (view("large-1", since=old), view("large-2", since=old))
    found = Choice(views, (), no_room(*REPLACEMENT.victims), replacement=REPLACEMENT)
    decided = decide(found, budgets=PoolBudgets((Budget(nodes="1"),)))
    assert decided.replacing == ()
    marks, _ = settle(decided)
    assert marks.replace == ()
    assert {k.rule for k in marks.kept} == {"disruption-budget"}


def test_a_pod_disruption_budget_that_allows_too_few_keeps_every_victim() -> None:
    old = NOW - UNNEEDED - 1
    views = (view("large-1", since=old), view("large-2", since=old))
    found = Choice(views, (), no_room(*REPLACEMENT.victims), replacement=REPLACEMENT)
    pdb = {
        "metadata": {"name": "web", "namespace": "apps"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 1},
    }
    marks, _ = settle(decide(found), [pdb])
    assert marks.replace == ()
    assert [(v.name, since) for v, since in marks.clear] == [("large-1", NOW), ("large-2", NOW)]
    [kept] = marks.kept
    assert kept.rule == "pod-disruption-budget"


def under_way(step: Any) -> Choice:
    marked = dataclasses.replace(REPLACEMENT, since=NOW - 30)
    views = (view("large-1", tainted=True), view("large-2", tainted=True), view("other"))
    return Choice(views, replacing=marked, step=step)


def test_the_victims_keep_their_marks_while_their_new_node_is_asked_for_and_boots() -> None:
    # Today a scale-up settling clears every mark of the pool: a replacement's own launch
    # must not call it off.
    for blocked in ("capacity-in-flight", "request-pending"):
        marks, review = settle(decide(under_way("wait"), blocked=blocked))
        assert marks == choice_module.Marks(), blocked
        assert review.victims == ()


def test_the_new_node_is_asked_for_when_none_was() -> None:
    marks, review = settle(decide(under_way("launch")))
    assert marks == choice_module.Marks()
    assert review.launch == dataclasses.replace(REPLACEMENT, since=NOW - 30)
    facts = PoolFacts(name="p", min_nodes=0, max_nodes=5, target=2, ready=2, open_request=False)
    decision = replace.launch_decision(facts, review.launch)
    assert (decision.action, decision.current, decision.target) == ("scale-up", 2, 3)
    assert "$0.8000/h before, $0.1000/h after" in decision.reason


def test_once_the_new_node_is_ready_and_proved_the_victims_are_named_with_both_prices() -> None:
    marks, review = settle(decide(under_way("name")))
    assert review.victims == ("large-1", "large-2")
    assert marks.clear == ()
    reason = review.reasons["large-1"]
    assert "replace large-1, large-2 ($0.8000/h) with one small in z" in reason
    assert "$0.1000/h" in reason


def test_a_replacement_called_off_keeps_its_victims_and_says_why() -> None:
    off = replace.Unreplaceable(REPLACEMENT.victims, "their pods no longer fit")
    marks, review = settle(decide(under_way(off)))
    assert [(v.name, since) for v, since in marks.clear] == [("large-1", None), ("large-2", None)]
    assert [k.rule for k in marks.kept] == ["replacement", "replacement"]
    assert "their pods no longer fit" in marks.kept[0].message
    assert review.victims == ()


def test_scale_down_turned_off_clears_a_replacement_under_way() -> None:
    marks, _ = settle(decide(under_way("wait"), blocked="disabled"))
    assert {v.name for v, _ in marks.clear} == {"large-1", "large-2"}


def test_when_no_cheaper_node_replaces_them_the_kept_event_says_why() -> None:
    views = (view("large-1"),)
    why = replace.Unreplaceable(("large-1",), "node large-1's price is unknown")
    marks, _ = settle(decide(Choice(views, (), no_room("large-1"), replacement=why)))
    [kept] = marks.kept
    assert kept.rule == "no-room"
    assert kept.message.endswith("no cheaper node replaces it: node large-1's price is unknown")


def test_a_victim_being_drained_keeps_its_marks_when_the_replacement_is_called_off() -> None:
    found = under_way(replace.Unreplaceable(REPLACEMENT.victims, "node large-2 is gone"))
    draining = dataclasses.replace(found.views[0], eligible=False, removing=True)
    found = dataclasses.replace(found, views=(draining, *found.views[1:]))
    marks, _ = settle(decide(found))
    assert [v.name for v, _ in marks.clear] == ["large-2"]
    assert [k.node for k in marks.kept] == ["large-2"]
