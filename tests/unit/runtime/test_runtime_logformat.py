"""Log lines: the reconcile's controller, key and id are bound once per reconcile and land
on every line written during it, as key=value text or as JSON fields."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from nodepool_operator.runtime import errors, logformat
from nodepool_operator.runtime.controller import (
    Controller,
    ReconcileLogContext,
    Request,
    Result,
)

log = logging.getLogger("nodepool_operator.test_logformat")


class Logging:
    """What the operator's handler would print, with the given format."""

    def __init__(self, kind: logformat.LogFormat) -> None:
        self.stream = io.StringIO()
        self.handler = logging.StreamHandler(self.stream)
        self.handler.addFilter(ReconcileLogContext())
        self.handler.setFormatter(logformat.formatter(kind))

    def lines(self) -> list[str]:
        return self.stream.getvalue().splitlines()


@pytest.fixture(params=list(logformat.LogFormat))
def captured(request: pytest.FixtureRequest) -> Iterator[Logging]:
    capture = Logging(request.param)
    root = logging.getLogger("nodepool_operator")
    level = root.level
    root.addHandler(capture.handler)
    root.setLevel(logging.DEBUG)
    yield capture
    root.removeHandler(capture.handler)
    root.setLevel(level)


class Talkative:
    async def reconcile(self, request: Request) -> Result:
        log.info("event=decided target=%d reason=%r", 3, "two pods wait")
        raise errors.Conflict("the object has been modified")


async def test_every_line_of_a_reconcile_carries_its_controller_key_and_id(
    captured: Logging,
) -> None:
    controller = Controller(name="nodepool", reconciler=Talkative())
    await controller.reconcile_once(Request("pool-a"))
    log.info("event=outside")
    mine = [line for line in captured.lines() if "decided" in line or "conflict" in line]
    outside = next(line for line in captured.lines() if "outside" in line)
    assert len(mine) == 2  # the reconciler's line and the controller's conflict line
    if captured.handler.formatter.__class__ is logformat.JsonFormatter:
        decided, conflict = (json.loads(line) for line in mine)
        assert decided["controller"] == "nodepool"
        assert decided["key"] == "pool-a"
        assert decided["reconcile_id"] == conflict["reconcile_id"]
        assert (decided["event"], decided["target"], decided["reason"]) == (
            "decided",
            "3",
            "two pods wait",
        )
        assert decided["msg"] == "event=decided target=3 reason='two pods wait'"
        assert conflict["level"] == "DEBUG"
        assert "controller" not in json.loads(outside)
    else:
        for line in mine:
            assert " controller=nodepool key=pool-a reconcile_id=nodepool-" in line
        assert line.count("controller=") == 1  # not formatted a second time by the caller
        assert "controller=" not in outside
        assert outside.endswith("logger=nodepool_operator.test_logformat event=outside")
