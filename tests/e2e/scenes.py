"""Set-ups the NodePool e2e tests share, so that each test states only what is its own:
a simulated cloud whose VMs boot in a fixed time, an operator on it, and a pool of
4 CPU / 16Gi nodes grown to its first size (``settled_pool``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from kubernetes_asyncio import client

from harness import POOLS, Operator, SimCloud, pool_body, settled, wait_for

__all__ = ["Scene", "grown_pool", "settled_pool"]


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
    api_client: client.ApiClient,
    start_simcloud: Callable[..., Awaitable[SimCloud]],
    start_operator: Callable[..., Operator],
    name: str,
    *,
    target: int,
    create_latency: float = 0.5,
    **spec: Any,
) -> Scene:
    """A simulated cloud whose VMs boot in ``create_latency`` seconds every time, an
    operator on it, and the pool ``name`` grown to ``target`` (``grown_pool``)."""
    cloud = await start_simcloud("--create-latency", str(create_latency), "--latency-jitter", "0")
    operator = start_operator(cloud)
    custom = await grown_pool(api_client, name, target=target, **spec)
    return Scene(cloud, operator, custom)
