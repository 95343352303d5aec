"""Nominations on the real control plane: a scale-up's Nodes wait, tainted, until the
Autoscaler has nominated the pending pods it planned there; kube-scheduler then binds each
pod on the Node it was nominated to, and no pod is stranded by another taking its room.

The pods are queued small first: two small, then two large, each large one with room
for one small beside it. The plan is two Nodes of {large, small}. Had one Node turned
schedulable before the other, the two small pods would both have gone there (first in
the queue), leaving no Node room for the second large pod, and a third Node would have
been bought. Once on kwok's Nodes, once on real (hollow) kubelets.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import workloads
from e2e import hollow
from e2e.autoscaling import pod, running
from e2e.consolidating import pool_nodes
from e2e.histories import TAINT, watching
from e2e.scenes import World
from harness import wait_for
from nodepool_devtools.cluster import audit
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler.act.nominations import CONFIRM_ROUNDS

OPERATOR_USER = "nodepool-operator"


async def _burst(world: World, *, small: str, big: str) -> list[str]:
    """Two pods of ``small`` CPU, then two of ``big``, for this test's pool; their names
    once all four run, with what the watches saw meanwhile checked (``_check``)."""
    names = ["small-0", "small-1", "big-0", "big-1"]
    async with watching(world.core, world.pool, world.namespace) as history:
        for name in names:
            cpu = small if name.startswith("small") else big
            body = pod(
                name, {"nodeSelector": world.on_pool, "containers": [workloads.container(cpu)]}
            )
            await world.core.create_namespaced_pod(world.namespace, body)

        async def all_running() -> bool:
            return await running(world.core, world.namespace, len(names))

        await wait_for(all_running, within=120)
    await _check(world, history.pods, names)
    return names


async def _check(world: World, versions: list[dict[str, Any]], names: list[str]) -> None:
    nodes = await pool_nodes(world.core, world.pool)
    assert len(nodes) == 2, [n.metadata.name for n in nodes]
    # Released: no Node keeps the taint, and each carries the Autoscaler's mark.
    for node in nodes:
        assert wellknown.NOMINATED_ANNOTATION in (node.metadata.annotations or {})
        assert not [t for t in node.spec.taints or () if t.key == TAINT]
    nominated: dict[str, str] = {}
    bound: dict[str, str] = {}
    for version in versions:
        name = version["metadata"]["name"]
        if node_name := (version.get("status") or {}).get("nominatedNodeName"):
            nominated.setdefault(name, node_name)
        if node_name := (version.get("spec") or {}).get("nodeName"):
            bound.setdefault(name, node_name)
    assert sorted(nominated) == sorted(names)
    assert bound == nominated
    # Every nomination is the operator's (pods/status patches at the server): one per pod,
    # and one more for each time the watch saw kube-scheduler clear it while the pod was
    # unbound (written again before the Nodes were released, ``act.nominations``).
    log = [
        e
        for e in audit.writes(world.cluster.audit_log().events(), user=OPERATOR_USER)
        if e.target == "pods/status" and e.namespace == world.namespace
    ]
    writes = Counter(e.name for e in log)
    clears = _clears(versions)
    for name in names:
        assert 1 <= writes[name] <= 1 + min(clears[name], CONFIRM_ROUNDS), (name, writes, clears)
    # The plan's two Nodes: each big pod with a small one.
    by_node: dict[str, list[str]] = {}
    for name, node_name in bound.items():
        by_node.setdefault(node_name, []).append(name.split("-")[0])
    assert sorted(sorted(v) for v in by_node.values()) == [["big", "small"], ["big", "small"]]


def _clears(versions: list[dict[str, Any]]) -> Counter[str]:
    """How many times each pod, unbound, went from a nomination to none, as watched."""
    clears: Counter[str] = Counter()
    held: dict[str, bool] = {}
    for version in versions:
        name = version["metadata"]["name"]
        nominated = bool((version.get("status") or {}).get("nominatedNodeName"))
        bound = bool((version.get("spec") or {}).get("nodeName"))
        if held.get(name) and not nominated and not bound:
            clears[name] += 1
        held[name] = nominated
    return clears


async def test_each_pod_is_bound_where_it_was_nominated_and_no_node_more_is_bought(
    world: World,
) -> None:
    await world.autoscaled(latency=0)  # kwok's Nodes of 4 CPU: the plan is {3, 1} twice
    await _burst(world, small="1", big="3")


async def test_on_real_kubelets_the_nodes_wait_for_their_nominations_after_reporting_ready(
    world: World,
) -> None:
    """kubemark's kubelets report 1 CPU each, a few seconds after their VM is made (so the
    wait counts from their Ready, not from the Node's creation): the plan is {600m, 300m}
    twice."""
    scene = await hollow.hollow_pool(world, target=0)
    await world.create_autoscaler()
    await _burst(world, small="300m", big="600m")
    assert scene.operator.errors_logged() == []
