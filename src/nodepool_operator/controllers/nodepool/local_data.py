"""Pods whose data lives on their Node's own disk: a voluntary replacement waits for them.

A pod whose PersistentVolumeClaim is bound to a PersistentVolume that only its Node can
mount (a local volume: its node affinity names that Node, by ``kubernetes.io/hostname``
or by ``metadata.name``) cannot run anywhere else. Evicting it to replace the Node by
drift or expiry would leave it Pending for good and its data on a disk that goes with
the VM. So such a Node is held, like one with a do-not-disrupt pod, and the event names
the pod, its claim and the volume. The roll goes on by itself once nothing on the Node
keeps data there any more (its owner moved the data and the pod and claim are gone).
A spot interruption is not held: the cloud takes the VM whatever anyone says.

Read from the shared claim and volume caches (the Autoscaler's scheduling simulation
reads the same ones); a claim or volume not in the cache holds nothing: what is not
known to pin a pod is not guessed to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from nodepool_operator.runtime.informer import Informer

__all__ = ["HOSTNAME_LABEL", "LocalData", "pinned_to"]

HOSTNAME_LABEL: Final = "kubernetes.io/hostname"


def _names_in(term: Mapping[str, Any]) -> frozenset[str] | None:
    """The node names (hostnames) one node selector term allows, when it names nodes one
    by one (an ``In`` on the hostname label or on ``metadata.name``); None otherwise."""
    named: frozenset[str] | None = None
    for kind in ("matchExpressions", "matchFields"):
        for expression in term.get(kind) or ():
            key = expression.get("key")
            if (kind, key) not in {
                ("matchExpressions", HOSTNAME_LABEL),
                ("matchFields", "metadata.name"),
            }:
                continue
            if expression.get("operator") != "In":
                continue
            values = frozenset(str(v) for v in expression.get("values") or ())
            named = values if named is None else named & values
    return named


def pinned_to(volume: Mapping[str, Any]) -> frozenset[str] | None:
    """The nodes (by name or hostname) that alone can mount ``volume``, when its required
    node affinity names them one by one in every term (a local volume); None when it is
    not tied to named nodes (a zonal or network volume, or no affinity at all)."""
    required = (((volume.get("spec") or {}).get("nodeAffinity") or {}).get("required")) or {}
    terms = required.get("nodeSelectorTerms") or ()
    if not terms:
        return None
    allowed: set[str] = set()
    for term in terms:
        names = _names_in(term)
        if names is None:
            return None  # one term that admits nodes by other labels: not node-local
        allowed |= names
    return frozenset(allowed)


def _claim_names(pod: Mapping[str, Any]) -> Iterable[str]:
    name = str((pod.get("metadata") or {}).get("name", ""))
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        claim = volume.get("persistentVolumeClaim")
        if claim is not None:
            yield str(claim.get("claimName", ""))
        elif volume.get("ephemeral") is not None:
            yield f"{name}-{volume.get('name', '')}"  # a generic ephemeral volume's claim


@dataclass(frozen=True)
class LocalData:
    """Reads, from the caches, which pods keep their data on their Node's disk."""

    claims: Informer
    volumes: Informer

    def holder(self, node: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> str | None:
        """Why ``node`` must not be replaced voluntarily: the first pod on it (by name)
        whose claim is bound to a volume only this Node can mount; None when there is none."""
        meta = node.get("metadata") or {}
        here = {str(meta.get("name", "")), str((meta.get("labels") or {}).get(HOSTNAME_LABEL, ""))}
        here.discard("")
        for pod in sorted(pods, key=_pod_key):
            namespace = str((pod.get("metadata") or {}).get("namespace", ""))
            for claim_name in _claim_names(pod):
                claim = self.claims.get(claim_name, namespace)
                volume_name = ((claim or {}).get("spec") or {}).get("volumeName")
                if not volume_name:
                    continue
                volume = self.volumes.get(str(volume_name))
                pinned = None if volume is None else pinned_to(volume)
                if pinned is not None and pinned & here:
                    return (
                        f"pod {_pod_key(pod)} keeps its data on this node's disk "
                        f"(claim {claim_name}, local PersistentVolume {volume_name}): "
                        "it can run on no other node"
                    )
        return None


def _pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
