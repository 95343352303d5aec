"""A cloud's notice that it takes a VM back, as a fact stored on its Node.

The NodePool controller's interruptions reconciler writes these marks (their keys live in
``api.wellknown``, which ``controllers.health``, the drain and the Autoscaler read):

* ``INTERRUPTION_ANNOTATION``: what the cloud said, one of ``KINDS``;
* ``NOTICED_AT_ANNOTATION``: when the cloud said it (RFC 3339);
* ``TERMINATE_AT_ANNOTATION``: when the cloud takes the VM back (RFC 3339), absent when it
  did not say (an instance already stopping);
* the ``INTERRUPTED_TAINT_KEY`` taint, ``NoSchedule``, and the Node cordoned: no new pod
  goes there while the Node is replaced.

A Node carries at most one notice; a second one only moves ``terminateAt`` earlier,
except after a rebalance recommendation (stored only where the pool opts in,
``spec.disruption.rebalanceRecommendation: Replace``): the notice that follows it takes
its place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from nodepool_operator import timestamps
from nodepool_operator.api import wellknown
from nodepool_operator.runtime import conditions

__all__ = [
    "INTERRUPTED_TAINT_KEY",
    "INTERRUPTION_ANNOTATION",
    "KINDS",
    "KIND_OF_EVENT",
    "NOTICED_AT_ANNOTATION",
    "REBALANCE",
    "SCHEDULED_CHANGE",
    "SPOT_INTERRUPTION",
    "STATE_CHANGE",
    "TERMINATE_AT_ANNOTATION",
    "Notice",
    "drain_deadline",
    "is_marked",
    "marks",
    "read",
]

INTERRUPTION_ANNOTATION: Final = wellknown.INTERRUPTION_ANNOTATION
NOTICED_AT_ANNOTATION: Final = wellknown.INTERRUPTION_NOTICED_AT_ANNOTATION
TERMINATE_AT_ANNOTATION: Final = wellknown.INTERRUPTION_TERMINATE_AT_ANNOTATION
#: On a Node the cloud takes back: nothing new is scheduled there (Karpenter taints
#: ``karpenter.sh/disrupted`` likewise).
INTERRUPTED_TAINT_KEY: Final = wellknown.INTERRUPTED_TAINT_KEY

SPOT_INTERRUPTION: Final = wellknown.SPOT_INTERRUPTION
REBALANCE: Final = wellknown.REBALANCE
SCHEDULED_CHANGE: Final = wellknown.SCHEDULED_CHANGE
STATE_CHANGE: Final = wellknown.STATE_CHANGE
KINDS: Final = wellknown.INTERRUPTION_KINDS
#: The kinds ``provider.CloudEvent`` documents (EC2's names, which simcloud uses too) ->
#: the annotation's value. Spelled here, not imported: the EC2 reader's module pulls in
#: botocore, which a simcloud operator never needs.
KIND_OF_EVENT: Final[Mapping[str, str]] = {
    "SpotInterruptionWarning": SPOT_INTERRUPTION,
    "RebalanceRecommendation": REBALANCE,
    "ScheduledChange": SCHEDULED_CHANGE,
    "InstanceStateChange": STATE_CHANGE,
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Notice:
    kind: str
    noticed_at: float
    terminate_at: float | None = None

    def merged(self, newer: Notice) -> Notice:
        """This notice with ``newer``'s deadline where that is earlier (the first kind
        stays: a spot warning followed by the instance stopping is still a spot warning),
        or ``newer`` whole when this is a rebalance recommendation and ``newer`` is not:
        a recommendation only warns; the notice that follows ends the VM, from its own
        time."""
        if self.kind == REBALANCE and newer.kind != REBALANCE:
            return newer
        due = [t for t in (self.terminate_at, newer.terminate_at) if t is not None]
        return dataclasses.replace(self, terminate_at=min(due) if due else None)


def read(node: Mapping[str, Any]) -> Notice | None:
    """The notice the Node carries; None without one, or when its time cannot be read
    (a hand-made mark: nothing is replaced on a guess)."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    kind = annotations.get(INTERRUPTION_ANNOTATION)
    if kind not in KINDS:
        return None
    noticed = timestamps.parse_rfc3339(str(annotations.get(NOTICED_AT_ANNOTATION, "")))
    if noticed is None:
        return None
    due = timestamps.parse_rfc3339(str(annotations.get(TERMINATE_AT_ANNOTATION, "")))
    return Notice(kind=str(kind), noticed_at=noticed, terminate_at=due)


def drain_deadline(node: Mapping[str, Any]) -> float | None:
    """When the cloud takes the Node's VM back: past it nothing on the Node can be waited
    for. None without a notice, or one that did not say."""
    found = read(node)
    return None if found is None else found.terminate_at


def marks(node: Mapping[str, Any], notice: Notice) -> dict[str, Any]:
    """The merge patch that stores ``notice`` on ``node``: annotations, the taint (the
    list is replaced whole, so the patch must carry the resourceVersion it was read at),
    cordon."""
    taints = list((node.get("spec") or {}).get("taints") or ())
    if not any(t.get("key") == INTERRUPTED_TAINT_KEY for t in taints):
        taints.append({"key": INTERRUPTED_TAINT_KEY, "effect": "NoSchedule"})
    annotations = {
        INTERRUPTION_ANNOTATION: notice.kind,
        NOTICED_AT_ANNOTATION: conditions.rfc3339(notice.noticed_at),
        TERMINATE_AT_ANNOTATION: (
            None if notice.terminate_at is None else conditions.rfc3339(notice.terminate_at)
        ),
    }
    return {
        "metadata": {
            "annotations": annotations,
            "resourceVersion": (node.get("metadata") or {}).get("resourceVersion"),
        },
        "spec": {"taints": taints, "unschedulable": True},
    }


def is_marked(node: Mapping[str, Any], notice: Notice) -> bool:
    """The Node carries ``notice`` (to the second, as it is stored), tainted and cordoned:
    nothing to write."""
    found = read(node)
    spec = node.get("spec") or {}
    tainted = any(t.get("key") == INTERRUPTED_TAINT_KEY for t in spec.get("taints") or ())
    return (
        found is not None
        and found.kind == notice.kind
        and _second(found.terminate_at) == _second(notice.terminate_at)
        and tainted
        and bool(spec.get("unschedulable"))
    )


def _second(at: float | None) -> int | None:
    return None if at is None else int(at)
