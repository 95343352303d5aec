"""When a pool's Node counts as unhealthy: one rule for the NodePool controller, which
replaces it, and the Autoscaler, which plans it as no capacity meanwhile.

A Node is unhealthy once it has been NotReady for ``notReadyTimeoutSeconds`` (or never
reported Ready within ``registrationTimeoutSeconds`` of its creation), or once it still
carries the unregistered taint or one of its template's startup taints at its creation
plus ``registrationTimeoutSeconds``, Ready or not: its kubelet never showed it is there,
or an agent it needs (a CNI, a device plugin) never finished, as for a VM that never
registered. A Node carrying the cloud's notice that it takes the VM back (a spot
interruption, a scheduled change, the instance stopping: ``interruptions.notice``) is
unhealthy from the notice on, Ready or not: it is replaced now, not once the VM is gone.
A rebalance recommendation is no such notice. Every deadline is read from the Node (its
conditions' ``lastTransitionTime``, its ``creationTimestamp``, the notice's annotations):
a restarted operator finds the same ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodepool_operator import timestamps
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.interruptions import notice
from nodepool_operator.runtime import nodes

__all__ = ["interrupted_at", "is_unhealthy", "startup_taints_left", "unhealthy_from"]


def startup_taints_left(node: Mapping[str, Any], template: nodepool_api.NodeTemplate) -> list[str]:
    """The keys of the template's startup taints the Node still carries: the agents that
    remove them (a CNI, a device plugin) have not finished there."""
    if not template.startup_taints:
        return []
    wanted = {(t.key, t.effect) for t in template.startup_taints}
    carried = (node.get("spec") or {}).get("taints") or ()
    return sorted({str(t.get("key")) for t in carried if (t.get("key"), t.get("effect")) in wanted})


def interrupted_at(node: Mapping[str, Any]) -> float | None:
    """When the cloud gave notice that it takes the Node's VM back; None without a notice
    that ends the VM (none, a rebalance recommendation, or one whose time is unreadable)."""
    found = notice.read(node)
    if found is None or found.kind == notice.REBALANCE:
        return None
    return found.noticed_at


def unhealthy_from(node: Mapping[str, Any], spec: nodepool_api.NodePoolSpec) -> float | None:
    """When the pool's ``node`` counts as unhealthy (seconds since the epoch); None when
    it does not, or when the time cannot be read: nothing is replaced on a guess."""
    interrupted = interrupted_at(node)
    if interrupted is not None:
        return interrupted
    at = nodes.unhealthy_from(
        node,
        not_ready_seconds=spec.not_ready_timeout_seconds,
        registration_seconds=spec.registration_timeout_seconds,
    )
    if not wellknown.is_unregistered(node) and not startup_taints_left(node, spec.template):
        return at
    created = timestamps.parse_rfc3339(
        str((node.get("metadata") or {}).get("creationTimestamp", ""))
    )
    if created is None:
        return at
    registration = created + spec.registration_timeout_seconds
    return registration if at is None else min(at, registration)


def is_unhealthy(node: Mapping[str, Any], spec: nodepool_api.NodePoolSpec, *, now: float) -> bool:
    at = unhealthy_from(node, spec)
    return at is not None and now >= at
