"""The simulation's answer per pool: the nodes it opened, in which zones, and which pending
pods each pool hosts.
"""

from __future__ import annotations

from nodepool_operator.controllers.autoscaler.simulation.model import PoolOutcome, SimulationOutcome
from nodepool_operator.controllers.autoscaler.simulation.pools import Simulation
from nodepool_operator.controllers.autoscaler.simulation.rooms import BEYOND_MAX, NEW

__all__ = ["outcome_of"]


def _give_back_unused(simulation: Simulation, used: set[str]) -> None:
    """Nodes an earlier round opened and nothing uses now, wherever in a pool's queue, are
    given back. Every placement still holds without them: an empty node only adds a
    domain with no pod to the spreads, which can only have lowered their smallest count,
    never raised it. A node beyond maxNodes that a given-back node had pushed past the
    limit is within it again, and is asked for."""
    nodes = simulation.cluster.nodes
    for state in simulation.pools.values():
        state.beyond[:] = [i for i in state.beyond if nodes[i].name in used]
        state.new_nodes[:] = [i for i in state.new_nodes if nodes[i].name in used]
        while state.beyond and len(state.new_nodes) < state.template.headroom:
            promoted = state.beyond.pop(0)
            nodes[promoted].kind = NEW
            state.new_nodes.append(promoted)


def outcome_of(
    simulation: Simulation, placements: list[str | None], unfit: dict[int, str]
) -> SimulationOutcome:
    _give_back_unused(simulation, {name for name in placements if name is not None})
    nodes = simulation.cluster.nodes
    pool_of_node = {node.name: node for node in nodes}
    hosted: dict[str, list[int]] = {}
    triggering: dict[str, list[int]] = {}
    beyond: dict[str, list[int]] = {}
    passed_over: dict[str, list[tuple[int, str]]] = {}
    passed_over_for = simulation.passed_over_for
    # Per pod: ``get`` before ``setdefault``, so that no empty list is made for each.
    for index, name in enumerate(placements):
        if name is None:
            continue
        node = pool_of_node[name]
        pool = node.pool
        if pool is None:
            continue
        found = hosted.get(pool)
        if found is None:
            found = hosted[pool] = []
        found.append(index)
        if node.kind == NEW:
            found = triggering.get(pool)
            if found is None:
                found = triggering[pool] = []
            found.append(index)
            preferred = passed_over_for.get(node.index) if passed_over_for else None
            if preferred is not None:
                passed_over.setdefault(pool, []).append((index, preferred))
        elif node.kind == BEYOND_MAX:
            beyond.setdefault(pool, []).append(index)
    pools = {
        name: PoolOutcome(
            new_nodes=len(state.new_nodes),
            wanted_nodes=len(state.new_nodes) + len(state.beyond),
            triggering=tuple(triggering.get(name, ())),
            hosted=tuple(hosted.get(name, ())),
            beyond=tuple(beyond.get(name, ())),
            passed_over=tuple(passed_over.get(name, ())),
            new_node_zones=simulation.new_node_zones(state),
            opened_zones=simulation.opened_zones(state),
        )
        for name, state in simulation.pools.items()
    }
    return SimulationOutcome(pools=pools, placements=tuple(placements), unfit=unfit)
