"""Pending pods as the planner finds them, and their parsed profiles.

The pending index files every pod the scheduler has not bound under its namespace and
under ``ALL_NAMESPACES``; profiles are parsed once per (uid, resourceVersion).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from nodepool_operator.controllers.autoscaler import constraints
from nodepool_operator.controllers.autoscaler.constraints import PodProfile, pending_pods
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.lru import Bounded

__all__ = [
    "ALL_NAMESPACES",
    "DEFAULT_EXPENDABLE_PRIORITY",
    "NOMINATED_INDEX",
    "PENDING_INDEX",
    "ProfileCache",
    "daemon_set_of",
    "nominated_index",
    "pending_index",
]

# Index names are our own, so that another controller's index of the same informer
# (which may compute something else under a common name) is never mistaken for ours.
PENDING_INDEX: Final = "autoscaler-pending"
#: Pending pods with a nominated node, of every namespace, all under ``ALL_NAMESPACES``.
NOMINATED_INDEX: Final = "autoscaler-nominated"
#: Every pending pod is also filed under this value; no namespace has an empty name.
ALL_NAMESPACES: Final = ""

DEFAULT_CACHE_SIZE: Final = 100_000
#: Pods below this priority never trigger a scale-up (cluster-autoscaler's default).
DEFAULT_EXPENDABLE_PRIORITY: Final = -10


def pending_index(pod: Object) -> list[str]:
    if not pending_pods.is_pending_unbound(pod):
        return []
    return [str(pod["metadata"].get("namespace", "")), ALL_NAMESPACES]


def nominated_index(pod: Object) -> list[str]:
    if not pending_pods.is_pending_unbound(pod) or pending_pods.nominated_node(pod) is None:
        return []
    return [ALL_NAMESPACES]


def daemon_set_of(pod: Mapping[str, Any]) -> str | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("kind") == "DaemonSet":
            return str(ref.get("uid", ""))
    return None


class ProfileCache:
    """Parsed pod profiles by (uid, resourceVersion); least recently used out first.

    Replicas have equal profiles, and hold one profile object between them: memory for
    tens of thousands of pods stays that of their few distinct shapes, and the
    simulation's memos by profile are shared too.
    """

    def __init__(self, size: int = DEFAULT_CACHE_SIZE) -> None:
        self._entries: Bounded[tuple[str, str], PodProfile | str] = Bounded(size)
        self._distinct: Bounded[PodProfile, PodProfile] = Bounded(size)

    def get(
        self,
        obj: Mapping[str, Any],
        parse: Callable[[Mapping[str, Any]], PodProfile] = constraints.profile_of,
    ) -> PodProfile | str:
        """The object's profile, or why it cannot be read (a malformed quantity)."""
        meta = obj.get("metadata") or {}
        key = (str(meta.get("uid", "")), str(meta.get("resourceVersion", "")))
        found = self._entries.get(key)
        if found is not None:
            return found
        try:
            value: PodProfile | str = parse(obj)
        except (ValueError, TypeError) as error:
            value = f"has a request that cannot be read: {error}"
        if isinstance(value, PodProfile):
            value = self._distinct.get(value) or value
            self._distinct[value] = value
        self._entries[key] = value
        return value
