"""A ScaleRequest the API server refuses for good is not sent again, unchanged, for a while."""

from __future__ import annotations

from typing import Any

import pytest

from nodepool_operator.controllers.autoscaler.act.handoff import (
    REFUSAL_RECHECK_SECONDS,
    RequestRefused,
    ScaleRequester,
)
from nodepool_operator.controllers.autoscaler.snapshot.scale_requests import RequestLedger
from nodepool_operator.runtime import errors
from nodepool_operator.runtime.client import Object, Resource
from nodepool_operator.runtime.testing import FakeWallClock


class RefusingApi:
    """Refuses every ScaleRequest create as the API server does a CRD's 422."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.refusing = True

    async def create(self, resource: Resource, body: dict[str, Any], **_: Any) -> Object:
        name = body["metadata"]["name"]
        self.sent.append(name)
        if self.refusing:
            raise errors.Invalid(f'ScaleRequest.nodepool.dev "{name}" is invalid: bad zones')
        return {**body, "metadata": {**body["metadata"], "resourceVersion": "7"}}


async def ask(requester: ScaleRequester, *, target: int = 3) -> Any:
    return await requester.request(
        "nas",
        pool="web",
        pool_uid="uid-web",
        target=target,
        basis=1,
        direction="up",
        reason=f"{target} pods wait",
    )


async def test_the_same_request_is_sent_again_only_after_the_recheck_or_when_it_changes() -> None:
    api, clock = RefusingApi(), FakeWallClock()
    requester = ScaleRequester(client=api, ledger=RequestLedger(), wall_clock=clock)  # type: ignore[arg-type]
    with pytest.raises(RequestRefused) as first:
        await ask(requester)
    assert first.value.sent
    assert first.value.said == "HTTP 422 Invalid: ScaleRequest.nodepool.dev is invalid: bad zones"
    clock.now += 1
    with pytest.raises(RequestRefused) as again:
        await ask(requester)
    assert not again.value.sent  # held: nothing sent
    assert again.value.said == first.value.said  # the name changed, the refusal did not
    assert len(api.sent) == 1
    with pytest.raises(RequestRefused):
        await ask(requester, target=4)  # a different request is sent
    assert len(api.sent) == 2
    api.refusing = False
    clock.now += REFUSAL_RECHECK_SECONDS
    made = await ask(requester, target=4)  # the recheck: sent, and taken this time
    assert made.target_nodes == 4
    assert len(api.sent) == 3
