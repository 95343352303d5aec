"""Consolidation: underused Nodes whose pods fit on the other Nodes are removed.

A pool's Node goes through these steps, each one a fact written on the Node, so that a
restarted operator (or a new leader) takes up where the last one stopped:

1. **Candidate.** Ready, schedulable, its pods requesting less than
   ``scaleDown.utilizationThreshold`` of its allocatable CPU and of its memory, every pod
   on it movable (``movable_problem``), and every one of them fitting on the Nodes that
   stay, with every filter of the scheduling simulation, counting the pods of all the
   other candidates too (``choose``): two removals never count on the same room. An empty
   Node (DaemonSet and mirror pods only) needs no simulation: the faster path. The
   Autoscaler stamps ``UNNEEDED_SINCE_ANNOTATION`` on it (one write).
2. **Tainted.** ``unneededSeconds`` after that stamp, with nothing in flight and no more
   than ``scaleDown.maxConcurrent`` Nodes with pods to move at a time (empty Nodes are not
   counted), and no more than the pool's disruption budgets allow (``spec.disruption``,
   reason ``Empty`` or ``Underutilized``, counting every Node of the pool being disrupted
   for any reason: a budget that holds keeps the stamp, and the event names it), the
   Node gets the ``NoSchedule`` taint ``CONSOLIDATING_TAINT_KEY`` (one write): from then
   on no new pod is scheduled there. A Node the NodePool controller tainted for its
   drift or expiry replacement is never a candidate.
3. **Named.** Once the taint shows in the cache, the decision is checked again, the
   PodDisruptionBudgets read from their cache (only now, for the few Nodes at this
   step), and the Node is named in a ScaleRequest (``spec.removeNodes``); the NodePool
   controller drains exactly those Nodes and removes them.
4. **Kept.** A Node that stops being a candidate at any step (a pod it cannot move landed
   on it, it got busy, its pods no longer fit elsewhere, a PodDisruptionBudget allows
   no disruption, a scale-up is settling) loses the stamp and the taint (one write), and
   an event on the Node and the Autoscaler names the pod and the rule that keeps it.

So a Node costs at most two writes on its way out, and one when it is kept; a Node is
never left tainted by a crash: the next pass either names it or clears it.

A pool with requirements may instead **replace** Nodes kept for lack of room by one
strictly cheaper Node (``decide.consolidation_replace``), on the same path: the victims
are stamped and timed as above, then tainted and marked together
(``REPLACEMENT_ANNOTATION``: the offering, both prices, the victims); the new Node is
asked for (``targetNodes`` + 1 naming its offering), launched before anything is
drained; once it is Ready the victims' pods are proved again and the victims named, or
kept (marks removed) when that fails. Each pass reads the step it is at from the marks,
the pool's ScaleRequests and its Nodes.

Consolidation runs in the Autoscaler's phases: ``snapshot.consolidation_views`` reads the
pool's member Nodes; ``decide.consolidation_rules``, ``decide.consolidation_proof`` and
``decide.consolidation_choice`` (pure) choose every pool's candidates together, prove the
choice with the scheduling simulation, run the unneeded timers and give the marks to
write; ``act.node_marks`` is the only writer (Node patches and events). This module runs
them: once per batch the choice, then one pass per pool.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from nodepool_operator import timestamps
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers import offerings
from nodepool_operator.controllers.autoscaler import metrics, replacements, simulation
from nodepool_operator.controllers.autoscaler.act.node_marks import NodeMarks
from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.autoscaler.decide import (
    consolidation_choice,
    consolidation_replace,
    consolidation_rules,
)
from nodepool_operator.controllers.autoscaler.decide.consolidation_proof import Proof
from nodepool_operator.controllers.autoscaler.decide.consolidation_rules import Kept, Review
from nodepool_operator.controllers.autoscaler.simulation.offering_plan import OfferingPool
from nodepool_operator.controllers.autoscaler.snapshot.consolidation_views import (
    NodeView,
    NodeViews,
)
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime.client import Client, Object, Resource
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import Informer

__all__ = ["PDBS", "Consolidator", "PoolTurn", "Proposal"]

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
    # Nodes an open request of the pool names already
    # (``consolidation_choice.named_by_open_requests``).
    leaving: frozenset[str] = frozenset()
    # Nodes preemption is making room on (a pending pod nominated there): they stay.
    held: frozenset[str] = frozenset()
    # The pool's disruption budgets, and its Nodes being repaired that use them.
    budgets: consolidation_choice.PoolBudgets = field(
        default_factory=consolidation_choice.PoolBudgets
    )
    # How many Nodes the pool may still add (maxNodes - target): a replacement is
    # launched before its victims go, so it needs one.
    headroom: int = 0


@dataclass(frozen=True)
class Proposal:
    """One pass decided and not written yet: the marks to write (``act.node_marks``), the
    review the pool's decision reads, and what the writes are stamped with."""

    marks: consolidation_choice.Marks
    review: Review
    now: float
    autoscaler: Object | None  # whose events the marks write; None: no event
    chosen: frozenset[str] | None = None  # the Nodes the batch chose; their marks are kept


class Consolidator:
    """Finds one pool's Nodes that can go, and keeps their stamps and taints true."""

    def __init__(
        self,
        *,
        client: Client,
        nodes: Informer,
        pods: Informer,
        budgets: Informer,
        profile: Callable[[Mapping[str, Any]], PodProfile | str],
        recorder: EventRecorder,
        wall_clock: clock_module.WallClock,
        requests: Informer | None = None,
        offerings_catalog: offerings.OfferingsCatalog | None = None,
    ) -> None:
        """``requests``, ``offerings_catalog``: what consolidation by price reads
        (``replacements.Replacer``); without either, Nodes are only removed."""
        self.replacer = replacements.Replacer(
            nodes=nodes,
            requests=requests,
            catalog=offerings_catalog.known if offerings_catalog is not None else None,
            profile=profile,
            wall_clock=wall_clock,
        )
        self.requests = requests
        self.client = client
        self.nodes = nodes
        self.profile = profile
        self.wall_clock = wall_clock
        self.pods = pods
        self.budgets = budgets
        self.views = NodeViews(nodes=nodes, pods=pods, profile=profile)
        self.marks = NodeMarks(client=client, nodes=nodes, recorder=recorder)
        # The last batch's choice and what it was made from (``choose``).
        self._chosen: tuple[Hashable, dict[str, consolidation_choice.Choice]] | None = None

    async def choose(
        self,
        turns: Sequence[PoolTurn],
        *,
        cluster: Sequence[simulation.ExistingNode],
        daemon_sets: Sequence[simulation.DaemonSetView],
        offering_pools: Sequence[OfferingPool] = (),
    ) -> dict[str, consolidation_choice.Choice]:
        """The batch's choice for every pool at once (``consolidation_rules.choose_together``: two
        removals never count on the same room, whichever pools they are in), off the
        event loop as the main plan is. It is made again only when a Node or a pod
        changed (the informers' resourceVersions) or the pools' turns did: a batch
        that changes neither reuses the last one.

        A pool with requirements (``offering_pools``) whose underused Nodes could not
        simply go may have them replaced by one cheaper Node (``consolidation_replace``);
        a replacement under way keeps its victims and its new Node out of the choice."""
        views = {
            t.pool: self.views.of_pool(t.pool, pool_uid=t.pool_uid, leaving=t.leaving, held=t.held)
            for t in turns
        }
        choosing = [t for t in turns if t.blocked is None]  # the others hold or clear
        key = (
            self.nodes.resource_version,
            self.pods.resource_version,
            self.requests.resource_version if self.requests is not None else "",
            tuple(
                (t.pool, t.pool_uid, t.policy, t.blocked, t.leaving, t.held, t.headroom)
                for t in turns
            ),
            tuple((p.pool, p.offerings, p.blocked) for p in offering_pools),
            # A replacement held back after its re-check failed may be tried again once
            # its time is over, though nothing else changed.
            self._backoffs_over(views.values()),
        )
        if key[0] and key[1] and self._chosen is not None and self._chosen[0] == key:
            return self._chosen[1]
        under_way = {t.pool: replacements.under_way(views[t.pool]) for t in turns}
        hidden = {
            t.pool: self.replacer.hidden(
                views[t.pool], under_way[t.pool], pool=t.pool, pool_uid=t.pool_uid
            )
            for t in turns
        }
        groups = [(hidden[t.pool], t.policy.utilization_threshold) for t in choosing]
        every = [v for found in hidden.values() for v in found]
        fits = Proof(views=every, cluster=cluster, daemon_sets=daemon_sets, profile=self.profile)
        chosen, kept = await asyncio.to_thread(
            consolidation_rules.choose_together, groups, fits=fits, fit_together=fits.together
        )
        pool_of = {v.name: pool for pool, found in views.items() for v in found}
        chosen_in: dict[str, list[NodeView]] = {pool: [] for pool in views}
        kept_in: dict[str, list[Kept]] = {pool: [] for pool in views}
        for view in chosen:
            chosen_in[pool_of[view.name]].append(view)
        for reason in kept:
            kept_in[pool_of[reason.node]].append(reason)
        offered = {p.pool: p for p in offering_pools if p.blocked is None}
        choices: dict[str, consolidation_choice.Choice] = {}
        for t in turns:
            replacing = under_way[t.pool]
            choice = consolidation_choice.Choice(
                tuple(views[t.pool]),
                () if replacing else tuple(chosen_in[t.pool]),
                () if replacing else tuple(kept_in[t.pool]),
                gone=self.views.deleting(t.pool, pool_uid=t.pool_uid),
                replacing=replacing,
            )
            if replacing is not None:
                step = await self.replacer.step(t, replacing, views[t.pool], fits)
                choice = dataclasses.replace(choice, step=step)
            elif t.blocked is None and not t.dry_run and not chosen and t.pool in offered:
                # Removing stays preferred (it is always cheaper): a replacement is looked
                # for only in a batch that removes nothing.
                found = await self.replacer.propose(
                    t, choice, offered[t.pool], cluster, daemon_sets
                )
                choice = dataclasses.replace(choice, replacement=found)
            choices[t.pool] = choice
        self._chosen = (key, choices)
        return choices

    def _backoffs_over(self, views: Iterable[Sequence[NodeView]]) -> int:
        """How many call-offs recorded on the Nodes are over by now (``choose``'s key)."""
        now = self.wall_clock.time()
        ends = consolidation_replace.backoff_ends(v for found in views for v in found)
        return sum(1 for end in ends if end <= now)

    def propose(
        self, autoscaler: Object, turn: PoolTurn, choice: consolidation_choice.Choice
    ) -> Proposal:
        """One pass over the pool's Nodes from its part of the batch's ``choice``, decided
        and not yet written: the marks to write and the review (the Nodes to name now).
        Reads only caches (the budgets of the Nodes about to be tainted or named among
        them). A dry run proposes nothing but the removal of marks left from before, and
        previews what would go."""
        now = self.wall_clock.time()
        per_request = scalerequest_api.MAX_REMOVE_NODES
        if turn.dry_run:
            previewed = consolidation_choice.preview(
                choice, room=turn.room, per_request=per_request, now=now, budgets=turn.budgets
            )
            stale = consolidation_choice.stale_marks(choice.views)
            return Proposal(stale, previewed, now=now, autoscaler=None)
        decided = consolidation_choice.decide(
            choice,
            now=now,
            unneeded_seconds=turn.policy.unneeded_seconds,
            max_concurrent=turn.policy.max_concurrent,
            room=turn.room,
            per_request=per_request,
            blocked=turn.blocked,
            active_since=active_since(autoscaler),
            budgets=turn.budgets,
        )
        key = str(autoscaler["metadata"]["name"])
        metrics.nodepool_autoscaler_consolidation_candidates.labels(key).set(
            decided.review.candidates
        )
        reading = (*decided.going, *decided.replacing)
        budgets = self._budgets(reading) if reading else None
        marks, review = consolidation_choice.judge_budgets(
            decided, budgets, now=now, recheck_seconds=_RECHECK_SECONDS
        )
        return Proposal(marks, review, now=now, autoscaler=autoscaler, chosen=decided.chosen)

    async def apply(self, proposal: Proposal) -> None:
        """Write the proposal's marks (stamps, taints, their removal) and their events: the
        act step, after the pool's decision is made."""
        if proposal.chosen is not None:
            self.marks.prune(proposal.chosen)
        await self.marks.apply(proposal.marks, autoscaler=proposal.autoscaler, now=proposal.now)

    async def clear_unwatched(self, watched: Iterable[str], *, named: frozenset[str]) -> None:
        """Take every consolidation mark off the Nodes of pools no Autoscaler reviews
        (``watched``: the pools some Autoscaler does): the Autoscaler was deleted or
        repointed. A Node being drained is the NodePool controller's and keeps its
        marks, and so does one an open request ``named``: its removal is under way, and
        the request would be Rejected as called off."""
        acting = set(watched)
        stale = [
            self.views.view(node)
            for node in self.nodes.items()
            if _marked(node)
            and wellknown.pool_of(node) not in acting
            and node["metadata"]["name"] not in named
        ]
        if stale:
            await self.marks.apply(
                consolidation_choice.stale_marks(stale), autoscaler=None, now=self.wall_clock.time()
            )

    async def announce(self, review: Review, *, request: str) -> None:
        await self.marks.announce(review, request=request)

    def _budgets(self, going: Sequence[NodeView]) -> list[Object] | None:
        """The PodDisruptionBudgets of the namespaces of ``going``'s pods, from the cache;
        None when the cache has not listed them yet (nothing is tainted or named then)."""
        if not self.budgets.has_synced():
            log.warning("event=budgets-unreadable reason=cache-not-synced")
            return None
        namespaces = {str(p["metadata"].get("namespace", "")) for v in going for p in v.to_move}
        found = [
            budget
            for budget in self.budgets.items()
            if budget["metadata"].get("namespace", "") in namespaces
        ]
        # In the order a LIST per namespace gave them: the first budget that refuses is
        # the one an event names.
        return sorted(found, key=lambda b: (b["metadata"]["namespace"], b["metadata"]["name"]))


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
    if wellknown.UNNEEDED_SINCE_ANNOTATION in (meta.get("annotations") or {}):
        return True
    taints = (node.get("spec") or {}).get("taints") or ()
    return any(t.get("key") == wellknown.CONSOLIDATING_TAINT_KEY for t in taints)
