"""Facts about Nodes that every controller reading them needs, in one place."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodepool_operator import timestamps

__all__ = ["is_ready", "is_unhealthy", "unhealthy_from"]


def is_ready(node: Mapping[str, Any]) -> bool:
    """The kubelet (or kwok) reports the Node Ready; a Node without the condition is not."""
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def unhealthy_from(
    node: Mapping[str, Any], *, not_ready_seconds: float, registration_seconds: float
) -> float | None:
    """When a Node not Ready now counts as unhealthy (seconds since the epoch): its Ready
    condition's last change plus ``not_ready_seconds``, or its creation plus
    ``registration_seconds`` when it never reported one. None when it is Ready, or when
    the time cannot be read: nothing is replaced on a guess.
    """
    if is_ready(node):
        return None
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            since = timestamps.parse_rfc3339(str(condition.get("lastTransitionTime", "")))
            return None if since is None else since + not_ready_seconds
    created = timestamps.parse_rfc3339(
        str((node.get("metadata") or {}).get("creationTimestamp", ""))
    )
    return None if created is None else created + registration_seconds


def is_unhealthy(
    node: Mapping[str, Any], *, now: float, not_ready_seconds: float, registration_seconds: float
) -> bool:
    """Not Ready for too long (``unhealthy_from``): such a node is replaced (Karpenter's
    node repair, cluster-autoscaler's unregistered and unready nodes), and counts for
    nothing meanwhile."""
    since = unhealthy_from(
        node, not_ready_seconds=not_ready_seconds, registration_seconds=registration_seconds
    )
    return since is not None and now >= since
