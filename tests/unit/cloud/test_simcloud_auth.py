"""simcloud's bearer token: every call but the probe needs it, a rotated file takes effect
on both sides without a restart, and neither errors nor logs ever carry it."""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib

import aiohttp
import pytest
from aiohttp import web

from nodepool_operator.cloud import credentials, provider
from nodepool_operator.cloud.simcloud import client, server
from unit.cloud import simcloud_calls

SPEC = provider.MachineSpec(cpu="4", memory="16Gi", pods=110)
NAME = provider.VmName("pool-a-0")


async def test_a_call_without_a_token_is_refused_with_401_and_has_no_effect(
    sim: server.SimCloudServer, cloud: client.SimCloudClient
) -> None:
    async with client.SimCloudClient(sim.endpoint) as anonymous:
        with pytest.raises(provider.PermanentCloudError) as raised:
            await anonymous.create_vm(name=NAME, pool="pool-a", spec=SPEC)

    assert raised.value.code == "Unauthorized"
    assert await cloud.get_vm(NAME) is None
    assert (await cloud.stats()).responses_by_call["PUT /v1/vms/{name}"] == {401: 1}


async def test_a_wrong_token_is_refused_on_the_api_and_the_admin_routes(
    sim: server.SimCloudServer,
) -> None:
    wrong = credentials.StaticToken("not-the-token")
    async with client.SimCloudClient(sim.endpoint, token=wrong) as intruder:
        with pytest.raises(provider.PermanentCloudError) as listing:
            await intruder.list_vms(pool="pool-a")
        with pytest.raises(provider.PermanentCloudError) as faults:
            await intruder.faults()

    assert (listing.value.code, faults.value.code) == ("Unauthorized", "Unauthorized")


async def test_the_401_names_the_scheme_and_the_probe_needs_no_token(
    sim: server.SimCloudServer,
) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{sim.endpoint}/v1/vms") as refused:
            challenge = refused.headers.get("WWW-Authenticate")
        async with session.get(f"{sim.endpoint}/healthz") as probe:
            probed = probe.status

    assert refused.status == 401
    assert challenge == 'Bearer realm="simcloud"'
    assert probed == 200


async def test_a_rotated_token_file_takes_effect_on_server_and_client_without_restart(
    sim: server.SimCloudServer,
    cloud: client.SimCloudClient,
    token: credentials.TokenFile,
    token_path: pathlib.Path,
) -> None:
    old = credentials.StaticToken(token.read())
    await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)

    _rotate(token_path, "rotated-token-7d2e")

    # `cloud` reads the same file: its next call carries the new token.
    assert (await cloud.get_vm(NAME)) is not None
    stale = await simcloud_calls.get_vm_error(sim.endpoint, old, NAME, provider.PermanentCloudError)
    assert stale.code == "Unauthorized"


async def test_the_token_never_reaches_the_server_log(
    sim: server.SimCloudServer,
    cloud: client.SimCloudClient,
    token: credentials.TokenFile,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)
    async with client.SimCloudClient(sim.endpoint, token=credentials.StaticToken("guess")) as bad:
        with pytest.raises(provider.PermanentCloudError):
            await bad.list_vms(pool="pool-a")

    assert "status=401 code=Unauthorized" in caplog.text
    assert token.read() not in caplog.text
    assert "guess" not in caplog.text


async def test_an_error_message_never_echoes_the_token_even_if_the_server_does() -> None:
    secret = "s3cret-token-echoed"

    async def echo(request: web.Request) -> web.Response:
        header = request.headers.get("Authorization", "")
        return web.json_response({"code": "Denied", "message": f"you sent {header}"}, status=403)

    app = web.Application()
    app.router.add_get("/v1/vms", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        token = credentials.StaticToken(secret)
        async with client.SimCloudClient(f"http://127.0.0.1:{port}", token=token) as cloud:
            with pytest.raises(provider.PermanentCloudError) as raised:
                await cloud.list_vms(pool="pool-a")
    finally:
        await runner.cleanup()

    assert secret not in str(raised.value)
    assert "<redacted>" in str(raised.value)


def test_a_token_inside_a_word_of_the_answer_leaves_the_word_alone() -> None:
    # A token that is part of a word is not where a server echoed it: taking it out
    # garbled the answer ("<redacted>ing the pool's VMs failed").
    answer = "listing the pool's VMs failed: you sent Bearer list"
    assert (
        credentials.redacted(answer, "list")
        == "listing the pool's VMs failed: you sent Bearer <redacted>"
    )
    assert credentials.redacted("Bearer s3cret.tok/en=", "s3cret.tok/en=") == "Bearer <redacted>"
    assert credentials.redacted("token=abc,next", "abc") == "token=abc,next".replace(
        "abc", "<redacted>"
    )
    assert credentials.redacted("nothing here", None) == "nothing here"


async def test_an_unreadable_token_file_is_a_transient_error_naming_the_file(
    sim: server.SimCloudServer, tmp_path: pathlib.Path
) -> None:
    missing = credentials.TokenFile(tmp_path / "absent")
    async with client.SimCloudClient(sim.endpoint, token=missing) as cloud:
        with pytest.raises(provider.TransientCloudError) as raised:
            await cloud.list_vms(pool="pool-a")

    assert raised.value.code == "CredentialUnavailable"
    assert str(tmp_path / "absent") in str(raised.value)


def test_a_config_needs_a_token_file_or_an_explicit_insecure_no_auth(
    config: server.SimCloudConfig,
) -> None:
    with pytest.raises(ValueError, match="--insecure-no-auth"):
        dataclasses.replace(config, token_file=None)
    with pytest.raises(ValueError, match="exactly one"):
        dataclasses.replace(config, insecure_no_auth=True)


async def test_a_server_whose_token_file_is_missing_does_not_start(
    config: server.SimCloudConfig, tmp_path: pathlib.Path
) -> None:
    broken = dataclasses.replace(config, token_file=str(tmp_path / "absent"))

    with pytest.raises(credentials.CredentialError, match="absent"):
        await server.SimCloudServer(broken).start()


async def test_with_insecure_no_auth_anyone_is_served(config: server.SimCloudConfig) -> None:
    open_cloud = dataclasses.replace(config, token_file=None, insecure_no_auth=True)
    async with (
        server.SimCloudServer(open_cloud) as sim,
        client.SimCloudClient(sim.endpoint) as anonymous,
    ):
        assert await anonymous.list_vms(pool="pool-a") == []


def _rotate(path: pathlib.Path, token: str) -> None:
    # As the kubelet updates a Secret volume: a new file renamed over the old one.
    partial = path.with_name(f".{path.name}.new")
    partial.write_text(token)
    os.replace(partial, path)
