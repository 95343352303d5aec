"""What a pool's kubelets report against its template: the rule, pure.

A real kubelet computes its own allocatable (kube-reserved, the eviction threshold, the
machine's real memory), often below the template's. Planning new Nodes from the template
then promises room no Node has: a pod that fits the template but no real Node gets a new,
useless Node on every scan. So per resource the pool remembers, in its status
(``status.reportedAllocatable``), what its Ready Nodes report below the template's figure;
the Autoscaler plans new Nodes with it.

The figure is robust, not the smallest ever seen: per resource, the lower median of what
the pool's Ready Nodes report now (``_robust``). All Nodes reporting the same lower figure
(a kubelet's reserve, the machine's real memory) give that figure; one Node reporting less
than its peers (7 GPUs of 8: a sick device; 0: its device plugin is down) does not plan
every future Node with its figure while the others say more, and once it is gone the
figure rises again. A pool with one or two Ready Nodes is planned with the lowest of them
(the lower median of two is the smaller): too few to outvote.

The NodePool controller writes the record (and its condition and event); the Autoscaler
plans with ``planned``: the record, lowered further by what the pool's Ready Nodes report
right now, so the moment between a kubelet's report and the status write that records it
never plans a Node from the template. Both go through ``snapshot.node_views``, so they
never disagree.

The record is measured against one template: when the template's figures change it
starts again, and only Nodes created since then count (the older ones are of the old
template). While the pool has no Ready Node of the template (scaled to zero, or all
booting) the record is kept as it is, so the last Nodes still speak for the next one; the
status is its one copy, so a restarted operator keeps it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from nodepool_operator import timestamps
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.runtime import nodes as k8s_nodes

__all__ = [
    "CONDITION",
    "EVENT_REASON",
    "as_reported",
    "condition",
    "observe",
    "overstated",
    "planned",
    "template_field",
]

#: The pool condition saying whether its template overstates what its kubelets report.
CONDITION = "AllocatableOverstated"
#: The reason of that condition (True) and of the event told when the record changes.
EVENT_REASON = "KubeletsReportLess"
AS_TEMPLATE = "AsTemplate"

_TEMPLATE_FIELDS = {
    "cpu": "cpu",
    "memory": "memory",
    "pods": "pods",
    "ephemeral-storage": "ephemeralStorage",
}


def template_field(resource: str, template: nodepool_api.NodeTemplate) -> str:
    """The template field that sets ``resource``'s allocatable (and its reserve, if set)."""
    field = _TEMPLATE_FIELDS.get(resource, f"extendedResources[{resource}]")
    path = f"spec.template.{field}"
    if resource in template.reserved:
        path = f"{path} - spec.template.reserved[{resource}]"
    return path


def _amount(resource: str, text: str) -> int | None:
    try:
        return nodepool_api.amount_of(resource, text)
    except ValueError:
        return None


def _counts(node: Mapping[str, Any], since: str | None) -> bool:
    """A Ready Node, not on its way out, created for the record's template. Ready is the
    kubelet's word that it has initialised the Node: it writes its Ready condition and
    its allocatable in one status update (see ``nodes``), so from the first Ready on the
    allocatable is the kubelet's, not the template's the Node was created with. Counting
    it then, not only once the unregistered taint is gone, leaves the Autoscaler the
    shortest time planning new Nodes from the template after a kubelet said less."""
    meta = node.get("metadata") or {}
    if meta.get("deletionTimestamp") or not k8s_nodes.is_ready(node):
        return False
    if since is None:
        return True
    created = timestamps.parse_rfc3339(str(meta.get("creationTimestamp", "")))
    start = timestamps.parse_rfc3339(since)
    return created is not None and start is not None and created >= start


def observe(
    record: nodepool_api.ReportedAllocatable | None,
    template: nodepool_api.NodeTemplate,
    nodes: Iterable[Mapping[str, Any]],
    *,
    now: str,
) -> nodepool_api.ReportedAllocatable:
    """The record after looking at the pool's ``nodes``.

    ``record`` is the one the status holds (None: never written, so every Node counts);
    one measured against other template figures is started again from ``now``.
    """
    figures = nodepool_api.template_allocatable(template)
    texts = nodepool_api.quantity_texts(figures)
    if record is None:
        record = nodepool_api.ReportedAllocatable(template_allocatable=texts)
    elif dict(record.template_allocatable) != texts:
        record = nodepool_api.ReportedAllocatable(template_allocatable=texts, since=now)
    counted = [node for node in nodes if _counts(node, record.since)]
    lowest: dict[str, int] = {}
    if not counted:
        # No Node speaks now: the last ones still do, through the record.
        for name, text in record.lowest.items():
            amount = _amount(name, text)
            if name in figures and amount is not None:
                lowest[name] = amount
    lowest.update(_medians(figures, counted))
    below = {name: amount for name, amount in lowest.items() if amount < figures[name]}
    return nodepool_api.ReportedAllocatable(
        template_allocatable=texts,
        since=record.since,
        lowest=nodepool_api.quantity_texts(dict(sorted(below.items()))),
    )


def _reported(node: Mapping[str, Any], resource: str) -> int | None:
    reported = (node.get("status") or {}).get("allocatable") or {}
    return _amount(resource, str(reported[resource])) if resource in reported else None


def _medians(resources: Iterable[str], counted: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Per resource of ``resources``, the robust figure (``_robust``) of what the
    ``counted`` Nodes report; a resource none of them reports is left out."""
    medians: dict[str, int] = {}
    for name in resources:
        amounts = [amount for node in counted if (amount := _reported(node, name)) is not None]
        if amounts:
            medians[name] = _robust(amounts)
    return medians


def _robust(amounts: list[int]) -> int:
    """The lower median: half the Nodes report at least this much, and one low reporter
    among three or more moves it no lower than its peers."""
    ordered = sorted(amounts)
    return ordered[(len(ordered) - 1) // 2]


def as_reported(figures: Mapping[str, int], nodes: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """``figures`` (what a Node is planned with), each resource lowered to what the Ready
    ``nodes`` made the same way report now, where they say less: the lower median, as the
    record takes it. Used per instance type (``offerings.as_reported``): no record is
    kept, so a type none of whose Nodes is left is planned from the catalog again."""
    reported = _medians(figures, [node for node in nodes if _counts(node, None)])
    return {name: min(figure, reported.get(name, figure)) for name, figure in figures.items()}


def planned(
    template: nodepool_api.NodeTemplate,
    record: nodepool_api.ReportedAllocatable | None,
    nodes: Iterable[Mapping[str, Any]],
    *,
    now: str,
) -> dict[str, int]:
    """The allocatable a future Node of the pool is planned with: the template's, lowered
    to what its Ready Nodes report (``nodes``, the pool's Nodes now; ``record``, the pool's
    status, when none of them is Ready), as ``snapshot.node_views`` computes it."""
    figures = nodepool_api.template_allocatable(template)
    for name, text in observe(record, template, nodes, now=now).lowest.items():
        amount = _amount(name, text)
        if amount is not None and name in figures:
            figures[name] = min(figures[name], amount)
    return figures


def overstated(
    record: nodepool_api.ReportedAllocatable, template: nodepool_api.NodeTemplate
) -> list[str]:
    """One line per resource the template overstates, naming its field: ``spec.template.
    memory: template 16Gi, kubelets report 15.2Gi``."""
    figures = nodepool_api.template_allocatable(template)
    lines = []
    for name, text in sorted(record.lowest.items()):
        amount = _amount(name, text)
        if amount is None or name not in figures:
            continue
        lines.append(
            f"{template_field(name, template)}: template {_human(name, figures[name])},"
            f" kubelets report {_human(name, amount)}"
        )
    return lines


def condition(
    record: nodepool_api.ReportedAllocatable, template: nodepool_api.NodeTemplate
) -> tuple[bool, str, str]:
    """``AllocatableOverstated``: holds, reason, message."""
    lines = overstated(record, template)
    if not lines:
        return False, AS_TEMPLATE, "kubelets report the template's allocatable"
    return (
        True,
        EVENT_REASON,
        "; ".join(lines) + "; new nodes are planned with what the kubelets report",
    )


def _human(resource: str, amount: int) -> str:
    """A figure as a person writes it: 15.2Gi, 512Mi, 3.5 (cpus), 110."""
    if resource == "cpu":
        return _trimmed(Fraction(amount, 1000))
    if resource in ("memory", "ephemeral-storage"):
        for suffix, unit in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount >= unit:
                return f"{_trimmed(Fraction(amount, unit))}{suffix}"
    return str(amount)


def _trimmed(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.3f}".rstrip("0").rstrip(".")
