"""How much of the cluster is unready, counted one way for every controller.

cluster-autoscaler halts every operation while more of the cluster's Nodes are unready
than ``--ok-total-unready-count`` and ``--max-total-unready-percentage`` allow: unready
Nodes in such numbers say more about the network or the control plane than about the
machines. The NodePool controller's repair brake holds every pool's repairs then
(``nodepool.repair.braked``); the Autoscaler reads the same count to hold its scale
decisions. A Node still carrying the unregistered taint is booting (cluster-autoscaler's
NotStarted), not unready, and one being deleted is not counted at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Final

from nodepool_operator.api import wellknown
from nodepool_operator.runtime import nodes

__all__ = ["DEFAULT_LIMITS", "ClusterReadiness", "UnreadyLimits", "cluster_readiness", "is_down"]


def is_down(node: Mapping[str, Any]) -> bool:
    """NotReady after its kubelet reported: not Ready, and not booting any more."""
    return not nodes.is_ready(node) and not wellknown.is_unregistered(node)


@dataclasses.dataclass(frozen=True)
class UnreadyLimits:
    """How many of the cluster's Nodes may be unready before no repair starts in any
    pool: cluster-autoscaler's ``--ok-total-unready-count`` and
    ``--max-total-unready-percentage`` (it halts every operation past both; these are its
    defaults)."""

    ok_count: int = 3
    max_percentage: float = 45.0


@dataclasses.dataclass(frozen=True)
class ClusterReadiness:
    """Every Node of the cluster (every pool's and none), as the brakes count them."""

    down: int
    total: int

    def past(self, limits: UnreadyLimits) -> bool:
        """More unready Nodes than both limits allow (cluster-autoscaler's rule)."""
        return self.down > limits.ok_count and self.down * 100 > limits.max_percentage * self.total


def cluster_readiness(every_node: Iterable[Mapping[str, Any]]) -> ClusterReadiness:
    """The cluster's Nodes not being deleted, and how many of them are down: NotReady
    after their kubelet reported (a Node still carrying the unregistered taint is booting,
    as cluster-autoscaler's NotStarted, not unready)."""
    counted = [n for n in every_node if not (n.get("metadata") or {}).get("deletionTimestamp")]
    return ClusterReadiness(down=sum(1 for n in counted if is_down(n)), total=len(counted))


#: cluster-autoscaler's defaults: more than 3 unready Nodes and more than 45% of them.
DEFAULT_LIMITS: Final = UnreadyLimits()
