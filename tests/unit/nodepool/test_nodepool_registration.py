"""Registration on a fake API server: what a pass of Node creates answers when some fail."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.controllers.nodepool import registration
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.runtime import errors
from nodepool_operator.runtime.client import Object, Resource
from nodepool_operator.runtime.testing import FakeApiServer, FakeInformer, FakeWallClock
from unit.nodepool.test_nodepool_unregistered import CREATED, POOL, TEMPLATE, vm

SPEC = nodepool_api.NodePoolSpec(target_nodes=3, template=TEMPLATE)


class FailingCreates(FakeApiServer):
    """Refuses (422) the Node creates named in ``refused``; fails (500) those in ``failing``."""

    def __init__(
        self,
        *,
        refused: frozenset[str],
        failing: frozenset[str],
        broken: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(wall_clock=FakeWallClock(CREATED + 10))
        self.refused, self.failing, self.broken = refused, failing, broken

    async def create(self, resource: Resource, body: Object, **kw: Any) -> Object:
        name = body["metadata"]["name"]
        if name in self.refused:
            raise errors.Invalid(f'Node "{name}" is invalid: metadata.labels: Invalid value')
        if name in self.failing:
            raise errors.InternalError("etcd is away")
        if name in self.broken:
            raise TypeError("a fault of ours, not an answer of the API server")
        return await super().create(resource, body, **kw)


def _registrar(api: FakeApiServer) -> registration.Registrar:
    return registration.Registrar(
        client=api,  # type: ignore[arg-type]
        nodes=FakeInformer(server=api, plural="nodes"),  # type: ignore[arg-type]
        config=NodePoolConfig(create_parallelism=4),
        wall_clock=FakeWallClock(CREATED + 10),
    )


async def test_a_refusal_among_the_creates_is_returned_though_another_create_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = FailingCreates(refused=frozenset({"web-1"}), failing=frozenset({"web-2"}))
    with caplog.at_level(logging.WARNING, logger=registration.__name__):
        refused = await _registrar(api).register(POOL, SPEC, [vm(f"web-{i}") for i in range(4)])
    assert refused is not None
    reason, message = refused
    assert reason == registration.NODE_REFUSED
    assert "web-1" in message
    assert "etcd is away" in caplog.text  # the failure is not lost either: logged
    assert sorted(n["metadata"]["name"] for n in api.stored("nodes")) == ["web-0", "web-3"]


async def test_a_failed_create_without_a_refusal_fails_the_pass() -> None:
    api = FailingCreates(refused=frozenset(), failing=frozenset({"web-2"}))
    with pytest.raises(errors.InternalError):
        await _registrar(api).register(POOL, SPEC, [vm(f"web-{i}") for i in range(4)])
    assert sorted(n["metadata"]["name"] for n in api.stored("nodes")) == [
        "web-0",
        "web-1",
        "web-3",
    ]


async def test_a_fault_of_ours_is_raised_even_beside_a_refusal() -> None:
    api = FailingCreates(
        refused=frozenset({"web-1"}), failing=frozenset(), broken=frozenset({"web-2"})
    )
    with pytest.raises(TypeError):
        await _registrar(api).register(POOL, SPEC, [vm(f"web-{i}") for i in range(4)])
