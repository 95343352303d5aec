"""The Autoscaler's planner, run read-only over a recording of its caches.

``plan`` and ``explain`` build the planner exactly as the controller does
(``controllers.autoscaler.setup.planner_reads``) but over informers that hold a snapshot,
then ask it what the controller would: each Autoscaler's observation and decision
(``scaling.decide``), and, for one pod, every filter's answer on every node and pool
(``simulation.verdicts``). Nothing here writes to the cluster; the decisions are the
controller's own code, not a copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodepool_operator import timestamps
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.cloud import catalog
from nodepool_operator.controllers import offerings
from nodepool_operator.controllers.autoscaler import constraints, simulation
from nodepool_operator.controllers.autoscaler.config import AutoscalerConfig
from nodepool_operator.controllers.autoscaler.decide import batch_plan, scaling
from nodepool_operator.controllers.autoscaler.decide.batch_plan import (
    ConflictingAutoscaler,
    MissingPool,
    Observation,
)
from nodepool_operator.controllers.autoscaler.decide.consolidation_choice import PoolBudgets
from nodepool_operator.controllers.autoscaler.setup import Reads, planner_reads
from nodepool_operator.controllers.autoscaler.simulation import offering_plan
from nodepool_operator.inspection import disruptions, report, scale_down
from nodepool_operator.inspection.snapshot import CacheRecording, SnapshotCache, SnapshotError
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.clock import FakeClock

__all__ = ["Lookup", "PodNotFoundError", "explain_pod", "plan_cluster", "reads_of"]


class PodNotFoundError(LookupError):
    """The pod named is not in the cluster (or the snapshot)."""


@dataclass(frozen=True)
class _At:
    """A wall clock stopped at the moment the snapshot was taken, so timers (a node
    NotReady past its pool's timeout) are judged as they were then."""

    seconds: float

    def time(self) -> float:
        return self.seconds


@dataclass(frozen=True)
class _Sells:
    """A catalog given whole (a file, a test) as the cloud's ``CatalogSource``."""

    found: catalog.Catalog

    async def catalog(self) -> catalog.Catalog:
        return self.found


def reads_of(
    snapshot: CacheRecording,
    *,
    config: AutoscalerConfig | None = None,
    offerings_catalog: catalog.Catalog | None = None,
) -> Reads:
    """The planner over ``snapshot``; ``offerings_catalog``: the cloud's catalog, which
    pools with requirements are planned with (None: they are planned as not growing)."""
    taken = timestamps.parse_rfc3339(snapshot.captured_at)
    if taken is None:
        raise SnapshotError(f"the snapshot's capturedAt is not a time: {snapshot.captured_at!r}")
    return planner_reads(
        SnapshotCache(snapshot),
        config=config or AutoscalerConfig(),
        wall_clock=_At(taken),
        offerings_catalog=(
            None
            if offerings_catalog is None
            else offerings.OfferingsCatalog(_Sells(offerings_catalog), clock=FakeClock())
        ),
    )


def _pod_name(pod: Object) -> str:
    return f"{pod['metadata'].get('namespace', '')}/{pod['metadata']['name']}"


@dataclass(frozen=True)
class Lookup:
    """Every Autoscaler's observation and decision, as the controller would make them."""

    observations: dict[str, Observation]  # by pool
    decisions: dict[str, scaling.ScalingDecision]  # by pool
    troubles: dict[str, str]  # Autoscaler -> why it decides nothing
    scale_down: dict[str, autoscaler_api.ScaleDownPolicy] = field(default_factory=dict)
    blocked: dict[str, str | None] = field(default_factory=dict)  # why no node may go now
    # The pools with requirements as the plan saw them: their offerings and prices.
    offering_pools: tuple[offering_plan.OfferingPool, ...] = ()


async def _lookup(reads: Reads) -> Lookup:
    observations: dict[str, Observation] = {}
    decisions: dict[str, scaling.ScalingDecision] = {}
    troubles: dict[str, str] = {}
    policies: dict[str, autoscaler_api.ScaleDownPolicy] = {}
    blockers: dict[str, str | None] = {}
    made = await reads.plan_maker.plan()  # one plan for all, as the planner makes it
    for autoscaler in sorted(reads.autoscalers.items(), key=lambda a: a["metadata"]["name"]):
        name = str(autoscaler["metadata"]["name"])
        spec = autoscaler_api.spec_of(autoscaler)
        seen = batch_plan.part_of(made, name, spec)
        if isinstance(seen, MissingPool):
            troubles[name] = f"NodePool {spec.node_pool_name!r} does not exist"
            continue
        if isinstance(seen, ConflictingAutoscaler):
            troubles[name] = f"Autoscaler {seen.owner!r} already plans for pool {seen.pool!r}"
            continue
        blocked = scaling.scale_down_blocker(
            seen.pool, enabled=spec.scale_down.enabled, pending_fitting=seen.pending_fitting
        )
        # The unneeded timers live in the running controller; a dry run names the nodes
        # that would go once their time is up and asks for no scale-down itself.
        decisions[seen.pool.name] = scaling.decide(
            seen.pool,
            seen.up,
            unneeded=(),
            unneeded_seconds=spec.scale_down.unneeded_seconds,
            blocked=blocked,
        )
        observations[seen.pool.name] = seen
        policies[seen.pool.name] = spec.scale_down
        blockers[seen.pool.name] = blocked
    return Lookup(observations, decisions, troubles, policies, blockers, made.world.offering_pools)


async def plan_cluster(
    reads: Reads, *, budgets: Sequence[Object] | None = None
) -> report.ClusterPlan:
    """The plan for the cluster ``reads`` holds. ``budgets``: the PodDisruptionBudgets
    recorded with it, which the disruption list names where one holds a node's drain
    (None: not recorded, by a version that did not read them)."""
    looked = await _lookup(reads)
    growth: list[report.PoolGrowth] = []
    unfit: dict[str, str] = {}
    pools: list[report.PoolScaleDown] = []
    placed = 0
    pending: set[str] = set()
    for pool, seen in sorted(looked.observations.items()):
        decision = looked.decisions[pool]
        pending.update(_pod_name(p) for p in seen.fitting)
        pending.update(_pod_name(p) for p, _ in seen.unfit)
        # Pods only nodes past maxNodes could host are not placed on existing room either.
        placed += len(seen.fitting) - len(seen.triggering) - len(seen.beyond_max)
        if decision.action == "scale-up" or decision.limited:
            growth.append(
                report.PoolGrowth(
                    pool=pool,
                    target_nodes=decision.current,
                    new_nodes=decision.target - decision.current,
                    pods=tuple(_pod_name(p) for p in seen.triggering),
                    limited_to=decision.target if decision.limited else None,
                    beyond_max=tuple(_pod_name(p) for p in seen.beyond_max),
                )
            )
        for pod, why in seen.unfit:
            unfit.setdefault(_pod_name(pod), why)
        pools.append(
            report.PoolScaleDown(
                pool=pool,
                target_nodes=seen.pool.target,
                min_nodes=seen.pool.min_nodes,
                may_give_up=_room(seen),
                waits_for=looked.blocked[pool],
            )
        )
    removable, kept = _scale_down(reads, looked)
    replaced = disruptions.preview(
        reads.pools.items(),
        nodes=reads.nodes,
        pods_of=reads.pods,
        unhealthy=reads.plan_maker.pool_reads.unhealthy,
        now=_now(reads),
        budgets=budgets,
    )
    offered = _offerings(looked)
    return report.ClusterPlan(
        pending=len(pending),
        on_existing=placed,
        growth=tuple(growth),
        unfit=tuple(report.UnfitPod(pod, why) for pod, why in sorted(unfit.items())),
        removable=tuple(removable),
        troubles=tuple(f"{name}: {why}" for name, why in sorted(looked.troubles.items())),
        kept=tuple(kept),
        scale_down=tuple(pools),
        disruptions=tuple(replaced),
        offerings=offered,
        new_nodes_per_hour=(
            round(sum(p.new_nodes_per_hour for p in offered), 6)
            if any(p.blocked is None for p in offered)
            else None
        ),
    )


def _offerings(looked: Lookup) -> tuple[report.PoolOfferings, ...]:
    """Each pool with requirements: the offerings it may use now and the plan's new nodes
    of each, priced as the plan chose them."""
    found = []
    for pool in sorted(looked.offering_pools, key=lambda p: p.pool):
        prices = {o.key: _price(o) for o in pool.offerings}
        seen = looked.observations.get(pool.pool)
        chosen = seen.up.new_node_offerings if seen is not None else {}
        new_nodes = tuple(
            report.OfferingNodes(offering=prices[key], count=count) for key, count in chosen.items()
        )
        found.append(
            report.PoolOfferings(
                pool=pool.pool,
                offerings=tuple(prices.values()),
                blocked=pool.blocked,
                new_nodes=new_nodes,
                new_nodes_per_hour=round(
                    sum(n.offering.price_per_hour * n.count for n in new_nodes), 6
                ),
            )
        )
    return tuple(found)


def _price(offering: offering_plan.PlannedOffering) -> report.OfferingPrice:
    instance_type, zone, capacity_type = offering.key
    return report.OfferingPrice(
        instance_type=instance_type,
        zone=zone,
        capacity_type=capacity_type,
        price_per_hour=offering.price,
    )


def _room(seen: Observation) -> int:
    """How many nodes the pool may still give up."""
    return max(0, seen.pool.target - seen.pool.min_nodes)


def _scale_down(
    reads: Reads, looked: Lookup
) -> tuple[list[report.Removable], list[report.KeptNode]]:
    """Every planned pool's scale-down preview, their candidates checked together."""
    if not looked.observations:
        return [], []
    seen = next(iter(looked.observations.values()))  # the cluster is the same in every part
    inputs = scale_down.Inputs(
        nodes=reads.nodes,
        pods=reads.pods,
        profile=reads.plan_maker.cache.get,
        cluster=seen.cluster,
        daemon_sets=seen.daemon_sets,
    )
    pools = [
        scale_down.PoolToPreview(
            pool=pool,
            pool_uid=part.pool_uid,
            room=_room(part),
            threshold=looked.scale_down[pool].utilization_threshold,
            budgets=PoolBudgets(part.pool.budgets, reads.plan_maker.pool_reads.unhealthy),
        )
        for pool, part in sorted(looked.observations.items())
    ]
    return scale_down.preview(inputs, pools, now=_now(reads))


def _now(reads: Reads) -> float:
    """The snapshot's time: budgets' windows are judged as they were then."""
    return reads.plan_maker.pool_reads.wall_clock.time()


def _newest_request(reads: Reads, pool: str) -> report.NewestScaleRequest | None:
    found = [
        r for r in reads.requests.items() if scalerequest_api.spec_of(r).node_pool_name == pool
    ]
    if not found:
        return None
    newest = max(
        found,
        key=lambda r: (
            str(r["metadata"].get("creationTimestamp", "")),
            int(r["metadata"].get("resourceVersion") or 0),
        ),
    )
    status = scalerequest_api.status_of(newest)
    return report.NewestScaleRequest(
        name=str(newest["metadata"]["name"]),
        pool=pool,
        target_nodes=scalerequest_api.spec_of(newest).target_nodes,
        phase=str(status.phase),
        message=status.message or "",
        created=str(newest["metadata"].get("creationTimestamp", "")),
    )


def _scheduler_message(pod: Object) -> str:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"{condition.get('reason', '')}: {condition.get('message', '')}".strip(": ")
    return ""


def _planned(pod: Object, looked: Lookup) -> tuple[str, str | None]:
    """What the plan does for the pod, in one sentence, and the pool concerned."""
    uid = pod["metadata"].get("uid")

    def has(pods: Iterable[Any]) -> bool:
        return any(p["metadata"].get("uid") == uid for p in pods)

    if (pod.get("spec") or {}).get("nodeName"):
        return f"bound to {pod['spec']['nodeName']}: nothing to plan", None
    for pool, seen in sorted(looked.observations.items()):
        decision = looked.decisions[pool]
        if has(seen.triggering):
            return (
                f"needs a new node of pool {pool}: targetNodes {decision.current} -> "
                f"{decision.target}",
                pool,
            )
        if has(seen.beyond_max):
            if decision.target > decision.current:
                # Not there yet: the plan grows it to maxNodes for other pods first.
                return (
                    f"needs a new node of pool {pool}, which would be at maxNodes once it "
                    f"grows for other pods: targetNodes {decision.current} -> {decision.target}",
                    pool,
                )
            if seen.pool.cannot_grow is not None:
                return (
                    f"needs a new node of pool {pool}, which cannot grow: {seen.pool.cannot_grow}",
                    pool,
                )
            return f"needs a new node of pool {pool}, which is at maxNodes", pool
        if has(seen.fitting):
            return f"fits on a node of pool {pool} that exists or is on its way", pool
        for unfit_pod, why in seen.unfit:
            if unfit_pod["metadata"].get("uid") == uid:
                return f"no pool can host it: {why}", None
    return "", None


def _degraded_note(reads: Reads, pool: str) -> str:
    """What holds the pool the plan counts on, when it is Degraded: its nodes on their way
    may never come (the cloud refuses the credential, a quota is full), and that, not
    the plan, is why the pod waits."""
    found = reads.pools.get(pool)
    if found is None:
        return ""
    for condition in (found.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Degraded" and condition.get("status") == "True":
            return (
                f"; but NodePool {pool} is Degraded ({condition.get('reason', '')}: "
                f"{condition.get('message', '')}), so nodes on their way may not come"
            )
    return ""


def _unplanned(
    namespace: str, watchers: Sequence[report.Watcher], troubles: Mapping[str, str]
) -> str:
    """Why a pending pod is in no part of the plan, consistent with the watchers the same
    answer names as the next look: the trouble of each Autoscaler that watches it (its
    pool does not exist, another Autoscaler plans for the pool), else that none does, else
    that the scheduler has not judged it yet."""
    if not watchers:
        return f"not planned: no Autoscaler watches namespace {namespace}"
    stuck = [
        f"Autoscaler {w.autoscaler}: {troubles[w.autoscaler]}"
        for w in watchers
        if w.autoscaler in troubles
    ]
    if stuck:
        return "not planned: " + "; ".join(stuck)
    return "not planned: the scheduler has not judged it yet"


def _watchers(reads: Reads, namespace: str, pool: str | None) -> tuple[report.Watcher, ...]:
    """The Autoscalers of ``pool``, or with no pool every one that watches ``namespace``."""
    found = []
    for autoscaler in sorted(reads.autoscalers.items(), key=lambda a: a["metadata"]["name"]):
        spec = autoscaler_api.spec_of(autoscaler)
        if spec.namespaces and namespace not in spec.namespaces:
            continue
        if pool is not None and spec.node_pool_name != pool:
            continue
        found.append(
            report.Watcher(
                autoscaler=str(autoscaler["metadata"]["name"]),
                pool=spec.node_pool_name,
                scan_interval_seconds=spec.scan_interval_seconds,
                dry_run=spec.dry_run,
            )
        )
    return tuple(found)


def _offering(pod: Object, looked: Lookup, pool: str | None) -> str | None:
    """The offering the plan's new node for the pod is, and the cheaper ones that refused
    it (a pool with requirements)."""
    seen = looked.observations.get(pool) if pool is not None else None
    if seen is None:
        return None
    uid = pod["metadata"].get("uid")
    for indexes, pods in (
        (seen.up.triggering, seen.triggering),
        (seen.up.beyond, seen.beyond_max),
    ):
        for index, found in zip(indexes, pods, strict=True):
            if found["metadata"].get("uid") == uid:
                return seen.up.offering_notes.get(index)
    return None


async def explain_pod(reads: Reads, namespace: str, name: str) -> report.PodExplanation:
    pod = reads.pods.get(name, namespace)
    if pod is None:
        raise PodNotFoundError(f"no pod {namespace}/{name}")
    # The plan first: it reads the catalog, which the inputs then plan with too.
    looked = await _lookup(reads)
    inputs = reads.plan_maker.inputs()
    uid = pod["metadata"].get("uid")
    profiles = {p["metadata"].get("uid"): inputs.profiles[i] for i, p in enumerate(inputs.pending)}
    profile = profiles.get(uid) or constraints.profile_of(pod)
    judged = simulation.verdicts(
        profile,
        nodes=inputs.nodes,
        pools=inputs.templates,
        daemon_sets=inputs.daemon_sets,
    )
    pools = [
        report.PoolVerdict(
            name=t.name, problem=judged.pools[t.name], headroom=t.headroom, autoscaled=True
        )
        for t in inputs.templates
    ]
    # A pool with requirements is judged as its templates, one per instance type; one
    # without an offering to plan with is not simulated, and says why.
    offered = {o.pool: o for o in inputs.offering_pools}
    for pool in sorted(reads.pools.items(), key=lambda p: p["metadata"]["name"]):
        pool_name = str(pool["metadata"]["name"])
        found = offered.get(pool_name)
        if found is not None and found.blocked is not None:
            pools.append(
                report.PoolVerdict(
                    name=pool_name,
                    problem=f"cannot grow: {found.blocked}",
                    headroom=0,
                    autoscaled=True,
                )
            )
        elif pool_name not in judged.pools and found is None:
            spec = nodepool_api.spec_of(pool)
            pools.append(
                report.PoolVerdict(
                    name=pool_name,
                    problem="no Autoscaler plans for this pool",
                    headroom=max(0, spec.max_nodes - spec.target_nodes),
                    autoscaled=False,
                )
            )
    planned, planned_pool = _planned(pod, looked)
    bound = (pod.get("spec") or {}).get("nodeName")
    watchers = () if bound else _watchers(reads, namespace, planned_pool)
    if not planned:
        planned = _unplanned(namespace, watchers, looked.troubles)
    elif planned_pool is not None and not bound:
        planned += _degraded_note(reads, planned_pool)
    return report.PodExplanation(
        namespace=namespace,
        name=name,
        phase=str((pod.get("status") or {}).get("phase", "")),
        node=bound,
        scheduler_says=_scheduler_message(pod),
        planned=planned,
        planned_pool=planned_pool,
        nodes=tuple(
            report.NodeVerdict(
                name=node, pool=answer.pool, booting=answer.booting, problem=answer.problem
            )
            for node, answer in sorted(judged.nodes.items())
        ),
        pools=tuple(pools),
        decision=_newest_request(reads, planned_pool) if planned_pool else None,
        watchers=watchers,
        offering=None if bound else _offering(pod, looked, planned_pool),
    )
