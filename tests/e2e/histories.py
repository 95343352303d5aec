"""Watches of a pool's Nodes and a namespace's Pods, every version kept: what the e2e tests
of the unregistered taint and of nominations read the order of events from."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio import client, watch

from nodepool_operator.api import wellknown

TAINT = wellknown.UNREGISTERED_TAINT_KEY


def tainted(node: dict[str, Any]) -> bool:
    return any(t.get("key") == TAINT for t in (node.get("spec") or {}).get("taints") or ())


def ready(node: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" and c.get("lastHeartbeatTime")
        for c in (node.get("status") or {}).get("conditions") or ()
    )


class History:
    """Every version of the pool's Nodes and of the namespace's Pods, as watches saw them."""

    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []
        self.pods: list[dict[str, Any]] = []

    async def follow(self, lister: Any, into: list[dict[str, Any]], **kwargs: Any) -> None:
        stream = watch.Watch()
        async with stream:
            async for event in stream.stream(lister, timeout_seconds=120, **kwargs):
                into.append(event["raw_object"])

    def untainted_at(self, node: str) -> dict[str, Any] | None:
        """The first version of ``node`` without the taint."""
        versions = [n for n in self.nodes if n["metadata"]["name"] == node]
        return next((n for n in versions if not tainted(n)), None)

    def bound_at(self, pod: str) -> dict[str, Any] | None:
        """The first version of ``pod`` bound to a node."""
        versions = [p for p in self.pods if p["metadata"]["name"] == pod]
        return next((p for p in versions if (p.get("spec") or {}).get("nodeName")), None)


@contextlib.asynccontextmanager
async def watching(core: client.CoreV1Api, pool: str, namespace: str) -> AsyncIterator[History]:
    """Watches from the versions a list returns now: nothing written after is missed."""
    history = History()
    selector = wellknown.pool_selector(pool)
    nodes_from = (await core.list_node(label_selector=selector)).metadata.resource_version
    pods_from = (await core.list_namespaced_pod(namespace)).metadata.resource_version
    nodes = history.follow(
        core.list_node, history.nodes, label_selector=selector, resource_version=nodes_from
    )
    pods = history.follow(
        core.list_namespaced_pod, history.pods, namespace=namespace, resource_version=pods_from
    )
    tasks = [asyncio.create_task(nodes), asyncio.create_task(pods)]
    try:
        yield history
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
