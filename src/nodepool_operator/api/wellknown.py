"""The marks on Nodes and Pods that the controllers (and users) read: labels, taints,
annotations, and the one reading of each.

A mark written by one controller and read by the other is a contract between them, like a
field of the API: its key lives here once, with the predicate that reads it, so that the
writer and every reader agree. The keys other projects defined first (Kubernetes'
topology and platform labels, Karpenter's and cluster-autoscaler's do-not-disrupt
annotations) are here under the same rule: the users migrating from those carry them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, get_args

from nodepool_operator import timestamps
from nodepool_operator.api import meta

__all__ = [
    "ARCHITECTURES",
    "ARCH_LABEL",
    "CAPACITY_TYPES",
    "CAPACITY_TYPE_LABEL",
    "CONSOLIDATING_TAINT_KEY",
    "DEFAULT_ARCH",
    "DEFAULT_OS",
    "DISRUPTED_TAINT_KEY",
    "DISRUPTION_ANNOTATIONS",
    "DO_NOT_DISRUPT_ANNOTATION",
    "DRIFTED_ANNOTATION",
    "HOSTNAME_LABEL",
    "INSTANCE_CPU_LABEL",
    "INSTANCE_MEMORY_LABEL",
    "INSTANCE_TYPE_LABEL",
    "INTERRUPTED_TAINT_KEY",
    "INTERRUPTION_ANNOTATION",
    "INTERRUPTION_KINDS",
    "INTERRUPTION_NOTICED_AT_ANNOTATION",
    "INTERRUPTION_TERMINATE_AT_ANNOTATION",
    "KARPENTER_CAPACITY_TYPE_LABEL",
    "KARPENTER_DO_NOT_DISRUPT_ANNOTATION",
    "NOMINATED_ANNOTATION",
    "OFFERING_LABELS",
    "OPERATING_SYSTEMS",
    "OPERATOR_LABELS",
    "OS_LABEL",
    "POOL_LABEL",
    "REBALANCE",
    "REGION_LABEL",
    "SAFE_TO_EVICT_ANNOTATION",
    "SCALE_DOWN_ANNOTATION",
    "SCALE_DOWN_DISABLED_ANNOTATION",
    "SCHEDULED_CHANGE",
    "SPEC_HASH_ANNOTATION",
    "SPOT_INTERRUPTION",
    "STATE_CHANGE",
    "UNNEEDED_SINCE_ANNOTATION",
    "UNREGISTERED_TAINT_KEY",
    "VM_DELETED_ANNOTATION",
    "ZONE_LABEL",
    "CapacityType",
    "do_not_disrupt_reason",
    "interrupted_at",
    "interruption_kind",
    "interruption_terminate_at",
    "is_being_disrupted",
    "is_being_removed",
    "is_unregistered",
    "pool_of",
    "pool_selector",
    "ready_changed_at",
]

# Labels. Every Node of a pool carries POOL_LABEL=<pool name>; the rest are Kubernetes' own.
POOL_LABEL: Final = f"{meta.GROUP}/pool"
ZONE_LABEL: Final = "topology.kubernetes.io/zone"
REGION_LABEL: Final = "topology.kubernetes.io/region"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
ARCH_LABEL: Final = "kubernetes.io/arch"
OS_LABEL: Final = "kubernetes.io/os"
DEFAULT_ARCH: Final = "amd64"
DEFAULT_OS: Final = "linux"
#: What a template may set ``ARCH_LABEL`` and ``OS_LABEL`` to: the values kubelets report
#: (Go's GOARCH and GOOS for the platforms Kubernetes ships nodes for).
ARCHITECTURES: Final = ("amd64", "arm64", "arm", "ppc64le", "s390x", "386", "riscv64")
OPERATING_SYSTEMS: Final = ("linux", "windows")
# The labels of a node's catalog offering (``cloud.catalog.offering_labels`` writes them
# on the Nodes of a pool with requirements; the pool's requirements are judged over them).
INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
#: The offering's capacity type: one of ``CAPACITY_TYPES``.
CAPACITY_TYPE_LABEL: Final = f"{meta.GROUP}/capacity-type"
#: Karpenter's name for the same label, also put on the Nodes: pods written for Karpenter
#: select the same nodes here.
KARPENTER_CAPACITY_TYPE_LABEL: Final = "karpenter.sh/capacity-type"
CapacityType = Literal["on-demand", "spot"]
CAPACITY_TYPES: Final[tuple[CapacityType, ...]] = get_args(CapacityType)
#: The instance type's cpu in whole cores and memory in MiB (rounded down), for Gt and Lt.
INSTANCE_CPU_LABEL: Final = f"{meta.GROUP}/instance-cpu"
INSTANCE_MEMORY_LABEL: Final = f"{meta.GROUP}/instance-memory"
#: Every label an offering puts on a Node (the zone, architecture and os among them).
OFFERING_LABELS: Final = (
    INSTANCE_TYPE_LABEL,
    ARCH_LABEL,
    OS_LABEL,
    ZONE_LABEL,
    CAPACITY_TYPE_LABEL,
    KARPENTER_CAPACITY_TYPE_LABEL,
    INSTANCE_CPU_LABEL,
    INSTANCE_MEMORY_LABEL,
)
#: Labels the operator alone puts on a pool's Nodes (zone and region from ``zones`` and
#: ``region``): a template setting one would contradict what the Node must say.
OPERATOR_LABELS: Final = (POOL_LABEL, HOSTNAME_LABEL, ZONE_LABEL, REGION_LABEL)

# On every Node the NodePool controller creates, until its kubelet has reported Ready and
# its own capacity: no pod is bound to a machine still booting (Karpenter's
# karpenter.sh/unregistered). The NodePool controller alone adds and removes it.
UNREGISTERED_TAINT_KEY: Final = f"{meta.GROUP}/unregistered"

#: On a new Node whose ScaleRequest asked the NodePool controller to wait for
#: nominations (``spec.awaitNominationsSeconds``): when (RFC 3339) the Autoscaler wrote
#: ``status.nominatedNodeName`` on the pending pods it planned there. The Autoscaler
#: writes it; the NodePool controller lifts the unregistered taint once it is there (or
#: the wait has run out). ``api.nominations`` has the rule.
NOMINATED_ANNOTATION: Final = f"{meta.GROUP}/nominated"

#: On a Node the Autoscaler will remove once the taint is visible and its decision still
#: holds: no new pod is scheduled there meanwhile. The Autoscaler adds and removes it.
CONSOLIDATING_TAINT_KEY: Final = f"{meta.GROUP}/consolidating"
#: On a Node that could go (underused, its pods movable and fitting elsewhere): since when
#: (RFC 3339). The Autoscaler's scale-down timer, kept in the world so that it survives a
#: restart; removed when the Node is needed again.
UNNEEDED_SINCE_ANNOTATION: Final = f"{meta.GROUP}/unneeded-since"

# The NodePool controller's marks on a Node it is removing: draining (value: when the drain
# started) and its VM deleted (value: when). Both controllers read them: a Node carrying
# one is on its way out, never a consolidation candidate again.
SCALE_DOWN_ANNOTATION: Final = f"{meta.GROUP}/scale-down"
VM_DELETED_ANNOTATION: Final = f"{meta.GROUP}/vm-deleted"

#: On a Node the NodePool controller is replacing of its own accord (drift, expiry); its
#: value is the reason (``api.disruption.DisruptionReason``). The record that the Node
#: uses its pool's disruption budget, from the moment it is chosen until it is gone: a
#: restarted operator counts it and goes on with its replacement. The NodePool
#: controller adds it; it stays until the Node is deleted.
DISRUPTED_TAINT_KEY: Final = f"{meta.GROUP}/disrupted"
#: On a pool's Node: the hash of the pool's spec it was made from (``api.drift``),
#: written by the NodePool controller at registration.
SPEC_HASH_ANNOTATION: Final = f"{meta.GROUP}/spec-hash"
#: On a Node whose pool's spec has changed since it was made: what changed (comma
#: separated sections, ``labels,capacity``). Written by the NodePool controller.
DRIFTED_ANNOTATION: Final = f"{meta.GROUP}/drifted"

# The cloud's notice that it takes a Node's VM back, as the NodePool controller stores it
# on the Node (``controllers.nodepool.interruptions``) and every reader reads it: what the
# cloud said (one of ``INTERRUPTION_KINDS``), when (RFC 3339), and when the VM goes
# (RFC 3339; absent when the cloud did not say), with the ``INTERRUPTED_TAINT_KEY`` taint
# (NoSchedule) and the Node cordoned. The record a restarted operator continues from.
INTERRUPTION_ANNOTATION: Final = f"{meta.GROUP}/interruption"
INTERRUPTION_NOTICED_AT_ANNOTATION: Final = f"{meta.GROUP}/interruption-noticed-at"
INTERRUPTION_TERMINATE_AT_ANNOTATION: Final = f"{meta.GROUP}/interruption-terminate-at"
INTERRUPTED_TAINT_KEY: Final = f"{meta.GROUP}/interrupted"
SPOT_INTERRUPTION: Final = "spot-interruption"
REBALANCE: Final = "rebalance"
SCHEDULED_CHANGE: Final = "scheduled-change"
STATE_CHANGE: Final = "state-change"
INTERRUPTION_KINDS: Final = (SPOT_INTERRUPTION, REBALANCE, SCHEDULED_CHANGE, STATE_CHANGE)

# "true" on a Pod (or a Node): the Autoscaler never chooses to remove the Node it runs on,
# and an explicit scale-down removes such Nodes last (Karpenter's karpenter.sh/do-not-disrupt).
DO_NOT_DISRUPT_ANNOTATION: Final = f"{meta.GROUP}/do-not-disrupt"
# "false" on a Pod means the same as do-not-disrupt, as cluster-autoscaler reads it.
SAFE_TO_EVICT_ANNOTATION: Final = "cluster-autoscaler.kubernetes.io/safe-to-evict"
# The annotations users migrating from Karpenter or cluster-autoscaler already carry: "true"
# on a Pod or Node (Karpenter), "true" on a Node (cluster-autoscaler) means do-not-disrupt.
KARPENTER_DO_NOT_DISRUPT_ANNOTATION: Final = "karpenter.sh/do-not-disrupt"
SCALE_DOWN_DISABLED_ANNOTATION: Final = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
#: Every annotation that can forbid a voluntary disruption, with the value that does.
_POD_REFUSALS: Final = (
    (DO_NOT_DISRUPT_ANNOTATION, "true"),
    (KARPENTER_DO_NOT_DISRUPT_ANNOTATION, "true"),
    (SAFE_TO_EVICT_ANNOTATION, "false"),
)
_NODE_REFUSALS: Final = (
    (DO_NOT_DISRUPT_ANNOTATION, "true"),
    (KARPENTER_DO_NOT_DISRUPT_ANNOTATION, "true"),
    (SCALE_DOWN_DISABLED_ANNOTATION, "true"),
)
DISRUPTION_ANNOTATIONS: Final = frozenset(key for key, _ in (*_POD_REFUSALS, *_NODE_REFUSALS))


def pool_selector(name: str) -> str:
    """The label selector, in its string form, that matches the Nodes of pool ``name``."""
    return f"{POOL_LABEL}={name}"


def pool_of(node: Mapping[str, Any]) -> str | None:
    """The pool a Node belongs to (its ``POOL_LABEL``), or None for other Nodes."""
    pool = ((node.get("metadata") or {}).get("labels") or {}).get(POOL_LABEL)
    return str(pool) if pool else None


def ready_changed_at(node: Mapping[str, Any]) -> float | None:
    """When the Node's Ready condition last turned (its ``lastTransitionTime``, seconds
    since the epoch), True or not; None without the condition or a readable time."""
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return timestamps.parse_rfc3339(str(condition.get("lastTransitionTime", "")))
    return None


def is_unregistered(node: Mapping[str, Any]) -> bool:
    """The Node still carries ``UNREGISTERED_TAINT_KEY``: its kubelet has not yet reported
    Ready and its own allocatable to the NodePool controller."""
    taints = (node.get("spec") or {}).get("taints") or ()
    return any(t.get("key") == UNREGISTERED_TAINT_KEY for t in taints)


def is_being_removed(node: Mapping[str, Any]) -> bool:
    """The NodePool controller is draining the Node or has deleted its VM."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return SCALE_DOWN_ANNOTATION in annotations or VM_DELETED_ANNOTATION in annotations


def is_being_disrupted(node: Mapping[str, Any]) -> bool:
    """The Node uses its pool's disruption budget: tainted for a disruption (ours, or
    the Autoscaler's consolidation), or on its way out already."""
    taints = (node.get("spec") or {}).get("taints") or ()
    return is_being_removed(node) or any(
        t.get("key") in (DISRUPTED_TAINT_KEY, CONSOLIDATING_TAINT_KEY) for t in taints
    )


def do_not_disrupt_reason(obj: Mapping[str, Any], *, node: bool) -> str | None:
    """The annotation (``key: "value"``) by which the Pod's (or, with ``node``, the Node's)
    owner asked that it not be disrupted voluntarily, or None: the one rule the Autoscaler's
    consolidation and the NodePool controller's drains both read."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    for key, value in _NODE_REFUSALS if node else _POD_REFUSALS:
        if annotations.get(key) == value:
            return f'{key}: "{value}"'
    return None


def interruption_kind(node: Mapping[str, Any]) -> str | None:
    """The kind of the cloud's notice the Node carries (one of ``INTERRUPTION_KINDS``),
    None without one (or with a value not known: a hand-made mark)."""
    kind = ((node.get("metadata") or {}).get("annotations") or {}).get(INTERRUPTION_ANNOTATION)
    return str(kind) if kind in INTERRUPTION_KINDS else None


def interrupted_at(node: Mapping[str, Any]) -> float | None:
    """When the cloud gave notice that it takes the Node's VM back (seconds since the
    epoch); None without a notice that ends the VM: none, a rebalance recommendation, or
    one whose time cannot be read (nothing is replaced on a guess)."""
    kind = interruption_kind(node)
    if kind is None or kind == REBALANCE:
        return None
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return timestamps.parse_rfc3339(str(annotations.get(INTERRUPTION_NOTICED_AT_ANNOTATION, "")))


def interruption_terminate_at(node: Mapping[str, Any]) -> float | None:
    """When the cloud takes the Node's VM back, as its notice says; None without a notice
    that ends the VM, or one that did not say."""
    if interrupted_at(node) is None:
        return None
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return timestamps.parse_rfc3339(str(annotations.get(INTERRUPTION_TERMINATE_AT_ANNOTATION, "")))
