"""When a pool's Node counts as unhealthy (the NodePool controller's repair replaces it),
and when it counts as no capacity (the Autoscaler plans around it meanwhile).

A Node is unhealthy once it has been NotReady for ``notReadyTimeoutSeconds`` (or never
reported Ready within ``registrationTimeoutSeconds`` of its creation), or once it still
carries the unregistered taint or one of its template's startup taints at its creation
plus ``registrationTimeoutSeconds``, Ready or not: its kubelet never showed it is there,
or an agent it needs (a CNI, a device plugin) never finished, as for a VM that never
registered: ``unhealthy_from``, what repair reads.

A Node carrying the cloud's notice that it takes the VM back (a spot interruption, a
scheduled change, the instance stopping: ``wellknown.interrupted_at``) is not broken, and
not repair's: the pool's disruption replaces it (reason ``Interrupted``: replacement
launched at once, drained at once). It is no capacity from the notice on, Ready or not,
as an unhealthy Node is: ``is_unhealthy``, what the Autoscaler reads, says so of both. A
rebalance recommendation is no such notice. Every deadline is read from the Node (its
conditions' ``lastTransitionTime``, its ``creationTimestamp``, the notice's annotations):
a restarted operator finds the same ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodepool_operator import timestamps
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.runtime import nodes

__all__ = [
    "interrupted_at",
    "is_unhealthy",
    "no_capacity_from",
    "startup_taints_left",
    "unhealthy_from",
]


def startup_taints_left(node: Mapping[str, Any], template: nodepool_api.NodeTemplate) -> list[str]:
    """The keys of the template's startup taints the Node still carries: the agents that
    remove them (a CNI, a device plugin) have not finished there."""
    if not template.startup_taints:
        return []
    wanted = {(t.key, t.effect) for t in template.startup_taints}
    carried = (node.get("spec") or {}).get("taints") or ()
    return sorted({str(t.get("key")) for t in carried if (t.get("key"), t.get("effect")) in wanted})


#: When the cloud gave notice that it takes the Node's VM back (None: no such notice).
interrupted_at = wellknown.interrupted_at


def unhealthy_from(node: Mapping[str, Any], spec: nodepool_api.NodePoolSpec) -> float | None:
    """When the pool's ``node`` counts as unhealthy (seconds since the epoch); None when
    it does not, or when the time cannot be read: nothing is replaced on a guess. A
    noticed Node is judged here as any other (it is disruption's, not repair's)."""
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


def no_capacity_from(node: Mapping[str, Any], spec: nodepool_api.NodePoolSpec) -> float | None:
    """From when the pool's ``node`` holds no capacity to plan on: the cloud's notice, or
    ``unhealthy_from``, whichever comes first."""
    found = [at for at in (interrupted_at(node), unhealthy_from(node, spec)) if at is not None]
    return min(found) if found else None


def is_unhealthy(node: Mapping[str, Any], spec: nodepool_api.NodePoolSpec, *, now: float) -> bool:
    """The Node is no capacity at ``now``: unhealthy, or noticed by the cloud (the
    Autoscaler's reading; repair reads ``unhealthy_from``)."""
    at = no_capacity_from(node, spec)
    return at is not None and now >= at
