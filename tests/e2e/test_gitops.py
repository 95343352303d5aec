"""A NodePool kept in Git next to an Autoscaler, applied with ``kubectl apply --server-side``.

The GitOps procedure of docs/operations.md, run as written: a manifest without ``targetNodes`` never
resets it, and ownership of ``targetNodes`` passes from the Git manifest to the
operator (the procedure Kubernetes documents for a Deployment's ``replicas`` and an HPA)
without a node being drained.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from e2e.scenes import World
from harness import MERGE, POOLS, Sampler, kubectl, settled, wait_for
from nodepool_devtools.cluster import binaries
from nodepool_devtools.cluster.pytest_plugin import Cluster
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown

GITOPS = "gitops"  # the field manager a GitOps tool applies with
HANDOVER = "handover-to-nodepool-operator"


def manifest(name: str, *, target: int | None, max_nodes: int = 10) -> dict[str, Any]:
    """The NodePool as kept in Git (``targetNodes`` only while Git owns it)."""
    spec: dict[str, Any] = {
        "maxNodes": max_nodes,
        "template": {"cpu": "4", "memory": "16Gi", "labels": {"team": "web"}},
    }
    if target is not None:
        spec["targetNodes"] = target
    return {
        "apiVersion": nodepool_api.API_VERSION,
        "kind": nodepool_api.KIND,
        "metadata": {"name": name},
        "spec": spec,
    }


@pytest.fixture
def apply(cluster: Cluster, tmp_path: Path) -> Any:
    """``kubectl apply --server-side`` of a manifest, as a given field manager."""
    kubectl_path = binaries.ensure_binaries()["kubectl"]

    async def run(body: dict[str, Any], *, manager: str) -> str:
        path = tmp_path / f"{manager}.json"
        path.write_text(json.dumps(body))
        return await kubectl(
            kubectl_path,
            cluster.kubeconfig,
            "apply",
            "--server-side",
            f"--field-manager={manager}",
            "-f",
            str(path),
        )

    return run


class NodeWatch(Sampler):
    """Every pool Node name seen, sampled until stopped: a drained node would show up."""

    def __init__(self, core: client.CoreV1Api, pool: str) -> None:
        self.core, self.pool = core, pool
        self.deleting: set[str] = set()

    async def _run(self) -> None:
        while True:
            nodes = await self.core.list_node(label_selector=wellknown.pool_selector(self.pool))
            for node in nodes.items:
                if node.spec.unschedulable or node.metadata.deletion_timestamp:
                    self.deleting.add(node.metadata.name)
            await asyncio.sleep(0.2)


async def target_of(custom: client.CustomObjectsApi, name: str) -> int:
    pool = await custom.get_cluster_custom_object(*POOLS, name)
    return int(pool["spec"]["targetNodes"])


async def test_targetnodes_passes_from_git_to_the_operator_without_a_drain(
    world: World, apply: Any
) -> None:
    _, operator = await world.operated(latency=1)
    # Git creates the pool with two nodes.
    await apply(manifest(world.pool, target=2), manager=GITOPS)
    await wait_for(lambda: settled(world.custom, world.pool, 2), within=60)
    watch = NodeWatch(world.core, world.pool)
    watch.start()
    try:
        # 1. A second manager takes a share of targetNodes at its current value.
        await apply(
            {
                "apiVersion": nodepool_api.API_VERSION,
                "kind": nodepool_api.KIND,
                "metadata": {"name": world.pool},
                "spec": {"targetNodes": 2},
            },
            manager=HANDOVER,
        )
        # 2. Git drops targetNodes: the handover manager still owns it, so it is kept.
        await apply(manifest(world.pool, target=None), manager=GITOPS)
        assert await target_of(world.custom, world.pool) == 2
        # 3. The operator (kubectl scale here, a ScaleRequest in production) moves it, and
        #    Git, applying again with another change, leaves it where it is. The change is
        #    one that drifts no Node (maxNodes): a template change would roll the pool.
        await world.custom.patch_cluster_custom_object(
            *POOLS, world.pool, {"spec": {"targetNodes": 3}}, _content_type=MERGE
        )
        await wait_for(lambda: settled(world.custom, world.pool, 3), within=60)
        await apply(manifest(world.pool, target=None, max_nodes=12), manager=GITOPS)
        pool = await world.custom.get_cluster_custom_object(*POOLS, world.pool)
        assert pool["spec"]["targetNodes"] == 3
        assert pool["spec"]["maxNodes"] == 12
        await asyncio.sleep(10)  # a few reconciles: nothing moves
        await wait_for(lambda: settled(world.custom, world.pool, 3), within=30)
    finally:
        await watch.stop()
    assert watch.deleting == set()  # no node was cordoned or deleted on the way
    assert operator.errors_logged() == []


async def test_without_the_handover_dropping_targetnodes_from_git_resets_it(
    world: World, apply: Any
) -> None:
    await apply(manifest(world.pool, target=2), manager=GITOPS)
    assert await target_of(world.custom, world.pool) == 2
    await apply(manifest(world.pool, target=None), manager=GITOPS)
    assert await target_of(world.custom, world.pool) == nodepool_api.DEFAULT_TARGET_NODES
