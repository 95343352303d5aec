"""The NodePool and Autoscaler controllers written with kopf, as its documentation teaches.

The same job as ``nodepool-operator run`` and the naive operator (VMs in the same
simcloud named by ``nodepool_api.vm_names``, Nodes from the same ``node_manifest``, scale-ups sized
by ``naive.sizing``), in kopf's idiom:

* NodePool: one handler on create, on resume and on update of ``spec.targetNodes``
  (kopf's field filter, so a label edit wakes nothing), which does the slow VM step and
  puts its result in ``patch.status``; kopf keeps its progress and the handler's return
  value in ``status`` (its default storages) and posts an Event per handler outcome; a
  timer reports drift (``currentNodes``, ``readyNodes``), patching only what changed;
* Autoscaler: a timer every ``SCAN_SECONDS`` reads unschedulable pods and the pools'
  Nodes from kopf's in-memory indexes and, when the pool needs more, merge-patches the
  NodePool's ``spec.targetNodes`` (kopf's patches carry no resourceVersion: kopf never
  sees a 409; the last writer wins).

Every handler run logs ``pass <handler> <name>`` so the bench can count them.

Run:  KUBECONFIG=K CLOUD_ENDPOINT=URL CLOUD_TOKEN_FILE=F \\
      python -m kopf run --standalone --all-namespaces bench/kopf_operator/handlers.py
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from pathlib import Path
from typing import Any

import kopf
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from naive import sizing
from naive import vms as vms_step
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud import credentials, provider
from nodepool_operator.cloud.simcloud.client import SimCloudClient
from nodepool_operator.controllers.autoscaler.constraints import pending_pods
from nodepool_operator.controllers.nodepool.nodes import node_manifest
from nodepool_operator.controllers.resources import NODEPOOLS
from nodepool_operator.runtime import errors, kinds, nodes, pods
from nodepool_operator.runtime.client import Client

GROUP, VERSION = nodepool_api.GROUP, nodepool_api.VERSION
SCAN_SECONDS = float(os.environ.get("SCAN_SECONDS", "2"))
STATUS_SECONDS = 5.0


@kopf.on.startup()
async def connect(memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    configuration = k8s.Configuration()
    await config.load_kube_config(client_configuration=configuration)
    memo.api_client = k8s.ApiClient(configuration)
    memo.api = Client(memo.api_client, field_manager="kopf-operator")
    token = credentials.TokenFile(os.environ["CLOUD_TOKEN_FILE"])
    memo.cloud = SimCloudClient(os.environ["CLOUD_ENDPOINT"], token=token)


@kopf.on.cleanup()
async def disconnect(memo: kopf.Memo, **_: Any) -> None:
    await memo.cloud.close()
    await memo.api_client.close()


# -- indexes: kopf's in-memory caches ---------------------------------------------------


# An index keeps what its function returned until the object stops matching the
# handler's filters (kopf 1.45: a None result leaves the old value in place), so what an
# entry depends on goes in ``when=`` / ``labels=``, as kopf's documentation does it.


def _unschedulable(body: kopf.Body, **_: Any) -> bool:
    return pending_pods.is_unschedulable(body)


def _bound(body: kopf.Body, spec: kopf.Spec, **_: Any) -> bool:
    return bool(spec.get("nodeName")) and not pods.is_terminal(body)


@kopf.index("pods", when=_unschedulable)
def unschedulable_pods(body: kopf.Body, namespace: str | None, **_: Any) -> Any:
    return {namespace: copy.deepcopy(dict(body))}


@kopf.index("pods", when=_bound)
def bound_pods(body: kopf.Body, spec: kopf.Spec, **_: Any) -> Any:
    return {spec["nodeName"]: pending_pods.pod_requests(body)}


@kopf.index("nodes", labels={wellknown.POOL_LABEL: kopf.PRESENT})
def pool_nodes(labels: kopf.Labels, name: str, **_: Any) -> Any:
    return {labels[wellknown.POOL_LABEL]: name}


@kopf.index(GROUP, VERSION, "nodepools")
def pool_specs(name: str, spec: kopf.Spec, **_: Any) -> Any:
    return {name: copy.deepcopy(dict(spec))}


# -- NodePool ---------------------------------------------------------------------------


@kopf.on.resume(GROUP, VERSION, "nodepools")
@kopf.on.create(GROUP, VERSION, "nodepools")
@kopf.on.update(GROUP, VERSION, "nodepools", field="spec.targetNodes")
async def scale(
    name: str, body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, logger: kopf.Logger, **_: Any
) -> dict[str, Any]:
    logger.info(f"pass scale {name}")
    spec = nodepool_api.spec_of(body)
    vms = await vms_step.live(memo.cloud, name)
    if len(vms) < spec.target_nodes:
        await vms_step.create(memo.cloud, name, spec, vms)
    for vm in vms[spec.target_nodes :]:
        await vms_step.remove(memo.api, memo.cloud, vm)
    vms = await vms_step.live(memo.cloud, name)
    page = await memo.api.list_page(kinds.NODES, label_selector=wellknown.pool_selector(name))
    registered = {node["metadata"]["name"] for node in page["items"]}
    for vm in vms:
        if vm.state == provider.VmState.RUNNING and vm.name not in registered:
            manifest = node_manifest(pool=body, vm=vm, template=spec.template, simulated=True)
            with contextlib.suppress(errors.AlreadyExists):
                await memo.api.create(kinds.NODES, manifest)
    patch.status.update(await observed(memo.api, name, spec.target_nodes))
    return {"targetNodes": spec.target_nodes}


@kopf.timer(GROUP, VERSION, "nodepools", interval=STATUS_SECONDS)
async def report(
    name: str,
    body: kopf.Body,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    logger.info(f"pass report {name}")
    seen = await observed(memo.api, name, nodepool_api.spec_of(body).target_nodes)
    changed = {key: value for key, value in seen.items() if status.get(key) != value}
    patch.status.update(changed)


async def observed(api: Client, pool: str, target: int) -> dict[str, Any]:
    page = await api.list_page(kinds.NODES, label_selector=wellknown.pool_selector(pool))
    registered = page["items"]
    ready = sum(1 for node in registered if nodes.is_ready(node))
    settled = ready == len(registered) == target
    return {
        "currentNodes": len(registered),
        "readyNodes": ready,
        "scaleOperation": "inactive" if settled else "active",
    }


# -- Autoscaler -------------------------------------------------------------------------


# kopf passes its indexes by name; its TimerFn protocol does not list them.
@kopf.timer(GROUP, VERSION, "autoscalers", interval=SCAN_SECONDS)  # type: ignore[arg-type]
async def scan(
    name: str,
    spec: kopf.Spec,
    memo: kopf.Memo,
    logger: kopf.Logger,
    unschedulable_pods: kopf.Index[str, Any],
    pool_nodes: kopf.Index[str, str],
    pool_specs: kopf.Index[str, Any],
    bound_pods: kopf.Index[str, Any],
    **_: Any,
) -> None:
    logger.info(f"pass scan {name}")
    pool_name = spec["nodePoolName"]
    known = list(pool_specs.get(pool_name, []))
    if not known:
        return
    pool_spec = nodepool_api.NodePoolSpec.from_dict(known[0])
    namespaces = spec.get("namespaces") or list(unschedulable_pods)
    candidates = [pod for ns in namespaces for pod in unschedulable_pods.get(ns, [])]
    pending = sizing.unschedulable_for(
        candidates, pool=pool_name, template=pool_spec.template, namespaces=namespaces
    )
    registered = list(pool_nodes.get(pool_name, []))
    used = [list(bound_pods.get(node, [])) for node in registered]
    coming = max(0, pool_spec.target_nodes - len(registered))
    extra = sizing.extra_nodes(pending, pool_spec.template, used=used, coming=coming)
    target = min(pool_spec.max_nodes, pool_spec.target_nodes + extra)
    if target > pool_spec.target_nodes:
        await memo.api.patch(NODEPOOLS, pool_name, {"spec": {"targetNodes": target}})
        logger.info(
            f"{pool_name} targetNodes -> {target} (pending {len(pending)}, "
            f"Nodes {len(registered)}, coming {coming})"
        )
