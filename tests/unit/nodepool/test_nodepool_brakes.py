"""The repair brakes that look past the pool: a pool of one Node is held while the
cluster around it looks cut off, as a larger pool is held by its own Nodes, and no pool
starts a repair while the cluster's unready Nodes pass cluster-autoscaler's limits
(``--ok-total-unready-count``, ``--max-total-unready-percentage``)."""

from __future__ import annotations

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers import readiness
from nodepool_operator.runtime import conditions
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.controller import Request
from unit.nodepool import drain_world as fakes
from unit.nodepool import repair_world as repairs

LONG_AGO = fakes.START - 900


def other_pools_node(name: str, *, ready: bool) -> Object:
    """A Node of another pool (or of none): it counts for the cluster, never for ``p``."""
    found = fakes.node(name) if ready else repairs.not_ready(name, since=LONG_AGO)
    found["metadata"]["labels"][wellknown.POOL_LABEL] = "other"
    found["metadata"].pop("ownerReferences", None)
    return found


def cluster(
    pool_size: int, *, broken_in_pool: int, others_ready: int, others_down: int
) -> repairs.World:
    world = repairs.pool_of_nodes(
        pool_size, not_ready_names={f"p-{i}" for i in range(broken_in_pool)}
    )
    for i in range(others_ready):
        world.nodes.put(other_pools_node(f"up-{i}", ready=True))
    for i in range(others_down):
        world.nodes.put(other_pools_node(f"down-{i}", ready=False))
    return world


# --- a pool of one Node ------------------------------------------------------------------


async def test_a_single_node_pool_is_held_while_most_of_the_cluster_is_not_ready() -> None:
    world = cluster(1, broken_in_pool=1, others_ready=1, others_down=1)

    view = await world.converge(1)

    assert world.warnings("NodeRepair") == []
    assert world.cloud.deleted_at == {}
    assert world.api.writes() == []  # not even cordoned
    [held] = world.warnings("RepairHeld")
    assert "2 of the cluster's 3 nodes are NotReady at once" in held
    assert view.repair_held == held


async def test_a_single_node_pool_is_repaired_when_the_rest_of_the_cluster_is_ready() -> None:
    world = cluster(1, broken_in_pool=1, others_ready=2, others_down=0)

    view = await world.converge(1)

    [repaired] = world.warnings("NodeRepair")
    assert "p-0" in repaired
    assert view.repair_held is None


async def test_a_single_node_pool_is_repaired_once_the_cluster_comes_back() -> None:
    world = cluster(1, broken_in_pool=1, others_ready=1, others_down=1)
    await world.converge(1)

    world.nodes.put(other_pools_node("down-0", ready=True))
    view = await world.converge(1)

    assert view.repair_held is None
    assert len(world.warnings("NodeRepair")) == 1


async def test_a_held_pool_is_looked_at_again_though_no_event_of_its_own_comes() -> None:
    world = cluster(1, broken_in_pool=1, others_ready=1, others_down=1)

    view = await world.converge(1)

    assert view.repair_held is not None
    assert view.recheck_in == repairs.CONFIG.repair_held_recheck


# --- the cluster-wide brake ----------------------------------------------------------------


async def test_no_repair_starts_while_the_cluster_is_past_both_unready_limits() -> None:
    # 1 of the pool's 5 is broken (its own brake lets one through); 4 of the other 5
    # Nodes are down: 5 of 10 unready, more than 3 and more than 45%.
    world = cluster(5, broken_in_pool=1, others_ready=1, others_down=4)

    view = await world.converge(5)

    assert world.warnings("NodeRepair") == []
    assert world.cloud.deleted_at == {}
    [held] = world.warnings("RepairHeld")
    assert held == (
        "5 of the cluster's 10 nodes are NotReady, more than okTotalUnreadyCount=3 and"
        " maxTotalUnreadyPercentage=45%: no node is replaced in any pool until they come back"
    )
    assert view.repair_held == held


async def test_a_few_unready_nodes_stay_under_the_count_however_small_the_cluster() -> None:
    # 3 of 6 unready: 50% is past 45%, but 3 is not more than okTotalUnreadyCount=3.
    world = cluster(3, broken_in_pool=1, others_ready=1, others_down=2)

    view = await world.converge(3)

    assert len(world.warnings("NodeRepair")) == 1
    assert view.repair_held is None


async def test_the_cluster_limits_are_the_operators_settings() -> None:
    found = readiness.ClusterReadiness(down=5, total=10)

    assert found.past(readiness.UnreadyLimits())
    assert not found.past(readiness.UnreadyLimits(ok_count=5))
    assert not found.past(readiness.UnreadyLimits(max_percentage=50))
    assert readiness.ClusterReadiness(down=6, total=10).past(readiness.UnreadyLimits(ok_count=5))


async def test_booting_and_departing_nodes_do_not_count_as_unready() -> None:
    booting = repairs.not_ready("b-0", since=LONG_AGO)
    booting["spec"]["taints"] = [{"key": wellknown.UNREGISTERED_TAINT_KEY, "effect": "NoSchedule"}]
    departing = repairs.not_ready("d-0", since=LONG_AGO)
    departing["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    down = repairs.not_ready("n-0", since=LONG_AGO)

    found = readiness.cluster_readiness([booting, departing, down, fakes.node("r-0")])

    assert found == readiness.ClusterReadiness(down=1, total=3)


async def test_the_cluster_wide_brake_shows_in_degraded() -> None:
    world = cluster(5, broken_in_pool=1, others_ready=1, others_down=4)
    world.pool(5)

    await world.reconciler.reconcile(Request(name="p"))

    [degraded] = [c for c in world.api.status_patches[-1]["conditions"] if c["type"] == "Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "RepairHeld")
    assert "okTotalUnreadyCount=3" in degraded["message"]


# --- the end of a partition ----------------------------------------------------------------


def came_back(name: str, *, at: float, created: float = LONG_AGO - 3600) -> Object:
    """A Node of the pool Ready again since ``at``."""
    found = fakes.node(name)
    found["metadata"]["creationTimestamp"] = conditions.rfc3339(created)
    found["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": conditions.rfc3339(at)}
    ]
    return found


def still_down(name: str) -> Object:
    found = repairs.not_ready(name, since=LONG_AGO)
    found["metadata"]["creationTimestamp"] = conditions.rfc3339(LONG_AGO - 3600)
    return found


async def test_the_last_node_back_from_a_partition_is_given_the_timeout_again() -> None:
    # All three were cut off 900 s ago; two kubelets reported again 5 s ago, the third
    # has not yet: it is not replaced for coming back a few seconds after its peers.
    world = repairs.World("p-0", "p-1", "p-2")
    world.nodes.put(still_down("p-0"))
    world.nodes.put(came_back("p-1", at=fakes.START - 5))
    world.nodes.put(came_back("p-2", at=fakes.START - 7))

    view = await world.converge(3)

    assert world.warnings("NodeRepair") == []
    assert world.cloud.deleted_at == {}
    timeout = nodepool_api.NodePoolSpec().not_ready_timeout_seconds
    assert view.recheck_in == timeout - 5  # its new deadline, from its peers' return

    world.advance(timeout - 5)  # still NotReady that long after its peers came back
    await world.converge(3)

    [repaired] = world.warnings("NodeRepair")
    assert "p-0" in repaired


async def test_a_node_made_while_another_was_down_does_not_put_off_its_repair() -> None:
    # p-1 replaced an earlier broken Node: made after p-0 went down, it was never down
    # with it, so its turning Ready says nothing of p-0.
    world = repairs.World("p-0", "p-1")
    world.nodes.put(still_down("p-0"))
    world.nodes.put(came_back("p-1", at=fakes.START - 5, created=fakes.START - 60))

    await world.converge(2)

    [repaired] = world.warnings("NodeRepair")
    assert "p-0" in repaired
