"""Everything one plan reads, copied out of the shared caches on the event loop.

No API call and no LIST: indexes on the shared informers keep the reads proportional to
what is looked at, and pod profiles are parsed once per (uid, resourceVersion). The copy
is immutable, so the simulation can run on it in a worker thread.

A pool is planned for by one Autoscaler: the oldest that names it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud.catalog import Catalog
from nodepool_operator.controllers import health, membership
from nodepool_operator.controllers.autoscaler import constraints, simulation
from nodepool_operator.controllers.autoscaler.constraints import PodProfile, pending_pods
from nodepool_operator.controllers.autoscaler.simulation import offering_plan
from nodepool_operator.controllers.autoscaler.snapshot import (
    node_views,
    offering_pools,
    pool_reads,
    volumes,
)
from nodepool_operator.controllers.autoscaler.snapshot.pod_profiles import (
    ALL_NAMESPACES,
    NOMINATED_INDEX,
    PENDING_INDEX,
    ProfileCache,
    daemon_set_of,
)
from nodepool_operator.controllers.autoscaler.snapshot.pool_reads import PoolRead, PoolReads
from nodepool_operator.controllers.resources import REQUESTS_BY_POOL
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import nodes as k8s_nodes
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.informer import Informer

__all__ = ["Gathered", "Gatherer", "Owners"]

#: pool -> (the Autoscaler that plans for it, its spec)
Owners = Mapping[str, tuple[str, autoscaler_api.AutoscalerSpec]]


@dataclass(frozen=True)
class Gathered:
    """Everything one plan reads."""

    pools: Mapping[str, PoolRead]
    owners: Mapping[str, str]  # pool -> the Autoscaler that plans for it
    pending: tuple[Object, ...]  # the unschedulable pods planned for, oldest first
    profiles: tuple[PodProfile, ...]  # theirs, in the same order
    unreadable: tuple[tuple[Object, str], ...]  # unschedulable pods whose requests are broken
    waiting: tuple[Object, ...]  # pending pods the scheduler has not judged yet
    # Every node, with the pods nominated to it among its pods: preemption holds their
    # room, for the plan and for consolidation's proof alike (``Gatherer.nominated``).
    nodes: tuple[simulation.ExistingNode, ...]
    templates: tuple[simulation.PoolTemplate, ...]
    daemon_sets: tuple[simulation.DaemonSetView, ...]
    # Pools an Autoscaler names that do not exist (or are being deleted): pool -> (the
    # Autoscaler, its namespaces; empty: all). Their pods are planned as any, and told why.
    missing: Mapping[str, tuple[str, frozenset[str]]] = dataclasses.field(default_factory=dict)
    # Pools with requirements, each simulated as one template per instance type (in
    # ``templates``) and planned as offerings (``simulation.offering_plan``).
    offering_pools: tuple[offering_plan.OfferingPool, ...] = ()

    def simulate(self) -> simulation.SimulationOutcome:
        outcome = simulation.simulate(
            self.profiles, nodes=self.nodes, pools=self.templates, daemon_sets=self.daemon_sets
        )
        return offering_plan.plan_offerings(
            outcome,
            self.profiles,
            pools=self.offering_pools,
            nodes=self.nodes,
            daemon_sets=self.daemon_sets,
        )


@dataclass(frozen=True)
class _Pending:
    planned: list[tuple[Object, PodProfile | str]]
    waiting: list[Object]


def _oldest_first(found: Iterable[Object]) -> list[Object]:
    # Equal pods keep this order, so the pods that have waited longest (and that earlier
    # requests were made for) take the room already requested, and the new nodes, with
    # their TriggeredScaleUp events, go to the pods that are new.
    def key(pod: Object) -> tuple[str, str, str]:
        meta = pod["metadata"]
        return (str(meta.get("creationTimestamp", "")), meta.get("namespace", ""), meta["name"])

    return sorted(found, key=key)


class Gatherer:
    """Reads Autoscalers, pools, nodes, pods and DaemonSets into one ``Gathered``."""

    def __init__(
        self,
        *,
        autoscalers: Informer,
        pools: Informer,
        daemon_sets: Informer,
        reads: PoolReads,
        cache: ProfileCache,
        expendable_priority: int,
        wall_clock: clock_module.WallClock,
        volume_reads: volumes.VolumeReads | None,
    ) -> None:
        self.autoscalers = autoscalers
        self.pools = pools
        self.daemon_sets = daemon_sets
        self.reads = reads
        self.cache = cache
        self.expendable_priority = expendable_priority
        self.wall_clock = wall_clock
        self.volume_reads = volume_reads

    def owners(self) -> dict[str, tuple[str, autoscaler_api.AutoscalerSpec]]:
        found: dict[str, tuple[tuple[str, str], str, autoscaler_api.AutoscalerSpec]] = {}
        for autoscaler in self.autoscalers.items():
            meta = autoscaler["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            spec = autoscaler_api.spec_of(autoscaler)
            age = (str(meta.get("creationTimestamp", "")), str(meta["name"]))
            held = found.get(spec.node_pool_name)
            if held is None or age < held[0]:
                found[spec.node_pool_name] = (age, str(meta["name"]), spec)
        return {pool: (name, spec) for pool, (_, name, spec) in found.items()}

    def gather(self, catalog: Catalog | None = None) -> Gathered:
        """What one plan reads; ``catalog``: the cloud's (None: not read yet), which
        pools with requirements are planned with."""
        self.reads.begin_plan()
        # Nodes turn unhealthy by time passing alone, not by an event: found at each plan.
        self.reads.unhealthy = self.find_unhealthy()
        owners = self.owners()
        pools: dict[str, PoolRead] = {}
        templates: list[simulation.PoolTemplate] = []
        existing: list[simulation.ExistingNode] = []
        held = node_views.names_by_prefix(self.reads.nodes.items())
        nominated = self.nominated()
        missing: dict[str, tuple[str, frozenset[str]]] = {}
        offering_pools: list[offering_plan.OfferingPool] = []
        for pool_name, (owner, spec) in sorted(owners.items()):
            pool = self.pools.get(pool_name)
            if pool is None or pool["metadata"].get("deletionTimestamp"):
                missing[pool_name] = (owner, frozenset(spec.namespaces))
                continue
            view, template, nodes = self.reads.pool(
                pool, namespaces=spec.namespaces, held=held.get(pool_name, ()), catalog=catalog
            )
            # A node preemption is making room on is about to run a pod: never unneeded.
            unneeded = tuple(n for n in view.unneeded if n not in nominated)
            pools[pool_name] = dataclasses.replace(view, unneeded=unneeded)
            if nodepool_api.spec_of(pool).requirements:
                offered = self._offering_pool(pool, template, view)
                offering_pools.append(offered)
                templates.extend(offered.templates)
            else:
                templates.append(template)
            existing.extend(nodes)
        existing.extend(self._other_nodes(planned=pools))
        pending = self._pending(owners)
        return Gathered(
            pools=pools,
            owners={pool: owner for pool, (owner, _) in owners.items()},
            pending=tuple(pod for pod, p in pending.planned if isinstance(p, PodProfile)),
            profiles=tuple(p for _, p in pending.planned if isinstance(p, PodProfile)),
            unreadable=tuple((pod, p) for pod, p in pending.planned if isinstance(p, str)),
            waiting=tuple(pending.waiting),
            nodes=tuple(_holding(existing, nominated)),
            templates=tuple(templates),
            daemon_sets=tuple(self._daemon_set_views()),
            missing=missing,
            offering_pools=tuple(offering_pools),
        )

    def _offering_pool(
        self, pool: Object, template: simulation.PoolTemplate, view: PoolRead
    ) -> offering_plan.OfferingPool:
        name = str(pool["metadata"]["name"])
        if not view.offerings:
            return offering_pools.blocked_pool(
                name,
                nodepool_api.spec_of(pool),
                template,
                why=view.facts.cannot_grow or pool_reads.NO_OFFERING,
            )
        members = list(membership.members(self.reads.nodes, pool_name=name, pool_uid=view.uid))
        booting = offering_pools.in_flight_offerings(
            template.in_flight,
            requests=self.reads.ledger.visible(
                name,
                self.reads.requests.by_index(REQUESTS_BY_POOL, name),
                cache_version=self.reads.requests.resource_version,
            ),
            nodes=members,
            allowed=[o.key for o in view.offerings],
        )
        return offering_pools.offering_pool(
            name,
            template,
            view.offerings,
            in_flight=booting,
            limits=nodepool_api.spec_of(pool).limits,
            nodes=members,
        )

    def nominated(self) -> dict[str, list[PodProfile]]:
        """The pending pods nominated to each node, of every namespace: kube-scheduler
        keeps their room on that node while preemption evicts for them (it lets a pod of
        higher priority take it; here they always hold it, so that no plan and no proof
        of consolidation counts on room a pod is waiting for). A DaemonSet's pod is left
        out: the room its DaemonSet takes on a node is counted already."""
        found: dict[str, list[PodProfile]] = {}
        for pod in _oldest_first(self.reads.pods.by_index(NOMINATED_INDEX, ALL_NAMESPACES)):
            node = pending_pods.nominated_node(pod)
            if node is None or daemon_set_of(pod) is not None:
                continue
            profile = self.cache.get(pod)
            if isinstance(profile, PodProfile):
                found.setdefault(node, []).append(profile)
        return found

    def _other_nodes(self, *, planned: Mapping[str, PoolRead]) -> list[simulation.ExistingNode]:
        """The nodes of pools no Autoscaler grows (they still take pods) and of no pool
        (system nodes, hand-made ones, another tool's, one only labelled with a pool: they
        host pods and count for affinity and spread, and are never grown nor taken
        away)."""
        found: list[simulation.ExistingNode] = []
        uids: dict[str, str] = {}
        for pool in self.pools.items():
            name = str(pool["metadata"]["name"])
            uids[name] = uid = str(pool["metadata"].get("uid", ""))
            if name not in planned:
                template = nodepool_api.spec_of(pool).template
                found.extend(self.reads.pool_nodes(name, template, keep=None, uid=uid)[0])
        for node in self.reads.nodes.items():
            if node["metadata"].get("deletionTimestamp"):
                continue
            label = wellknown.pool_of(node)
            if label in uids and membership.is_member(node, pool_name=label, pool_uid=uids[label]):
                continue  # counted with its pool above
            # Labelled with a pool that does not own it: someone else's Node, room as any.
            bound = self.reads.bound(str(node["metadata"]["name"]))
            found.append(
                node_views.existing(
                    node,
                    pool=None,
                    allocatable=node_views.allocatable_of(node, {}),
                    bound=(bound.running, bound.terminating, bound.daemons),
                    startup=frozenset(),
                )
            )
        return found

    def _pending(self, owners: Owners) -> _Pending:
        namespaces: set[str] = set()
        everything = False
        for _, spec in owners.values():
            everything = everything or not spec.namespaces
            namespaces.update(spec.namespaces)
        pods = self.reads.pods
        if everything:
            found = pods.by_index(PENDING_INDEX, ALL_NAMESPACES)
        else:
            found = [p for n in sorted(namespaces) for p in pods.by_index(PENDING_INDEX, n)]
        sorted_out = _Pending([], [])
        for pod in _oldest_first(found):
            if daemon_set_of(pod) is not None:
                continue  # bound to one node by its DaemonSet: a new node never helps it
            if pending_pods.nominated_node(pod) is not None:
                continue  # its room is held on its node (``nominated``)
            if not pending_pods.is_unschedulable(pod):
                # Not judged yet by kube-scheduler: it may still need the pool's room. A gated
                # pod or one for another scheduler is not ours to wait for.
                if pending_pods.is_ours_to_schedule(pod):
                    sorted_out.waiting.append(pod)
                continue
            profile = self.cache.get(pod)
            if isinstance(profile, PodProfile) and profile.priority < self.expendable_priority:
                continue  # expendable: may run on room that is there, never worth a node
            sorted_out.planned.append((pod, self._with_volumes(pod, profile)))
        return sorted_out

    def scheduling_profile(self, pod: Mapping[str, Any]) -> PodProfile | str:
        """The pod's profile as kube-scheduler judges it wherever it goes next: the one a
        pending pod is planned with, and the one consolidation proves a pod it would move
        fits with (a pod bound to a local volume fits only on its node, one on a zonal
        volume only in its zone)."""
        return self._with_volumes(pod, self.cache.get(pod))

    def _with_volumes(self, pod: Mapping[str, Any], profile: PodProfile | str) -> PodProfile | str:
        """The profile with what the pod's claims ask of a node (read at each call: claims
        bind and volumes appear without the pod changing)."""
        if self.volume_reads is None or not isinstance(profile, PodProfile):
            return profile
        rules = self.volume_reads.rules(pod)
        return profile if rules is None else constraints.with_volumes(profile, rules)

    def _daemon_set_views(self) -> list[simulation.DaemonSetView]:
        views = []
        for daemon in self.daemon_sets.items():
            template = ((daemon.get("spec") or {}).get("template")) or {}
            meta = daemon["metadata"]
            as_pod = {
                "metadata": {
                    **(template.get("metadata") or {}),
                    "namespace": meta.get("namespace", ""),
                    "uid": f"daemonset/{meta.get('uid', '')}",
                    "resourceVersion": str(meta.get("resourceVersion", "")),
                },
                "spec": template.get("spec") or {},
            }
            profile = self.cache.get(
                as_pod,
                lambda p: constraints.profile_of(
                    p, extra_tolerations=constraints.DAEMON_TOLERATIONS
                ),
            )
            if isinstance(profile, PodProfile):
                views.append(simulation.DaemonSetView(str(meta.get("uid", "")), profile))
        return views

    def find_unhealthy(self) -> frozenset[str]:
        """Pool nodes unhealthy by their pool's rule (``health``: NotReady past its
        timeouts, or a startup taint its agent never removed): the NodePool controller
        replaces them, and until then they are no capacity, present or in flight."""
        now = self.wall_clock.time()
        found = set()
        for node in self.reads.nodes.items():
            if k8s_nodes.is_ready(node) and not (node.get("spec") or {}).get("taints"):
                continue  # Ready and untainted: healthy whatever its pool's rules
            pool = self.pools.get(wellknown.pool_of(node) or "")
            if pool is None:
                continue
            uid = str(pool["metadata"].get("uid", ""))
            if not membership.is_member(node, pool_name=pool["metadata"]["name"], pool_uid=uid):
                continue
            if health.is_unhealthy(node, nodepool_api.spec_of(pool), now=now):
                found.add(str(node["metadata"]["name"]))
        return frozenset(found)


def _holding(
    nodes: Sequence[simulation.ExistingNode], nominated: Mapping[str, Sequence[PodProfile]]
) -> list[simulation.ExistingNode]:
    """``nodes``, each with the pods nominated to it among its pods."""
    if not nominated:
        return list(nodes)
    return [
        dataclasses.replace(node, pods=(*node.pods, *nominated[node.name]))
        if node.name in nominated
        else node
        for node in nodes
    ]
