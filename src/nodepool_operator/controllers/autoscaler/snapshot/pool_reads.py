"""One pool as the planner reads it: its facts, its template for new nodes, its nodes.

Everything comes from the shared caches (indexes keep the reads proportional to what is
looked at) and from the requests this process created that the cache does not show yet
(``scale_requests.RequestLedger``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud.catalog import Catalog
from nodepool_operator.controllers import allocatable, capacity, membership
from nodepool_operator.controllers import offerings as offerings_module
from nodepool_operator.controllers.autoscaler import simulation
from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.autoscaler.snapshot import node_views, pool_facts, zoning
from nodepool_operator.controllers.autoscaler.snapshot.pod_profiles import (
    ProfileCache,
    daemon_set_of,
)
from nodepool_operator.controllers.autoscaler.snapshot.scale_requests import RequestLedger
from nodepool_operator.controllers.resources import PODS_BY_NODE, REQUESTS_BY_POOL
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import conditions, pods
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.informer import Informer

__all__ = ["NO_OFFERING", "REQUIREMENTS_NOT_PLANNED", "Bound", "PoolRead", "PoolReads"]


@dataclass(frozen=True)
class PoolRead:
    """What the decision for one pool needs besides the simulation's outcome."""

    facts: pool_facts.PoolFacts
    uid: str
    basis: int  # the pool's spec.targetNodes the plan started from
    unneeded: tuple[str, ...]
    # A pool with requirements: the offerings it may use now, cheapest first (its new
    # nodes are planned as those, ``snapshot.offering_pools``); empty for any other.
    offerings: tuple[offerings_module.PricedOffering, ...] = ()


@dataclass(frozen=True)
class Bound:
    """The pods on one node, as profiles."""

    running: tuple[PodProfile, ...]
    terminating: tuple[PodProfile, ...]
    daemons: frozenset[str]
    busy: bool  # some pod on it needs the node (not a DaemonSet's, a mirror, or leaving)


@dataclass(frozen=True)
class _Sizes:
    basis: int
    target: int
    open_request: bool


class PoolReads:
    """Reads pools, their Nodes, the pods on them and their ScaleRequests."""

    def __init__(
        self,
        *,
        nodes: Informer,
        pods: Informer,
        requests: Informer,
        ledger: RequestLedger,
        cache: ProfileCache,
        wall_clock: clock_module.WallClock,
    ) -> None:
        self.nodes = nodes
        self.pods = pods
        self.requests = requests
        self.ledger = ledger
        self.cache = cache
        self.wall_clock = wall_clock
        #: Pool nodes NotReady past their timeouts, found once per plan (``Gatherer``).
        self.unhealthy: frozenset[str] = frozenset()
        # node -> (its pods' index stamp, what bound() read then), for the nodes read by
        # this plan and the one before: a plan reads every pod of the cluster, and between
        # two plans the pods of most nodes have not changed.
        self._bound: dict[str, tuple[int, Bound]] = {}
        self._bound_before: dict[str, tuple[int, Bound]] = {}

    def begin_plan(self) -> None:
        """A new plan reads: what the plan before last read and this one does not is
        forgotten (nodes that are gone)."""
        self._bound_before, self._bound = self._bound, {}

    def pool(
        self,
        pool: Object,
        *,
        namespaces: Sequence[str],
        held: Iterable[str],
        catalog: Catalog | None = None,
    ) -> tuple[PoolRead, simulation.PoolTemplate, list[simulation.ExistingNode]]:
        """The pool as the plan reads it; ``catalog``: the cloud's, for a pool with
        requirements (None: not read yet)."""
        name = str(pool["metadata"]["name"])
        spec = nodepool_api.spec_of(pool)
        sizes = self._sizes(pool, spec)
        uid = str(pool["metadata"].get("uid", ""))
        nodes, usage = self.pool_nodes(name, spec.template, keep=sizes.target, uid=uid)
        # Every zone backed off (no capacity, or VMs that never registered), the cloud
        # paused or its VMs unlistable: the pool cannot grow, and what it asked for is
        # not coming.
        now = self.wall_clock.time()
        members = membership.members(self.nodes, pool_name=name, pool_uid=uid)
        allowed, unplannable = _offerings(pool, spec, catalog, members, now=now)
        stuck = (
            capacity.cannot_grow(nodepool_api.status_of(pool).zone_backoffs, spec.template, now=now)
            or capacity.paused(pool, now=now)
            or capacity.listing_doubtful(pool, now=now)
            or unplannable
        )
        facts = pool_facts.PoolFacts(
            name=name,
            min_nodes=spec.min_nodes,
            max_nodes=spec.max_nodes,
            target=sizes.target,
            ready=usage.ready,
            cordoned=usage.cordoned,
            unhealthy=usage.unhealthy,
            open_request=sizes.open_request,
            cannot_grow=stuck,
            stalled=usage.stalled,
            budgets=spec.disruption.budgets,
        )
        template = self._template(
            pool,
            spec,
            target=sizes.target,
            usage=usage,
            stuck=stuck is not None,
            held=held,
            members=members,
        )
        if namespaces:
            template = dataclasses.replace(template, namespaces=frozenset(namespaces))
        uid = str(pool["metadata"].get("uid", ""))
        read = PoolRead(facts, uid, sizes.basis, usage.unneeded, offerings=tuple(allowed))
        return read, template, nodes

    def _sizes(self, pool: Object, spec: nodepool_api.NodePoolSpec) -> _Sizes:
        views = self.request_views(str(pool["metadata"]["name"]))
        basis = pool_facts.base_target(
            target=spec.target_nodes,
            min_nodes=spec.min_nodes,
            max_nodes=spec.max_nodes,
            pool_version=str(pool["metadata"].get("resourceVersion", "")),
            requests=views,
        )
        target = pool_facts.effective_target(
            base=basis, min_nodes=spec.min_nodes, max_nodes=spec.max_nodes, requests=views
        )
        return _Sizes(basis, target, any(v.phase == "Pending" for v in views))

    def _template(
        self,
        pool: Object,
        spec: nodepool_api.NodePoolSpec,
        *,
        target: int,
        usage: node_views.Usage,
        stuck: bool,
        held: Iterable[str],
        members: Sequence[Object],
    ) -> simulation.PoolTemplate:
        """``members``: the pool's member Nodes, read once by ``pool``."""
        name = str(pool["metadata"]["name"])
        in_flight = 0 if stuck else max(0, target - len(usage.registered))
        where = zoning.pool_zones(
            pool,
            nodes=members,
            requests=self.ledger.visible(
                name,
                self.requests.by_index(REQUESTS_BY_POOL, name),
                cache_version=self.requests.resource_version,
            ),
            in_flight=in_flight,
            now=self.wall_clock.time(),
        )
        return simulation.PoolTemplate(
            name=name,
            weight=spec.weight,
            taints=node_views.template_taints(spec.template),
            allocatable=allocatable.planned(
                spec.template,
                nodepool_api.status_of(pool).reported_allocatable,
                members,
                now=conditions.rfc3339(self.wall_clock.time()),
            ),
            upcoming=node_views.upcoming(
                name, spec.template, nodepool_api.names_taken(own=usage.registered, held=held)
            ),
            in_flight=in_flight,
            headroom=0 if stuck else max(0, spec.max_nodes - target),
            zones=max(1, len(where.names)),
            namespaces=None,
            zoning=where,
        )

    def request_views(self, pool: str) -> list[pool_facts.RequestView]:
        cached = [
            r
            for r in self.requests.by_index(REQUESTS_BY_POOL, pool)
            if not r["metadata"].get("deletionTimestamp")
        ]
        visible = self.ledger.visible(pool, cached, cache_version=self.requests.resource_version)
        views = []
        for request in visible:
            meta, status = request["metadata"], scalerequest_api.status_of(request)
            spec = scalerequest_api.spec_of(request)
            views.append(
                pool_facts.RequestView(
                    name=str(meta["name"]),
                    created=str(meta.get("creationTimestamp", "")),
                    target=spec.target_nodes,
                    phase=status.phase,
                    applied=status.applied_target_nodes,
                    version=str(meta.get("resourceVersion", "")),
                    based_on=spec.based_on_target_nodes,
                    zones_served=bool(status.zones_served),
                )
            )
        return views

    def pool_nodes(
        self,
        pool: str,
        template: nodepool_api.NodeTemplate,
        *,
        keep: int | None,
        uid: str | None,
    ) -> tuple[list[simulation.ExistingNode], node_views.Usage]:
        """The pool's member nodes (``membership``: a Node only labelled with the pool is
        not counted) as the simulation sees them, and what scale-down needs of them.

        With ``keep`` below the registered nodes, the ones the NodePool controller removes
        first (cordoned, then not Ready, then the emptiest) are left out: they are going.
        """
        fallback = nodepool_api.template_allocatable(template)
        startup = node_views.startup_keys(template)
        live = [
            n
            for n in membership.members(self.nodes, pool_name=pool, pool_uid=uid)
            if not n["metadata"].get("deletionTimestamp")
        ]
        bound = {str(n["metadata"]["name"]): self.bound(str(n["metadata"]["name"])) for n in live}
        staying = _staying(live, bound, keep=keep)
        found = [
            node_views.existing(
                node,
                pool=pool,
                allocatable=node_views.allocatable_of(node, fallback),
                bound=(b.running, b.terminating, b.daemons),
                startup=startup,
            )
            for node in sorted(live, key=lambda n: n["metadata"]["name"])
            for b in (bound[str(node["metadata"]["name"])],)
            if node["metadata"]["name"] in staying
            and node["metadata"]["name"] not in self.unhealthy
        ]
        return found, self._usage(live, bound)

    def _usage(self, live: Sequence[Object], bound: dict[str, Bound]) -> node_views.Usage:
        unneeded: list[str] = []
        ready = cordoned = stalled = 0
        for node in sorted(live, key=lambda n: n["metadata"]["name"]):
            name = str(node["metadata"]["name"])
            # An unhealthy node is being replaced, Ready or not (a startup taint never
            # lifted): no room, and not counted twice (ready and unhealthy).
            is_ready = node_views.is_ready(node) and name not in self.unhealthy
            is_cordoned = bool((node.get("spec") or {}).get("unschedulable"))
            ready += is_ready
            cordoned += is_ready and is_cordoned
            # Registered once (Ready then), NotReady now, not past the timeouts: a blip.
            stalled += (
                not is_ready and name not in self.unhealthy and not wellknown.is_unregistered(node)
            )
            if is_ready and not is_cordoned and not bound[name].busy:
                unneeded.append(name)
        return node_views.Usage(
            ready=ready,
            cordoned=cordoned,
            stalled=stalled,
            unhealthy=sum(1 for n in live if n["metadata"]["name"] in self.unhealthy),
            registered=tuple(str(n["metadata"]["name"]) for n in live),
            unneeded=tuple(unneeded),
        )

    def bound(self, node: str) -> Bound:
        """The profiles of the pods on ``node``, and whether any of them needs the node."""
        stamp = self.pods.index_stamp(PODS_BY_NODE, node)
        kept = self._bound.get(node) or self._bound_before.get(node)
        if kept is None or kept[0] != stamp:
            kept = (stamp, self._read_bound(node))
        self._bound[node] = kept
        return kept[1]

    def _read_bound(self, node: str) -> Bound:
        running: list[PodProfile] = []
        terminating: list[PodProfile] = []
        daemons: set[str] = set()
        busy = False
        for pod in self.pods.by_index(PODS_BY_NODE, node):
            if pods.is_terminal(pod):
                continue
            profile = self.cache.get(pod)
            leaving = bool(pod["metadata"].get("deletionTimestamp"))
            if isinstance(profile, PodProfile):
                (terminating if leaving else running).append(profile)
            daemon = daemon_set_of(pod)
            if daemon is not None:
                daemons.add(daemon)
            # A pod on its way out still holds its room (the scheduler counts it until it
            # is gone) but no longer keeps the node needed.
            busy = busy or not (leaving or pods.is_daemon_or_mirror(pod))
        return Bound(tuple(running), tuple(terminating), frozenset(daemons), busy)


#: Why a pool with requirements is not grown without a catalog: its template's shape is
#: not what the NodePool controller launches (an offering), so nodes sized by it may never
#: hold the pods they are for.
REQUIREMENTS_NOT_PLANNED: Final = (
    "it has requirements and the Autoscaler cannot plan its offerings "
    "(no catalog read yet); its pods wait"
)
#: Why a pool with requirements cannot grow when none of its offerings may be used now.
NO_OFFERING: Final = "no offering its requirements allow is available (or all backed off)"


def _offerings(
    pool: Object,
    spec: nodepool_api.NodePoolSpec,
    catalog: Catalog | None,
    members: Iterable[Object],
    *,
    now: float,
) -> tuple[list[offerings_module.PricedOffering], str | None]:
    """A pool with requirements: the offerings it may use now, each with the allocatable
    its ``members`` of the same type report where that is less than the catalog's, or why
    it cannot grow."""
    if not spec.requirements:
        return [], None
    if catalog is None:
        return [], REQUIREMENTS_NOT_PLANNED
    allowed = offerings_module.pool_offerings(
        spec, catalog, nodepool_api.status_of(pool).zone_backoffs, now=now
    )
    allowed = offerings_module.as_reported(allowed, members)
    return allowed, None if allowed else NO_OFFERING


def _staying(live: Sequence[Object], bound: dict[str, Bound], *, keep: int | None) -> set[str]:
    """The nodes the NodePool controller keeps when it goes down to ``keep``, as it orders
    them without zones (cordoned, then NotReady, then emptiest go first); in a pool with
    zones it takes Ready nodes from the fullest zone first, which this does not predict
    (docs/autoscaling.md says what that costs)."""

    def going_first(node: Object) -> tuple[bool, bool, int, str]:
        name = str(node["metadata"]["name"])
        cordoned = bool((node.get("spec") or {}).get("unschedulable"))
        return (not cordoned, node_views.is_ready(node), len(bound[name].running), name)

    ordered = sorted(live, key=going_first)
    kept = ordered[max(0, len(ordered) - keep) :] if keep is not None else ordered
    return {str(n["metadata"]["name"]) for n in kept}
