"""``plan`` and ``explain`` over a recorded cluster: a pool already at maxNodes with its one
node full, and pods that only a new node of that pool, or of another, could host."""

from __future__ import annotations

from typing import Any

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.controllers.resources import (
    AUTOSCALERS,
    NODEPOOLS,
)
from nodepool_operator.inspection import planning, snapshot
from unit.inspection.recordings import (
    CAPPED,
    CREATED,
    NAMESPACE,
    TEMPLATE,
    autoscaler,
    node,
    pod,
    recording,
)

PLAIN = "plain"


def _pool(name: str, *, target: int, max_nodes: int) -> dict[str, Any]:
    spec = nodepool_api.NodePoolSpec(target_nodes=target, max_nodes=max_nodes, template=TEMPLATE)
    found = nodepool_api.manifest(name, spec)
    found["metadata"].update(uid=f"uid-{name}", creationTimestamp=CREATED)
    return found


def _recording(*pending: dict[str, Any], plain_pool: bool = False) -> snapshot.CacheRecording:
    """The capped pool at maxNodes 1, its node full; with ``plain_pool`` an empty pool too."""
    pools = [_pool(CAPPED, target=1, max_nodes=1)]
    if plain_pool:
        pools.append(_pool(PLAIN, target=0, max_nodes=10))
    full = f"{CAPPED}-0"
    return recording(
        pools=pools,
        nodes=[node(full, CAPPED)],
        pods=[pod("filler", "3900m", node=full), *pending],
    )


async def test_a_pod_held_by_max_nodes_is_the_pools_and_not_on_existing_room() -> None:
    recorded = _recording(pod("waiting", "2"))

    planned = await planning.plan_cluster(planning.reads_of(recorded))

    [growth] = planned.growth
    assert (growth.pool, growth.new_nodes, growth.limited_to) == (CAPPED, 0, 1)
    assert growth.pods == ()
    assert growth.beyond_max == (f"{NAMESPACE}/waiting",)
    assert planned.on_existing == 0
    assert planned.unfit == ()


async def test_explain_says_a_pool_still_growing_to_max_nodes_would_be_at_it() -> None:
    # One node of two allowed, full: "first" gets the second node, "second" none. The pool
    # is not at maxNodes now; it would be once the plan's growth is made.
    full = f"{CAPPED}-0"
    recorded = recording(
        pools=[_pool(CAPPED, target=1, max_nodes=2)],
        nodes=[node(full, CAPPED)],
        pods=[pod("filler", "3900m", node=full), pod("first", "3"), pod("second", "3")],
    )
    reads = planning.reads_of(recorded)

    first = await planning.explain_pod(reads, NAMESPACE, "first")
    second = await planning.explain_pod(reads, NAMESPACE, "second")

    assert first.planned == f"needs a new node of pool {CAPPED}: targetNodes 1 -> 2"
    assert second.planned == (
        f"needs a new node of pool {CAPPED}, which would be at maxNodes once it grows for "
        "other pods: targetNodes 1 -> 2"
    )
    assert "is at maxNodes" not in second.planned


async def test_explain_says_the_pool_that_could_host_the_pod_is_at_max_nodes() -> None:
    reads = planning.reads_of(_recording(pod("waiting", "2")))

    explained = await planning.explain_pod(reads, NAMESPACE, "waiting")

    assert explained.planned == f"needs a new node of pool {CAPPED}, which is at maxNodes"
    assert explained.planned_pool == CAPPED
    [pool] = explained.pools
    assert (pool.problem, pool.headroom) == (None, 0)
    [node] = explained.nodes
    assert node.problem == "not enough free cpu"
    [watcher] = explained.watchers
    assert (watcher.autoscaler, watcher.pool, watcher.dry_run) == (f"nas-{CAPPED}", CAPPED, False)
    assert watcher.scan_interval_seconds == autoscaler_api.DEFAULT_SCAN_INTERVAL_SECONDS


async def test_a_bound_pod_has_nothing_planned_and_no_next_look() -> None:
    reads = planning.reads_of(_recording())

    explained = await planning.explain_pod(reads, NAMESPACE, "filler")

    assert explained.node == f"{CAPPED}-0"
    assert explained.planned == f"bound to {CAPPED}-0: nothing to plan"
    assert explained.watchers == ()


async def test_a_pod_another_pool_can_host_is_not_put_on_a_node_past_max_nodes() -> None:
    pinned = pod("pinned", "2")  # only the capped pool: past its maxNodes
    anywhere = pod("anywhere", "500m", pool=None)  # a new plain node would do
    recorded = _recording(pinned, anywhere, plain_pool=True)

    planned = await planning.plan_cluster(planning.reads_of(recorded))

    growth = {g.pool: g for g in planned.growth}
    assert growth[CAPPED].beyond_max == (f"{NAMESPACE}/pinned",)
    assert growth[PLAIN].pods == (f"{NAMESPACE}/anywhere",)


async def test_explain_names_the_missing_pool_of_the_autoscaler_it_also_names_as_next_look() -> (
    None
):
    # The Autoscaler watches the pod's namespace but names a pool that does not exist: the
    # answer says so, and never "no Autoscaler watches it" while naming that Autoscaler.
    recorded = recording(pools=[], nodes=[], pods=[pod("waiting", "2", pool=None)])
    key = snapshot.cache_key(AUTOSCALERS, None, None, None)
    recorded.caches[key] = [autoscaler("gone")]
    reads = planning.reads_of(recorded)

    explained = await planning.explain_pod(reads, NAMESPACE, "waiting")

    assert explained.planned == "not planned: Autoscaler nas-gone: NodePool 'gone' does not exist"
    assert [w.autoscaler for w in explained.watchers] == ["nas-gone"]
    assert "no Autoscaler watches" not in explained.planned


async def test_explain_says_no_autoscaler_watches_the_namespace_only_when_none_does() -> None:
    recorded = recording(pools=[], nodes=[], pods=[pod("waiting", "2", pool=None)])

    explained = await planning.explain_pod(planning.reads_of(recorded), NAMESPACE, "waiting")

    assert explained.planned == f"not planned: no Autoscaler watches namespace {NAMESPACE}"
    assert explained.watchers == ()


async def test_explain_names_the_degraded_pool_the_plan_counts_on() -> None:
    # The plan sends the pod to the capped pool's existing room or nodes on their way, but
    # the pool is Degraded: the answer says what holds it, not only that it fits.
    recorded = _recording(pod("waiting", "2"), plain_pool=True)
    key = snapshot.cache_key(NODEPOOLS, None, None, None)
    for found in recorded.caches[key]:
        found["status"] = {
            "conditions": [
                {
                    "type": "Degraded",
                    "status": "True",
                    "reason": "CloudListFailed",
                    "message": "listing the pool's VMs failed (Unauthorized)",
                    "lastTransitionTime": CREATED,
                }
            ]
        }
    reads = planning.reads_of(recorded)

    explained = await planning.explain_pod(reads, NAMESPACE, "waiting")

    assert explained.planned.startswith(f"needs a new node of pool {CAPPED}")
    assert explained.planned.endswith(
        f"; but NodePool {CAPPED} is Degraded (CloudListFailed: listing the pool's VMs failed "
        "(Unauthorized)), so nodes on their way may not come"
    )


async def test_explain_counts_no_vm_on_its_way_for_a_pool_whose_vms_cannot_be_listed() -> None:
    # Target 3 and one full node: two VMs asked for. The cloud refused to list the pool's
    # VMs (a wrong credential) for ten minutes, so none of them is being made: the pod is
    # not told it fits on a node "on its way", and no "(booting)" node is offered to it.
    pool = _pool(CAPPED, target=3, max_nodes=4)
    pool["status"] = {
        "conditions": [
            {
                "type": "Degraded",
                "status": "True",
                "reason": "CloudListFailed",
                "message": "listing the pool's VMs failed (Unauthorized): wrong bearer token",
                "lastTransitionTime": CREATED,
            }
        ]
    }
    full = f"{CAPPED}-0"
    reads = planning.reads_of(
        recording(
            pools=[pool],
            nodes=[node(full, CAPPED)],
            pods=[pod("filler", "3900m", node=full), pod("waiting", "2")],
        )
    )

    explained = await planning.explain_pod(reads, NAMESPACE, "waiting")

    assert explained.planned.startswith(
        f"needs a new node of pool {CAPPED}, which cannot grow: its VMs cannot be listed "
        "(CloudListFailed: listing the pool's VMs failed (Unauthorized)"
    ), explained.planned
    assert not any(node.booting for node in explained.nodes), explained.nodes
