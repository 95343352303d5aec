"""Set-ups the e2e tests share, so that each test states only what is its own.

``World`` (the ``world`` fixture) is what every e2e test works in: the API clients, the
names of its own pool, Autoscaler and namespace (each removed afterwards), and starters for
a simulated cloud and an operator on it. ``settled_pool`` is a simulated cloud whose VMs
boot in a fixed time, an operator on it, and a pool of 4 CPU / 16Gi nodes grown to its
first size."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from kubernetes_asyncio import client

from e2e import autoscaling
from harness import POOLS, Operator, SimCloud, pool_body, settled, wait_for
from nodepool_devtools.cluster.pytest_plugin import Cluster
from nodepool_operator.api import wellknown

__all__ = ["Operators", "Scene", "World", "grown_pool", "settled_pool"]


class Operators:
    """The operator processes one test starts, each logging to a file of its own in
    ``logs``; ``stop_all`` after the test."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[Operator] = []

    def start(self, args: list[str]) -> Operator:
        operator = Operator("operator", args, self.logs / f"operator-{len(self.started)}.log")
        operator.start()
        self.started.append(operator)
        return operator

    def stop_all(self) -> None:
        for operator in self.started:
            operator.stop()


@dataclass
class World:
    """One e2e test's world: the cluster and its API, the test's own pool, Autoscaler and
    namespace names (the ``pool_name``, ``autoscaler_name`` and ``namespace`` fixtures: the
    pool is removed while the operator still runs), and the simcloud and operator starters
    (stopped after the test)."""

    api_client: client.ApiClient
    cluster: Cluster
    pool: str
    autoscaler: str
    namespace: str
    start_simcloud: Callable[..., Awaitable[SimCloud]]
    start_hollow_simcloud: Callable[..., Awaitable[SimCloud]]
    start_operator: Callable[..., Operator]
    custom: client.CustomObjectsApi = field(init=False)
    core: client.CoreV1Api = field(init=False)
    apps: client.AppsV1Api = field(init=False)

    @property
    def on_pool(self) -> dict[str, str]:
        """The label of this test's pool's Nodes, as a node selector."""
        return {wellknown.POOL_LABEL: self.pool}

    @property
    def tier(self) -> dict[str, str]:
        """A label for the Nodes of all the pools one test makes, as a node selector."""
        return {"example.com/tier": self.pool}

    def __post_init__(self) -> None:
        self.custom = client.CustomObjectsApi(self.api_client)
        self.core = client.CoreV1Api(self.api_client)
        self.apps = client.AppsV1Api(self.api_client)

    async def cloud(self, *extra: str, latency: float, jitter: float = 0) -> SimCloud:
        """A simcloud whose VMs boot in ``latency`` seconds, give or take ``jitter``."""
        timing = ("--create-latency", str(latency), "--latency-jitter", str(jitter))
        return await self.start_simcloud(*timing, *extra)

    async def operated(
        self, *operator_args: str, latency: float, jitter: float = 0
    ) -> tuple[SimCloud, Operator]:
        """A simcloud (``cloud``) and an operator on it, started with ``operator_args``."""
        cloud = await self.cloud(latency=latency, jitter=jitter)
        return cloud, self.start_operator(cloud, *operator_args)

    async def autoscaled(
        self,
        *,
        latency: float,
        min_nodes: int = 0,
        max_nodes: int = 10,
        unneeded_seconds: int = 600,
    ) -> tuple[SimCloud, Operator]:
        """``operated``, then this test's pool (``create_pool``) and its Autoscaler
        (``create_autoscaler``)."""
        cloud, operator = await self.operated(latency=latency)
        await self.create_pool(min_nodes=min_nodes, max_nodes=max_nodes)
        await self.create_autoscaler(unneeded_seconds=unneeded_seconds)
        return cloud, operator

    async def create_pool(self, *, min_nodes: int = 0, max_nodes: int = 10) -> None:
        """This test's pool of 4 CPU / 16Gi nodes, for an Autoscaler (``create_pool``)."""
        await autoscaling.create_pool(
            self.custom, self.pool, min_nodes=min_nodes, max_nodes=max_nodes
        )

    async def create_autoscaler(
        self, *, unneeded_seconds: int = 600, scale_down: bool = True
    ) -> None:
        """This test's Autoscaler of this test's pool, for the pods of its namespace."""
        await autoscaling.create_autoscaler(
            self.custom,
            self.autoscaler,
            pool=self.pool,
            namespace=self.namespace,
            unneeded_seconds=unneeded_seconds,
            scale_down=scale_down,
        )

    async def scale_up(self, **options: Any) -> autoscaling.History:
        """``scale_up`` (``options``: its keyword arguments) in this test's namespace,
        watching this test's pool."""
        return await autoscaling.scale_up(
            self.api_client, pool=self.pool, namespace=self.namespace, **options
        )


class Scene(NamedTuple):
    cloud: SimCloud
    operator: Operator
    custom: client.CustomObjectsApi


async def grown_pool(
    api_client: client.ApiClient, name: str, *, target: int, **spec: Any
) -> client.CustomObjectsApi:
    """A pool of 4 CPU / 16Gi nodes (``spec`` sets other fields of its spec), once it has
    ``target`` Ready nodes and nothing under way."""
    custom = client.CustomObjectsApi(api_client)
    body = pool_body(name, target=target)
    body["spec"].update(spec)
    await custom.create_cluster_custom_object(*POOLS, body)
    await wait_for(lambda: settled(custom, name, target), within=60)
    return custom


async def settled_pool(
    world: World, *, target: int, create_latency: float = 0.5, **spec: Any
) -> Scene:
    """A simulated cloud whose VMs boot in ``create_latency`` seconds every time, an
    operator on it, and the world's pool grown to ``target`` (``grown_pool``)."""
    cloud, operator = await world.operated(latency=create_latency)
    custom = await grown_pool(world.api_client, world.pool, target=target, **spec)
    return Scene(cloud, operator, custom)
