"""Which pods the Autoscaler plans for, and what each one asks of a node.

Pure functions over pods as the API returns them (plain dicts). Requests are computed as
``k8s.io/component-helpers/resource.PodRequests`` does: the sum of the app containers,
restartable init containers ("sidecars") added to it, the largest one-shot init container
(plus the sidecars started before it) as a floor, pod-level requests replacing the
aggregate for cpu and memory, and ``spec.overhead`` on top. Every resource is kept
(cpu, memory, ephemeral-storage, hugepages, extended resources), as an integer in its
base unit (cpu in millicores), with one pod slot.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from nodepool_operator.api import quantity

__all__ = [
    "DEFAULT_SCHEDULER",
    "is_judged",
    "is_ours_to_schedule",
    "is_pending_unbound",
    "is_unschedulable",
    "nominated_node",
    "pod_requests",
]

DEFAULT_SCHEDULER: Final = "default-scheduler"
_CPU: Final = "cpu"
_MEMORY: Final = "memory"


# -- pod state ------------------------------------------------------------------------


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("spec") or {}


def _deleting(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def is_pending_unbound(pod: Mapping[str, Any]) -> bool:
    """Pending, not bound to a node, not being deleted: the scheduler still has to place it."""
    phase = (pod.get("status") or {}).get("phase", "Pending")
    return phase == "Pending" and not _spec(pod).get("nodeName") and not _deleting(pod)


def nominated_node(pod: Mapping[str, Any]) -> str | None:
    """The node preemption is making room on for this pod, if any."""
    name = (pod.get("status") or {}).get("nominatedNodeName")
    return str(name) if name else None


def is_ours_to_schedule(pod: Mapping[str, Any]) -> bool:
    """Whether kube-scheduler (not another scheduler) may place the pod now: no gates left."""
    spec = _spec(pod)
    if spec.get("schedulingGates"):
        return False
    return (spec.get("schedulerName") or DEFAULT_SCHEDULER) == DEFAULT_SCHEDULER


def is_judged(pod: Mapping[str, Any]) -> bool:
    """Whether a scheduler has said anything of the pod yet (its PodScheduled condition)."""
    return any(
        c.get("type") == "PodScheduled" for c in (pod.get("status") or {}).get("conditions") or ()
    )


def is_unschedulable(pod: Mapping[str, Any]) -> bool:
    """A pod our scheduler tried and could not place, that a new node might help.

    Pending and marked ``PodScheduled=False`` with reason ``Unschedulable`` by
    kube-scheduler. Left out: a pod with a nominated node (preemption is making room for
    it there, so a new node would be wasted), a pod still held by scheduling gates, and a
    pod for another scheduler (we cannot know what that one decides).
    """
    if not is_pending_unbound(pod) or nominated_node(pod) is not None:
        return False
    if not is_ours_to_schedule(pod):
        return False
    return any(
        c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


# -- requests -------------------------------------------------------------------------


def _parsed(holder: Mapping[str, Any]) -> dict[str, Any]:
    requests = (holder.get("resources") or {}).get("requests") or {}
    return {name: _amount(name, value) for name, value in requests.items()}


def _amount(name: str, value: Any) -> int:
    text = str(value)
    if name == _CPU:
        return quantity.parse_cpu_millicores(text)
    if name == _MEMORY:
        return quantity.parse_memory_bytes(text)
    return math.ceil(quantity.parse_quantity(text))


def _plus(total: dict[str, Any], more: Mapping[str, Any]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, 0) + value


def _max_into(total: dict[str, Any], other: Mapping[str, Any]) -> None:
    for name, value in other.items():
        total[name] = max(total.get(name, 0), value)


def _aggregate(spec: Mapping[str, Any]) -> dict[str, Any]:
    total: dict[str, Any] = {}
    for container in spec.get("containers") or ():
        _plus(total, _parsed(container))
    sidecars: dict[str, Any] = {}
    init_floor: dict[str, Any] = {}
    for container in spec.get("initContainers") or ():
        own = _parsed(container)
        if container.get("restartPolicy") == "Always":
            # A sidecar keeps running next to the app containers, so it adds to them.
            _plus(total, own)
            _plus(sidecars, own)
            step = dict(sidecars)
        else:
            # A one-shot init container runs alongside the sidecars started before it.
            step = dict(own)
            _plus(step, sidecars)
        _max_into(init_floor, step)
    _max_into(total, init_floor)
    return total


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """The pod's effective requests, zeros left out, plus one pod slot.

    Raises ``ValueError`` on a malformed quantity.
    """
    spec = _spec(pod)
    total = _aggregate(spec)
    pod_level = _parsed(spec)
    for name in (_CPU, _MEMORY):
        if name in pod_level:
            total[name] = pod_level[name]
    overhead = spec.get("overhead") or {}
    _plus(total, {name: _amount(name, value) for name, value in overhead.items()})
    found = {name: int(value) for name, value in total.items() if value > 0 and name != "pods"}
    found["pods"] = 1
    return found
