"""One pass of consolidation over a pool, in three steps a reader can follow: read the
pool's Nodes (``views``), decide (``decide``, pure: the budgets are read between its two
steps, for the few Nodes about to be tainted or named), act (``marks``, the only writer).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from nodepool_operator import timestamps
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.controllers.autoscaler import metrics, simulation
from nodepool_operator.controllers.autoscaler.consolidation import decide
from nodepool_operator.controllers.autoscaler.consolidation.marks import NodeMarks
from nodepool_operator.controllers.autoscaler.consolidation.rules import NodeView, Review, pod_key
from nodepool_operator.controllers.autoscaler.consolidation.views import NodeViews
from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import errors
from nodepool_operator.runtime.client import Client, Object, Resource
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import Informer

__all__ = ["PDBS", "Consolidator", "PoolTurn"]

log = logging.getLogger(__name__)

PDBS: Final = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True)

#: Seconds after a taint is written until the decision is checked again.
_RECHECK_SECONDS: Final = 1.0


@dataclass(frozen=True)
class PoolTurn:
    """What one pass over a pool needs to know of its pool and Autoscaler."""

    pool: str
    pool_uid: str | None
    room: int  # how many Nodes the pool may still give up (target - minNodes)
    policy: autoscaler_api.ScaleDownPolicy
    blocked: str | None  # why no Node may be given up now (``plan.scale_down_blocker``)
    dry_run: bool = False


class Consolidator:
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
        self.profile = profile
        self.wall_clock = wall_clock
        self.views = NodeViews(nodes=nodes, pods=pods, profile=profile)
        self.marks = NodeMarks(client=client, nodes=nodes, recorder=recorder)

    async def review(
        self,
        autoscaler: Object,
        turn: PoolTurn,
        *,
        cluster: Sequence[simulation.ExistingNode],
        daemon_sets: Sequence[simulation.DaemonSetView],
    ) -> Review:
        """One pass over the pool's Nodes (see the package docstring). A dry run writes
        nothing but the removal of marks left from before, and previews what would go."""
        now = self.wall_clock.time()
        views = self.views.of_pool(turn.pool, pool_uid=turn.pool_uid)
        fits = self._fits(views, cluster, daemon_sets)
        per_request = scalerequest_api.MAX_REMOVE_NODES
        if turn.dry_run:
            previewed = decide.preview(
                views,
                threshold=turn.policy.utilization_threshold,
                room=turn.room,
                per_request=per_request,
                fits=fits,
            )
            await self.marks.apply(decide.stale_marks(views), autoscaler=None, now=now)
            return previewed
        decided = decide.decide(
            views,
            now=now,
            threshold=turn.policy.utilization_threshold,
            unneeded_seconds=turn.policy.unneeded_seconds,
            max_concurrent=turn.policy.max_concurrent,
            room=turn.room,
            per_request=per_request,
            blocked=turn.blocked,
            active_since=active_since(autoscaler),
            fits=fits,
        )
        key = str(autoscaler["metadata"]["name"])
        metrics.nodepool_autoscaler_consolidation_candidates.labels(key).set(
            decided.review.candidates
        )
        self.marks.prune(decided.chosen)
        budgets = await self._budgets(decided.going) if decided.going else None
        marks, review = decide.judge_budgets(
            decided, budgets, now=now, recheck_seconds=_RECHECK_SECONDS
        )
        await self.marks.apply(marks, autoscaler=autoscaler, now=now)
        return review

    async def clear_unwatched(self, watched: Iterable[str]) -> None:
        """Take every consolidation mark off the Nodes of pools no Autoscaler reviews
        (``watched``: the pools some Autoscaler does): the Autoscaler was deleted or
        repointed. A Node being drained is the NodePool controller's and keeps its
        marks."""
        acting = set(watched)
        stale = [
            self.views.view(node)
            for node in self.nodes.items()
            if _marked(node) and nodepool_api.pool_of(node) not in acting
        ]
        if stale:
            await self.marks.apply(
                decide.stale_marks(stale), autoscaler=None, now=self.wall_clock.time()
            )

    async def announce(self, review: Review, *, request: str) -> None:
        await self.marks.announce(review, request=request)

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

    async def _budgets(self, going: Sequence[NodeView]) -> list[Object] | None:
        """The PodDisruptionBudgets of the namespaces of ``going``'s pods, read now; None
        when they cannot be read (nothing is tainted or named then)."""
        namespaces = sorted(
            {str(p["metadata"].get("namespace", "")) for v in going for p in v.to_move}
        )
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


def active_since(autoscaler: Mapping[str, Any]) -> float | None:
    """When scale-down last became possible for this Autoscaler, as the world records it:
    its creation, or its dry run turned off (the ``DryRun`` condition's last transition to
    False). A stamp older than that was not watched all along, and starts over."""
    meta = autoscaler.get("metadata") or {}
    moments = [timestamps.parse_rfc3339(meta.get("creationTimestamp"))]
    status = autoscaler.get("status") or {}
    for condition in status.get("conditions") or ():
        if condition.get("type") == "DryRun" and condition.get("status") == "False":
            moments.append(timestamps.parse_rfc3339(condition.get("lastTransitionTime")))
    known = [m for m in moments if m is not None]
    return max(known) if known else None


def _marked(node: Mapping[str, Any]) -> bool:
    meta = node.get("metadata") or {}
    if autoscaler_api.UNNEEDED_SINCE_ANNOTATION in (meta.get("annotations") or {}):
        return True
    taints = (node.get("spec") or {}).get("taints") or ()
    return any(t.get("key") == autoscaler_api.CONSOLIDATING_TAINT_KEY for t in taints)
