"""One pod judged against every node and pool, with the filters ``simulate`` uses and
before any pending pod is placed: what ``nodepool-operator explain`` shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.autoscaler.simulation.model import (
    DaemonSetView,
    ExistingNode,
    PoolTemplate,
)
from nodepool_operator.controllers.autoscaler.simulation.pools import Simulation
from nodepool_operator.controllers.autoscaler.simulation.rooms import BOOTING

__all__ = ["NodeAnswer", "NodeVerdicts", "verdicts"]


@dataclass(frozen=True)
class NodeAnswer:
    pool: str | None
    booting: bool  # requested and not Ready yet (a VM without a Node, or a Node booting)
    problem: str | None  # the first filter that refuses, None where the pod fits


@dataclass(frozen=True)
class NodeVerdicts:
    """For one pod: each node's answer and each pool's, None where it fits. A problem is
    the first filter that refuses, in the order the scheduler runs them."""

    nodes: Mapping[str, NodeAnswer]  # existing and booting nodes
    pools: Mapping[str, str | None]  # the pool's next new node (any of its zones)


def verdicts(
    profile: PodProfile,
    *,
    nodes: Sequence[ExistingNode],
    pools: Sequence[PoolTemplate],
    daemon_sets: Sequence[DaemonSetView] = (),
) -> NodeVerdicts:
    """Judge ``profile`` against the cluster as it is, with the filters ``simulate`` uses
    and before any pending pod is placed: what ``nodepool-operator explain`` shows."""
    simulation = Simulation(nodes, pools, daemon_sets, {})
    cluster = simulation.cluster
    if profile.unsupported is not None:
        return NodeVerdicts(
            nodes={
                node.name: NodeAnswer(node.pool, node.kind == BOOTING, profile.unsupported)
                for node in cluster.nodes
            },
            pools={name: profile.unsupported for name in simulation.pools},
        )
    on_nodes = {
        node.name: NodeAnswer(node.pool, node.kind == BOOTING, cluster.problem(profile, node))
        for node in cluster.nodes
    }
    on_pools: dict[str, str | None] = {}
    for name, state in simulation.pools.items():
        template = state.template
        if template.namespaces is not None and profile.namespace not in template.namespaces:
            on_pools[name] = f"its Autoscaler does not watch namespace {profile.namespace}"
            continue
        first: str | None = None
        for ahead in range(max(1, template.zones)):
            problem = cluster.problem(profile, simulation.candidate(state, ahead), candidate=True)
            if problem is None:
                first = None
                break
            first = first or problem
        on_pools[name] = first
    return NodeVerdicts(nodes=on_nodes, pools=on_pools)
