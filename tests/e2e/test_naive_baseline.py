"""The naive baseline of bench/contention.py converges when nothing races.

Its figures under contention are meant to be the cost of the anti-patterns, not of a
broken operator: alone on a control plane of its own (its CRDs have no status
subresource, so it cannot share the session's), it scales a pool up for unschedulable
pods and follows a user's edit of ``targetNodes``, with the same VM names and Nodes as
the product.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from harness import MERGE, POOLS, Process, SimCloud, pool_body, wait_for
from nodepool_devtools.cluster import controlplane
from nodepool_devtools.cluster.pytest_plugin import connected, local_plane
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import contention  # noqa: E402 - bench/ is not a package
from naive import crds  # noqa: E402

NAMESPACE = "naive-work"
POOL = "naive"


@pytest.fixture(scope="module")
def naive_plane(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with local_plane(tmp_path_factory.mktemp("naive-plane")) as plane:
        yield plane


@pytest.fixture
async def naive_api(naive_plane: controlplane.ControlPlane) -> AsyncIterator[client.ApiClient]:
    async with connected(naive_plane.kubeconfig) as api:
        await crds.install(api, crds.variant(status_subresource=False))
        yield api


async def test_naive_operator_scales_up_for_pods_and_follows_a_user_edit(
    naive_plane: controlplane.ControlPlane,
    naive_api: client.ApiClient,
    start_simcloud: Callable[..., Any],
    tmp_path: Path,
) -> None:
    cloud: SimCloud = await start_simcloud("--create-latency", "0.5", "--latency-jitter", "0.2")
    operator = Process(
        "naive",
        [
            sys.executable,
            str(BENCH / "naive" / "run.py"),
            *("--kubeconfig", str(naive_plane.kubeconfig)),
            *("--cloud-endpoint", cloud.endpoint, "--cloud-token-file", str(cloud.token_file)),
        ],
        tmp_path / "naive.log",
    )
    custom = client.CustomObjectsApi(naive_api)
    core = client.CoreV1Api(naive_api)
    await core.create_namespace({"metadata": {"name": NAMESPACE}})
    await custom.create_cluster_custom_object(*POOLS, pool_body(POOL, max_nodes=10))
    scaler = autoscaler_api.AutoscalerSpec(
        node_pool_name=POOL, namespaces=(NAMESPACE,), scan_interval_seconds=1
    )
    await custom.create_cluster_custom_object(
        nodepool_api.GROUP,
        nodepool_api.VERSION,
        "autoscalers",
        autoscaler_api.manifest(POOL, scaler),
    )
    operator.start()
    try:
        # 6 pods of 900m / 3Gi with a node selector on the pool: 4 fit on one Node, so two.
        for index in range(6):
            await core.create_namespaced_pod(NAMESPACE, contention.pod_manifest(POOL, 0, index))

        async def all_running() -> bool:
            assert operator.running, operator.output()
            pods = (await core.list_namespaced_pod(NAMESPACE)).items
            return len(pods) == 6 and all(p.status.phase == "Running" for p in pods)

        await wait_for(all_running, within=120)
        await wait_for(lambda: settled_on(custom, 2), within=60)
        assert cloud.client is not None
        assert sorted(vm.name for vm in await cloud.client.list_vms(pool=POOL)) == [
            "naive-0",
            "naive-1",
        ]

        # The naive operator writes back the whole pool it read, so a pass that was under
        # way when the edit came can put targetNodes back to 2 (its lost update, which
        # bench/contention.py counts). A user would edit again; so does the test, at most
        # twice, and the operator must then follow the edit.
        edit = {"spec": {"targetNodes": 3}}
        await custom.patch_cluster_custom_object(*POOLS, POOL, edit, _content_type=MERGE)
        edits_again = 0

        async def followed() -> dict[str, Any] | None:
            nonlocal edits_again
            seen: dict[str, Any] = await custom.get_cluster_custom_object(*POOLS, POOL)
            if seen["spec"]["targetNodes"] != 3 and edits_again < 2:
                edits_again += 1
                await custom.patch_cluster_custom_object(*POOLS, POOL, edit, _content_type=MERGE)
                return None
            return await settled_on(custom, 3)

        pool = await wait_for(followed, within=60)
        assert pool["status"]["lastUpdated"]  # the anti-pattern is in place
        assert sorted(vm.name for vm in await cloud.client.list_vms(pool=POOL)) == [
            "naive-0",
            "naive-1",
            "naive-2",
        ]
        nodes = await core.list_node(label_selector=wellknown.pool_selector(POOL))
        assert sorted(n.metadata.name for n in nodes.items) == ["naive-0", "naive-1", "naive-2"]
    finally:
        operator.stop()
    assert "Traceback" not in operator.output()


async def settled_on(custom: client.CustomObjectsApi, nodes: int) -> dict[str, Any] | None:
    """The pool once its spec asks for ``nodes`` and its status reports them all Ready."""
    pool: dict[str, Any] = await custom.get_cluster_custom_object(*POOLS, POOL)
    status = pool.get("status") or {}
    done = (
        pool["spec"]["targetNodes"] == nodes
        and status.get("currentNodes") == nodes
        and status.get("readyNodes") == nodes
        and status.get("scaleOperation") == "inactive"
    )
    return pool if done else None
