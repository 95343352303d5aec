"""``plan`` and ``explain`` over a recorded cluster: a pool already at maxNodes with its one
node full, and pods that only a new node of that pool, or of another, could host."""

from __future__ import annotations

from typing import Any

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.controllers.resources import (
    AUTOSCALERS,
    NODEPOOLS,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    SCALEREQUESTS,
    STORAGE_CLASSES,
)
from nodepool_operator.inspection import planning, snapshot
from nodepool_operator.runtime import kinds

NAMESPACE = "web"
CAPPED = "capped"
PLAIN = "plain"
CREATED = "2026-12-01T00:00:00Z"
TEMPLATE = nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=110)


def _pod(
    name: str, cpu: str, *, node: str | None = None, pool: str | None = CAPPED
) -> dict[str, Any]:
    pending = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-{name}",
            "creationTimestamp": CREATED,
        },
        "spec": {
            "nodeSelector": {nodepool_api.POOL_LABEL: pool} if pool else {},
            "containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}],
            **({"nodeName": node} if node else {}),
        },
        "status": {"phase": "Running"} if node else {"phase": "Pending", "conditions": [pending]},
    }


def _pool(name: str, *, target: int, max_nodes: int) -> dict[str, Any]:
    spec = nodepool_api.NodePoolSpec(target_nodes=target, max_nodes=max_nodes, template=TEMPLATE)
    found = nodepool_api.manifest(name, spec)
    found["metadata"].update(uid=f"uid-{name}", creationTimestamp=CREATED)
    return found


def _node(name: str, pool: str) -> dict[str, Any]:
    room = {"cpu": "4", "memory": "16Gi", "pods": "110"}
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "creationTimestamp": CREATED,
            "labels": {
                **nodepool_api.node_labels(pool, TEMPLATE),
                nodepool_api.HOSTNAME_LABEL: name,
            },
            "ownerReferences": [{"kind": "NodePool", "name": pool, "uid": f"uid-{pool}"}],
        },
        "spec": {},
        "status": {
            "allocatable": room,
            "capacity": room,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": CREATED}],
        },
    }


def _autoscaler(pool: str) -> dict[str, Any]:
    spec = autoscaler_api.AutoscalerSpec(node_pool_name=pool, namespaces=(NAMESPACE,))
    found = autoscaler_api.manifest(f"nas-{pool}", spec)
    found["metadata"].update(uid=f"uid-nas-{pool}", creationTimestamp=CREATED)
    return found


def _recording(*pending: dict[str, Any], plain_pool: bool = False) -> snapshot.CacheRecording:
    """The capped pool at maxNodes 1, its node full; with ``plain_pool`` an empty pool too."""
    pools = [_pool(CAPPED, target=1, max_nodes=1)]
    if plain_pool:
        pools.append(_pool(PLAIN, target=0, max_nodes=10))
    full = f"{CAPPED}-0"
    return recording(
        pools=pools,
        nodes=[_node(full, CAPPED)],
        pods=[_pod("filler", "3900m", node=full), *pending],
    )


def recording(*, pools: list[Any], nodes: list[Any], pods: list[Any]) -> snapshot.CacheRecording:
    """What the planner's informers hold: the pools, an Autoscaler for each, the nodes and
    pods, and nothing else."""
    key = snapshot.cache_key
    return snapshot.CacheRecording(
        caches={
            key(AUTOSCALERS, None, None, None): [_autoscaler(p["metadata"]["name"]) for p in pools],
            key(NODEPOOLS, None, None, None): pools,
            key(kinds.NODES, None, None, None): nodes,
            key(kinds.PODS, None, None, None): pods,
            key(SCALEREQUESTS, None, None, None): [],
            key(kinds.DAEMONSETS, None, None, None): [],
            key(PERSISTENT_VOLUME_CLAIMS, None, None, None): [],
            key(PERSISTENT_VOLUMES, None, None, None): [],
            key(STORAGE_CLASSES, None, None, None): [],
        },
        captured_at="2026-12-01T00:10:00+00:00",
    )


async def test_a_pod_held_by_max_nodes_is_the_pools_and_not_on_existing_room() -> None:
    recorded = _recording(_pod("waiting", "2"))

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
        nodes=[_node(full, CAPPED)],
        pods=[_pod("filler", "3900m", node=full), _pod("first", "3"), _pod("second", "3")],
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
    reads = planning.reads_of(_recording(_pod("waiting", "2")))

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
    pinned = _pod("pinned", "2")  # only the capped pool: past its maxNodes
    anywhere = _pod("anywhere", "500m", pool=None)  # a new plain node would do
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
    recorded = recording(pools=[], nodes=[], pods=[_pod("waiting", "2", pool=None)])
    key = snapshot.cache_key(AUTOSCALERS, None, None, None)
    recorded.caches[key] = [_autoscaler("gone")]
    reads = planning.reads_of(recorded)

    explained = await planning.explain_pod(reads, NAMESPACE, "waiting")

    assert explained.planned == "not planned: Autoscaler nas-gone: NodePool 'gone' does not exist"
    assert [w.autoscaler for w in explained.watchers] == ["nas-gone"]
    assert "no Autoscaler watches" not in explained.planned


async def test_explain_says_no_autoscaler_watches_the_namespace_only_when_none_does() -> None:
    recorded = recording(pools=[], nodes=[], pods=[_pod("waiting", "2", pool=None)])

    explained = await planning.explain_pod(planning.reads_of(recorded), NAMESPACE, "waiting")

    assert explained.planned == f"not planned: no Autoscaler watches namespace {NAMESPACE}"
    assert explained.watchers == ()


async def test_explain_names_the_degraded_pool_the_plan_counts_on() -> None:
    # The plan sends the pod to the capped pool's existing room or nodes on their way, but
    # the pool is Degraded: the answer says what holds it, not only that it fits.
    recorded = _recording(_pod("waiting", "2"), plain_pool=True)
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
