"""Two replicas under leader election, end to end: only the holder of the Lease acts, and
when it dies without releasing the Lease (SIGKILL), the standby takes over once the
Lease expires and finishes the work, with no VM created twice."""

from __future__ import annotations

import re
from collections import Counter

from kubernetes_asyncio import client

from e2e.scenes import World
from harness import MERGE, POOLS, Operator, pool_body, settled, wait_for

ELECTED = re.compile(r"lease=nodepool-operator identity=(\S+) event=elected")
CANDIDATE = re.compile(r"lease=nodepool-operator identity=(\S+) event=candidate")


async def identity_logged(operator: Operator, pattern: re.Pattern[str]) -> str | None:
    found = pattern.search(operator.output())
    return found.group(1) if found else None


async def test_the_standby_finishes_a_scale_up_after_the_leader_is_killed(world: World) -> None:
    cloud = await world.cloud(latency=0.5)
    leader = world.start_operator(cloud, "--leader-elect")
    # A Lease left by an earlier run expires within its 15 s duration.
    await wait_for(lambda: identity_logged(leader, ELECTED), within=60)
    standby = world.start_operator(cloud, "--leader-elect")
    standby_identity = await wait_for(lambda: identity_logged(standby, CANDIDATE), within=30)
    await world.custom.create_cluster_custom_object(*POOLS, pool_body(world.pool, target=2))
    await wait_for(lambda: settled(world.custom, world.pool, 2), within=60)
    assert ELECTED.search(standby.output()) is None  # it waited, it did not act

    leader.kill()  # no release: the standby must wait for the Lease to expire
    await world.custom.patch_cluster_custom_object(
        *POOLS, world.pool, {"spec": {"targetNodes": 4}}, _content_type=MERGE
    )
    assert await wait_for(lambda: identity_logged(standby, ELECTED), within=60) == (
        standby_identity
    )
    pool = await wait_for(lambda: settled(world.custom, world.pool, 4), within=90)
    assert pool["status"]["observedGeneration"] == pool["metadata"]["generation"]

    coordination = client.CoordinationV1Api(world.api_client)
    lease = await coordination.read_namespaced_lease("nodepool-operator", "nodepool-system")
    assert lease.spec.holder_identity == standby_identity
    assert cloud.client is not None
    machines = await cloud.client.list_vms(pool=world.pool)
    names = Counter(machine.name for machine in machines)
    assert sorted(names) == [f"{world.pool}-{index}" for index in range(4)]
    assert max(names.values()) == 1
    assert standby.errors_logged() == []
