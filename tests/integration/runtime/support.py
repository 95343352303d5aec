"""What the runtime's integration tests share: the throwaway Gadget kind and small helpers.

The runtime knows nothing of NodePools, so it is proven on a kind of its own: a namespaced
``Gadget`` with the status subresource, a spec that bumps the generation, and schema limits
(``spec.size`` and ``status.count`` at least 0) that make a 422 easy to provoke.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import crds
from harness import wait_for
from nodepool_operator.runtime.client import Object, Resource
from nodepool_operator.runtime.controller import Controller
from nodepool_operator.runtime.informer import Informer

GROUP = "runtime.test.nodepool.dev"
GADGETS = Resource(GROUP, "v1", "gadgets", "Gadget", namespaced=True)
FIELD_MANAGER = "runtime-test"

GADGET_CRD = crds.crd_with_status(
    group=GROUP,
    plural=GADGETS.plural,
    kind="Gadget",
    scope="Namespaced",
    spec={"size": {"type": "integer", "minimum": 0}, "color": {"type": "string"}},
    status={
        "phase": {"type": "string"},
        "count": {"type": "integer", "minimum": 0},
        "observedGeneration": {"type": "integer"},
    },
)


def gadget(name: str, namespace: str, *, size: int = 0, **metadata: Any) -> Object:
    return {
        "apiVersion": GADGETS.api_version,
        "kind": GADGETS.kind,
        "metadata": {"name": name, "namespace": namespace, **metadata},
        "spec": {"size": size},
    }


@contextlib.asynccontextmanager
async def running(informer: Informer, *, within: float = 30.0) -> AsyncIterator[asyncio.Task[None]]:
    """Run the informer as a task until the block ends; the block starts once it has synced."""
    task = asyncio.create_task(informer.run(), name=f"test-informer-{informer.resource.plural}")
    try:
        async with asyncio.timeout(within):
            await informer.wait_for_sync()
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def eventually(
    check: Callable[[], bool], *, within: float = 30.0, every: float = 0.02
) -> None:
    """Wait until a synchronous check on in-process state holds (cache contents, counters)."""

    async def probe() -> bool:
        return check()

    await wait_for(probe, within=within, every=every)


def cached_version(informer: Informer, name: str, namespace: str) -> int:
    obj = informer.get(name, namespace)
    return int(obj["metadata"]["resourceVersion"]) if obj is not None else 0


@contextlib.asynccontextmanager
async def started(*controllers: Controller) -> AsyncIterator[None]:
    """Run the controllers' workers until the block ends, then drain them."""
    for controller in controllers:
        controller.start()
    try:
        yield
    finally:
        for controller in controllers:
            await controller.stop()
