"""Two replicas under leader election, end to end: only the holder of the Lease acts, and
when it dies without releasing the Lease (SIGKILL), the standby takes over once the
Lease expires and finishes the work, with no VM created twice."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from kubernetes_asyncio import client

from harness import MERGE, POOLS, Operator, SimCloud, pool_body, settled, wait_for

ELECTED = re.compile(r"lease=nodepool-operator identity=(\S+) event=elected")
CANDIDATE = re.compile(r"lease=nodepool-operator identity=(\S+) event=candidate")


async def identity_logged(operator: Operator, pattern: re.Pattern[str]) -> str | None:
    found = pattern.search(operator.output())
    return found.group(1) if found else None


async def test_the_standby_finishes_a_scale_up_after_the_leader_is_killed(
    api_client: client.ApiClient, start_simcloud: Any, start_operator: Any, pool_name: str
) -> None:
    cloud: SimCloud = await start_simcloud("--create-latency", "0.5", "--latency-jitter", "0")
    leader = start_operator(cloud, "--leader-elect")
    # A Lease left by an earlier run expires within its 15 s duration.
    await wait_for(lambda: identity_logged(leader, ELECTED), within=60)
    standby = start_operator(cloud, "--leader-elect")
    standby_identity = await wait_for(lambda: identity_logged(standby, CANDIDATE), within=30)

    custom = client.CustomObjectsApi(api_client)
    await custom.create_cluster_custom_object(*POOLS, pool_body(pool_name, target=2))
    await wait_for(lambda: settled(custom, pool_name, 2), within=60)
    assert ELECTED.search(standby.output()) is None  # it waited, it did not act

    leader.kill()  # no release: the standby must wait for the Lease to expire
    await custom.patch_cluster_custom_object(
        *POOLS, pool_name, {"spec": {"targetNodes": 4}}, _content_type=MERGE
    )
    assert await wait_for(lambda: identity_logged(standby, ELECTED), within=60) == (
        standby_identity
    )
    pool = await wait_for(lambda: settled(custom, pool_name, 4), within=90)
    assert pool["status"]["observedGeneration"] == pool["metadata"]["generation"]

    coordination = client.CoordinationV1Api(api_client)
    lease = await coordination.read_namespaced_lease("nodepool-operator", "nodepool-system")
    assert lease.spec.holder_identity == standby_identity
    assert cloud.client is not None
    machines = await cloud.client.list_vms(pool=pool_name)
    names = Counter(machine.name for machine in machines)
    assert sorted(names) == [f"{pool_name}-{index}" for index in range(4)]
    assert max(names.values()) == 1
    assert standby.errors_logged() == []
