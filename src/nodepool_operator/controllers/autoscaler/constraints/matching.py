"""The API's matching rules a pod's constraints are judged by: taints and tolerations
(``Toleration.ToleratesTaint``), label selectors (``k8s.io/apimachinery``) and node
selector terms (``core/v1``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from nodepool_operator.api import wellknown

__all__ = [
    "BLOCKING_EFFECTS",
    "DAEMON_TOLERATIONS",
    "UNSCHEDULABLE_TAINT",
    "NodeTaint",
    "Requirement",
    "Selector",
    "Toleration",
    "node_affinity_problem",
    "parse_selector",
    "term_holds",
    "terms_name_nodes",
    "untolerated",
]

# Taint effects that keep a pod off a node; PreferNoSchedule is only a preference.
BLOCKING_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})
UNSCHEDULABLE_TAINT: Final = "node.kubernetes.io/unschedulable"


@dataclass(frozen=True, slots=True)
class NodeTaint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str

    def tolerates(self, taint: NodeTaint) -> bool:
        # core/v1 Toleration.ToleratesTaint: an empty effect or key matches any.
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator in ("", "Equal") and self.value == taint.value


#: What the DaemonSet controller adds to every DaemonSet pod, so that it runs on nodes
#: that are not ready, unreachable, under pressure or cordoned.
DAEMON_TOLERATIONS: Final = tuple(
    Toleration(key=f"node.kubernetes.io/{key}", operator="Exists", value="", effect=effect)
    for key, effect in (
        ("not-ready", "NoExecute"),
        ("unreachable", "NoExecute"),
        ("disk-pressure", "NoSchedule"),
        ("memory-pressure", "NoSchedule"),
        ("pid-pressure", "NoSchedule"),
        ("unschedulable", "NoSchedule"),
        ("network-unavailable", "NoSchedule"),
    )
)


def untolerated(tolerations: Sequence[Toleration], taints: Sequence[NodeTaint]) -> NodeTaint | None:
    """The first taint that keeps a pod with ``tolerations`` off the node, or None."""
    for taint in taints:
        if taint.effect in BLOCKING_EFFECTS and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


# -- label selectors ------------------------------------------------------------------

Requirement = tuple[str, str, frozenset[str]]  # key, operator, values


@dataclass(frozen=True, slots=True)
class Selector:
    """A ``metav1.LabelSelector``; ``None`` in a term means it matches nothing."""

    requirements: tuple[Requirement, ...]

    @property
    def keys(self) -> frozenset[str]:
        """The label keys it reads: a pod's other labels never change what it matches."""
        return frozenset(key for key, _, _ in self.requirements)

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, operator, values in self.requirements:
            present = key in labels
            if operator == "In":
                if not present or labels[key] not in values:
                    return False
            elif operator == "NotIn":
                if present and labels[key] in values:
                    return False
            elif operator == "Exists":
                if not present:
                    return False
            elif operator == "DoesNotExist":
                if present:
                    return False
            else:
                return False
        return True


def parse_selector(
    raw: Mapping[str, Any] | None,
    *,
    pod_labels: Mapping[str, str],
    match_keys: Sequence[str] = (),
    mismatch_keys: Sequence[str] = (),
) -> Selector | None:
    if raw is None:
        return None
    found: list[Requirement] = [
        (str(k), "In", frozenset({str(v)}))
        for k, v in sorted((raw.get("matchLabels") or {}).items())
    ]
    for expression in raw.get("matchExpressions") or ():
        found.append(
            (
                str(expression.get("key", "")),
                str(expression.get("operator", "")),
                frozenset(str(v) for v in expression.get("values") or ()),
            )
        )
    # matchLabelKeys / mismatchLabelKeys: the incoming pod's own values join the selector.
    for key in match_keys:
        if key in pod_labels:
            found.append((key, "In", frozenset({pod_labels[key]})))
    for key in mismatch_keys:
        if key in pod_labels:
            found.append((key, "NotIn", frozenset({pod_labels[key]})))
    return Selector(tuple(found))


# -- node affinity --------------------------------------------------------------------


def _requirement_holds(requirement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
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


def term_holds(term: Mapping[str, Any], labels: Mapping[str, str], name: str) -> bool:
    expressions = term.get("matchExpressions") or ()
    fields = term.get("matchFields") or ()
    if not expressions and not fields:
        return False  # an empty term matches no node (core/v1 NodeSelectorTerm)
    # The only field a node selector term may name is metadata.name.
    return all(_requirement_holds(e, labels) for e in expressions) and all(
        _requirement_holds(f, {"metadata.name": name}) for f in fields
    )


def terms_name_nodes(terms: Sequence[Mapping[str, Any]]) -> bool:
    """Whether node selector terms name nodes one by one (by hostname or by field), so
    that nodes alike in every other label may still be judged differently."""
    return any(
        term.get("matchFields")
        or any(e.get("key") == wellknown.HOSTNAME_LABEL for e in term.get("matchExpressions") or ())
        for term in terms
    )


def node_affinity_problem(
    node_selector: Mapping[str, str],
    affinity_terms: Sequence[Mapping[str, Any]] | None,
    *,
    labels: Mapping[str, str],
    name: str,
) -> str | None:
    """Why ``nodeSelector`` or required node affinity refuse a node, or None."""
    for key, value in sorted(node_selector.items()):
        if labels.get(key) != value:
            return f"nodeSelector {key}={value}"
    if affinity_terms is not None and not any(
        term_holds(term, labels, name) for term in affinity_terms
    ):
        return "required node affinity"
    return None


# -- volumes ------------------------------------------------------------------------------
