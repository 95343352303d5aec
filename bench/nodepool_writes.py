"""API writes per scale-up of k nodes, counted by the API server (audit log).

Two variants of the same operator run against the same local control plane and simcloud:

* ``disciplined``: the operator as shipped (status compared before writing, generation
  predicate on NodePools);
* ``naive``: the baseline most hand-written controllers start from — the status is
  written on every reconcile whether or not it changed (no progress held back either),
  and every update of a NodePool (its own status writes included) triggers another
  reconcile.

For each k the pool goes 0 -> k; the operator user's writes are counted from the moment
the target changes until the pool has settled and 3 quiet seconds have passed.

Run:  .venv/bin/python bench/nodepool_writes.py [--sizes 1 5 10 20]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config

from nodepool_devtools.cluster import audit, controlplane, install
from nodepool_operator import operator
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud import credentials
from nodepool_operator.controllers.nodepool import report as pool_report
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.runtime import controller as runtime_controller
from nodepool_operator.runtime import status as runtime_status

POOLS = ("nodepool.dev", "v1alpha1", "nodepools")


@contextlib.contextmanager
def naive_writes() -> Iterator[None]:
    """Swap in the naive baseline: write status always, react to every update."""
    original_update = runtime_status.StatusWriter.update
    original_predicate = runtime_controller.GenerationChanged.update
    original_interval = pool_report.PROGRESS_INTERVAL

    async def always_write(
        self: runtime_status.StatusWriter, obj: dict[str, Any], status: Any
    ) -> dict[str, Any] | None:
        meta = obj["metadata"]
        self.writes += 1
        return await self.client.patch(
            self.resource, meta["name"], {"status": dict(status)}, subresource="status"
        )

    runtime_status.StatusWriter.update = always_write  # type: ignore[method-assign]
    runtime_controller.GenerationChanged.update = lambda self, old, new: True  # type: ignore[method-assign]
    pool_report.PROGRESS_INTERVAL = 0.0
    try:
        yield
    finally:
        pool_report.PROGRESS_INTERVAL = original_interval
        runtime_status.StatusWriter.update = original_update  # type: ignore[method-assign]
        runtime_controller.GenerationChanged.update = original_predicate  # type: ignore[method-assign]


async def wait_settled(custom: client.CustomObjectsApi, name: str, nodes: int) -> None:
    async with asyncio.timeout(120):
        while True:
            pool = await custom.get_cluster_custom_object(*POOLS, name)
            if nodepool_api.is_settled(pool, nodes):
                return
            await asyncio.sleep(0.2)


async def measure(
    *,
    plane: controlplane.ControlPlane,
    custom: client.CustomObjectsApi,
    endpoint: str,
    token_file: Path,
    variant: str,
    sizes: list[int],
) -> list[tuple[str, int, Counter[str], int]]:
    log = audit.AuditLog(plane.audit_log)
    options = operator.OperatorOptions(
        kubeconfig=plane.kubeconfig_for("operator"),
        cloud_endpoint=endpoint,
        cloud_token_file=token_file,
        metrics_port=None,
        health_port=None,
        nodepool=NodePoolConfig(poll_interval=0.5, simulated_nodes=True),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(operator.run_operator(options, stop=stop))
    rows = []
    try:
        for k in sizes:
            name = f"{variant}-{k}"
            await custom.create_cluster_custom_object(
                *POOLS,
                nodepool_api.manifest(
                    name, nodepool_api.NodePoolSpec(target_nodes=0, max_nodes=max(sizes))
                ),
            )
            await wait_settled(custom, name, 0)
            await asyncio.sleep(1)
            log.mark()
            await custom.patch_cluster_custom_object(
                *POOLS,
                name,
                {"spec": {"targetNodes": k}},
                _content_type="application/merge-patch+json",
            )
            await wait_settled(custom, name, k)
            await asyncio.sleep(3)
            mine = audit.writes(log.events_since_mark(), user=install.OPERATOR_USER)
            by_target = Counter(f"{e.verb} {e.target}" for e in mine)
            conflicts = sum(1 for e in mine if e.code == 409)
            rows.append((variant, k, by_target, conflicts))
            print(
                f"  {variant:<12} k={k:<3} writes={sum(by_target.values()):<4} 409s={conflicts}",
                file=sys.stderr,
                flush=True,
            )
    finally:
        for k in sizes:
            with contextlib.suppress(client.exceptions.ApiException):
                await custom.delete_cluster_custom_object(*POOLS, f"{variant}-{k}")
        await asyncio.sleep(5)  # let the finalizers delete VMs and Nodes
        stop.set()
        await task
    return rows


async def main(sizes: list[int]) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-writes-") as work:
        plane = controlplane.ControlPlane(Path(work) / "plane")
        plane.up()
        token_file = Path(work) / "simcloud.token"
        credentials.write_new_token(token_file)
        simcloud = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "nodepool_operator.cli",
            "simcloud",
            "--state",
            f"{work}/sim.sqlite3",
            "--port",
            "0",
            "--port-file",
            f"{work}/port",
            "--token-file",
            str(token_file),
            "--create-latency",
            "1",
            "--latency-jitter",
            "0.2",
            "--delete-latency",
            "0.2",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        port_file = Path(work) / "port"
        try:
            while not port_file.exists():  # noqa: ASYNC110 - waiting for a process
                await asyncio.sleep(0.05)
            endpoint = f"http://127.0.0.1:{port_file.read_text().strip()}"
            configuration = client.Configuration()
            await config.load_kube_config(
                config_file=str(plane.kubeconfig), client_configuration=configuration
            )
            async with client.ApiClient(configuration) as api:
                await install.install_crds(api)
                await install.grant_operator_rbac(api)
                custom = client.CustomObjectsApi(api)
                rows = await measure(
                    plane=plane,
                    custom=custom,
                    endpoint=endpoint,
                    token_file=token_file,
                    variant="disciplined",
                    sizes=sizes,
                )
                with naive_writes():
                    rows += await measure(
                        plane=plane,
                        custom=custom,
                        endpoint=endpoint,
                        token_file=token_file,
                        variant="naive",
                        sizes=sizes,
                    )
        finally:
            simcloud.terminate()
            await simcloud.wait()
            plane.down()
    print_table(rows, sizes)


def print_table(rows: list[tuple[str, int, Counter[str], int]], sizes: list[int]) -> None:
    totals = {(variant, k): sum(c.values()) for variant, k, c, _ in rows}
    print("| k | disciplined writes | naive writes | naive / disciplined | 409s (disc., naive) |")
    print("|---|---|---|---|---|")
    conflicts = {(variant, k): n for variant, k, _, n in rows}
    for k in sizes:
        ours, naive = totals[("disciplined", k)], totals[("naive", k)]
        print(
            f"| {k} | {ours} | {naive} | {naive / ours:.1f}x | "
            f"{conflicts[('disciplined', k)]}, {conflicts[('naive', k)]} |"
        )
    print()
    print("disciplined writes by verb and resource:")
    for variant, k, counted, _ in rows:
        if variant == "disciplined":
            detail = ", ".join(f"{what}={n}" for what, n in sorted(counted.items()))
            print(f"  k={k}: {detail}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 5, 10, 20])
    asyncio.run(main(parser.parse_args().sizes))
