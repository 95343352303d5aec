"""A pod's scheduling constraints, parsed once, and the matching rules kube-scheduler uses.

A ``PodProfile`` is everything the simulation needs to know of one pod: its namespace and
labels (what other pods' terms match), its effective requests, and its required
constraints (node selector and affinity, tolerations, inter-pod affinity and
anti-affinity, topology spread with ``DoNotSchedule``, host ports). Replicas of one
Deployment have equal profiles, and equal profiles are placed as one class; that is what
keeps planning tens of thousands of pods fast.

The matching rules follow the API's definitions (``k8s.io/apimachinery`` label selectors,
``core/v1`` node selector terms and ``Toleration.ToleratesTaint``, the scheduler's
``InterPodAffinity`` and ``PodTopologySpread`` plugins). Preferred (soft) terms do not
decide feasibility, so they are not parsed.

The package: ``pending_pods`` (which pods the Autoscaler plans for and what each asks of
a node), ``matching`` (taints and tolerations, label selectors, node selector terms),
``profile`` (the ``PodProfile`` value and its parts), ``parsing`` (a pod's manifest read
into its profile). Every phase reads it; it imports none of them.
"""

from nodepool_operator.controllers.autoscaler.constraints.matching import (
    BLOCKING_EFFECTS,
    DAEMON_TOLERATIONS,
    UNSCHEDULABLE_TAINT,
    NodeTaint,
    Selector,
    Toleration,
    node_affinity_problem,
    terms_name_nodes,
    untolerated,
)
from nodepool_operator.controllers.autoscaler.constraints.parsing import profile_of
from nodepool_operator.controllers.autoscaler.constraints.profile import (
    MAIN_RESOURCES,
    VOLUME_TOPOLOGY_LABELS,
    AffinityTerm,
    HostPort,
    PodProfile,
    SpreadConstraint,
    VolumeRules,
    with_volumes,
)

__all__ = [
    "BLOCKING_EFFECTS",
    "DAEMON_TOLERATIONS",
    "MAIN_RESOURCES",
    "UNSCHEDULABLE_TAINT",
    "VOLUME_TOPOLOGY_LABELS",
    "AffinityTerm",
    "HostPort",
    "NodeTaint",
    "PodProfile",
    "Selector",
    "SpreadConstraint",
    "Toleration",
    "VolumeRules",
    "node_affinity_problem",
    "profile_of",
    "terms_name_nodes",
    "untolerated",
    "with_volumes",
]
