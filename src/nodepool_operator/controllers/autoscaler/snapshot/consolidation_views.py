"""What consolidation reads of a pool's Nodes: one ``NodeView`` per member Node (how used
it is, ``usage_of``; its marks; the pods a drain would move), kept between passes while
the Node and the pods on it stay as they were.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from nodepool_operator import timestamps
from nodepool_operator.api import quantity, wellknown
from nodepool_operator.controllers import membership
from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.resources import PODS_BY_NODE
from nodepool_operator.runtime import nodes as k8s_nodes
from nodepool_operator.runtime import pods
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.informer import Informer

__all__ = ["NodeView", "NodeViews", "annotations_of", "usage_of"]

#: Views of Nodes that are gone are dropped once the kept views outnumber twice the
#: Nodes by this many.
_VIEWS_SLACK: Final = 64


@dataclass(frozen=True)
class NodeView:
    """One of the pool's Nodes as consolidation sees it."""

    name: str
    obj: Object
    to_move: tuple[Object, ...]  # pods a drain would evict
    usage: float  # the larger of its requested cpu and memory shares of allocatable
    since: float | None  # UNNEEDED_SINCE_ANNOTATION, seconds since the epoch
    tainted: bool  # carries CONSOLIDATING_TAINT_KEY
    eligible: bool  # Ready, registered, schedulable, not do-not-disrupt itself
    # Registered and NotReady (a blip), not being removed: its own timer starts over.
    stalled: bool = False
    # Takes pods: Ready, registered, schedulable, not on its way out. A Node that is only
    # not eligible (do-not-disrupt, preemption making room on it) still gives room.
    gives_room: bool = True
    # The NodePool controller is draining it or has deleted its VM: its marks are its own.
    removing: bool = False
    # Uses its pool's disruption budget (``wellknown.is_being_disrupted``): our taint, the
    # NodePool controller's drift or expiry taint, or on its way out.
    disrupting: bool = False

    @property
    def empty(self) -> bool:
        return not self.to_move


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _share(requested: int, allocatable: int) -> float:
    return requested / allocatable if allocatable > 0 else 1.0


def usage_of(node: Mapping[str, Any], profiles: Iterable[PodProfile]) -> float:
    """The larger of the node's requested cpu and memory, each over its allocatable."""
    reported = (node.get("status") or {}).get("allocatable") or {}
    try:
        cpu = quantity.parse_cpu_millicores(str(reported.get("cpu", "0")))
        memory = quantity.parse_memory_bytes(str(reported.get("memory", "0")))
    except ValueError:
        return 1.0  # unreadable: never judged underused
    used_cpu = used_memory = 0
    for profile in profiles:
        used_cpu += profile.requests.get("cpu", 0)
        used_memory += profile.requests.get("memory", 0)
    return max(_share(used_cpu, cpu), _share(used_memory, memory))


class NodeViews:
    """Reads the pool's member Nodes (``membership``: the one rule both controllers use)
    as consolidation sees them."""

    def __init__(
        self,
        *,
        nodes: Informer,
        pods: Informer,
        profile: Callable[[Mapping[str, Any]], PodProfile | str],
    ) -> None:
        self.nodes = nodes
        self.pods = pods
        self.profile = profile
        # Node -> (its resourceVersion, its pods' index stamp, its view then). A pass runs
        # for every pool in every batch, and between two batches most Nodes and the pods on
        # them have not changed: a view is read again only when either moved
        # (docs/performance.md has what that saves).
        self._views: dict[str, tuple[str, int, NodeView]] = {}

    def of_pool(
        self,
        pool: str,
        *,
        pool_uid: str | None,
        leaving: frozenset[str] = frozenset(),
        held: frozenset[str] = frozenset(),
    ) -> list[NodeView]:
        """The views of the pool's member Nodes not being deleted, by name; those in
        ``leaving`` (named by an open request already) are not eligible and give no room,
        those ``held`` (preemption makes room on them) are not eligible."""
        found = [
            self.view(node)
            for node in membership.members(self.nodes, pool_name=pool, pool_uid=pool_uid)
            if not node["metadata"].get("deletionTimestamp")
        ]
        found = [
            dataclasses.replace(v, eligible=False, gives_room=False)
            if v.name in leaving
            else dataclasses.replace(v, eligible=False)
            if v.name in held and v.eligible
            else v
            for v in found
        ]
        if len(self._views) > 2 * len(self.nodes) + _VIEWS_SLACK:
            self._views = {n: v for n, v in self._views.items() if self.nodes.get(n) is not None}
        return sorted(found, key=lambda v: v.name)

    def deleting(self, pool: str, *, pool_uid: str | None) -> int:
        """How many of the pool's member Nodes are being deleted (not among ``of_pool``'s
        views): they still use the pool's disruption budget."""
        return sum(
            1
            for node in membership.members(self.nodes, pool_name=pool, pool_uid=pool_uid)
            if node["metadata"].get("deletionTimestamp")
        )

    def view(self, node: Object) -> NodeView:
        """The Node's view, kept while the Node (its resourceVersion) and the pods on it
        (their index stamp) stay as they were; a Node without a resourceVersion is not
        kept."""
        meta = node["metadata"]
        name, version = str(meta["name"]), str(meta.get("resourceVersion") or "")
        stamp = self.pods.index_stamp(PODS_BY_NODE, name)
        kept = self._views.get(name)
        if kept is not None and version and kept[0] == version and kept[1] == stamp:
            return kept[2]
        view = self._read(node)
        if version:
            self._views[name] = (version, stamp, view)
        return view

    def _read(self, node: Object) -> NodeView:
        name = str(node["metadata"]["name"])
        bound = [
            p
            for p in self.pods.by_index(PODS_BY_NODE, name)
            if not pods.is_terminal(p) and not p["metadata"].get("deletionTimestamp")
        ]
        profiles = [self.profile(p) for p in bound]
        readable = [p for p in profiles if isinstance(p, PodProfile)]
        usage = usage_of(node, readable) if len(readable) == len(profiles) else 1.0
        spec = node.get("spec") or {}
        taints = spec.get("taints") or ()
        since = annotations_of(node).get(wellknown.UNNEEDED_SINCE_ANNOTATION)
        registered = not wellknown.is_unregistered(node)
        removed = wellknown.is_being_removed(node)
        # Tainted by the NodePool controller for its replacement (drift, expiry): not
        # cordoned, but a request naming it would collide with that replacement. Our own
        # taint counts as being disrupted too, and such a Node stays ours to name.
        replaced = any(t.get("key") == wellknown.DISRUPTED_TAINT_KEY for t in taints)
        ready, cordoned = k8s_nodes.is_ready(node), bool(spec.get("unschedulable"))
        return NodeView(
            name=name,
            obj=node,
            to_move=tuple(p for p in bound if not pods.is_daemon_or_mirror(p)),
            usage=usage,
            since=timestamps.parse_rfc3339(since),
            tainted=any(t.get("key") == wellknown.CONSOLIDATING_TAINT_KEY for t in taints),
            eligible=(
                k8s_nodes.is_ready(node)
                and not spec.get("unschedulable")
                and registered
                and wellknown.do_not_disrupt_reason(node, node=True) is None
                and not removed
                and not replaced
            ),
            stalled=registered and not removed and not ready,
            gives_room=ready and not cordoned and registered and not removed,
            removing=removed,
            disrupting=wellknown.is_being_disrupted(node),
        )
