"""What a pod asks for, and whether a node of the pool's template could ever hold it.

Pure functions over pods as the API returns them (plain dicts), so each rule is
unit-tested on its own. The rules are the scheduler's, restricted to what a node that
does not exist yet can be judged on:

* requests as ``k8s.io/component-helpers/resource.PodRequests`` computes them: the sum of
  the app containers, restartable init containers ("sidecars") added to it, the largest
  one-shot init container (plus the sidecars started before it) as a floor, pod-level
  requests replacing the aggregate for cpu and memory, and ``spec.overhead`` on top;
* ``nodeSelector`` and required node affinity against the labels every Node of the pool
  will carry;
* tolerations against the template's ``NoSchedule`` and ``NoExecute`` taints;
* any other requested resource (``ephemeral-storage``, GPUs...) never fits, because a
  template node offers only cpu, memory and pods and the scheduler's NodeResourcesFit
  refuses a request above an absent (zero) allocatable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from nodepool_operator.api import nodepool as np
from nodepool_operator.api import quantity

__all__ = [
    "NodeShape",
    "PodRequests",
    "Resources",
    "is_pending_unbound",
    "is_unschedulable",
    "pod_requests",
    "why_not_fit",
]

# Taint effects that keep a pod off a node; PreferNoSchedule is only a preference.
_BLOCKING_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})
_CPU: Final = "cpu"
_MEMORY: Final = "memory"


@dataclass(frozen=True, slots=True, kw_only=True)
class Resources:
    """An amount of capacity: millicores of cpu, bytes of memory and pod slots."""

    cpu: int
    memory: int
    pods: int = 1

    def fits_in(self, other: Resources) -> bool:
        return self.cpu <= other.cpu and self.memory <= other.memory and self.pods <= other.pods

    def minus(self, other: Resources) -> Resources:
        return Resources(
            cpu=self.cpu - other.cpu,
            memory=self.memory - other.memory,
            pods=self.pods - other.pods,
        )


@dataclass(frozen=True)
class NodeShape:
    """One node of a pool as a pod sees it: capacity, labels, taints."""

    pool: str
    capacity: Resources
    labels: Mapping[str, str]
    taints: tuple[np.Taint, ...]

    @classmethod
    def of_pool(cls, pool: str, template: np.NodeTemplate) -> NodeShape:
        capacity = Resources(
            cpu=template.cpu_millicores, memory=template.memory_bytes, pods=template.pods
        )
        labels = np.node_labels(pool, template)
        return cls(pool=pool, capacity=capacity, labels=labels, taints=template.taints)


@dataclass(frozen=True, slots=True)
class PodRequests:
    """What a pod needs from a node; ``other`` names requested resources beyond cpu/memory."""

    resources: Resources
    other: tuple[str, ...] = ()


# -- pod state ------------------------------------------------------------------------


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("spec") or {}


def _deleting(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def is_pending_unbound(pod: Mapping[str, Any]) -> bool:
    """Pending, not bound to a node, not being deleted: the scheduler still has to place it."""
    phase = (pod.get("status") or {}).get("phase", "Pending")
    return phase == "Pending" and not _spec(pod).get("nodeName") and not _deleting(pod)


def is_unschedulable(pod: Mapping[str, Any]) -> bool:
    """Pending and marked ``PodScheduled=False`` with reason ``Unschedulable`` by the scheduler.

    A pod with a nominated node is left out: preemption is making room for it on that node,
    so a new node would be wasted on it.
    """
    if not is_pending_unbound(pod):
        return False
    status = pod.get("status") or {}
    if status.get("nominatedNodeName"):
        return False
    return any(
        c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and c.get("reason") == "Unschedulable"
        for c in status.get("conditions") or ()
    )


# -- requests -------------------------------------------------------------------------


def _parsed(holder: Mapping[str, Any]) -> dict[str, Any]:
    requests = (holder.get("resources") or {}).get("requests") or {}
    return {name: _amount(name, value) for name, value in requests.items()}


def _amount(name: str, value: Any) -> Any:
    text = str(value)
    if name == _CPU:
        return quantity.parse_cpu_millicores(text)
    if name == _MEMORY:
        return quantity.parse_memory_bytes(text)
    return quantity.parse_quantity(text)


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


def pod_requests(pod: Mapping[str, Any]) -> PodRequests:
    """The pod's effective requests; raises ``ValueError`` on a malformed quantity."""
    spec = _spec(pod)
    total = _aggregate(spec)
    pod_level = _parsed(spec)
    for name in (_CPU, _MEMORY):
        if name in pod_level:
            total[name] = pod_level[name]
    overhead = spec.get("overhead") or {}
    _plus(total, {name: _amount(name, value) for name, value in overhead.items()})
    other = tuple(sorted(n for n, v in total.items() if n not in (_CPU, _MEMORY) and v > 0))
    resources = Resources(cpu=int(total.get(_CPU, 0)), memory=int(total.get(_MEMORY, 0)))
    return PodRequests(resources, other)


# -- placement rules ------------------------------------------------------------------


def _requirement_matches(requirement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = requirement.get("key", "")
    operator = requirement.get("operator")
    values: Sequence[str] = requirement.get("values") or ()
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            label, bound = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return label > bound if operator == "Gt" else label < bound
    return False


def _field_matches(requirement: Mapping[str, Any]) -> bool:
    # The only field is metadata.name, and a node that does not exist yet has no name the
    # pod could have asked for; only an exclusion can hold for it.
    return requirement.get("operator") == "NotIn"


def _term_matches(term: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    expressions = term.get("matchExpressions") or ()
    fields = term.get("matchFields") or ()
    if not expressions and not fields:
        return False  # an empty term matches no node (core/v1 NodeSelectorTerm)
    return all(_requirement_matches(e, labels) for e in expressions) and all(
        _field_matches(f) for f in fields
    )


def _selector_problem(spec: Mapping[str, Any], labels: Mapping[str, str]) -> str | None:
    for key, value in sorted((spec.get("nodeSelector") or {}).items()):
        if labels.get(key) != value:
            return f"nodeSelector {key}={value} does not match the pool's node labels"
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if affinity is not None:
        terms = affinity.get("nodeSelectorTerms") or ()
        if not any(_term_matches(term, labels) for term in terms):
            return "required node affinity matches no node of the pool"
    return None


def _tolerates(toleration: Mapping[str, Any], taint: np.Taint) -> bool:
    # core/v1 Toleration.ToleratesTaint: an empty effect or key matches any.
    effect = toleration.get("effect") or ""
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key") or ""
    if key and key != taint.key:
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.value or "")


def _untolerated(spec: Mapping[str, Any], taints: Iterable[np.Taint]) -> np.Taint | None:
    tolerations = spec.get("tolerations") or ()
    for taint in taints:
        if taint.effect in _BLOCKING_EFFECTS and not any(_tolerates(t, taint) for t in tolerations):
            return taint
    return None


def _capacity_problem(requests: PodRequests, shape: NodeShape) -> str | None:
    need, have = requests.resources, shape.capacity
    if requests.other:
        return f"requests {', '.join(requests.other)}, which nodes of the pool do not offer"
    if need.cpu > have.cpu:
        return f"requests cpu {need.cpu}m but a node of the pool has {have.cpu}m"
    if need.memory > have.memory:
        return f"requests memory {need.memory} bytes but a node of the pool has {have.memory}"
    if need.pods > have.pods:
        return f"a node of the pool holds {have.pods} pods"
    return None


def why_not_fit(pod: Mapping[str, Any], requests: PodRequests, *, shape: NodeShape) -> str | None:
    """None if the pod fits on an empty node of ``shape``; otherwise why it never will."""
    spec = _spec(pod)
    problem = _capacity_problem(requests, shape) or _selector_problem(spec, shape.labels)
    if problem is not None:
        return problem
    taint = _untolerated(spec, shape.taints)
    if taint is not None:
        value = f"={taint.value}" if taint.value else ""
        return f"does not tolerate the pool's taint {taint.key}{value}:{taint.effect}"
    return None
