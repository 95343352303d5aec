"""Consolidation by price, the reading side: for one pool, the replacement under way and
its next step, read from the world (the victims' marks, the pool's ScaleRequests and
Nodes), and a new replacement looked for with the catalog's prices. The decisions are
``decide.consolidation_replace``'s (pure); ``consolidator`` runs this once per batch,
beside the removal choice.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import disruption as disruption_api
from nodepool_operator.cloud.catalog import Catalog
from nodepool_operator.controllers import membership, offerings
from nodepool_operator.controllers.autoscaler import simulation
from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.autoscaler.decide import (
    consolidation_choice,
    consolidation_replace,
    consolidation_rules,
)
from nodepool_operator.controllers.autoscaler.decide.consolidation_proof import Proof
from nodepool_operator.controllers.autoscaler.decide.consolidation_replace import (
    Replacement,
    Unreplaceable,
)
from nodepool_operator.controllers.autoscaler.simulation.offering_plan import OfferingPool
from nodepool_operator.controllers.autoscaler.snapshot.consolidation_views import NodeView
from nodepool_operator.controllers.resources import REQUESTS_BY_POOL
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.informer import Informer

__all__ = ["Replacer", "Turn", "under_way"]


class Turn(Protocol):
    """What a replacement needs of the pool's turn (``consolidator.PoolTurn``)."""

    @property
    def pool(self) -> str: ...
    @property
    def pool_uid(self) -> str | None: ...
    @property
    def blocked(self) -> str | None: ...
    @property
    def room(self) -> int: ...
    @property
    def headroom(self) -> int: ...
    @property
    def budgets(self) -> consolidation_choice.PoolBudgets: ...
    @property
    def policy(self) -> autoscaler_api.ScaleDownPolicy: ...


class Replacer:
    """Reads what consolidation by price needs, for one pool at a time."""

    def __init__(
        self,
        *,
        nodes: Informer,
        requests: Informer | None,
        catalog: Callable[[], Catalog | None] | None,
        profile: Callable[[Mapping[str, Any]], PodProfile | str],
        wall_clock: clock_module.WallClock,
    ) -> None:
        """``requests``: the ScaleRequests (indexed by pool), which say whether a
        replacement was asked for; ``catalog``: the catalog last read (None: not read
        yet), whose prices the Nodes a replacement would replace are judged by. Without
        either, nothing is replaced (only removed)."""
        self.nodes = nodes
        self.requests = requests
        self.catalog = catalog
        self.profile = profile
        self.wall_clock = wall_clock

    def hidden(
        self,
        views: Sequence[NodeView],
        replacing: Replacement | None,
        *,
        pool: str,
        pool_uid: str | None,
    ) -> list[NodeView]:
        """``views`` as the removal choice sees them: a replacement's victims and its new
        Node are not candidates while it is under way (the new Node would be the emptiest
        of all until the victims' pods move to it)."""
        if replacing is None:
            return list(views)
        members = membership.members(self.nodes, pool_name=pool, pool_uid=pool_uid)
        new = consolidation_replace.replacement_node(replacing, members)
        out = {*replacing.victims, *((new[0],) if new else ())}
        return [dataclasses.replace(v, eligible=False) if v.name in out else v for v in views]

    async def step(
        self,
        turn: Turn,
        replacing: Replacement,
        views: Sequence[NodeView],
        fits: Proof,
    ) -> consolidation_replace.Step | Unreplaceable:
        """The next step of the replacement under way, from the world; once its new Node is
        Ready, the victims' pods are proved again on the Nodes that stay (the new one
        among them): ``name`` when they fit."""
        requested = consolidation_replace.request_state(replacing, self._requests_of(turn.pool))
        if isinstance(requested, Unreplaceable):
            return requested
        members = list(membership.members(self.nodes, pool_name=turn.pool, pool_uid=turn.pool_uid))
        step = consolidation_replace.next_step(
            replacing,
            views=views,
            nodes=members,
            requested=requested,
            settled=turn.blocked is None,
        )
        if step != "recheck":
            return step
        victims = [v for v in views if v.name in replacing.victims]
        unfit = await asyncio.to_thread(fits.unfit_together, victims)
        if unfit is None:
            return "name"
        pod, why = unfit
        return Unreplaceable(
            replacing.victims,
            f"their pods no longer fit on the nodes that stay and the new one: pod {pod}: {why}",
            backs_off=True,
        )

    async def propose(
        self,
        turn: Turn,
        choice: consolidation_choice.Choice,
        pool: OfferingPool,
        cluster: Sequence[simulation.ExistingNode],
        daemon_sets: Sequence[simulation.DaemonSetView],
    ) -> Replacement | Unreplaceable | None:
        """One cheaper Node for the pool's Nodes kept for lack of room (their pods fit on
        no other Node) or used above the threshold, or why none
        (``consolidation_replace.replacement_candidates``, ``choose_replacement``)."""
        candidates = consolidation_replace.replacement_candidates(
            choice.views,
            no_room=(k.node for k in choice.kept if k.rule == "no-room"),
            threshold=turn.policy.utilization_threshold,
            movable=consolidation_rules.movable_problem,
        )
        if not candidates:
            return None
        names = tuple(v.name for v in candidates)
        if turn.headroom < 1:
            return Unreplaceable(names, "the pool is at maxNodes: no room to launch one first")
        if turn.room < 1:
            # The victims are named only within minNodes (``replacement_steps``): chosen
            # now, they would stay stamped and never go.
            return Unreplaceable(names, "the pool is at minNodes: no node of it may go")
        if self.requests is None or self.catalog is None:
            return None
        views = choice.views
        unhealthy = turn.budgets.unhealthy
        allows = disruption_api.allowance(
            turn.budgets.budgets,
            reason="Underutilized",
            total=disruption_api.counted_in_budgets(v.obj for v in views) + choice.gone,
            disrupting=choice.gone + sum(1 for v in views if v.disrupting or v.name in unhealthy),
            now=self.wall_clock.time(),
        )
        if allows.allowed < 1:
            return Unreplaceable(names, f"the pool's disruption {allows.describe()}")
        found = self.catalog()
        leaving = {v.name for v in choice.views if v.tainted or not v.gives_room}
        fits = consolidation_replace.ReplacementFit(
            pool=turn.pool,
            room=[n for n in cluster if n.name not in leaving],
            taints=pool.taints,
            daemon_sets=daemon_sets,
            candidates=candidates,
            profile=self.profile,
            threshold=turn.policy.utilization_threshold,
        )

        def price_of(view: NodeView) -> float | None:
            machine = consolidation_replace.node_offering(view.obj)
            if found is None or machine is None:
                return None
            return offerings.cost_per_hour(found, [machine])

        chosen = await asyncio.to_thread(
            consolidation_replace.choose_replacement,
            candidates,
            offerings=pool.offerings if found is not None else None,
            price_of=price_of,
            fits=fits,
            max_victims=min(consolidation_replace.MAX_VICTIMS, turn.room, allows.allowed),
        )
        if isinstance(chosen, Replacement):
            # The same replacement called off by its re-check a moment ago would be
            # launched and called off again and again: held back for a while.
            held = consolidation_replace.held_back(chosen, views, now=self.wall_clock.time())
            if held is not None:
                return held
        return chosen

    def _requests_of(self, pool: str) -> list[Object]:
        if self.requests is None:
            return []
        return list(self.requests.by_index(REQUESTS_BY_POOL, pool))


def under_way(views: Sequence[NodeView]) -> Replacement | None:
    """The replacement recorded on the pool's Nodes (``consolidation_replace.read_mark``),
    the first one readable; None when none is."""
    for view in views:
        found = consolidation_replace.read_mark(view)
        if found is not None:
            return found
    return None
