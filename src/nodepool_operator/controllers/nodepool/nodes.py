"""Nodes of a pool: how a RUNNING VM is registered, cordoned and drained.

A Node is created once per VM with everything a real kubelet would report at
registration (capacity and allocatable from the pool's template, every resource of it)
plus what the pool promises (its label, zone and region, the template's labels and
taints) and an owner reference to the NodePool. Capacity, allocatable, zone and labels
come from ``api.nodepool``'s functions, the ones the Autoscaler simulates Nodes with.
Draining (``drain``) uses the Eviction API, so PodDisruptionBudgets are respected: a 429
from an eviction means "not now".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud.provider import VirtualMachine
from nodepool_operator.controllers.nodepool import plan
from nodepool_operator.runtime import conditions, kinds
from nodepool_operator.runtime.client import Client, Object

__all__ = [
    "KWOK_ANNOTATION",
    "cordon",
    "evict_one",
    "mark_vm_deleted",
    "node_manifest",
    "node_named",
    "quantities",
    "uncordon",
]

KWOK_ANNOTATION = "kwok.x-k8s.io/node"


async def node_named(client: Client, name: str) -> Object | None:
    """The Node ``name`` as the API server has it now, or None: for a Node the cache does
    not hold (it holds only pool-labelled Nodes). A LIST by name rather than a GET: the
    operator's role reads Nodes by listing (deploy/rbac), and one name is one item."""
    page = await client.list_page(kinds.NODES, field_selector=f"metadata.name={name}")
    found = [n for n in page.get("items") or () if (n.get("metadata") or {}).get("name") == name]
    return found[0] if found else None


def node_manifest(
    *,
    pool: Mapping[str, Any],
    vm: VirtualMachine,
    template: nodepool_api.NodeTemplate,
    simulated: bool,
) -> Object:
    name = str(pool["metadata"]["name"])
    zone = nodepool_api.zone_of(vm.name, template)
    labels = {
        **nodepool_api.node_labels(name, template, zone=zone),
        nodepool_api.HOSTNAME_LABEL: vm.name,
    }
    spec: dict[str, Any] = {"providerID": vm.provider_id}
    if template.taints:
        spec["taints"] = [taint.to_dict() for taint in template.taints]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": vm.name,
            "labels": labels,
            "annotations": {KWOK_ANNOTATION: "fake"} if simulated else {},
            "ownerReferences": [
                {
                    "apiVersion": nodepool_api.API_VERSION,
                    "kind": nodepool_api.KIND,
                    "name": name,
                    "uid": pool["metadata"]["uid"],
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": spec,
        "status": {
            "capacity": quantities(nodepool_api.template_capacity(template)),
            "allocatable": quantities(nodepool_api.template_allocatable(template)),
        },
    }


def quantities(amounts: Mapping[str, int]) -> dict[str, str]:
    """Amounts in ``template_capacity``'s units as the quantity text a Node carries:
    cpu in millicores ("3500m"), everything else a plain integer (bytes or a count)."""
    return {
        resource: f"{amount}m" if resource == "cpu" else str(amount)
        for resource, amount in amounts.items()
    }


async def cordon(client: Client, node: Mapping[str, Any], *, started: float) -> None:
    """Mark the Node unschedulable and remember on it (annotation) that we chose it, and
    since when: the drain timeout counts from there, across restarts."""
    await client.patch(
        kinds.NODES,
        str(node["metadata"]["name"]),
        {
            "metadata": {"annotations": {plan.SCALE_DOWN_ANNOTATION: conditions.rfc3339(started)}},
            "spec": {"unschedulable": True},
        },
    )


async def mark_vm_deleted(client: Client, node: Mapping[str, Any], *, at: float) -> None:
    """Record on a drained Node that its VM is being deleted by us (see
    ``plan.VM_DELETED_ANNOTATION``), before the cloud is asked."""
    await client.patch(
        kinds.NODES,
        str(node["metadata"]["name"]),
        {"metadata": {"annotations": {plan.VM_DELETED_ANNOTATION: conditions.rfc3339(at)}}},
    )


async def uncordon(client: Client, node: Mapping[str, Any]) -> None:
    await client.patch(
        kinds.NODES,
        str(node["metadata"]["name"]),
        {
            "metadata": {"annotations": {plan.SCALE_DOWN_ANNOTATION: None}},
            "spec": {"unschedulable": None},
        },
    )


async def evict_one(client: Client, pod: Mapping[str, Any]) -> None:
    """Ask the Eviction API to evict ``pod``: ``TooManyRequests`` when a budget refuses."""
    meta = pod["metadata"]
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        # The uid: an eviction meant for this pod never evicts another of the same name.
        "deleteOptions": {"preconditions": {"uid": meta["uid"]}} if meta.get("uid") else None,
    }
    await client.create_subresource(
        kinds.PODS,
        str(meta["name"]),
        "eviction",
        {k: v for k, v in body.items() if v is not None},
        namespace=str(meta["namespace"]),
    )
