"""What consolidation reads of a pool's Nodes: one ``NodeView`` per member Node, kept
between passes while the Node and the pods on it stay as they were.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Final

from nodepool_operator import timestamps
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.controllers import membership
from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.autoscaler.decide.consolidation_rules import (
    NodeView,
    annotations_of,
    usage_of,
)
from nodepool_operator.controllers.resources import PODS_BY_NODE
from nodepool_operator.runtime import nodes as k8s_nodes
from nodepool_operator.runtime import pods
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.informer import Informer

__all__ = ["NodeViews"]

#: Views of Nodes that are gone are dropped once the kept views outnumber twice the
#: Nodes by this many.
_VIEWS_SLACK: Final = 64


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
        # them have not changed: at half of bench/scale.py's size, reading every view again
        # was a tenth of the operator's CPU in a burst (py-spy).
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
        since = annotations_of(node).get(autoscaler_api.UNNEEDED_SINCE_ANNOTATION)
        registered = not nodepool_api.is_unregistered(node)
        removed = nodepool_api.is_being_removed(node)
        ready, cordoned = k8s_nodes.is_ready(node), bool(spec.get("unschedulable"))
        return NodeView(
            name=name,
            obj=node,
            to_move=tuple(p for p in bound if not pods.is_daemon_or_mirror(p)),
            usage=usage,
            since=timestamps.parse_rfc3339(since),
            tainted=any(t.get("key") == autoscaler_api.CONSOLIDATING_TAINT_KEY for t in taints),
            eligible=(
                k8s_nodes.is_ready(node)
                and not spec.get("unschedulable")
                and registered
                and nodepool_api.do_not_disrupt_reason(node, node=True) is None
                and not removed
            ),
            stalled=registered and not removed and not ready,
            gives_room=ready and not cordoned and registered and not removed,
            removing=removed,
        )
