"""Facts about Pods that every controller reading them needs, in one place."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["MIRROR_POD_ANNOTATION", "is_daemon_or_mirror", "is_terminal", "node_name_index"]

MIRROR_POD_ANNOTATION: Final = "kubernetes.io/config.mirror"


def is_terminal(pod: Mapping[str, Any]) -> bool:
    """Finished for good: its containers will not run again."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_daemon_or_mirror(pod: Mapping[str, Any]) -> bool:
    """Pods that come with every node (DaemonSet or static pods): a node running only
    these is empty, and a drain leaves them where they are."""
    meta = pod.get("metadata") or {}
    if MIRROR_POD_ANNOTATION in (meta.get("annotations") or {}):
        return True
    return any(ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or ())


def node_name_index(pod: Mapping[str, Any]) -> list[str]:
    """Index function of the Pods an informer holds by the Node they are bound to."""
    node = (pod.get("spec") or {}).get("nodeName")
    return [str(node)] if node else []
