"""Consolidation carried out by real kubelets: two 1-CPU nodes each running a pod of
250m are one node too many; the Autoscaler names one, the NodePool controller drains it
through the Eviction API, the hollow kubelet ends the evicted pod, the scheduler binds its
replacement to the node that stays and that node's kubelet runs it."""

from __future__ import annotations

import workloads
from e2e import hollow
from e2e.autoscaling import create_autoscaler
from e2e.scenes import World
from harness import REQUESTS, settled, wait_for
from nodepool_operator.api import wellknown
from nodepool_operator.cloud.provider import VmState


async def test_two_half_empty_kubelets_become_one_and_its_pods_run_there(world: World) -> None:
    cloud, operator, custom, core = await hollow.hollow_pool(
        world, target=2, min_nodes=1, max_nodes=3
    )
    assert cloud.client is not None
    web = workloads.deployment(
        "web",
        selector={wellknown.POOL_LABEL: world.pool},
        replicas=2,
        cpu="250m",
        # One pod on each node, so that consolidating moves one.
        topologySpreadConstraints=workloads.spread(
            {"app": "web"}, "kubernetes.io/hostname", whenUnsatisfiable="ScheduleAnyway"
        ),
    )
    await world.apps.create_namespaced_deployment(world.namespace, web)

    async def both_running() -> dict[str, str] | None:
        found = await hollow.running_pods(core, world.namespace)
        return found if len(found) == 2 else None

    before = await wait_for(both_running, within=60)
    await create_autoscaler(
        custom, world.autoscaler, pool=world.pool, namespace=world.namespace, unneeded_seconds=5
    )
    await wait_for(lambda: settled(custom, world.pool, 1), within=150)

    [vm] = [
        v.name for v in await cloud.client.list_vms(pool=world.pool) if v.state is VmState.RUNNING
    ]

    async def both_on_the_one_left() -> dict[str, str] | None:
        found = await hollow.running_pods(core, world.namespace)
        return found if len(found) == 2 and set(found.values()) == {vm} else None

    after = await wait_for(both_on_the_one_left, within=60)
    assert len(set(before.values())) == 2  # the spread put one pod on each node
    # The evicted pod's replacement, bound to the node that stays and run by its kubelet.
    assert len(set(after) - set(before)) == 1
    requests = await custom.list_cluster_custom_object(
        *REQUESTS, label_selector=wellknown.pool_selector(world.pool)
    )
    named = [r["spec"].get("removeNodes") for r in requests["items"]]
    assert [n for n in named if n] == [[name for name in set(before.values()) if name != vm]]
    assert operator.errors_logged() == []
