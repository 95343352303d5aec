"""Nodes of a pool: how a RUNNING VM is registered, cordoned and drained.

A Node is created once per VM with everything a real kubelet would report at
registration (capacity and allocatable from the pool's template, every resource of it)
plus what the pool promises (its label, zone and region, the template's labels and
taints) and an owner reference to the NodePool. Capacity, allocatable, zone and labels
come from ``api.nodepool``'s functions, the ones the Autoscaler simulates Nodes with.
Draining (``drain``) uses the Eviction API, so PodDisruptionBudgets are respected: a 429
from an eviction means "not now".

A Node is created before its kubelet runs, so it carries ``UNREGISTERED_TAINT`` until the
kubelet (kwok on the local control plane) has shown it is there: a Ready condition with
a heartbeat, and capacity and allocatable in the status. The kubelet writes all three in
one status update (its status setters run together), so from then on the capacity the
scheduler reads is the kubelet's, not the template's; only then is a pod bound there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodepool_operator import timestamps
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud.provider import VirtualMachine
from nodepool_operator.controllers.nodepool import plan
from nodepool_operator.runtime import conditions, errors, kinds, retry
from nodepool_operator.runtime import nodes as k8s_nodes
from nodepool_operator.runtime.client import Client, Object, read_by_listing

__all__ = [
    "KWOK_ANNOTATION",
    "UNREGISTERED_TAINT",
    "cordon",
    "evict_one",
    "is_unregistered",
    "kubelet_flags",
    "kubelet_may_set",
    "kubelet_reported",
    "mark_vm_deleted",
    "node_manifest",
    "node_named",
    "owner_reference",
    "registration_taints",
    "remove_unregistered_taint",
    "reported_and_tainted",
    "uncordon",
]

KWOK_ANNOTATION = "kwok.x-k8s.io/node"

#: NoSchedule, not NoExecute (Karpenter's choice): kube-scheduler keeps pods off either
#: alike, and nothing can be running there yet that an eviction would have to move, but
#: NoExecute would let the taint-eviction controller delete a pod placed by ``nodeName``
#: (bypassing the scheduler, as a DaemonSet pod of another tool may be), outside the
#: Eviction API and its PodDisruptionBudgets. DaemonSet pods do not tolerate it (their
#: automatic tolerations cover ``node.kubernetes.io/*`` only): they land the moment it
#: goes, as the pool's other pods; pods that tolerate everything land at once, as on any
#: new node.
UNREGISTERED_TAINT: Mapping[str, str] = {
    "key": wellknown.UNREGISTERED_TAINT_KEY,
    "effect": "NoSchedule",
}

#: The resources a kubelet always reports; a status without them is not its report.
_REPORTED = ("cpu", "memory", "pods")


async def node_named(client: Client, name: str) -> Object | None:
    """The Node ``name`` as the API server has it now, or None: for a Node the cache does
    not hold (it holds only pool-labelled Nodes), read by listing (``read_by_listing``)."""
    return await read_by_listing(client, kinds.NODES, name)


def node_manifest(
    *,
    pool: Mapping[str, Any],
    vm: VirtualMachine,
    template: nodepool_api.NodeTemplate,
    simulated: bool,
    unregistered: bool = False,
    spec_hash: str | None = None,
) -> Object:
    """The Node of ``vm``. ``unregistered``: with ``UNREGISTERED_TAINT``, as the operator
    creates them (the peers in ``bench/`` that never remove it create them without).
    ``simulated``: annotated for kwok, which then plays the VM's kubelet. ``spec_hash``:
    the hash of the pool's spec it is made from (``api.drift``), recorded on it."""
    name = str(pool["metadata"]["name"])
    # The cloud's fact; a pool without zones has no zone label, as the planner predicts.
    zone = vm.zone if template.zones else None
    labels = {
        **nodepool_api.node_labels(name, template, zone=zone),
        wellknown.HOSTNAME_LABEL: vm.name,
    }
    spec: dict[str, Any] = {"providerID": vm.provider_id}
    taints = registration_taints(template, unregistered=unregistered)
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": vm.name,
            "labels": labels,
            # A simulated VM whose kubelet never joins (a simcloud fault) is left to no
            # one, as a real one would be: its Node never turns Ready.
            # Nor one whose VM boots a kubelet of its own: two would write its status.
            "annotations": {
                **(
                    {KWOK_ANNOTATION: "fake"}
                    if simulated and vm.kubelet_joins and not vm.boots_kubelet
                    else {}
                ),
                **({} if spec_hash is None else {wellknown.SPEC_HASH_ANNOTATION: spec_hash}),
            },
            "ownerReferences": [owner_reference(pool)],
        },
        "spec": spec,
        "status": {
            "capacity": nodepool_api.quantity_texts(nodepool_api.template_capacity(template)),
            "allocatable": nodepool_api.quantity_texts(nodepool_api.template_allocatable(template)),
        },
    }


def owner_reference(pool: Mapping[str, Any]) -> dict[str, Any]:
    """The owner reference a Node of ``pool`` carries: the pool by uid. It does not block
    the pool's deletion; the pool's finalizer drains and removes its Nodes first."""
    return {
        "apiVersion": nodepool_api.API_VERSION,
        "kind": nodepool_api.KIND,
        "name": str(pool["metadata"]["name"]),
        "uid": pool["metadata"]["uid"],
        "blockOwnerDeletion": False,
    }


def registration_taints(
    template: nodepool_api.NodeTemplate, *, unregistered: bool
) -> list[dict[str, Any]]:
    """The taints a Node of the pool is registered with: the template's, its startup taints
    (which an agent on the Node removes once it is ready; never put back), and
    ``UNREGISTERED_TAINT`` if ``unregistered``."""
    taints = [taint.to_dict() for taint in (*template.taints, *template.startup_taints)]
    if unregistered:
        taints.append(dict(UNREGISTERED_TAINT))
    return taints


#: Labels in the kubernetes.io and k8s.io namespaces a kubelet sets with ``--node-labels``;
#: it refuses to start with any other label of those namespaces (kubelet's
#: ``KubeletLabels``). The others are the operator's to set once the Node is adopted.
_KUBELET_LABELS = frozenset(
    {
        "kubernetes.io/hostname",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "failure-domain.beta.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
    }
)
_KUBELET_PREFIXES = ("kubelet.kubernetes.io", "node.kubernetes.io")


def kubelet_may_set(label: str) -> bool:
    """Whether a kubelet accepts ``label`` in ``--node-labels`` (see ``_KUBELET_LABELS``)."""
    prefix, slash, _ = label.partition("/")
    if not slash:
        return True
    if not any(prefix == d or prefix.endswith("." + d) for d in ("kubernetes.io", "k8s.io")):
        return True
    return label in _KUBELET_LABELS or any(
        prefix == p or prefix.endswith("." + p) for p in _KUBELET_PREFIXES
    )


def kubelet_flags(
    pool: str, template: nodepool_api.NodeTemplate, *, zone: str | None
) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """The labels and taints a VM's kubelet registers its Node with (the launch's user
    data): the pool's labels the kubelet may set, and every registration taint, the
    unregistered one included (lifted once the kubelet has reported), as
    ``key[=value]:Effect``."""
    labels = nodepool_api.node_labels(pool, template, zone=zone if template.zones else None)
    taints = tuple(
        f"{t['key']}{'=' + t['value'] if t.get('value') else ''}:{t['effect']}"
        for t in registration_taints(template, unregistered=True)
    )
    return tuple(sorted((k, v) for k, v in labels.items() if kubelet_may_set(k))), taints


is_unregistered = plan.is_unregistered


def kubelet_reported(node: Mapping[str, Any]) -> bool:
    """The kubelet (or kwok) has shown it is there: Ready, with a heartbeat no older than
    the Node (we never write conditions, so the heartbeat is the kubelet's), and capacity
    and allocatable with cpu, memory and pods in the status."""
    if not k8s_nodes.is_ready(node):
        return False
    status = node.get("status") or {}
    ready = next(c for c in status.get("conditions") or () if c.get("type") == "Ready")
    heartbeat = timestamps.parse_rfc3339(str(ready.get("lastHeartbeatTime", "")))
    created = timestamps.parse_rfc3339(
        str((node.get("metadata") or {}).get("creationTimestamp", ""))
    )
    if heartbeat is None or (created is not None and heartbeat < created):
        return False
    return all(
        resource in (status.get(field) or {})
        for field in ("capacity", "allocatable")
        for resource in _REPORTED
    )


async def reported_and_tainted(client: Client, name: str) -> Object | None:
    """Node ``name`` read fresh (the cache keeps no heartbeats) if it still carries
    ``UNREGISTERED_TAINT`` and its kubelet has reported (``kubelet_reported``); else None."""
    node = await node_named(client, name)
    if node is None or not is_unregistered(node) or not kubelet_reported(node):
        return None
    return node


async def remove_unregistered_taint(
    client: Client, name: str, *, read: Object | None = None
) -> bool:
    """Remove ``UNREGISTERED_TAINT`` from Node ``name`` if its kubelet has reported
    (``reported_and_tainted``; ``read``: that fresh read, made already), and only that
    taint. With ``read``, first as a JSON patch that tests the taints are still those read
    and replaces them: only a change to the taints refuses it (422), not one to another
    field (the controller-manager annotates a Node as it turns Ready, and a
    resourceVersion precondition would be refused for that, and the Node turn
    schedulable a round trip after the others of its plan). Otherwise, or when the test
    fails, a merge patch naming the resourceVersion it was computed from, so a taint
    another writer added meanwhile is never dropped (409: read again). True if removed
    now."""
    if read is not None:
        taints = list(read["spec"].get("taints") or ())
        kept = [t for t in taints if t.get("key") != wellknown.UNREGISTERED_TAINT_KEY]
        change: dict[str, Any] = (
            {"op": "replace", "path": "/spec/taints", "value": kept}
            if kept
            else {"op": "remove", "path": "/spec/taints"}
        )
        try:
            await client.patch(
                kinds.NODES,
                name,
                [{"op": "test", "path": "/spec/taints", "value": taints}, change],
                patch_type="json",
            )
            return True
        except errors.NotFound:
            return False
        except errors.Invalid:
            pass  # the taints changed since the read: read again, below

    async def attempt() -> bool:
        node = await reported_and_tainted(client, name)
        if node is None:
            return False
        taints = [
            taint
            for taint in node["spec"].get("taints") or ()
            if taint.get("key") != wellknown.UNREGISTERED_TAINT_KEY
        ]
        await client.patch(
            kinds.NODES,
            name,
            {
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"taints": taints or None},
            },
        )
        return True

    try:
        return await retry.retry_on_conflict(attempt)
    except errors.NotFound:
        return False  # deleted between the read and the patch


async def cordon(
    client: Client, node: Mapping[str, Any], *, started: float, as_read: bool = False
) -> Object:
    """Mark the Node unschedulable and remember on it (annotation) that we chose it, and
    since when: the drain timeout counts from there, across restarts. ``as_read``: only
    if the Node is still as ``node`` shows it (its resourceVersion; 409 otherwise).
    Returns the Node as the patch left it."""
    metadata: dict[str, Any] = {
        "annotations": {plan.SCALE_DOWN_ANNOTATION: conditions.rfc3339(started)}
    }
    if as_read:
        metadata["resourceVersion"] = node["metadata"]["resourceVersion"]
    return await client.patch(
        kinds.NODES,
        str(node["metadata"]["name"]),
        {"metadata": metadata, "spec": {"unschedulable": True}},
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
