"""One pass of consolidation over a pool: read its Nodes, choose those that can go with the
scheduling simulation, and move each through stamp, taint and name as its timers and
budgets allow.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from nodepool_operator import timestamps
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.controllers.autoscaler import metrics, simulation
from nodepool_operator.controllers.autoscaler.consolidation.marks import NodeMarks
from nodepool_operator.controllers.autoscaler.consolidation.rules import (
    Kept,
    NodeView,
    Review,
    annotations_of,
    budget_problem,
    choose,
    pod_key,
    unneeded_timers,
    usage_of,
    why_it_goes,
    within_limits,
)
from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.resources import NODES_BY_POOL, PODS_BY_NODE
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import errors, pods
from nodepool_operator.runtime import nodes as k8s_nodes
from nodepool_operator.runtime.client import Client, Object, Resource
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import Informer

__all__ = ["PDBS", "Consolidator"]

log = logging.getLogger(__name__)

PDBS: Final = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True)

#: Blockers during which the timers start over: scale-down is off, or a scale-up is
#: settling (no Node is given up shortly after the pool grew). A Pending request or pods
#: the scheduler has not placed yet only hold the timers: an eviction's replacement pod
#: must not restart every other candidate's wait.
_RESETS: Final = frozenset({"disabled", "capacity-in-flight"})

#: Seconds after a taint is written until the decision is checked again.
_RECHECK_SECONDS: Final = 1.0
#: Views of Nodes that are gone are dropped once the kept views outnumber twice the
#: Nodes by this many.
_VIEWS_SLACK: Final = 64


class Consolidator(NodeMarks):
    """Finds one pool's Nodes that can go, and keeps their stamps and taints true."""

    def __init__(
        self,
        *,
        client: Client,
        nodes: Informer,
        pods: Informer,
        profile: Callable[[Mapping[str, Any]], PodProfile | str],
        recorder: EventRecorder,
        wall_clock: clock_module.WallClock,
    ) -> None:
        self.client = client
        self.nodes = nodes
        self.pods = pods
        self.profile = profile
        self.recorder = recorder
        self.wall_clock = wall_clock
        # Node -> (rule, pod) last told, so that a Node kept for the same reason scan after
        # scan is told once (a cache only: after a restart it is told once more).
        self._told: dict[str, tuple[str, str | None]] = {}
        # Node -> (its resourceVersion, its pods' index stamp, its view then). A pass runs
        # for every pool in every batch, and between two batches most Nodes and the pods on
        # them have not changed: at half of bench/scale.py's size, reading every view again
        # was a tenth of the operator's CPU in a burst (py-spy).
        self._views: dict[str, tuple[str, int, NodeView]] = {}

    # -- reading --------------------------------------------------------------------------

    def views(self, pool: str) -> list[NodeView]:
        found = [
            self._view(node)
            for node in self.nodes.by_index(NODES_BY_POOL, pool)
            if not node["metadata"].get("deletionTimestamp")
        ]
        if len(self._views) > 2 * len(self.nodes) + _VIEWS_SLACK:
            self._views = {n: v for n, v in self._views.items() if self.nodes.get(n) is not None}
        return sorted(found, key=lambda v: v.name)

    def _view(self, node: Object) -> NodeView:
        """The Node's view, kept while the Node (its resourceVersion) and the pods on it
        (their index stamp) stay as they were; a Node without a resourceVersion is not
        kept."""
        meta = node["metadata"]
        name, version = str(meta["name"]), str(meta.get("resourceVersion") or "")
        stamp = self.pods.index_stamp(PODS_BY_NODE, name)
        kept = self._views.get(name)
        if kept is not None and version and kept[0] == version and kept[1] == stamp:
            return kept[2]
        view = self._read_view(node)
        if version:
            self._views[name] = (version, stamp, view)
        return view

    def _read_view(self, node: Object) -> NodeView:
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
        return NodeView(
            name=name,
            obj=node,
            to_move=tuple(p for p in bound if not pods.is_daemon_or_mirror(p)),
            usage=usage,
            since=None if since is None else timestamps.parse_rfc3339(since),
            tainted=any(t.get("key") == autoscaler_api.CONSOLIDATING_TAINT_KEY for t in taints),
            eligible=(
                k8s_nodes.is_ready(node)
                and not spec.get("unschedulable")
                and not any(t.get("key") == nodepool_api.UNREGISTERED_TAINT_KEY for t in taints)
                and annotations_of(node).get(nodepool_api.DO_NOT_DISRUPT_ANNOTATION) != "true"
            ),
        )

    def _fits(
        self,
        views: Sequence[NodeView],
        cluster: Sequence[simulation.ExistingNode],
        daemon_sets: Sequence[simulation.DaemonSetView],
    ) -> Callable[[Sequence[NodeView]], tuple[str, str] | None]:
        # Nodes already leaving (tainted, cordoned) take no pod: never counted as room.
        leaving = {v.name for v in views if v.tainted or not v.eligible}

        def fits(chosen: Sequence[NodeView]) -> tuple[str, str] | None:
            going = leaving | {v.name for v in chosen}
            moving = [p for v in chosen for p in v.to_move]
            profiles = [self.profile(p) for p in moving]
            if any(not isinstance(p, PodProfile) for p in profiles):
                return pod_key(moving[0]), "its requests cannot be read"
            outcome = simulation.simulate(
                [p for p in profiles if isinstance(p, PodProfile)],
                nodes=[n for n in cluster if n.name not in going],
                pools=(),
                daemon_sets=daemon_sets,
            )
            if not outcome.unfit:
                return None
            first = min(outcome.unfit)
            return pod_key(moving[first]), outcome.unfit[first]

        return fits

    # -- one pass -------------------------------------------------------------------------

    async def review(
        self,
        autoscaler: Object,
        *,
        pool: str,
        room: int,
        policy: autoscaler_api.ScaleDownPolicy,
        blocked: str | None,
        cluster: Sequence[simulation.ExistingNode],
        daemon_sets: Sequence[simulation.DaemonSetView],
    ) -> Review:
        """One pass over the pool's Nodes (see the module docstring); ``room`` is how many
        Nodes the pool may still give up (target - minNodes)."""
        now = self.wall_clock.time()
        views = self.views(pool)
        if blocked in _RESETS:
            await self._clear_all(views, keep=frozenset())
            return Review()
        chosen, kept = choose(
            views,
            threshold=policy.utilization_threshold,
            fits=self._fits(views, cluster, daemon_sets),
        )
        key = str(autoscaler["metadata"]["name"])
        metrics.nodepool_autoscaler_consolidation_candidates.labels(key).set(len(chosen))
        names = frozenset(v.name for v in chosen)
        self._prune(names)
        await self._tell_kept(autoscaler, kept)
        await self._clear_all(views, keep=names)
        if blocked is not None:
            return Review(candidates=len(chosen))
        for view in chosen:
            if view.since is None:
                await self._stamp(view, now)
        expired, next_check = unneeded_timers(
            chosen, now=now, unneeded_seconds=policy.unneeded_seconds
        )
        to_taint = within_limits(
            [v for v in expired if not v.tainted],
            tainted=[v for v in views if v.tainted],
            room=room,
            max_concurrent=policy.max_concurrent,
        )
        # Budgets are read only for the Nodes about to be tainted or named: not every pass
        # for every candidate waiting for its turn.
        going = [*(v for v in expired if v.tainted), *to_taint]
        allowed = await self._budgets_allow(going, autoscaler)
        if allowed is None:
            return Review(candidates=len(chosen), next_check=next_check)
        return await self._name(allowed, candidates=len(chosen), next_check=next_check)

    async def _clear_all(self, views: Sequence[NodeView], *, keep: frozenset[str]) -> None:
        """Take the stamp and taint off every eligible Node not in ``keep``: it is needed
        again, or the timers start over."""
        for view in views:
            if view.eligible and view.name not in keep and (view.since is not None or view.tainted):
                await self._clear(view, since=None)

    async def _name(
        self, allowed: Sequence[NodeView], *, candidates: int, next_check: float | None
    ) -> Review:
        """Taint the ``allowed`` Nodes not tainted yet; name those whose taint is there."""
        tainted_now = 0
        for view in allowed:
            if not view.tainted and await self._taint(view):
                tainted_now += 1
        if tainted_now:
            # The watches do not wake us for our own taint: look again once it shows.
            next_check = min(next_check or _RECHECK_SECONDS, _RECHECK_SECONDS)
        return Review(
            victims=tuple(v.name for v in allowed if v.tainted),
            candidates=candidates,
            next_check=next_check,
            reasons={v.name: why_it_goes(v) for v in allowed if v.tainted},
        )

    async def _budgets_allow(
        self, expired: Sequence[NodeView], autoscaler: Object
    ) -> list[NodeView] | None:
        """Those of ``expired`` whose pods the budgets (read now) allow to move; None
        when the budgets cannot be read. Checked before the taint, so that a Node a budget
        keeps is not tainted in vain, and again once the taint is visible. A Node kept
        starts its timer over: the budget may allow it later."""
        namespaces = sorted(
            {str(p["metadata"].get("namespace", "")) for v in expired for p in v.to_move}
        )
        budgets = await self._budgets(namespaces)
        if budgets is None:
            return None
        allowed = []
        for view in expired:
            problem = budget_problem(view.to_move, budgets)
            if problem is None:
                allowed.append(view)
                continue
            pod, rule, why = problem
            await self._tell_kept(autoscaler, [Kept(view.name, rule, pod, f"pod {pod}: {why}")])
            await self._clear(view, since=self.wall_clock.time())
        return allowed

    async def _budgets(self, namespaces: Sequence[str]) -> list[Object] | None:
        found: list[Object] = []
        for namespace in namespaces:
            try:
                page = await self.client.list_page(PDBS, namespace=namespace)
            except errors.ApiError as error:
                log.warning("event=budgets-unreadable namespace=%s error=%r", namespace, error)
                return None
            for item in page.get("items") or ():
                item.setdefault("metadata", {}).setdefault("namespace", namespace)
                found.append(item)
        return found
