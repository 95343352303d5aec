"""A pod's PersistentVolumeClaims as kube-scheduler's volume filters judge them.

``VolumeBinding``: a bound claim (``spec.volumeName`` and the PV controller's
bind-completed mark) holds its PersistentVolume, and a node must match the PV's node
affinity. An unbound claim of a ``WaitForFirstConsumer`` StorageClass is bound or
provisioned once a node is chosen: a node must match the node affinity of a PV it could
bind (same class, enough capacity, the access modes, available) or, when the class
provisions (any provisioner but ``kubernetes.io/no-provisioner``), the class's
``allowedTopologies`` (none: every node). Any other unbound claim (an ``Immediate``
class, no class, a class that does not exist, a claim naming a volume that is not bound
yet) is the PV controller's to bind: no new node helps, and the pod is unfit, saying which
claim. A claim that does not exist, or is being deleted, makes the pod unfit too.

``VolumeZone``: a bound PV's zone and region labels (several zones written ``a__b``) must
be the node's, unless the node has no topology label at all.

Not simulated: volume count limits per node (``NodeVolumeLimits``), CSI storage capacity,
and a static PV counted for several pending claims at once (the scheduler gives it to one).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, Final

from nodepool_operator.api import quantity
from nodepool_operator.controllers import cached
from nodepool_operator.controllers.autoscaler.constraints import (
    VOLUME_TOPOLOGY_LABELS,
    VolumeRules,
)
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.informer import Informer

__all__ = ["NO_PROVISIONER", "VOLUMES_BY_CLASS", "VolumeReads", "claim_names"]

#: The provisioner of a class whose volumes are all made by hand (local volumes).
NO_PROVISIONER: Final = "kubernetes.io/no-provisioner"
WAIT_FOR_FIRST_CONSUMER: Final = "WaitForFirstConsumer"
#: Our own index on the PersistentVolume informer: volumes by their storage class.
VOLUMES_BY_CLASS: Final = "autoscaler-storage-class"


def _class_of(volume: Object) -> list[str]:
    return [str((volume.get("spec") or {}).get("storageClassName") or "")]


def claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The claims the pod's volumes use: named ones, and an ephemeral volume's own
    (``<pod>-<volume>``, made by the ephemeral volume controller)."""
    pod_name = str((pod.get("metadata") or {}).get("name", ""))
    found = []
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        claim = volume.get("persistentVolumeClaim")
        if claim is not None:
            found.append(str(claim.get("claimName", "")))
        elif volume.get("ephemeral") is not None:
            found.append(f"{pod_name}-{volume.get('name', '')}")
    return found


def _required_terms(volume: Object) -> tuple[Mapping[str, Any], ...] | None:
    """The PV's required node affinity terms; None when it may be used on any node."""
    required = ((volume.get("spec") or {}).get("nodeAffinity") or {}).get("required")
    if required is None:
        return None
    return tuple(required.get("nodeSelectorTerms") or ())


def _topology_terms(storage_class: Object) -> tuple[dict[str, Any], ...] | None:
    """The class's ``allowedTopologies`` as node selector terms; None: every node."""
    topologies = storage_class.get("allowedTopologies") or ()
    if not topologies:
        return None
    return tuple(
        {
            "matchExpressions": [
                {"key": e.get("key", ""), "operator": "In", "values": list(e.get("values") or ())}
                for e in term.get("matchLabelExpressions") or ()
            ]
        }
        for term in topologies
    )


def _storage(amounts: Mapping[str, Any] | None) -> int:
    try:
        return quantity.parse_memory_bytes(str((amounts or {}).get("storage", "0")))
    except ValueError:
        return 0


def _could_bind(volume: Object, claim: Object) -> bool:
    """Whether the PV is one the claim could be bound to (the PV controller's match)."""
    meta, spec = claim["metadata"], claim.get("spec") or {}
    volume_spec = volume.get("spec") or {}
    if volume["metadata"].get("deletionTimestamp"):
        return False
    taken = volume_spec.get("claimRef")
    if taken is not None and (
        taken.get("namespace") != meta.get("namespace") or taken.get("name") != meta.get("name")
    ):
        return False
    if (volume.get("status") or {}).get("phase") not in (None, "Available", "Pending"):
        return False
    if (volume_spec.get("volumeMode") or "Filesystem") != (spec.get("volumeMode") or "Filesystem"):
        return False
    if not set(spec.get("accessModes") or ()) <= set(volume_spec.get("accessModes") or ()):
        return False
    wanted = _storage((spec.get("resources") or {}).get("requests"))
    return _storage(volume_spec.get("capacity")) >= wanted


class VolumeReads:
    """The claims, volumes and classes the filters read, from the shared informers."""

    def __init__(self, *, claims: Informer, volumes: Informer, classes: Informer) -> None:
        self.claims = claims
        self.volumes = volumes
        self.classes = classes
        volumes.add_index(VOLUMES_BY_CLASS, _class_of)

    def version(self) -> tuple[Hashable, ...]:
        return (
            self.claims.resource_version,
            self.volumes.resource_version,
            self.classes.resource_version,
        )

    def rules(self, pod: Mapping[str, Any]) -> VolumeRules | str | None:
        """What the pod's claims ask of a node; a string when no node can hold them (why);
        None when the pod has no claim."""
        names = claim_names(pod)
        if not names:
            return None
        namespace = str((pod.get("metadata") or {}).get("namespace", ""))
        choices: list[tuple[str, tuple[Any, ...]]] = []
        zones: list[tuple[str, frozenset[str], str]] = []
        for name in names:
            claim = self.claims.get(name, namespace)
            if claim is None:
                return f'persistentvolumeclaim "{name}" not found'
            if claim["metadata"].get("deletionTimestamp"):
                return f'persistentvolumeclaim "{name}" is being deleted'
            found = self._claim(claim, choices, zones)
            if found is not None:
                return found
        return VolumeRules(choices=tuple(choices), zones=tuple(zones))

    def _claim(
        self,
        claim: Object,
        choices: list[tuple[str, tuple[Any, ...]]],
        zones: list[tuple[str, frozenset[str], str]],
    ) -> str | None:
        """Add what ``claim`` asks of a node to ``choices`` and ``zones``; or say why no
        node can hold it."""
        name = str(claim["metadata"]["name"])
        spec = claim.get("spec") or {}
        bound_to = spec.get("volumeName")
        annotations = claim["metadata"].get("annotations") or {}
        if bound_to and cached.BIND_COMPLETED_ANNOTATION in annotations:
            return self._bound(name, str(bound_to), choices, zones)
        class_name = str(spec.get("storageClassName") or "")
        storage_class = self.classes.get(class_name) if class_name else None
        if class_name and storage_class is None:
            return (
                f'persistentvolumeclaim "{name}" is not bound and its storageclass '
                f'"{class_name}" does not exist'
            )
        if (
            bound_to
            or storage_class is None
            or storage_class.get("volumeBindingMode") != WAIT_FOR_FIRST_CONSUMER
        ):
            return (
                f'persistentvolumeclaim "{name}" is not bound and binds immediately: the '
                "volume controller binds it, a new node does not"
            )
        return self._unbound(claim, class_name, storage_class, choices)

    def _bound(
        self,
        claim: str,
        volume_name: str,
        choices: list[tuple[str, tuple[Any, ...]]],
        zones: list[tuple[str, frozenset[str], str]],
    ) -> str | None:
        volume = self.volumes.get(volume_name)
        if volume is None:
            return (
                f'persistentvolumeclaim "{claim}" is bound to persistentvolume '
                f'"{volume_name}", which does not exist'
            )
        # Named as the claim and its PV: a refusal is told in events about the pod (a
        # pod kept on its node by consolidation, one no new node can hold), whose spec
        # names only the claim.
        whose = f'persistentvolumeclaim "{claim}" is bound to persistentvolume "{volume_name}"'
        terms = _required_terms(volume)
        if terms is not None:
            choices.append((f"{whose}, whose node affinity does not match", terms))
        for key, value in sorted((volume["metadata"].get("labels") or {}).items()):
            if key in VOLUME_TOPOLOGY_LABELS:
                zones.append((key, frozenset(str(value).split("__")), whose))
        return None

    def _unbound(
        self,
        claim: Object,
        class_name: str,
        storage_class: Object,
        choices: list[tuple[str, tuple[Any, ...]]],
    ) -> str | None:
        options: list[Mapping[str, Any]] = []
        for volume in sorted(
            self.volumes.by_index(VOLUMES_BY_CLASS, class_name),
            key=lambda v: str(v["metadata"]["name"]),
        ):
            if not _could_bind(volume, claim):
                continue
            terms = _required_terms(volume)
            if terms is None:
                return None  # a volume usable on every node
            options.extend(terms)
        provisions = storage_class.get("provisioner") != NO_PROVISIONER
        if provisions:
            allowed = _topology_terms(storage_class)
            if allowed is None:
                return None  # provisioned wherever the pod goes
            options.extend(allowed)
        name = str(claim["metadata"]["name"])
        if not options:
            return (
                f'persistentvolumeclaim "{name}" is not bound and no persistentvolume of '
                f'storageclass "{class_name}" is available for it'
            )
        where = (
            "an available persistentvolume or the allowed topologies"
            if provisions
            else ("an available persistentvolume")
        )
        choices.append(
            (
                f'persistentvolumeclaim "{name}" (storageclass {class_name}): no node '
                f"affinity of {where} matches",
                tuple(options),
            )
        )
        return None
