"""Facts about Nodes that every controller reading them needs, in one place."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodepool_operator.runtime import conditions

__all__ = ["is_ready", "is_unhealthy"]


def is_ready(node: Mapping[str, Any]) -> bool:
    """The kubelet (or kwok) reports the Node Ready; a Node without the condition is not."""
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def is_unhealthy(
    node: Mapping[str, Any], *, now: float, not_ready_seconds: float, registration_seconds: float
) -> bool:
    """Not Ready for too long: ``not_ready_seconds`` since its Ready condition last changed,
    or ``registration_seconds`` since it was registered when it never reported one.

    Such a node is replaced (Karpenter's node repair, cluster-autoscaler's unregistered
    and unready nodes), and counts for nothing meanwhile. A time that cannot be read makes
    no node unhealthy: nothing is replaced on a guess.
    """
    if is_ready(node):
        return False
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            since = conditions.parse_rfc3339(str(condition.get("lastTransitionTime", "")))
            return since is not None and now - since >= not_ready_seconds
    created = conditions.parse_rfc3339(
        str((node.get("metadata") or {}).get("creationTimestamp", ""))
    )
    return created is not None and now - created >= registration_seconds
