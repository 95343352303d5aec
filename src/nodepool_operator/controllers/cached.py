"""What the shared caches keep of the Pods and Nodes they hold: the fields some controller
reads, nothing else.

Both controllers share one Pod and one Node informer, so the transform of each kind is
defined here, once, as an allowlist of what either controller reads (the Autoscaler's
scheduling simulation, the NodePool controller's drain and registration). A cluster of
50,000 pods holds them all in memory; a Deployment pod as the API returns it (images,
commands, env, volume mounts, container statuses) is several kilobytes of dicts, the
fields kept here a few hundred bytes (``bench/cache_memory.py`` measures both).

Replicas of one Deployment carry equal containers, tolerations, affinity, labels and
owner: those parts are shared between the pods that have them (the first one seen is
kept, later equal ones are dropped), so a replica costs little more than its name, uid,
resourceVersion and node. Shared parts are read-only, like everything in a cache.

A field a controller starts reading must be added here, or the controller sees it
missing; ``tests/unit/controllers/test_cached.py`` lists what each controller needs.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeVar

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.runtime import pods as k8s_pods
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.lru import Bounded

__all__ = [
    "ANNOTATIONS",
    "BIND_COMPLETED_ANNOTATION",
    "claim_fields",
    "node_fields",
    "pod_fields",
    "storage_class_fields",
    "volume_fields",
]

#: On a PersistentVolumeClaim whose binding to its volume is complete (the PV controller's
#: mark): the scheduler counts a claim as bound only with it.
BIND_COMPLETED_ANNOTATION: Final = "pv.kubernetes.io/bind-completed"

#: The annotations some controller reads besides our own (``nodepool.dev/``); every other
#: annotation (last-applied configurations above all) is dropped.
ANNOTATIONS: Final = frozenset(
    {
        k8s_pods.MIRROR_POD_ANNOTATION,
        *wellknown.DISRUPTION_ANNOTATIONS,
        BIND_COMPLETED_ANNOTATION,
    }
)
_OUR_PREFIX: Final = f"{nodepool_api.GROUP}/"

_METADATA: Final = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "finalizers",
)
_OWNER: Final = ("apiVersion", "kind", "name", "uid", "controller")
_POD_SPEC: Final = (
    "nodeName",
    "nodeSelector",
    "affinity",
    "tolerations",
    "topologySpreadConstraints",
    "priority",
    "schedulerName",
    "schedulingGates",
    "overhead",
    "resources",
    "terminationGracePeriodSeconds",
)
_CONTAINER: Final = ("name", "resources", "restartPolicy")
_POD_STATUS: Final = ("phase", "nominatedNodeName")
_NODE_SPEC: Final = ("taints", "unschedulable", "providerID")
_NODE_STATUS: Final = ("capacity", "allocatable")


#: Distinct shared parts remembered; beyond, the least recently seen are forgotten (the
#: pods holding them keep them; a later equal part is then shared anew).
SHARED_PARTS: Final = 20_000
_shared: Bounded[str, Any] = Bounded(SHARED_PARTS)
_T = TypeVar("_T")


def _share(value: _T) -> _T:
    """An equal part already held by another cached object, or ``value`` (now held)."""
    if not value:
        return value
    key = json.dumps(value, sort_keys=True, separators=(",", ":"))
    found = _shared.get(key)
    if found is not None:
        return found  # type: ignore[no-any-return]
    _shared[key] = value
    return value


def _pick(source: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    # Keys come from our own (interned) constants, not from each decoded object.
    return {key: source[key] for key in keys if key in source}


def _metadata(meta: Mapping[str, Any]) -> dict[str, Any]:
    kept = _pick(meta, _METADATA)
    if "namespace" in kept:
        kept["namespace"] = sys.intern(str(kept["namespace"]))
    if "labels" in kept:
        kept["labels"] = _share(kept["labels"])
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if k in ANNOTATIONS or k.startswith(_OUR_PREFIX)
    }
    if annotations:
        kept["annotations"] = annotations
    owners = [_pick(ref, _OWNER) for ref in meta.get("ownerReferences") or ()]
    if owners:
        kept["ownerReferences"] = _share(owners)
    return kept


def _container(container: Mapping[str, Any]) -> dict[str, Any]:
    kept = _pick(container, _CONTAINER)
    # Limits play no part in scheduling; requests do.
    requests = (container.get("resources") or {}).get("requests")
    kept["resources"] = {"requests": requests} if requests else {}
    # Only host ports take part in scheduling (NodePorts); container ports do not.
    ports = [port for port in container.get("ports") or () if port.get("hostPort")]
    if ports:
        kept["ports"] = ports
    return kept


#: Volumes whose data lives on the node: a drain asks about them, not about the others.
LOCAL_VOLUMES: Final = ("emptyDir", "hostPath")


def _volumes(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "name": volume.get("name", ""),
            **{kind: volume[kind] for kind in LOCAL_VOLUMES if kind in volume},
        }
        for volume in spec.get("volumes") or ()
        if any(kind in volume for kind in LOCAL_VOLUMES)
    ]


def _claims(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The volumes backed by a PersistentVolumeClaim (named, or an ephemeral volume's,
    named ``<pod>-<volume>``), as the scheduler's volume filters read them: the claim, no
    more (an ephemeral volume's template is the claim's, and the claim is read itself)."""
    found: list[dict[str, Any]] = []
    for volume in spec.get("volumes") or ():
        claim = volume.get("persistentVolumeClaim")
        if claim is not None:
            kept = {"claimName": claim.get("claimName", "")}
            found.append({"name": volume.get("name", ""), "persistentVolumeClaim": kept})
        elif volume.get("ephemeral") is not None:
            found.append({"name": volume.get("name", ""), "ephemeral": {}})
    return found


def _head(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **_pick(obj, ("apiVersion", "kind")),
        "metadata": _metadata(obj.get("metadata") or {}),
    }


def pod_fields(pod: Object) -> Object:
    """The part of a Pod the controllers read (an informer transform)."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    kept_spec = {key: _share(value) for key, value in _pick(spec, _POD_SPEC).items()}
    if "nodeName" in kept_spec:
        kept_spec["nodeName"] = sys.intern(str(kept_spec["nodeName"]))
    kept_spec["containers"] = _share([_container(c) for c in spec.get("containers") or ()])
    if spec.get("initContainers"):
        kept_spec["initContainers"] = _share([_container(c) for c in spec["initContainers"]])
    volumes = [*_volumes(spec), *_claims(spec)]
    if volumes:
        kept_spec["volumes"] = _share(volumes)
    kept_status = _pick(status, _POD_STATUS)
    if "phase" in kept_status:
        kept_status["phase"] = sys.intern(str(kept_status["phase"]))
    # Whether the scheduler gave up on it matters only while the pod waits for a node.
    if not spec.get("nodeName"):
        scheduled = [c for c in status.get("conditions") or () if c.get("type") == "PodScheduled"]
        if scheduled:
            kept_status["conditions"] = scheduled
    return {**_head(pod), "spec": kept_spec, "status": kept_status}


def node_fields(node: Object) -> Object:
    """The part of a Node the controllers read (an informer transform): not its images,
    addresses, daemon endpoints or heartbeats."""
    status = node.get("status") or {}
    kept_status = _pick(status, _NODE_STATUS)
    # Ready only, without its heartbeat: what readiness and repair are decided on.
    ready = [
        _pick(c, ("type", "status", "reason", "message", "lastTransitionTime"))
        for c in status.get("conditions") or ()
        if c.get("type") == "Ready"
    ]
    if ready:
        kept_status["conditions"] = ready
    kept_status = {key: _share(value) for key, value in kept_status.items()}
    kept_spec = _pick(node.get("spec") or {}, _NODE_SPEC)
    if "taints" in kept_spec:
        kept_spec["taints"] = _share(kept_spec["taints"])
    return {**_head(node), "spec": kept_spec, "status": kept_status}


def claim_fields(claim: Object) -> Object:
    """The part of a PersistentVolumeClaim the volume filters read: its class, the volume
    it is bound to, what it asks for, and its phase."""
    spec = claim.get("spec") or {}
    kept_spec = _pick(spec, ("storageClassName", "volumeName", "accessModes", "volumeMode"))
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    if storage is not None:
        kept_spec["resources"] = {"requests": {"storage": storage}}
    return {
        **_head(claim),
        "spec": kept_spec,
        "status": _pick(claim.get("status") or {}, ("phase",)),
    }


def volume_fields(volume: Object) -> Object:
    """The part of a PersistentVolume the volume filters read: where it can be used (node
    affinity, topology labels), its class, size, access modes, claim and phase."""
    spec = volume.get("spec") or {}
    kept_spec = _pick(
        spec,
        ("nodeAffinity", "storageClassName", "capacity", "accessModes", "volumeMode"),
    )
    claim = spec.get("claimRef")
    if claim is not None:
        kept_spec["claimRef"] = _pick(claim, ("namespace", "name", "uid"))
    return {
        **_head(volume),
        "spec": kept_spec,
        "status": _pick(volume.get("status") or {}, ("phase",)),
    }


def storage_class_fields(storage_class: Object) -> Object:
    """The part of a StorageClass the volume filters read (its fields are top-level)."""
    return {
        **_head(storage_class),
        **_pick(storage_class, ("provisioner", "volumeBindingMode", "allowedTopologies")),
    }
