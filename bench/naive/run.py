"""The naive operator: the same NodePool and Autoscaler job, written as the article warns.

It does what ``nodepool-operator run`` does when nothing races (VMs in the same simcloud,
named by ``nodepool_api.vm_names``; Nodes from the same ``node_manifest``; the same runtime client
and informers), and drops the five practices:

* no status subresource: the NodePool controller reads the pool, does the slow VM step,
  then PUTs the whole object (spec and status) from the copy it read before that step;
* a 409 is "fixed" the way its message invites a hurried reader to: take the latest
  ``resourceVersion`` and send the same object again, at once, so whatever changed
  meanwhile (a user's ``targetNodes``, the Autoscaler's raise) is overwritten; any other
  error puts the key straight back in the queue, without backoff;
* status carries ``lastUpdated`` (a Kubernetes timestamp, second resolution) and is
  written on every pass, and every change of a NodePool (its own writes, a label) starts
  a pass;
* the Autoscaler raises ``NodePool.spec.targetNodes`` itself, from its cached copy;
* no ``observedGeneration``: nothing tells a new desire from an echo.

Every pass logs ``pass <controller> <name>`` so the bench can count them.

Run:  python bench/naive/run.py --kubeconfig K --cloud-endpoint URL --cloud-token-file F
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import datetime
import logging
import sys
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from naive import sizing
from naive import vms as vms_step
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud import credentials, provider
from nodepool_operator.cloud.simcloud.client import SimCloudClient
from nodepool_operator.controllers.nodepool.nodes import node_manifest
from nodepool_operator.controllers.resources import AUTOSCALERS, NODEPOOLS
from nodepool_operator.runtime import errors, informer, kinds, nodes, workqueue
from nodepool_operator.runtime.client import Client, Object, Resource

log = logging.getLogger("naive")
WORKERS = 4


def now() -> str:
    """What ``metav1.Now()`` serializes to: RFC 3339, whole seconds."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EveryChange:
    """Queue the pool an object belongs to on every add, update and delete."""

    def __init__(self, queue: workqueue.WorkQueue[str], pool_of: Any) -> None:
        self.queue, self.pool_of = queue, pool_of

    def _add(self, obj: Object) -> None:
        if name := self.pool_of(obj):
            self.queue.add(name)

    def on_add(self, obj: Object) -> None:
        self._add(obj)

    def on_update(self, old: Object, new: Object) -> None:
        self._add(new)

    def on_delete(self, obj: Object) -> None:
        self._add(obj)


async def write_back(api: Client, resource: Resource, obj: Object) -> Object:
    """PUT ``obj``; on 409 take the server's resourceVersion and PUT the same object again."""
    while True:
        try:
            return await api.replace(resource, obj)
        except errors.Conflict:
            latest = await api.get(resource, obj["metadata"]["name"])
            obj["metadata"]["resourceVersion"] = latest["metadata"]["resourceVersion"]


class NaiveOperator:
    def __init__(self, api: Client, cloud: SimCloudClient) -> None:
        self.api, self.cloud = api, cloud
        self.cache = informer.InformerCache(api)
        self.pools = self.cache.informer(NODEPOOLS)
        self.scalers = self.cache.informer(AUTOSCALERS)
        self.pods = self.cache.informer(kinds.PODS)
        self.nodes = self.cache.informer(kinds.NODES)
        self.queue: workqueue.WorkQueue[str] = workqueue.WorkQueue(name="naive-nodepool")
        self.pools.add_handler(EveryChange(self.queue, lambda o: o["metadata"]["name"]))
        self.nodes.add_handler(EveryChange(self.queue, wellknown.pool_of))

    async def run(self) -> None:
        self.cache.start()
        await self.cache.wait_for_sync()
        async with asyncio.TaskGroup() as tasks:
            for _ in range(WORKERS):
                tasks.create_task(self.pool_worker())
            tasks.create_task(self.autoscaler_loop())

    # -- NodePool controller ---------------------------------------------------------

    async def pool_worker(self) -> None:
        while True:
            name = await self.queue.get()
            try:
                await self.reconcile_pool(name)
            except Exception as error:  # every error is retried at once
                log.warning("nodepool %s: %r; retrying", name, error)
                self.queue.add(name)
            finally:
                self.queue.done(name)

    async def reconcile_pool(self, name: str) -> None:
        log.info("pass nodepool %s", name)
        try:
            pool = await self.api.get(NODEPOOLS, name)
        except errors.NotFound:
            return
        spec = nodepool_api.spec_of(pool)
        vms = await vms_step.live(self.cloud, name)
        if len(vms) < spec.target_nodes:
            await vms_step.create(self.cloud, name, spec, vms)  # the slow step, holding the copy
        elif len(vms) > spec.target_nodes:
            for vm in vms[spec.target_nodes :]:
                await vms_step.remove(self.api, self.cloud, vm)
        vms = await vms_step.live(self.cloud, name)
        await self.register_nodes(pool, spec.template, vms)
        page = await self.api.list_page(kinds.NODES, label_selector=wellknown.pool_selector(name))
        registered = page["items"]
        ready = sum(1 for node in registered if nodes.is_ready(node))
        settled = ready == len(registered) == spec.target_nodes
        pool["status"] = {
            "currentNodes": len(registered),
            "readyNodes": ready,
            "scaleOperation": "inactive" if settled else "active",
            "lastUpdated": now(),
        }
        await write_back(self.api, NODEPOOLS, pool)
        if not settled:
            self.queue.add_after(name, vms_step.POLL_SECONDS)

    async def register_nodes(
        self, pool: Object, template: nodepool_api.NodeTemplate, vms: list[provider.VirtualMachine]
    ) -> None:
        for vm in vms:
            if vm.state == provider.VmState.RUNNING and self.nodes.get(vm.name) is None:
                manifest = node_manifest(pool=pool, vm=vm, template=template, simulated=True)
                await self.api.create(kinds.NODES, manifest)

    # -- Autoscaler controller -------------------------------------------------------

    async def autoscaler_loop(self) -> None:
        next_scan: dict[str, float] = {}
        loop = asyncio.get_running_loop()
        while True:
            for scaler in self.scalers.items():
                name = scaler["metadata"]["name"]
                if loop.time() < next_scan.get(name, 0.0):
                    continue
                spec = autoscaler_api.spec_of(scaler)
                next_scan[name] = loop.time() + spec.scan_interval_seconds
                while True:  # every error is retried at once
                    try:
                        await self.scan(scaler, spec)
                        break
                    except Exception as error:
                        log.warning("autoscaler %s: %r; retrying", name, error)
            await asyncio.sleep(0.1)

    async def scan(self, scaler: Object, spec: autoscaler_api.AutoscalerSpec) -> None:
        log.info("pass autoscaler %s", scaler["metadata"]["name"])
        cached = self.pools.get(spec.node_pool_name)
        if cached is None:
            return
        pool_spec = nodepool_api.spec_of(cached)
        pending = sizing.unschedulable_for(
            self.pods.items(),
            pool=spec.node_pool_name,
            template=pool_spec.template,
            namespaces=spec.namespaces,
        )
        pool_nodes = [n for n in self.nodes.items() if wellknown.pool_of(n) == spec.node_pool_name]
        used = sizing.bound_requests(self.pods.items(), {n["metadata"]["name"] for n in pool_nodes})
        coming = max(0, pool_spec.target_nodes - len(pool_nodes))
        extra = sizing.extra_nodes(pending, pool_spec.template, used=used.values(), coming=coming)
        target = min(pool_spec.max_nodes, pool_spec.target_nodes + extra)
        if target > pool_spec.target_nodes:
            raised = copy.deepcopy(cached)
            raised["spec"]["targetNodes"] = target
            await write_back(self.api, NODEPOOLS, raised)
            log.info(
                "autoscaler: %s targetNodes -> %d (pending %d, Nodes %d, coming %d)",
                *(spec.node_pool_name, target, len(pending), len(pool_nodes), coming),
            )
        scaler = copy.deepcopy(scaler)
        scaler["status"] = {"lastUpdated": now(), "pendingPods": len(pending)}
        await write_back(self.api, AUTOSCALERS, scaler)


async def main(arguments: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    configuration = k8s.Configuration()
    await config.load_kube_config(
        config_file=str(arguments.kubeconfig), client_configuration=configuration
    )
    token = credentials.TokenFile(arguments.cloud_token_file)
    async with k8s.ApiClient(configuration) as api:
        cloud = SimCloudClient(arguments.cloud_endpoint, token=token)
        try:
            await NaiveOperator(Client(api, field_manager="naive-operator"), cloud).run()
        finally:
            await cloud.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--cloud-endpoint", required=True)
    parser.add_argument("--cloud-token-file", type=Path, required=True)
    asyncio.run(main(parser.parse_args()))
