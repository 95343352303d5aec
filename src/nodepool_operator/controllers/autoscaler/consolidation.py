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
   counted), the Node gets the ``NoSchedule`` taint ``CONSOLIDATING_TAINT_KEY`` (one
   write): from then on no new pod is scheduled there.
3. **Named.** Once the taint shows in the cache, the decision is checked again, the
   PodDisruptionBudgets read from the API server (only now, for the few Nodes at this
   step), and the Node is named in a ScaleRequest (``spec.removeNodes``); the NodePool
   controller drains exactly those Nodes and removes them.
4. **Kept.** A Node that stops being a candidate at any step (a pod it cannot move landed
   on it, it got busy, its pods no longer fit elsewhere, a budget allows no disruption,
   a scale-up is settling) loses the stamp and the taint (one write), and an event on the
   Node and the Autoscaler names the pod and the rule that keeps it.

So a Node costs at most two writes on its way out, and one when it is kept; a Node is
never left tainted by a crash: the next pass either names it or clears it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import quantity
from nodepool_operator.controllers.autoscaler import metrics, simulation
from nodepool_operator.controllers.autoscaler.constraints import PodProfile, Selector
from nodepool_operator.controllers.resources import NODES_BY_POOL, PODS_BY_NODE
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import conditions, errors, kinds, pods
from nodepool_operator.runtime import nodes as k8s_nodes
from nodepool_operator.runtime.client import Client, Object, Resource
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import Informer

__all__ = [
    "PDBS",
    "Consolidator",
    "Kept",
    "NodeView",
    "Review",
    "budget_problem",
    "choose",
    "movable_problem",
    "usage_of",
]

log = logging.getLogger(__name__)

PDBS: Final = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True)

#: Blockers during which the timers start over: scale-down is off, or a scale-up is
#: settling (no Node is given up shortly after the pool grew). A Pending request or pods
#: the scheduler has not placed yet only hold the timers: an eviction's replacement pod
#: must not restart every other candidate's wait.
_RESETS: Final = frozenset({"disabled", "capacity-in-flight"})

_KUBE_SYSTEM: Final = "kube-system"
#: Seconds after a taint is written until the decision is checked again.
_RECHECK_SECONDS: Final = 1.0


@dataclass(frozen=True)
class Kept:
    """Why an underused Node stays: the rule, and the pod it applies to (if one)."""

    node: str
    rule: str
    pod: str | None
    message: str


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

    @property
    def empty(self) -> bool:
        return not self.to_move


@dataclass(frozen=True)
class Review:
    """What one pass found: the Nodes to name now, and when to look again."""

    victims: tuple[str, ...] = ()
    candidates: int = 0
    next_check: float | None = None  # seconds until a stamp reaches unneededSeconds
    # Why each named Node goes, for the events written once the request is made.
    reasons: Mapping[str, str] = field(default_factory=dict)


def _pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def movable_problem(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(rule, message) when a drain must not move ``pod``; None when it may.

    The budgets (and a kube-system pod's need of one) are judged apart, with the
    budgets read (``budget_problem``).
    """
    annotations = _annotations(pod)
    safe = annotations.get(nodepool_api.SAFE_TO_EVICT_ANNOTATION) == "true"
    if annotations.get(nodepool_api.DO_NOT_DISRUPT_ANNOTATION) == "true":
        return "do-not-disrupt", f"{nodepool_api.DO_NOT_DISRUPT_ANNOTATION}: true"
    if annotations.get(nodepool_api.SAFE_TO_EVICT_ANNOTATION) == "false":
        return "do-not-disrupt", f'{nodepool_api.SAFE_TO_EVICT_ANNOTATION}: "false"'
    owners = (pod.get("metadata") or {}).get("ownerReferences") or ()
    if not any(ref.get("controller") for ref in owners) and not safe:
        return "not-replicated", "no controller recreates it (a bare pod)"
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        if safe:
            break
        if "hostPath" in volume:
            return "local-storage", f"hostPath volume {volume.get('name', '')!r}"
        empty_dir = volume.get("emptyDir")
        if empty_dir is not None and (empty_dir or {}).get("medium") != "Memory":
            return "local-storage", f"emptyDir volume {volume.get('name', '')!r} on the node's disk"
    return None


def _selector(raw: Mapping[str, Any] | None) -> Selector:
    if raw is None:
        return Selector((("", "NoSuchOperator", frozenset()),))  # a PDB without one: none
    requirements = [
        (str(k), "In", frozenset({str(v)}))
        for k, v in sorted((raw.get("matchLabels") or {}).items())
    ]
    requirements += [
        (
            str(e.get("key", "")),
            str(e.get("operator", "")),
            frozenset(map(str, e.get("values") or ())),
        )
        for e in raw.get("matchExpressions") or ()
    ]
    return Selector(tuple(requirements))


def budget_problem(
    to_move: Sequence[Mapping[str, Any]], budgets: Sequence[Mapping[str, Any]]
) -> tuple[str, str, str] | None:
    """(pod, rule, message) when the budgets do not allow moving every pod of ``to_move``
    now, or a kube-system pod has no budget (cluster-autoscaler's rule); else None."""
    covering: dict[str, int] = {}
    named: dict[str, Mapping[str, Any]] = {}
    for pod in to_move:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        matched = False
        for budget in budgets:
            bmeta = budget.get("metadata") or {}
            if bmeta.get("namespace") != meta.get("namespace"):
                continue
            if not _selector((budget.get("spec") or {}).get("selector")).matches(labels):
                continue
            matched = True
            key = f"{bmeta.get('namespace')}/{bmeta.get('name')}"
            covering[key] = covering.get(key, 0) + 1
            named[key] = budget
            allowed = int((budget.get("status") or {}).get("disruptionsAllowed") or 0)
            if covering[key] > allowed:
                message = f"PodDisruptionBudget {key} allows {allowed} disruptions now"
                return _pod_key(pod), "pod-disruption-budget", message
        if not matched and meta.get("namespace") == _KUBE_SYSTEM:
            safe = _annotations(pod).get(nodepool_api.SAFE_TO_EVICT_ANNOTATION) == "true"
            if not safe:
                return _pod_key(pod), "kube-system", "a kube-system pod without a budget"
    return None


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


def choose(
    views: Sequence[NodeView],
    *,
    threshold: float,
    fits: Callable[[Sequence[NodeView]], tuple[str, str] | None],
) -> tuple[list[NodeView], list[Kept]]:
    """The candidates among ``views``, and why each other underused Node stays.

    Empty Nodes first (no simulation), then the Nodes already tainted (a decision in
    progress keeps its room), then the longest stamped (a pass after a removal keeps the
    timers that ran, instead of starting another Node's from zero), then the least used.
    ``fits(chosen)`` says which pod of ``chosen`` fits nowhere on the Nodes that stay
    (``(pod, why)``), or None.
    """

    def order(v: NodeView) -> tuple[bool, bool, bool, float, float, str]:
        return (not v.empty, not v.tainted, v.since is None, v.since or 0.0, v.usage, v.name)

    underused = sorted((v for v in views if v.eligible and v.usage < threshold), key=order)
    chosen: list[NodeView] = []
    kept: list[Kept] = []
    for view in underused:
        if view.empty:
            chosen.append(view)
            continue
        problems = ((pod, movable_problem(pod)) for pod in view.to_move)
        pod, problem = next(((p, found) for p, found in problems if found), (None, None))
        if pod is not None and problem is not None:
            rule, why = problem
            kept.append(Kept(view.name, rule, _pod_key(pod), f"pod {_pod_key(pod)}: {why}"))
            continue
        unfit = fits([*chosen, view])
        if unfit is not None:
            pod_name, why = unfit
            message = f"pod {pod_name} fits on no other node: {why}"
            kept.append(Kept(view.name, "no-room", pod_name, message))
            continue
        chosen.append(view)
    return chosen, kept


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
        self.pods = pods
        self.profile = profile
        self.recorder = recorder
        self.wall_clock = wall_clock
        # Node -> (rule, pod) last told, so that a Node kept for the same reason scan after
        # scan is told once (a cache only: after a restart it is told once more).
        self._told: dict[str, tuple[str, str | None]] = {}

    # -- reading --------------------------------------------------------------------------

    def views(self, pool: str) -> list[NodeView]:
        found = []
        for node in self.nodes.by_index(NODES_BY_POOL, pool):
            meta = node["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            name = str(meta["name"])
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
            since = _annotations(node).get(autoscaler_api.UNNEEDED_SINCE_ANNOTATION)
            found.append(
                NodeView(
                    name=name,
                    obj=node,
                    to_move=tuple(p for p in bound if not pods.is_daemon_or_mirror(p)),
                    usage=usage,
                    since=None if since is None else conditions.parse_rfc3339(since),
                    tainted=any(
                        t.get("key") == autoscaler_api.CONSOLIDATING_TAINT_KEY for t in taints
                    ),
                    eligible=(
                        k8s_nodes.is_ready(node)
                        and not spec.get("unschedulable")
                        and not any(
                            t.get("key") == nodepool_api.UNREGISTERED_TAINT_KEY for t in taints
                        )
                        and _annotations(node).get(nodepool_api.DO_NOT_DISRUPT_ANNOTATION) != "true"
                    ),
                )
            )
        return sorted(found, key=lambda v: v.name)

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
                return _pod_key(moving[0]), "its requests cannot be read"
            outcome = simulation.simulate(
                [p for p in profiles if isinstance(p, PodProfile)],
                nodes=[n for n in cluster if n.name not in going],
                pools=(),
                daemon_sets=daemon_sets,
            )
            if not outcome.unfit:
                return None
            first = min(outcome.unfit)
            return _pod_key(moving[first]), outcome.unfit[first]

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
        key = str(autoscaler["metadata"]["name"])
        if blocked in _RESETS:
            for view in views:
                if view.eligible and (view.since is not None or view.tainted):
                    await self._clear(view, since=None)
            return Review()
        chosen, kept = choose(
            views,
            threshold=policy.utilization_threshold,
            fits=self._fits(views, cluster, daemon_sets),
        )
        metrics.nodepool_autoscaler_consolidation_candidates.labels(key).set(len(chosen))
        names = {v.name for v in chosen}
        self._prune(names)
        await self._tell_kept(autoscaler, kept)
        for view in views:
            if view.eligible and view.name not in names and (view.since or view.tainted):
                await self._clear(view, since=None)
        if blocked is not None:
            return Review(candidates=len(chosen))
        for view in chosen:
            if view.since is None:
                await self._stamp(view, now)
        expired = [
            v for v in chosen if v.since is not None and now - v.since >= policy.unneeded_seconds
        ]
        waiting = [
            v.since + policy.unneeded_seconds - now
            for v in chosen
            if v.since is not None and v not in expired
        ]
        next_check = (
            min(waiting)
            if waiting
            else (policy.unneeded_seconds if any(v.since is None for v in chosen) else None)
        )
        to_taint = _within_limits(
            [v for v in expired if not v.tainted],
            tainted=[v for v in views if v.tainted],
            room=room,
            max_concurrent=policy.max_concurrent,
        )
        # Budgets are read only for the Nodes about to be tainted or named: not every pass
        # for every candidate waiting for its turn.
        allowed = await self._budgets_allow(
            [*(v for v in expired if v.tainted), *to_taint], autoscaler
        )
        if allowed is None:
            return Review(candidates=len(chosen), next_check=next_check)
        tainted_now = 0
        for view in allowed:
            if not view.tainted and await self._taint(view):
                tainted_now += 1
        if tainted_now:
            # The watches do not wake us for our own taint: look again once it shows.
            next_check = min(next_check or _RECHECK_SECONDS, _RECHECK_SECONDS)
        victims = tuple(v.name for v in allowed if v.tainted)
        reasons = {v.name: _why_it_goes(v) for v in allowed if v.tainted}
        return Review(
            victims=victims,
            candidates=len(chosen),
            next_check=next_check,
            reasons=reasons,
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

    # -- writing --------------------------------------------------------------------------

    async def _patch(self, view: NodeView, body: Mapping[str, Any]) -> bool:
        """A merge patch with the resourceVersion precondition (a taint list is replaced
        whole): a 409 or a Node gone leaves it to the next pass."""
        patch = {
            **body,
            "metadata": {
                **body.get("metadata", {}),
                "resourceVersion": view.obj["metadata"].get("resourceVersion"),
            },
        }
        try:
            await self.client.patch(kinds.NODES, view.name, patch)
        except (errors.Conflict, errors.NotFound):
            return False
        metrics.nodepool_autoscaler_consolidation_node_writes_total.inc()
        return True

    async def _stamp(self, view: NodeView, now: float) -> None:
        annotations = {autoscaler_api.UNNEEDED_SINCE_ANNOTATION: conditions.rfc3339(now)}
        if await self._patch(view, {"metadata": {"annotations": annotations}}):
            log.info("event=node-unneeded node=%s usage=%.2f", view.name, view.usage)

    async def _taint(self, view: NodeView) -> bool:
        taints = list((view.obj.get("spec") or {}).get("taints") or ())
        taints.append({"key": autoscaler_api.CONSOLIDATING_TAINT_KEY, "effect": "NoSchedule"})
        if not await self._patch(view, {"spec": {"taints": taints}}):
            return False
        # No event here: the taint shows on the Node, and the one event a Node gets is
        # ConsolidationRemoving, once it is named (or ConsolidationKept).
        log.info(
            "event=node-consolidating node=%s usage=%.2f pods=%d",
            view.name,
            view.usage,
            len(view.to_move),
        )
        return True

    async def _clear(self, view: NodeView, *, since: float | None) -> None:
        """Remove the taint, and the stamp (or restart it at ``since``)."""
        stamp = None if since is None else conditions.rfc3339(since)
        body: dict[str, Any] = {
            "metadata": {"annotations": {autoscaler_api.UNNEEDED_SINCE_ANNOTATION: stamp}}
        }
        if view.tainted:
            taints = [
                t
                for t in (view.obj.get("spec") or {}).get("taints") or ()
                if t.get("key") != autoscaler_api.CONSOLIDATING_TAINT_KEY
            ]
            body["spec"] = {"taints": taints}
        if await self._patch(view, body) and view.tainted:
            log.info("event=node-consolidation-called-off node=%s", view.name)

    async def _tell_kept(self, autoscaler: Object, kept: Iterable[Kept]) -> None:
        for item in kept:
            said = (item.rule, item.pod)
            if self._told.get(item.node) == said:
                continue
            self._told[item.node] = said
            metrics.nodepool_autoscaler_consolidation_kept_total.labels(item.rule).inc()
            message = f"node {item.node} stays although underused: {item.message} ({item.rule})"
            log.info("event=node-kept node=%s rule=%s pod=%s", item.node, item.rule, item.pod)
            node = self.nodes.get(item.node)
            if node is not None:
                await self.recorder.event(
                    _node_ref(node), type="Normal", reason="ConsolidationKept", message=message
                )
            await self.recorder.event(
                autoscaler, type="Normal", reason="ConsolidationKept", message=message
            )

    async def announce(self, review: Review, *, request: str) -> None:
        """Tell each named Node why it goes, once its request is made."""
        for name in review.victims:
            metrics.nodepool_autoscaler_consolidation_removals_total.inc()
            self._told.pop(name, None)
            node = self.nodes.get(name)
            if node is None:
                continue
            with contextlib.suppress(errors.ApiError):
                await self.recorder.event(
                    _node_ref(node),
                    type="Normal",
                    reason="ConsolidationRemoving",
                    message=(
                        f"named for removal in ScaleRequest {request}: "
                        f"{review.reasons.get(name, '')}"
                    ),
                )

    def _prune(self, candidates: set[str]) -> None:
        """Forget what was told of Nodes gone, or candidates again (told anew if kept
        again later)."""
        for name in [*candidates, *self._told]:
            if name in candidates or self.nodes.get(name) is None:
                self._told.pop(name, None)


def _within_limits(
    untainted: Sequence[NodeView], *, tainted: Sequence[NodeView], room: int, max_concurrent: int
) -> list[NodeView]:
    """Those of ``untainted`` (in order) that may be tainted now: never more tainted Nodes
    than the pool may give up, never more than ``max_concurrent`` with pods to move. Nodes
    tainted already count (named, or draining)."""
    busy = sum(1 for v in tainted if not v.empty)
    count = len(tainted)
    chosen = []
    for view in untainted:
        if count >= room:
            break
        if not view.empty and busy >= max_concurrent:
            continue
        chosen.append(view)
        count += 1
        busy += not view.empty
    return chosen


def _why_it_goes(view: NodeView) -> str:
    if view.empty:
        return "empty (DaemonSet and mirror pods only)"
    return (
        f"underused ({view.usage:.0%} requested); its {len(view.to_move)} pods fit on other nodes"
    )


def _node_ref(node: Mapping[str, Any]) -> Object:
    return {"apiVersion": "v1", "kind": "Node", "metadata": dict(node.get("metadata") or {})}
