"""`run`'s startup check of the cloud credential, against a real in-process simcloud that
requires a token: the refusal is logged once, as a 401, naming the flag that fixes it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nodepool_operator import operator
from nodepool_operator.cloud import credentials
from nodepool_operator.cloud.simcloud import client, server

TOKEN = "cli-check-token-93ab"


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[server.SimCloudServer]:
    token = tmp_path / "accepted-token"
    token.write_text(TOKEN)
    config = server.SimCloudConfig(
        state_path=str(tmp_path / "simcloud.sqlite3"), token_file=str(token), port=0
    )
    async with server.SimCloudServer(config) as running:
        yield running


def _lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


async def test_no_token_file_is_logged_once_as_401_naming_the_flag(
    sim: server.SimCloudServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="nodepool_operator")
    async with client.SimCloudClient(sim.endpoint) as cloud:
        answered = await operator.check_cloud_credential(cloud, name="simcloud", token=None)

    assert answered is False
    [line] = _lines(caplog, logging.ERROR)
    assert "event=cloud-unauthorized" in line
    assert "401 Unauthorized" in line
    assert "pass --cloud-token-file FILE" in line
    assert "CloudListFailed" in line  # what the pools will show meanwhile


async def test_a_wrong_token_names_its_file_and_never_the_token(
    sim: server.SimCloudServer, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-the-accepted-one")
    caplog.set_level(logging.INFO, logger="nodepool_operator")
    token = credentials.TokenFile(wrong)
    async with client.SimCloudClient(sim.endpoint, token=token) as cloud:
        answered = await operator.check_cloud_credential(cloud, name="simcloud", token=token)

    assert answered is False
    [line] = _lines(caplog, logging.ERROR)
    assert f"--cloud-token-file {wrong}" in line
    assert "not-the-accepted-one" not in caplog.text


async def test_the_accepted_token_passes_without_an_error_or_a_warning(
    sim: server.SimCloudServer, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    right = tmp_path / "right-token"
    right.write_text(TOKEN)
    caplog.set_level(logging.INFO, logger="nodepool_operator")
    token = credentials.TokenFile(right)
    async with client.SimCloudClient(sim.endpoint, token=token) as cloud:
        answered = await operator.check_cloud_credential(cloud, name="simcloud", token=token)

    assert answered is True
    assert _lines(caplog, logging.ERROR) == _lines(caplog, logging.WARNING) == []
    assert "event=cloud-check-passed cloud=simcloud" in caplog.text


async def test_an_unreachable_cloud_is_a_warning_not_a_credential_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="nodepool_operator")
    # Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
    async with client.SimCloudClient("http://127.0.0.1:9", timeout=5.0) as cloud:
        answered = await operator.check_cloud_credential(cloud, name="simcloud", token=None)

    assert answered is False
    assert _lines(caplog, logging.ERROR) == []
    [line] = _lines(caplog, logging.WARNING)
    assert "event=cloud-check-failed" in line
    assert "code=ConnectionError" in line
