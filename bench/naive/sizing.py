"""How many Nodes of a pool the unschedulable pods need: the job both baselines share.

The naive operator and the kopf operator size a scale-up the same way, with the product's
own arithmetic (``pending_pods.pod_requests``,
``nodepool_api.template_allocatable``), so that what differs
between the three operators in ``bench/contention.py`` is how they write, not what they
decide. First-fit decreasing by cpu; a pod that fits no empty Node is left out (no
number of Nodes would help it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.controllers.autoscaler.constraints import pending_pods
from nodepool_operator.runtime import pods as runtime_pods

__all__ = ["bound_requests", "extra_nodes", "unschedulable_for"]


def _selects(pod: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    return all(labels.get(key) == value for key, value in selector.items())


def unschedulable_for(
    pods: Iterable[Mapping[str, Any]],
    *,
    pool: str,
    template: nodepool_api.NodeTemplate,
    namespaces: Iterable[str],
) -> list[Mapping[str, Any]]:
    """Pods of ``namespaces`` (all when empty) the scheduler could not place and that a
    Node of ``pool`` would accept (its node selector matches the pool's labels)."""
    allowed = set(namespaces)
    labels = nodepool_api.node_labels(pool, template)
    return [
        pod
        for pod in pods
        if (not allowed or pod["metadata"].get("namespace") in allowed)
        and pending_pods.is_unschedulable(pod)
        and _selects(pod, labels)
    ]


def bound_requests(
    pods: Iterable[Mapping[str, Any]], node_names: set[str]
) -> dict[str, list[dict[str, int]]]:
    """The requests of the running pods bound to each of ``node_names``."""
    used: dict[str, list[dict[str, int]]] = {node: [] for node in node_names}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node in used and not runtime_pods.is_terminal(pod):
            used[node].append(pending_pods.pod_requests(pod))
    return used


def extra_nodes(
    pods: Iterable[Mapping[str, Any]],
    template: nodepool_api.NodeTemplate,
    *,
    used: Iterable[Iterable[Mapping[str, int]]],
    coming: int,
) -> int:
    """New Nodes of ``template`` the pods need beyond the pool's room, packed first-fit
    decreasing: first into what is left on each existing Node (``used``: the requests of
    the pods bound to it), then into the ``coming`` Nodes asked for but not registered."""
    room = nodepool_api.template_allocatable(template)
    bins: list[dict[str, int]] = []
    for requests in used:
        free = dict(room)
        for request in requests:
            for name, amount in request.items():
                free[name] = free.get(name, 0) - amount
        bins.append(free)
    bins += [dict(room) for _ in range(coming)]
    known = len(bins)
    wanted = sorted(
        (pending_pods.pod_requests(pod) for pod in pods), key=lambda r: -r.get("cpu", 0)
    )
    for request in wanted:
        if any(request.get(name, 0) > room.get(name, 0) for name in request):
            continue
        for free in bins:
            if all(request.get(name, 0) <= free.get(name, 0) for name in request):
                break
        else:
            free = dict(room)
            bins.append(free)
        for name, amount in request.items():
            free[name] = free.get(name, 0) - amount
    return len(bins) - known
