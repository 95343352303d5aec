"""Nodes an earlier round opened and nothing uses are given back, wherever they are."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from nodepool_operator.controllers.autoscaler.simulation import outcomes
from nodepool_operator.controllers.autoscaler.simulation.rooms import BEYOND_MAX, NEW


def simulation(*, headroom: int, kinds: list[str]) -> Any:
    nodes = [SimpleNamespace(name=f"p-{i}", kind=kind) for i, kind in enumerate(kinds)]
    state = SimpleNamespace(
        template=SimpleNamespace(headroom=headroom),
        new_nodes=[i for i, kind in enumerate(kinds) if kind == NEW],
        beyond=[i for i, kind in enumerate(kinds) if kind == BEYOND_MAX],
    )
    return SimpleNamespace(cluster=SimpleNamespace(nodes=nodes), pools={"p": state})


def test_an_empty_node_in_the_middle_of_the_queue_is_given_back() -> None:
    sim = simulation(headroom=5, kinds=[NEW, NEW, NEW])
    outcomes._give_back_unused(sim, {"p-1", "p-2"})
    assert sim.pools["p"].new_nodes == [1, 2]


def test_a_node_pushed_beyond_max_by_a_given_back_one_is_asked_for_again() -> None:
    sim = simulation(headroom=2, kinds=[NEW, NEW, BEYOND_MAX, BEYOND_MAX])
    outcomes._give_back_unused(sim, {"p-1", "p-2", "p-3"})
    state = sim.pools["p"]
    assert state.new_nodes == [1, 2]  # p-2 is within maxNodes now that p-0 is gone
    assert state.beyond == [3]
    assert [node.kind for node in sim.cluster.nodes[1:]] == [NEW, NEW, BEYOND_MAX]
