"""simcloud as a process: ``serve`` publishes its port and stops on request, and ``run``
stops cleanly on SIGTERM after logging one key=value line per call."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import signal
import sys

import pytest
from typer.testing import CliRunner

from nodepool_devtools.cluster import children
from nodepool_operator import cli
from nodepool_operator.cloud import credentials, provider
from nodepool_operator.cloud.simcloud import client, server, store

CLI = children.CLI
SMALL = provider.MachineSpec(cpu="4", memory="16Gi", pods=110, zone="sim-1a")


async def test_serve_writes_the_bound_port_and_stops_when_asked(
    token: credentials.TokenFile,
    config: server.SimCloudConfig,
    tmp_path: pathlib.Path,
    clock: store.WallClock,
) -> None:
    port_file = tmp_path / "run" / "simcloud.port"
    ready, stop = asyncio.Event(), asyncio.Event()
    serving = asyncio.create_task(
        server.serve(
            dataclasses.replace(config, port_file=str(port_file)),
            ready=ready,
            stop=stop,
            clock=clock,
        )
    )
    await asyncio.wait_for(ready.wait(), timeout=10)
    port = int(port_file.read_text())

    async with client.SimCloudClient(f"http://127.0.0.1:{port}", token=token) as cloud:
        vms = await cloud.list_vms(pool="pool-a")
    stop.set()
    await asyncio.wait_for(serving, timeout=10)

    assert vms == []
    assert not port_file.exists()


async def test_run_logs_each_call_and_exits_cleanly_on_sigterm(
    token: credentials.TokenFile, config: server.SimCloudConfig, tmp_path: pathlib.Path
) -> None:
    port_file = tmp_path / "simcloud.port"
    script = (
        "import sys; from nodepool_operator.cloud.simcloud import server; "
        "server.run(server.SimCloudConfig(state_path=sys.argv[1], port=0, port_file=sys.argv[2],"
        " token_file=sys.argv[3]))"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        config.state_path,
        str(port_file),
        token.path,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        # Polling a real process is the one wait here that no fake clock can replace.
        for _ in range(200):
            if port_file.exists():
                break
            await asyncio.sleep(0.05)
        port = int(port_file.read_text())
        async with client.SimCloudClient(f"http://127.0.0.1:{port}", token=token) as cloud:
            await cloud.get_vm(provider.VmName("pool-a-0"))
        process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=20)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()

    log = stderr.decode()
    assert process.returncode == 0, log
    assert (
        "simcloud call method=GET route=/v1/vms/{name} name=pool-a-0 status=404 code=VmNotFound"
        in log
    )
    assert "simcloud stopped" in log
    assert "Traceback" not in log


async def test_the_simcloud_command_starts_with_the_faults_given_as_json(
    token: credentials.TokenFile, config: server.SimCloudConfig, tmp_path: pathlib.Path
) -> None:
    port_file = tmp_path / "simcloud.port"
    faults = '{"capacity": [{"zone": "sim-1a", "maxVms": 0}], "kubeletNeverJoins": [{}]}'
    process = await asyncio.create_subprocess_exec(
        *CLI,
        "simcloud",
        *("--state", config.state_path, "--port", "0", "--port-file", str(port_file)),
        *("--token-file", token.path, "--faults", faults),
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        for _ in range(400):
            if port_file.exists():
                break
            await asyncio.sleep(0.05)
        port = int(port_file.read_text())
        async with client.SimCloudClient(f"http://127.0.0.1:{port}", token=token) as cloud:
            with pytest.raises(provider.InsufficientCapacity):
                await cloud.create_vm(name=provider.VmName("a-0"), pool="a", spec=SMALL)
            vm = await cloud.create_vm(
                name=provider.VmName("a-1"), pool="a", spec=dataclasses.replace(SMALL, zone="b")
            )
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.communicate(), timeout=20)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()

    assert vm.kubelet_joins is False


def test_the_simcloud_command_refuses_bad_faults_json() -> None:
    result = CliRunner().invoke(
        cli.app, ["simcloud", "--insecure-no-auth", "--faults", '{"capacity": [{"zone": "x"}]}']
    )

    assert result.exit_code == 2
    assert "maxVms" in result.output
