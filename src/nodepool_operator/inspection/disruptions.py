"""What the NodePool controller would disrupt next for drift and expiry, and what holds
it: its own decision (``controllers.nodepool.disruption.plan``) run read-only over the
snapshot, never a copy of it.

Each pool's member Nodes that have drifted from its spec or outlived its
``expireAfter``, at the snapshot's time: those it would taint next (within the pool's
disruption budgets), those held and by what (the budget that holds, naming its window;
a do-not-disrupt annotation on the Node or one of its pods), and those being replaced
already (tainted ``nodepool.dev/disrupted``). A Node the controller would taint next,
or is draining already, that runs a pod a PodDisruptionBudget allowing no disruption
covers is held by that budget: its drain goes through the Eviction API, which refuses
that pod's eviction until the budget allows one (the snapshot records the budgets; one
taken by a version that did not cannot say, and names none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.controllers import membership
from nodepool_operator.controllers.autoscaler.constraints.matching import parse_selector
from nodepool_operator.controllers.nodepool import disruption, drain
from nodepool_operator.controllers.nodepool import plan as pool_plan
from nodepool_operator.controllers.resources import PODS_BY_NODE
from nodepool_operator.inspection import report
from nodepool_operator.runtime import pods
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.informer import Informer

__all__ = ["preview"]


def _moving(node: str, pods_of: Informer) -> list[Object]:
    """The pods a drain of ``node`` evicts: not its DaemonSet or mirror pods (they go
    with the Node), not those that have finished."""
    return [
        p
        for p in pods_of.by_index(PODS_BY_NODE, node)
        if not pods.is_daemon_or_mirror(p) and not pods.is_terminal(p)
    ]


def _view(
    members: Mapping[str, Mapping[str, Any]], pods_of: Informer, unhealthy: frozenset[str]
) -> pool_plan.PoolView:
    """The pool as the NodePool controller's disruption pass reads it (its Nodes, which
    of them are do-not-disrupt or being repaired); the VMs play no part in that pass."""
    moving = {name: _moving(name, pods_of) for name in members}
    return pool_plan.PoolView(
        vms=(),
        nodes=members,
        pods_per_node={name: len(found) for name, found in moving.items()},
        protected=frozenset(
            name for name, found in moving.items() if drain.node_is_protected(members[name], found)
        ),
        unhealthy=unhealthy & members.keys(),
    )


def preview(
    pools: Sequence[Mapping[str, Any]],
    *,
    nodes: Informer,
    pods_of: Informer,
    unhealthy: frozenset[str],
    now: float,
    budgets: Sequence[Mapping[str, Any]] | None = None,
) -> list[report.NodeDisruption]:
    """Every pool's drifted and expired Nodes at ``now``, each with what happens next;
    ``budgets``: the cluster's PodDisruptionBudgets (None: not known)."""

    def holding(node: str) -> str | None:
        return None if budgets is None else _budget_holding(_moving(node, pods_of), budgets)

    found: list[report.NodeDisruption] = []
    for pool in sorted(pools, key=lambda p: str(p["metadata"]["name"])):
        if pool["metadata"].get("deletionTimestamp"):
            continue
        name = str(pool["metadata"]["name"])
        members = {
            str(n["metadata"]["name"]): n
            for n in membership.members(
                nodes, pool_name=name, pool_uid=str(pool["metadata"].get("uid", ""))
            )
        }
        spec = nodepool_api.spec_of(pool)
        decided = disruption.plan(
            _view(members, pods_of, unhealthy), spec, desired=spec.target_nodes, now=now
        )
        for candidate in decided.taint:
            found.append(_row(name, candidate, state="next", held_by=holding(candidate.node)))
        for candidate, holder in decided.held:
            found.append(_row(name, candidate, state="held", held_by=holder))
        for node_name, node in sorted(members.items()):
            reason = disruption.disruption_reason(node)
            if reason is not None:
                found.append(
                    report.NodeDisruption(
                        pool=name,
                        node=node_name,
                        reason=reason,
                        why="",
                        state="in-progress",
                        held_by=holding(node_name),
                    )
                )
    return found


def _budget_holding(
    moving: Sequence[Mapping[str, Any]], budgets: Sequence[Mapping[str, Any]]
) -> str | None:
    """The first PodDisruptionBudget (by namespace and name) that allows no disruption
    now and covers one of ``moving``: a policy/v1 budget covers the pods of its namespace
    its selector matches (an empty selector every one, a missing one none)."""
    for budget in sorted(
        budgets,
        key=lambda b: (str(b["metadata"].get("namespace", "")), str(b["metadata"]["name"])),
    ):
        meta, spec = budget["metadata"], budget.get("spec") or {}
        allowed = int((budget.get("status") or {}).get("disruptionsAllowed") or 0)
        selector = parse_selector(spec.get("selector"), pod_labels={})
        if allowed > 0 or selector is None:
            continue
        for pod in moving:
            pod_meta = pod.get("metadata") or {}
            if pod_meta.get("namespace") == meta.get("namespace") and selector.matches(
                pod_meta.get("labels") or {}
            ):
                return (
                    f"PodDisruptionBudget {meta.get('namespace')}/{meta['name']} "
                    f"({allowed} disruptions allowed)"
                )
    return None


def _row(
    pool: str, candidate: disruption.Candidate, *, state: str, held_by: str | None
) -> report.NodeDisruption:
    return report.NodeDisruption(
        pool=pool,
        node=candidate.node,
        reason=candidate.reason,
        why=candidate.why,
        state=state,
        held_by=held_by,
    )
