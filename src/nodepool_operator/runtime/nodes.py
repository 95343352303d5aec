"""Facts about Nodes that every controller reading them needs, in one place."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["is_ready"]


def is_ready(node: Mapping[str, Any]) -> bool:
    """The kubelet (or kwok) reports the Node Ready; a Node without the condition is not."""
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False
