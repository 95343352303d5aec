"""The cloud pause as the Autoscaler reads it: from the pool's status alone."""

from __future__ import annotations

from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.controllers import capacity
from nodepool_operator.runtime import conditions

NOW = 1_800_000_000.0


def pool(*, generation: int, pause: nodepool_api.CloudPause | None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if pause is not None:
        status["cloudPause"] = pause.to_dict()
    return {"metadata": {"name": "web", "generation": generation}, "status": status}


def pause(*, until: float, generation: int = 3) -> nodepool_api.CloudPause:
    return nodepool_api.CloudPause(
        reason="QuotaExceeded",
        message="vCPU limit",
        failures=2,
        until=conditions.rfc3339(until),
        generation=generation,
    )


def test_a_pause_in_force_says_why_and_until_when() -> None:
    why = capacity.paused(pool(generation=3, pause=pause(until=NOW + 20)), now=NOW)
    assert why is not None
    assert "QuotaExceeded" in why
    assert conditions.rfc3339(NOW + 20) in why


def test_a_pause_past_its_end_or_of_an_older_generation_holds_nothing() -> None:
    assert capacity.paused(pool(generation=3, pause=pause(until=NOW - 1)), now=NOW) is None
    assert capacity.paused(pool(generation=4, pause=pause(until=NOW + 20)), now=NOW) is None
    assert capacity.paused(pool(generation=3, pause=None), now=NOW) is None
