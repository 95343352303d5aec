"""Helpers for tests that run real processes: polling, child processes, the simcloud."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodepool_operator.cloud.simcloud.client import SimCloudClient

CLI = [sys.executable, "-m", "nodepool_operator.cli"]


async def wait_for(
    predicate: Callable[[], Any], *, within: float = 60.0, every: float = 0.2
) -> Any:
    """Poll an async predicate until it returns something truthy; fail after ``within`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    last: Any = None
    while True:
        last = await predicate()
        if last:
            return last
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {within}s (last value: {last!r})")
        await asyncio.sleep(every)


class Process:
    """A child process started from the command line, with its log in a file."""

    def __init__(self, name: str, args: list[str], log: Path) -> None:
        self.name = name
        self.args = args
        self.log = log
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        handle = self.log.open("ab")
        self.popen = subprocess.Popen(
            self.args,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        handle.close()

    def kill(self) -> None:
        """SIGKILL: no cleanup, no lease release; what a crash or an OOM kill looks like."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait()

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class SimCloud:
    def __init__(self, process: Process, port_file: Path) -> None:
        self.process = process
        self.port_file = port_file
        self.endpoint = ""
        self.client: SimCloudClient | None = None

    async def start(self) -> None:
        self.port_file.unlink(missing_ok=True)
        self.process.start()
        deadline = time.monotonic() + 30
        while not self.port_file.exists():
            if self.process.popen is not None and self.process.popen.poll() is not None:
                raise AssertionError(f"simcloud exited:\n{self.process.output()}")
            if time.monotonic() > deadline:
                raise AssertionError("simcloud did not start")
            await asyncio.sleep(0.05)
        self.endpoint = f"http://127.0.0.1:{self.port_file.read_text().strip()}"
        self.client = SimCloudClient(self.endpoint)


class Operator(Process):
    def errors_logged(self) -> list[str]:
        return [line for line in self.output().splitlines() if "level=ERROR" in line]


async def kubectl(kubectl_path: Path, kubeconfig: Path, *args: str) -> str:
    """Run kubectl as a user would; fail the test with its stderr if it fails."""
    process = await asyncio.create_subprocess_exec(
        str(kubectl_path),
        "--kubeconfig",
        str(kubeconfig),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode()
