"""The cloud client introduces the operator in every request's User-Agent."""

from __future__ import annotations

from importlib import metadata

from aiohttp import web
from aiohttp.test_utils import TestServer

from nodepool_operator.cloud.simcloud import client


async def test_cloud_requests_carry_the_operator_user_agent() -> None:
    seen: list[str] = []

    async def list_vms(request: web.Request) -> web.Response:
        seen.append(request.headers.get("User-Agent", ""))
        return web.json_response({"items": []})

    app = web.Application()
    app.router.add_get("/v1/vms", list_vms)
    async with TestServer(app) as server, client.SimCloudClient(str(server.make_url(""))) as cloud:
        await cloud.list_vms(pool="pool-a")

    assert seen == [f"nodepool-operator/{metadata.version('nodepool-operator')}"]
