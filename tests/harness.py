"""Helpers for tests that run real processes: polling, child processes, the simcloud."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from nodepool_devtools.cluster import children
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.cloud import credentials
from nodepool_operator.cloud.simcloud.client import SimCloudClient

CLI = children.CLI


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


Process = children.ChildProcess


class Sampler:
    """A loop (``_run``) that watches the cluster while a test acts: ``start`` it, and
    ``stop`` it (cancelled, and waited for) before reading what it saw."""

    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        raise NotImplementedError


class SimCloud:
    """A simcloud process; ``token_file`` is the token it requires (``--token-file``)."""

    def __init__(self, process: Process, port_file: Path, token_file: Path) -> None:
        self.process = process
        self.port_file = port_file
        self.token_file = token_file
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
        self.client = SimCloudClient(self.endpoint, token=credentials.TokenFile(self.token_file))


class Operator(Process):
    def errors_logged(self) -> list[str]:
        return [line for line in self.output().splitlines() if "level=ERROR" in line]

    async def served(self, what: str = "metrics") -> str:
        """The base URL (``https://127.0.0.1:PORT``) of its metrics or probes listener."""
        pattern = re.compile(rf"event=serving what={what} address=(\S+):(\d+) scheme=(https?)")

        async def logged() -> str | None:
            found = pattern.search(self.output())
            return f"{found.group(3)}://127.0.0.1:{found.group(2)}" if found else None

        url: str = await wait_for(logged, within=30)
        return url


def operator_args(kubeconfig: Path, *cloud: str, poll_interval: float = 0.5) -> list[str]:
    """``run`` with what every test's operator shares: its own user's kubeconfig, metrics
    and probes on free loopback ports, a quick poll; ``cloud`` says which cloud and how to
    reach it (``--cloud-endpoint URL --cloud-token-file PATH``, ``--cloud aws ...``)."""
    return [
        "run",
        "--kubeconfig",
        str(kubeconfig),
        *cloud,
        "--metrics-port",
        "0",
        "--metrics-host",
        "127.0.0.1",
        "--health-port",
        "0",
        "--poll-interval",
        str(poll_interval),
        "--leader-election-namespace",
        "nodepool-system",
    ]


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


#: The group, version and plural of each resource, as the custom-objects API takes them.
POOLS = (nodepool_api.GROUP, nodepool_api.VERSION, nodepool_api.PLURAL)
AUTOSCALERS = (autoscaler_api.GROUP, autoscaler_api.VERSION, autoscaler_api.PLURAL)
REQUESTS = (scalerequest_api.GROUP, scalerequest_api.VERSION, scalerequest_api.PLURAL)
MERGE = "application/merge-patch+json"


def pool_body(name: str, *, target: int = 0, max_nodes: int = 10) -> dict[str, Any]:
    """A NodePool of 4 CPU / 16Gi nodes."""
    spec = nodepool_api.NodePoolSpec(
        target_nodes=target,
        max_nodes=max_nodes,
        template=nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=110),
    )
    return nodepool_api.manifest(name, spec)


async def settled(custom: Any, name: str, nodes: int) -> dict[str, Any] | None:
    """The pool, once it has settled on ``nodes`` nodes (see ``nodepool.is_settled``)."""
    pool: dict[str, Any] = await custom.get_cluster_custom_object(*POOLS, name)
    return pool if nodepool_api.is_settled(pool, nodes) else None


async def lift_taint(core: client.CoreV1Api, node: Any, key: str) -> None:
    """Take taint ``key`` off ``node`` (a Node as the client read it) as an agent on the node
    does once it is ready: one merge patch on the resourceVersion read, so a Node changed
    since is left to the agent's next look."""
    kept = [
        {"key": t.key, "value": t.value, "effect": t.effect}
        for t in node.spec.taints or []
        if t.key != key
    ]
    body = {
        "metadata": {"resourceVersion": node.metadata.resource_version},
        "spec": {"taints": kept or None},
    }
    with contextlib.suppress(client.exceptions.ApiException):
        await core.patch_node(
            node.metadata.name, body, _content_type="application/merge-patch+json"
        )


async def remove_pool(custom: Any, name: str, *, within: float = 30) -> None:
    """Delete a NodePool and wait until it is gone, while its operator still runs.

    A pool left deleting outlives the operator that owned it; the next test's operator,
    with another cloud, would find its Nodes without VMs and (rightly) refuse to delete
    them on a guess, polling its own cloud meanwhile. So a test takes its pools with it,
    and when its operator cannot finish in time, lifts the finalizer itself.
    """
    with contextlib.suppress(client.exceptions.ApiException):
        await custom.delete_cluster_custom_object(*POOLS, name)

    async def gone() -> bool:
        try:
            await custom.get_cluster_custom_object(*POOLS, name)
        except client.exceptions.ApiException as error:
            return error.status == 404
        return False

    try:
        await wait_for(gone, within=within)
    except AssertionError:
        with contextlib.suppress(client.exceptions.ApiException):
            await custom.patch_cluster_custom_object(
                *POOLS, name, {"metadata": {"finalizers": None}}, _content_type=MERGE
            )
