"""Latency from a pod being marked Unschedulable to the ScaleRequest created for it.

Everything is real except the VMs: the local control plane (kube-scheduler marks the pods
``PodScheduled=False/Unschedulable``), the simcloud and the operator as its own process
(``nodepool-operator run`` as the operator user, under the deployed RBAC).

Set-up that makes every pod's request observable: the pool's template holds one pod (1
cpu) and each pod asks for 1 cpu, so every pod needs a node of its own; VMs take an hour to
boot, so no node ever comes and no pod is ever scheduled. Pods are created at a steady
rate. Then the i-th pod marked Unschedulable is covered by the first ScaleRequest whose
``targetNodes >= i``, and its latency is the time from the bench seeing the pod marked to
the bench seeing that request created, both through watches on the same API server.

The Autoscaler reacts after its batch window (``spec.batchWindowSeconds``, 1 s by
default): the first event of a burst opens it, one decision covers every pod marked
within it. Each window given with ``--batch-windows`` is measured with a fresh namespace,
pool and Autoscaler against the same operator.

Run:  .venv/bin/python bench/autoscaler_latency.py [--pods 1000] [--rate 25]
          [--batch-windows 1.0 0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config

from nodepool_devtools.cluster import controlplane, install
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud import credentials
from nodepool_operator.controllers.resources import SCALEREQUESTS
from nodepool_operator.runtime import errors, kinds
from nodepool_operator.runtime.client import Client, Resource

POOLS = ("nodepool.dev", "v1alpha1", "nodepools")
AUTOSCALERS = ("nodepool.dev", "v1alpha1", "autoscalers")


@dataclass
class Seen:
    """When the bench saw each pod marked and each request created (monotonic seconds)."""

    marked: dict[str, float] = field(default_factory=dict)
    requests: dict[str, tuple[float, int]] = field(default_factory=dict)

    def asked(self) -> int:
        return max((target for _, target in self.requests.values()), default=0)

    def done(self, pods: int) -> bool:
        return len(self.marked) >= pods and self.asked() >= pods


def unschedulable(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


async def follow(
    api: Client,
    resource: Resource,
    *,
    on_event: Any,
    namespace: str | None = None,
    label_selector: str | None = None,
) -> None:
    """LIST, then WATCH for ever: resume after a closed watch, re-LIST after an error."""
    while True:
        page = await api.list_page(resource, namespace=namespace, label_selector=label_selector)
        for item in page["items"]:
            on_event("ADDED", item)  # the handlers keep the first time they saw a thing
        version = page["metadata"]["resourceVersion"]
        try:
            while True:
                with contextlib.suppress(errors.ConnectionFailed):
                    async for event in api.watch(
                        resource,
                        resource_version=version,
                        namespace=namespace,
                        label_selector=label_selector,
                    ):
                        version = event.object["metadata"].get("resourceVersion", version)
                        if event.type != "BOOKMARK":
                            on_event(event.type, event.object)
        except errors.ApiError as error:
            print(f"  watch of {resource.plural} failed ({error!r}): re-listing", file=sys.stderr)


def pod_body(name: str, pool: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {wellknown.POOL_LABEL: pool},
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "1", "memory": "64Mi"}},
                }
            ],
        },
    }


def latencies(seen: Seen) -> list[float]:
    """Per pod, in the order they were marked: first request covering it minus the mark."""
    requests = sorted(seen.requests.values())
    result = []
    for rank, marked_at in enumerate(sorted(seen.marked.values()), start=1):
        covering = next(t for t, target in requests if target >= rank)
        result.append(max(0.0, covering - marked_at))
    return result


async def run_one(
    api: client.ApiClient, raw: Client, *, window: float, pods: int, rate: float, run: int
) -> dict[str, Any]:
    name = f"bench-{run}"
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    await core.create_namespace({"metadata": {"name": name}})
    template = nodepool_api.NodeTemplate(cpu="1", memory="4Gi", pods=110)
    pool = nodepool_api.NodePoolSpec(target_nodes=0, min_nodes=0, max_nodes=pods, template=template)
    await custom.create_cluster_custom_object(*POOLS, nodepool_api.manifest(name, pool))
    spec = autoscaler_api.AutoscalerSpec(
        node_pool_name=name, namespaces=(name,), batch_window_seconds=window
    )
    await custom.create_cluster_custom_object(*AUTOSCALERS, autoscaler_api.manifest(name, spec))
    async with asyncio.timeout(60):
        while not (await custom.get_cluster_custom_object(*AUTOSCALERS, name)).get("status"):  # noqa: ASYNC110 - polling the API
            await asyncio.sleep(0.1)  # the operator has seen it

    seen = Seen()

    def on_pod(kind: str, pod: dict[str, Any]) -> None:
        if kind != "DELETED" and unschedulable(pod):
            seen.marked.setdefault(pod["metadata"]["name"], time.monotonic())

    def on_request(kind: str, request: dict[str, Any]) -> None:
        if kind == "ADDED":
            target = int(request["spec"]["targetNodes"])
            seen.requests.setdefault(request["metadata"]["name"], (time.monotonic(), target))

    watchers = [
        asyncio.create_task(follow(raw, kinds.PODS, on_event=on_pod, namespace=name)),
        asyncio.create_task(
            follow(
                raw,
                SCALEREQUESTS,
                on_event=on_request,
                label_selector=wellknown.pool_selector(name),
            )
        ),
    ]
    started = time.monotonic()
    try:
        for index in range(pods):
            await core.create_namespaced_pod(name, pod_body(f"p{index:04d}", name))
            await asyncio.sleep(max(0.0, started + (index + 1) / rate - time.monotonic()))
        try:
            async with asyncio.timeout(120):
                while not seen.done(pods):  # noqa: ASYNC110 - filled by the watch tasks
                    await asyncio.sleep(0.1)
        except TimeoutError:
            raise SystemExit(
                f"timed out: {len(seen.marked)}/{pods} pods marked, requests up to {seen.asked()}"
            ) from None
    finally:
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
    await custom.delete_cluster_custom_object(*AUTOSCALERS, name)
    await core.delete_namespace(name)
    values = sorted(latencies(seen))
    return {
        "window": window,
        "pods": len(values),
        "requests": len(seen.requests),
        "p50": statistics.quantiles(values, n=100)[49],
        "p99": statistics.quantiles(values, n=100)[98],
        "max": values[-1],
        "mean": statistics.fmean(values),
    }


async def main(*, pods: int, rate: float, windows: list[float]) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-autoscaler-") as work:
        plane = controlplane.ControlPlane(Path(work) / "plane")
        plane.up()
        port_file = Path(work) / "port"
        token_file = Path(work) / "simcloud.token"
        credentials.write_new_token(token_file)
        simcloud = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "nodepool_operator.cli", "simcloud"),
            *("--state", f"{work}/sim.sqlite3", "--port", "0", "--port-file", str(port_file)),
            *("--token-file", str(token_file)),
            *("--create-latency", "3600", "--latency-jitter", "0"),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        operator = None
        log_path = Path(work) / "operator.log"
        try:
            while not port_file.exists():  # noqa: ASYNC110 - waiting for a process
                await asyncio.sleep(0.05)
            configuration = client.Configuration()
            await config.load_kube_config(
                config_file=str(plane.kubeconfig), client_configuration=configuration
            )
            async with client.ApiClient(configuration) as api:
                await install.install_crds(api)
                await install.grant_operator_rbac(api)
                with log_path.open("wb") as log:
                    operator = await asyncio.create_subprocess_exec(
                        *(sys.executable, "-m", "nodepool_operator.cli", "run"),
                        *("--kubeconfig", str(plane.kubeconfig_for("operator"))),
                        *("--cloud-endpoint", f"http://127.0.0.1:{port_file.read_text().strip()}"),
                        *("--cloud-token-file", str(token_file)),
                        *(
                            "--metrics-port",
                            "0",
                            "--metrics-host",
                            "127.0.0.1",
                            "--health-port",
                            "0",
                        ),
                        *("--leader-election-namespace", "nodepool-system"),
                        stdout=log,
                        stderr=log,
                    )
                raw = Client(api, field_manager="bench")
                rows = []
                for run, window in enumerate(windows):
                    row = await run_one(api, raw, window=window, pods=pods, rate=rate, run=run)
                    print(f"  {row}", file=sys.stderr, flush=True)
                    rows.append(row)
        except BaseException:
            if log_path.exists():
                tail = log_path.read_text(errors="replace").splitlines()[-40:]
                print("operator log (last 40 lines):", *tail, sep="\n", file=sys.stderr)
            raise
        finally:
            if operator is not None:
                operator.terminate()
                await operator.wait()
            simcloud.terminate()
            await simcloud.wait()
            plane.down()
    print(f"pods created at {rate:g}/s; each needs a node of its own")
    print("| batch window | pending pods | ScaleRequests | p50 | p99 | max | mean |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['window']:g} s | {row['pods']} | {row['requests']} | {row['p50']:.3f} s "
            f"| {row['p99']:.3f} s | {row['max']:.3f} s | {row['mean']:.3f} s |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=25.0, help="pods created per second")
    parser.add_argument("--batch-windows", type=float, nargs="+", default=[1.0, 0.1])
    arguments = parser.parse_args()
    asyncio.run(main(pods=arguments.pods, rate=arguments.rate, windows=arguments.batch_windows))
