"""Fixtures for the cloud tests: an in-process simcloud on a free port, a temp SQLite file
and a hand-driven wall clock, so VM lifecycles are tested without sleeping; and a moto EC2
server for the aws provider's tests.

Tests read the clock through ``clock`` and move it through ``advance`` (plain callables,
since test modules cannot import from a conftest under ``--import-mode=importlib``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

import ec2_server
from nodepool_operator.cloud import credentials
from nodepool_operator.cloud.simcloud import client, server, store
from nodepool_operator.runtime.testing import FakeWallClock
from unit.cloud import simcloud_calls

TOKEN = "unit-test-token-4f1c9a"


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ec2_server.MotoEc2]:
    """moto's EC2 server, one per test module (the aws provider's tests)."""
    with ec2_server.running(tmp_path_factory.mktemp("moto") / "moto.log") as server:
        yield server


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ec2_server.ENV`` set, where the SDK's chain looks for credentials and a region."""
    for key, value in ec2_server.ENV.items():
        monkeypatch.setenv(key, value)


@pytest.fixture
def _fake_clock() -> FakeWallClock:
    return FakeWallClock(1_750_000_000.0)


@pytest.fixture
def clock(_fake_clock: FakeWallClock) -> store.WallClock:
    return _fake_clock.time


@pytest.fixture
def advance(_fake_clock: FakeWallClock) -> Callable[[float], None]:
    return _fake_clock.advance


@pytest.fixture
def state_path(tmp_path: pathlib.Path) -> str:
    return str(tmp_path / "simcloud.sqlite3")


@pytest.fixture
def token_path(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "token"
    path.write_text(f"{TOKEN}\n")
    return path


@pytest.fixture
def token(token_path: pathlib.Path) -> credentials.TokenFile:
    """The token the server requires, as a client reads it."""
    return credentials.TokenFile(token_path)


@pytest.fixture
def config(state_path: str, token_path: pathlib.Path) -> server.SimCloudConfig:
    """Whole-second latencies without jitter, so a test can step exactly past them."""
    return server.SimCloudConfig(
        state_path=state_path,
        token_file=str(token_path),
        port=0,
        create_latency_seconds=10.0,
        latency_jitter_seconds=0.0,
        delete_latency_seconds=5.0,
        seed=7,
    )


@pytest.fixture
async def sim(
    config: server.SimCloudConfig, clock: store.WallClock
) -> AsyncIterator[server.SimCloudServer]:
    async with server.SimCloudServer(config, clock=clock) as running:
        yield running


@pytest.fixture
async def cloud(
    sim: server.SimCloudServer, token: credentials.TokenFile
) -> AsyncIterator[client.SimCloudClient]:
    async with client.SimCloudClient(sim.endpoint, token=token, timeout=5.0) as c:
        yield c


@pytest.fixture
def serving(config: server.SimCloudConfig, token: credentials.TokenFile) -> simcloud_calls.Serving:
    """Starts a simcloud of ``config`` with ``changes`` (on ``clock``, real time unless
    given) for the length of an ``async with``, and gives a client of it."""

    @contextlib.asynccontextmanager
    async def serve(
        *, clock: store.WallClock = time.time, **changes: Any
    ) -> AsyncIterator[client.SimCloudClient]:
        changed = dataclasses.replace(config, **changes)
        async with (
            server.SimCloudServer(changed, clock=clock) as sim,
            client.SimCloudClient(sim.endpoint, token=token) as cloud,
        ):
            yield cloud

    return serve
