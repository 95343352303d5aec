"""What the Autoscalers see, read from the shared caches, and the one plan made from it.

All Autoscalers' pending pods are planned together: one scheduling simulation
(``simulation``) over every pool's nodes gives each pod to at most one pool, so two pools
never grow for the same pods. The plan is made once per change of what it reads (the
informers' resource versions and the requests we created) and shared by every
Autoscaler's reconcile until something changes; each Autoscaler then takes its own pool's
part of it.

In a busy cluster something changes all the time (pods start, kwok or kubelets report
status), and a plan of tens of thousands of pods takes a good part of a second: replanning
for each of a thousand Autoscalers would take minutes per round. So a plan serves each
Autoscaler once even when the caches have moved since it was made: an Autoscaler that
has not decided from it yet takes it as it is (marked ``stale`` when the caches moved, so
its reconcile looks again after its batch window if pods are pending or it asked for
something; otherwise its own watches and scan suffice); one that already decided from it, and
finds the caches moved, plans anew, for itself and for the others. A round of changes
costs about one plan, not one per Autoscaler, and no Autoscaler decides twice from the
same picture (its own request is in the next plan it sees).

No API call and no LIST per scan: indexes on the shared informers keep the reads
proportional to what is looked at, and pod profiles are parsed once per
(uid, resourceVersion).

A pool is planned for by one Autoscaler: the oldest that names it. Any other Autoscaler
naming the same pool is reported as conflicting and decides nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import quantity
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.controllers import allocatable, capacity
from nodepool_operator.controllers.autoscaler import (
    constraints,
    fit,
    plan,
    simulation,
    volumes,
    zoning,
)
from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.autoscaler.handoff import RequestLedger
from nodepool_operator.controllers.resources import (
    NODES_BY_POOL,
    PODS_BY_NODE,
    REQUESTS_BY_POOL,
    add_shared_indexes,
)
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import conditions, pods
from nodepool_operator.runtime import nodes as k8s_nodes
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.informer import Informer
from nodepool_operator.runtime.lru import Bounded

__all__ = [
    "ALL_NAMESPACES",
    "DEFAULT_EXPENDABLE_PRIORITY",
    "PENDING_INDEX",
    "ConflictingAutoscaler",
    "Observation",
    "Observer",
    "ProfileCache",
]

# Index names are our own, so that another controller's index of the same informer
# (which may compute something else under a common name) is never mistaken for ours.
PENDING_INDEX: Final = "autoscaler-pending"
#: Every pending pod is also filed under this value; no namespace has an empty name.
ALL_NAMESPACES: Final = ""

DEFAULT_CACHE_SIZE: Final = 100_000
#: Pods below this priority never trigger a scale-up (cluster-autoscaler's default).
DEFAULT_EXPENDABLE_PRIORITY: Final = -10


def _pending_index(pod: Object) -> list[str]:
    if not fit.is_pending_unbound(pod):
        return []
    return [str(pod["metadata"].get("namespace", "")), ALL_NAMESPACES]


def _daemon_set_of(pod: Mapping[str, Any]) -> str | None:
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


@dataclass(frozen=True)
class ConflictingAutoscaler:
    """This Autoscaler names a pool another (older) Autoscaler already plans for."""

    pool: str
    owner: str


@dataclass(frozen=True)
class Observation:
    """One Autoscaler's part of the plan: its pool, and the pods waiting for it."""

    pool: plan.PoolFacts
    pool_uid: str
    basis: int  # the pool's spec.targetNodes the plan started from
    up: simulation.PoolOutcome
    fitting: tuple[Object, ...]  # unschedulable pods the plan gives to this pool
    triggering: tuple[Object, ...]  # of those, the ones on its new nodes
    beyond_max: tuple[Object, ...]  # of those, the ones only nodes past maxNodes could host
    unfit: tuple[tuple[Object, str], ...]  # unschedulable pods of its namespaces no node can host
    pending: int  # pending pods not bound to a node, in the watched namespaces
    pending_fitting: int  # pods that keep the pool from shrinking: planned here or not judged yet
    unneeded: tuple[str, ...]  # Ready nodes running only DaemonSet or mirror pods
    # The plan predates changes in the caches (it served other Autoscalers first): the
    # decision is sound for what it saw, and the Autoscaler should look again soon.
    stale: bool = False
    # The whole cluster's nodes and DaemonSets as the plan saw them (for consolidation).
    cluster: tuple[simulation.ExistingNode, ...] = ()
    daemon_sets: tuple[simulation.DaemonSetView, ...] = ()
    # Of ``triggering``, the pods sent here because the pool ranked before this one could
    # not grow, each with why (the pool's name and its limit or backoff).
    passed_over: tuple[tuple[Object, str], ...] = ()

    @property
    def unschedulable(self) -> int:
        return len(self.fitting) + len(self.unfit)


@dataclass(frozen=True)
class _Pool:
    facts: plan.PoolFacts
    uid: str
    basis: int
    unneeded: tuple[str, ...]


@dataclass(frozen=True)
class _Gathered:
    """Everything one plan reads, copied out of the caches on the event loop."""

    pools: Mapping[str, _Pool]
    owners: Mapping[str, str]  # pool -> the Autoscaler that plans for it
    pending: tuple[Object, ...]  # the unschedulable pods planned for, oldest first
    profiles: tuple[PodProfile, ...]  # theirs, in the same order
    unreadable: tuple[tuple[Object, str], ...]  # unschedulable pods whose requests are broken
    waiting: tuple[Object, ...]  # pending pods the scheduler has not judged yet
    nodes: tuple[simulation.ExistingNode, ...]
    templates: tuple[simulation.PoolTemplate, ...]
    daemon_sets: tuple[simulation.DaemonSetView, ...]
    nominated: tuple[tuple[PodProfile, str], ...]

    def simulate(self) -> simulation.Outcome:
        return simulation.simulate(
            self.profiles,
            nodes=self.nodes,
            pools=self.templates,
            daemon_sets=self.daemon_sets,
            nominated=self.nominated,
        )


class _ContentChanges:
    """Counts the changes to what an informer keeps of its objects: an update that only
    moved the resourceVersion (its other changes dropped by the cache's transform) is
    not one."""

    def __init__(self) -> None:
        self.count = 0

    def on_add(self, obj: Object) -> None:
        self.count += 1

    def on_update(self, old: Object, new: Object) -> None:
        if _kept(old) != _kept(new):
            self.count += 1

    def on_delete(self, obj: Object) -> None:
        self.count += 1


def _kept(obj: Object) -> Object:
    meta = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
    return {**obj, "metadata": meta}


@dataclass
class _Plan:
    """A plan, what it was made from, and the Autoscalers that decided from it."""

    version: tuple[object, ...]  # (unhealthy nodes, *the caches' versions)
    world: _Gathered
    outcome: simulation.Outcome
    served: set[str] = field(default_factory=set)


def _cannot_grow(name: str, pool: _Pool | None) -> str:
    """Why pool ``name`` grows no more, in a pod's event."""
    if pool is not None and pool.facts.cannot_grow is not None:
        return f"NodePool {name}, ranked first for it, cannot grow: {pool.facts.cannot_grow}"
    at = f" {pool.facts.max_nodes}" if pool is not None else ""
    return f"NodePool {name}, ranked first for it, is at maxNodes{at}"


def _oldest_first(found: Iterable[Object]) -> list[Object]:
    # Equal pods keep this order, so the pods that have waited longest (and that earlier
    # requests were made for) take the room already requested, and the new nodes, with
    # their TriggeredScaleUp events, go to the pods that are new.
    def key(pod: Object) -> tuple[str, str, str]:
        meta = pod["metadata"]
        return (str(meta.get("creationTimestamp", "")), meta.get("namespace", ""), meta["name"])

    return sorted(found, key=key)


def _allocatable(node: Mapping[str, Any], fallback: Mapping[str, int]) -> dict[str, int]:
    reported = (node.get("status") or {}).get("allocatable") or {}
    if not reported:
        return dict(fallback)  # registered a moment ago: the template's, as we register it
    found: dict[str, int] = {}
    for name, value in reported.items():
        try:
            if name == "cpu":
                found[name] = quantity.parse_cpu_millicores(str(value))
            elif name == "memory":
                found[name] = quantity.parse_memory_bytes(str(value))
            else:
                found[name] = int(quantity.parse_quantity(str(value)))
        except ValueError:
            continue
    return found


#: Taints a node carries while it boots (until the node-lifecycle controller notices it
#: is Ready, or the NodePool controller that its kubelet reported): counting them on a
#: booting node would make it useless to every pod and ask for more nodes while the first
#: ones come up (Karpenter ignores the same ones, its unregistered taint too). A node whose
#: kubelet reports Ready may still carry them for a few seconds (the node-lifecycle
#: controller removes them on its next look), so they are ignored there too. On a node
#: that reports NotReady or Unknown they mean what they say (a dead node is no room).
EPHEMERAL_TAINTS: Final = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.cloudprovider.kubernetes.io/uninitialized",
        nodepool_api.UNREGISTERED_TAINT_KEY,
    }
)


def _ready(node: Mapping[str, Any]) -> bool:
    """Ready and past the unregistered taint: a node still carrying it is booting (its
    room is in flight, never unneeded), however early kwok or its kubelet says Ready."""
    return k8s_nodes.is_ready(node) and not any(
        taint.get("key") == nodepool_api.UNREGISTERED_TAINT_KEY
        for taint in (node.get("spec") or {}).get("taints") or ()
    )


def _booting(node: Mapping[str, Any]) -> bool:
    """Not initialised yet: still carrying the unregistered taint, or with no Ready
    condition reported at all (no kubelet has spoken for it)."""
    conditions = (node.get("status") or {}).get("conditions") or ()
    return any(
        taint.get("key") == nodepool_api.UNREGISTERED_TAINT_KEY
        for taint in (node.get("spec") or {}).get("taints") or ()
    ) or not any(c.get("type") == "Ready" for c in conditions)


def _startup_keys(template: nodepool_api.NodeTemplate | None) -> frozenset[tuple[str, str]]:
    if template is None:
        return frozenset()
    return frozenset((t.key, t.effect) for t in template.startup_taints)


def _taints(
    node: Mapping[str, Any], *, startup: frozenset[tuple[str, str]] = frozenset()
) -> tuple[constraints.Taint, ...]:
    """The taints the scheduler will judge the node by once it is up: the booting ones
    (on a node still booting, or Ready and not yet rid of them) and its pool's startup
    taints (an agent removes them) left out."""
    booting = _booting(node) or k8s_nodes.is_ready(node)
    return tuple(
        constraints.Taint(
            str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", ""))
        )
        for t in (node.get("spec") or {}).get("taints") or ()
        if not (booting and t.get("key") in EPHEMERAL_TAINTS)
        and (t.get("key"), t.get("effect")) not in startup
    )


def _template_taints(template: nodepool_api.NodeTemplate) -> tuple[constraints.Taint, ...]:
    return tuple(constraints.Taint(t.key, t.value or "", t.effect) for t in template.taints)


def _names_by_prefix(nodes: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Node names by what precedes their last ``-``: a name ``vm_names`` gives pool P is
    ``P-<index>``, so the Nodes that may hold one of its names are those under P."""
    found: dict[str, list[str]] = {}
    for node in nodes:
        name = str(node["metadata"]["name"])
        found.setdefault(name.rpartition("-")[0], []).append(name)
    return found


def _upcoming(
    pool: str, template: nodepool_api.NodeTemplate, taken: Iterable[str]
) -> Callable[[int, str | None], tuple[str, Mapping[str, str]]]:
    """Names and labels of the nodes the pool registers next, in the order it creates them.

    ``taken`` is ``names_taken``: the NodePool controller's own rule, so a name held by a
    Node the pool does not own is skipped here as it is there."""
    names = nodepool_api.vm_names(pool, taken)
    known: list[str] = []

    def upcoming(k: int, zone: str | None) -> tuple[str, Mapping[str, str]]:
        while len(known) <= k:
            known.append(next(names))
        name = known[k]
        labels = nodepool_api.node_labels(pool, template, zone=zone)
        return name, {**labels, nodepool_api.HOSTNAME_LABEL: name}

    return upcoming


class Observer:
    """Reads pools, nodes, pods, DaemonSets and ScaleRequests; plans for all Autoscalers."""

    def __init__(
        self,
        *,
        autoscalers: Informer,
        pools: Informer,
        nodes: Informer,
        pods: Informer,
        requests: Informer,
        daemon_sets: Informer,
        ledger: RequestLedger,
        cache: ProfileCache | None = None,
        expendable_priority: int = DEFAULT_EXPENDABLE_PRIORITY,
        wall_clock: clock_module.WallClock | None = None,
        volume_reads: volumes.VolumeReads | None = None,
    ) -> None:
        """``volume_reads``: the claims, volumes and classes the volume filters read;
        None leaves pods' claims unjudged (a planner without those caches)."""
        self.autoscalers = autoscalers
        self.volume_reads = volume_reads
        self.pools = pools
        self.nodes = nodes
        self.pods = pods
        self.requests = requests
        self.daemon_sets = daemon_sets
        self.ledger = ledger
        self.cache = cache or ProfileCache()
        self.expendable_priority = expendable_priority
        self.wall_clock = wall_clock or clock_module.RealWallClock()
        self._unhealthy: frozenset[str] = frozenset()
        self._plan: _Plan | None = None
        self._planning = asyncio.Lock()
        # Pods and Nodes are updated all the time by what the caches do not keep (node
        # heartbeats, kubelet or kwok status times): such an update must not make the
        # plan look stale, so their versions are counts of changes to what is kept.
        self._pod_changes, self._node_changes = _ContentChanges(), _ContentChanges()
        pods.add_handler(self._pod_changes)
        nodes.add_handler(self._node_changes)
        pods.add_index(PENDING_INDEX, _pending_index)
        add_shared_indexes(nodes=nodes, pods_=pods, requests=requests)

    # -- one Autoscaler's view ------------------------------------------------------------

    async def observe(
        self, name: str, spec: autoscaler_api.AutoscalerSpec
    ) -> Observation | ConflictingAutoscaler | None:
        """The Autoscaler's part of the plan; None when its pool does not exist."""
        world, outcome, stale = await self._current(name)  # shared by every Autoscaler
        owner = world.owners.get(spec.node_pool_name)
        if owner is not None and owner != name:
            return ConflictingAutoscaler(pool=spec.node_pool_name, owner=owner)
        pool = world.pools.get(spec.node_pool_name)
        if pool is None:
            return None
        up = outcome.pools.get(pool.facts.name) or simulation.PoolOutcome(0, 0, (), ())
        mine = set(spec.namespaces)
        watched = [
            (i, pod)
            for i, pod in enumerate(world.pending)
            if not mine or pod["metadata"].get("namespace") in mine
        ]
        broken = tuple(
            (pod, why)
            for pod, why in world.unreadable
            if not mine or pod["metadata"].get("namespace") in mine
        )
        unfit = tuple((pod, outcome.unfit[i]) for i, pod in watched if i in outcome.unfit) + broken
        waiting = sum(
            1 for pod in world.waiting if not mine or pod["metadata"].get("namespace") in mine
        )
        return Observation(
            pool=pool.facts,
            pool_uid=pool.uid,
            basis=pool.basis,
            up=up,
            fitting=tuple(world.pending[i] for i in up.hosted),
            triggering=tuple(world.pending[i] for i in up.triggering),
            beyond_max=tuple(world.pending[i] for i in up.beyond),
            passed_over=tuple(
                (world.pending[i], _cannot_grow(preferred, world.pools.get(preferred)))
                for i, preferred in up.passed_over
            ),
            unfit=unfit,
            pending=len(watched) + len(broken) + waiting,
            pending_fitting=len(up.hosted) + waiting,
            unneeded=pool.unneeded,
            stale=stale,
            cluster=world.nodes,
            daemon_sets=world.daemon_sets,
        )

    def inputs(self) -> _Gathered:
        """What a plan would read now, for the tools that explain one (``inspection``)."""
        self._unhealthy = self._find_unhealthy()
        return self._gather()

    def _version(self) -> tuple[object, ...]:
        return (
            self.autoscalers.resource_version,
            self.pools.resource_version,
            self._node_changes.count,
            self._pod_changes.count,
            self.requests.resource_version,
            self.daemon_sets.resource_version,
            str(self.ledger.serial),
            *(self.volume_reads.version() if self.volume_reads is not None else ()),
        )

    def _find_unhealthy(self) -> frozenset[str]:
        """Pool nodes NotReady past their pool's timeouts: the NodePool controller replaces
        them, and until then they are no capacity, present or in flight."""
        now = self.wall_clock.time()
        found = set()
        for node in self.nodes.items():
            if k8s_nodes.is_ready(node):
                continue
            pool = self.pools.get(nodepool_api.pool_of(node) or "")
            if pool is None:
                continue
            spec = nodepool_api.spec_of(pool)
            if k8s_nodes.is_unhealthy(
                node,
                now=now,
                not_ready_seconds=spec.not_ready_timeout_seconds,
                registration_seconds=spec.registration_timeout_seconds,
            ):
                found.add(str(node["metadata"]["name"]))
        return frozenset(found)

    async def _current(self, autoscaler: str) -> tuple[_Gathered, simulation.Outcome, bool]:
        """The plan for ``autoscaler`` and whether the caches moved since it was made.

        Reconciles of different Autoscalers run concurrently (their status writes and
        requests overlap); one plans at a time, and those that wait for it take its plan.
        """
        async with self._planning:
            current = self._plan
            if current is not None and autoscaler not in current.served:
                current.served.add(autoscaler)
                return current.world, current.outcome, current.version[1:] != self._version()
            # Nodes turn unhealthy by time passing alone, not by an event: part of the version.
            unhealthy = self._find_unhealthy()
            version = (unhealthy, *self._version())
            if current is None or current.version != version:
                self._unhealthy = unhealthy
                gathered = self._gather()
                # Simulating tens of thousands of pods takes long enough to starve the
                # informers and the lease renewal if it ran on the event loop; its inputs
                # are immutable snapshots, so it runs in a worker thread.
                outcome = await asyncio.to_thread(gathered.simulate)
                current = self._plan = _Plan(version, gathered, outcome)
            current.served.add(autoscaler)
            return current.world, current.outcome, False

    # -- the shared plan ------------------------------------------------------------------

    def _owners(self) -> dict[str, tuple[str, autoscaler_api.AutoscalerSpec]]:
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

    def _gather(self) -> _Gathered:
        owners = self._owners()
        pools: dict[str, _Pool] = {}
        templates: list[simulation.PoolTemplate] = []
        existing: list[simulation.ExistingNode] = []
        every_node = self.nodes.items()
        held = _names_by_prefix(every_node)
        for pool_name, (_, spec) in sorted(owners.items()):
            pool = self.pools.get(pool_name)
            if pool is None or pool["metadata"].get("deletionTimestamp"):
                continue
            view, template, nodes = self._pool(
                pool, namespaces=spec.namespaces, held=held.get(pool_name, ())
            )
            pools[pool_name] = view
            templates.append(template)
            existing.extend(nodes)
        known: set[str] = set()
        for pool in self.pools.items():
            name = str(pool["metadata"]["name"])
            known.add(name)
            if name not in pools:  # no Autoscaler: its nodes still take pods, it does not grow
                existing.extend(
                    self._nodes(name, nodepool_api.spec_of(pool).template, keep=None)[0]
                )
        # Nodes of no pool (system nodes, hand-made ones, another tool's) host pods and
        # count for affinity and spread; they are never grown nor taken away.
        for node in every_node:
            if nodepool_api.pool_of(node) in known or node["metadata"].get("deletionTimestamp"):
                continue
            running, terminating, daemons, _ = self._bound(str(node["metadata"]["name"]))
            existing.append(
                _existing(
                    node,
                    pool=None,
                    allocatable=_allocatable(node, {}),
                    bound=(running, terminating, daemons),
                    startup=frozenset(),
                )
            )
        pending, nominated, waiting = self._pending(owners.values())
        return _Gathered(
            pools=pools,
            owners={pool: owner for pool, (owner, _) in owners.items()},
            pending=tuple(pod for pod, p in pending if isinstance(p, PodProfile)),
            profiles=tuple(p for _, p in pending if isinstance(p, PodProfile)),
            unreadable=tuple((pod, p) for pod, p in pending if isinstance(p, str)),
            waiting=tuple(waiting),
            nodes=tuple(existing),
            templates=tuple(templates),
            daemon_sets=tuple(self._daemon_set_views()),
            nominated=tuple(nominated),
        )

    def _pending(
        self, owners: Iterable[tuple[str, autoscaler_api.AutoscalerSpec]]
    ) -> tuple[list[tuple[Object, PodProfile | str]], list[tuple[PodProfile, str]], list[Object]]:
        namespaces: set[str] = set()
        everything = False
        for _, spec in owners:
            if not spec.namespaces:
                everything = True
            namespaces.update(spec.namespaces)
        if everything:
            found = self.pods.by_index(PENDING_INDEX, ALL_NAMESPACES)
        else:
            found = [p for n in sorted(namespaces) for p in self.pods.by_index(PENDING_INDEX, n)]
        planned: list[tuple[Object, PodProfile | str]] = []
        nominated: list[tuple[PodProfile, str]] = []
        waiting: list[Object] = []
        for pod in _oldest_first(found):
            if _daemon_set_of(pod) is not None:
                continue  # bound to one node by its DaemonSet: a new node never helps it
            node = fit.nominated_node(pod)
            if node is not None:
                profile = self.cache.get(pod)
                if isinstance(profile, PodProfile):
                    nominated.append((profile, node))
                continue
            if not fit.is_unschedulable(pod):
                # Not judged yet by kube-scheduler: it may still need the pool's room. A gated
                # pod or one for another scheduler is not ours to wait for.
                if fit.is_ours_to_schedule(pod):
                    waiting.append(pod)
                continue
            profile = self.cache.get(pod)
            if isinstance(profile, PodProfile) and profile.priority < self.expendable_priority:
                continue  # expendable: may run on room that is there, never worth a node
            planned.append((pod, self._with_volumes(pod, profile)))
        return planned, nominated, waiting

    def _with_volumes(self, pod: Object, profile: PodProfile | str) -> PodProfile | str:
        """The profile with what the pod's claims ask of a node (read at each plan: claims
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

    def _pool(
        self, pool: Object, *, namespaces: Sequence[str], held: Iterable[str]
    ) -> tuple[_Pool, simulation.PoolTemplate, list[simulation.ExistingNode]]:
        name = str(pool["metadata"]["name"])
        spec = nodepool_api.spec_of(pool)
        views = self._requests(name)
        basis = plan.base_target(
            target=spec.target_nodes,
            min_nodes=spec.min_nodes,
            max_nodes=spec.max_nodes,
            pool_version=str(pool["metadata"].get("resourceVersion", "")),
            requests=views,
        )
        target = plan.effective_target(
            base=basis, min_nodes=spec.min_nodes, max_nodes=spec.max_nodes, requests=views
        )
        nodes, usage = self._nodes(name, spec.template, keep=target)
        # Every zone backed off (no capacity, or VMs that never registered): the pool
        # cannot grow, and what it asked for is not coming.
        stuck = capacity.cannot_grow(
            nodepool_api.status_of(pool).zone_backoffs, spec.template, now=self.wall_clock.time()
        )
        facts = plan.PoolFacts(
            name=name,
            min_nodes=spec.min_nodes,
            max_nodes=spec.max_nodes,
            target=target,
            ready=usage.ready,
            cordoned=usage.cordoned,
            unhealthy=usage.unhealthy,
            open_request=any(v.phase == "Pending" for v in views),
            cannot_grow=stuck,
        )
        in_flight = 0 if stuck else max(0, target - len(usage.registered))
        where = zoning.pool_zones(
            pool,
            nodes=self.nodes.by_index(NODES_BY_POOL, name),
            requests=self.ledger.visible(
                name,
                self.requests.by_index(REQUESTS_BY_POOL, name),
                cache_version=self.requests.resource_version,
            ),
            in_flight=in_flight,
            now=self.wall_clock.time(),
        )
        template = simulation.PoolTemplate(
            name=name,
            weight=spec.weight,
            taints=_template_taints(spec.template),
            allocatable=allocatable.planned(
                spec.template,
                nodepool_api.status_of(pool).reported_allocatable,
                self.nodes.by_index(NODES_BY_POOL, name),
                now=conditions.rfc3339(self.wall_clock.time()),
            ),
            upcoming=_upcoming(
                name, spec.template, nodepool_api.names_taken(own=usage.registered, held=held)
            ),
            in_flight=in_flight,
            headroom=0 if stuck else max(0, spec.max_nodes - target),
            zones=max(1, len(where.names)),
            namespaces=frozenset(namespaces) if namespaces else None,
            zoning=where,
        )
        view = _Pool(
            facts=facts,
            uid=str(pool["metadata"].get("uid", "")),
            basis=basis,
            unneeded=usage.unneeded,
        )
        return view, template, nodes

    def _requests(self, pool: str) -> list[plan.RequestView]:
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
                plan.RequestView(
                    name=str(meta["name"]),
                    created=str(meta.get("creationTimestamp", "")),
                    target=spec.target_nodes,
                    phase=status.phase,
                    applied=status.applied_target_nodes,
                    version=str(meta.get("resourceVersion", "")),
                    based_on=spec.based_on_target_nodes,
                )
            )
        return views

    def _nodes(
        self, pool: str, template: nodepool_api.NodeTemplate, *, keep: int | None
    ) -> tuple[list[simulation.ExistingNode], _Usage]:
        """The pool's nodes as the simulation sees them, and what scale-down needs of them.

        With ``keep`` below the registered nodes, the ones the NodePool controller removes
        first (cordoned, then not Ready, then the emptiest) are left out: they are going.
        """
        fallback = nodepool_api.template_allocatable(template)
        startup = _startup_keys(template)
        live = [
            n
            for n in self.nodes.by_index(NODES_BY_POOL, pool)
            if not n["metadata"].get("deletionTimestamp")
        ]
        bound = {str(n["metadata"]["name"]): self._bound(str(n["metadata"]["name"])) for n in live}

        def going_first(node: Object) -> tuple[bool, bool, int, str]:
            name = str(node["metadata"]["name"])
            cordoned = bool((node.get("spec") or {}).get("unschedulable"))
            return (not cordoned, _ready(node), len(bound[name][0]), name)

        ordered = sorted(live, key=going_first)
        kept = ordered[max(0, len(ordered) - keep) :] if keep is not None else ordered
        staying = {str(n["metadata"]["name"]) for n in kept}
        found: list[simulation.ExistingNode] = []
        unneeded: list[str] = []
        ready = cordoned = 0
        for node in sorted(live, key=lambda n: n["metadata"]["name"]):
            name = str(node["metadata"]["name"])
            is_ready = _ready(node)
            is_cordoned = bool((node.get("spec") or {}).get("unschedulable"))
            ready += is_ready
            cordoned += is_ready and is_cordoned
            running, terminating, daemons, busy = bound[name]
            if is_ready and not is_cordoned and not busy:
                unneeded.append(name)
            if name not in staying or name in self._unhealthy:
                continue  # going away, or no capacity until it is replaced
            found.append(
                _existing(
                    node,
                    pool=pool,
                    allocatable=_allocatable(node, fallback),
                    bound=(running, terminating, daemons),
                    startup=startup,
                )
            )
        usage = _Usage(
            ready=ready,
            cordoned=cordoned,
            unhealthy=sum(1 for n in live if n["metadata"]["name"] in self._unhealthy),
            registered=tuple(str(n["metadata"]["name"]) for n in live),
            unneeded=tuple(unneeded),
        )
        return found, usage

    def _bound(
        self, node: str
    ) -> tuple[tuple[PodProfile, ...], tuple[PodProfile, ...], frozenset[str], bool]:
        """The profiles of the pods on ``node``, and whether any of them needs the node."""
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
            daemon = _daemon_set_of(pod)
            if daemon is not None:
                daemons.add(daemon)
            # A pod on its way out still holds its room (the scheduler counts it until it
            # is gone) but no longer keeps the node needed.
            busy = busy or not (leaving or pods.is_daemon_or_mirror(pod))
        return tuple(running), tuple(terminating), frozenset(daemons), busy


def _existing(
    node: Object,
    *,
    pool: str | None,
    allocatable: Mapping[str, int],
    bound: tuple[tuple[PodProfile, ...], tuple[PodProfile, ...], frozenset[str]],
    startup: frozenset[tuple[str, str]],
) -> simulation.ExistingNode:
    """A Node as the simulation sees it."""
    name = str(node["metadata"]["name"])
    labels = node["metadata"].get("labels") or {}
    hostname = labels.get(nodepool_api.HOSTNAME_LABEL, name)
    running, terminating, daemons = bound
    return simulation.ExistingNode(
        name=name,
        pool=pool,
        labels={**labels, nodepool_api.HOSTNAME_LABEL: hostname},
        taints=_taints(node, startup=startup),
        unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
        allocatable=allocatable,
        pods=running,
        terminating=terminating,
        daemon_sets=daemons,
    )


@dataclass(frozen=True)
class _Usage:
    ready: int
    cordoned: int
    unhealthy: int
    registered: tuple[str, ...]
    unneeded: tuple[str, ...]
