"""Tunables of the NodePool controller, with the defaults the operator runs with."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NodePoolConfig"]


@dataclass(frozen=True)
class NodePoolConfig:
    create_parallelism: int = 10
    poll_interval: float = 1.0
    # While VMs boot, the cloud is listed again after this, then twice as long each time,
    # up to poll_interval: a VM that runs a moment after its create has its Node at once.
    boot_poll_initial: float = 0.1
    # Node events wake the pool this long after the first of a burst: the Nodes of one
    # scale-up turn Ready within a fraction of a second of each other, and one pass at
    # the end of the window writes the status once instead of once per Node.
    node_event_window: float = 1.0
    request_retention: float = 60.0
    provisioning_timeout: float = 600.0
    # Off unless asked: kwok's annotation on a Node a real kubelet runs would let kwok
    # claim it. The command line turns it on for the simulated cloud.
    simulated_nodes: bool = False
    degraded_backoff: float = 10.0
    degraded_backoff_max: float = 300.0
    max_concurrent_reconciles: int = 4
    # A pod whose eviction a PodDisruptionBudget refused is asked again after 1 s, then
    # 2, 4, ... up to a minute: a budget opens when another pod turns Ready, rarely sooner.
    eviction_backoff: float = 1.0
    eviction_backoff_max: float = 60.0
    # A pod still there this long past its deletion deadline is stuck (its node cannot
    # finish it); a drain stops waiting for it, as Karpenter does after a minute.
    stuck_terminating_seconds: float = 60.0
    # The cloud has no watch: each pool's VMs are listed at least this often (spread
    # between 0.75x and 1.25x per pool) so a VM deleted out of band is noticed and healed.
    cloud_resync_interval: float = 300.0
    # Nodes removed on the controller's own initiative (VM confirmed gone, repair of an
    # unhealthy Node, VM that never registered): a token bucket per pool.
    node_deletions_per_minute: float = 6.0
    node_deletion_burst: int = 3
    # No repair starts in any pool while more of the cluster's Nodes are unready than
    # both of these allow (cluster-autoscaler's --ok-total-unready-count and
    # --max-total-unready-percentage, with its defaults).
    ok_total_unready_count: int = 3
    max_total_unready_percentage: float = 45.0
    # While the brake holds repairs back, the pool is looked at again this often: the
    # Nodes that end a cluster-wide hold may be other pools', whose events do not wake it.
    repair_held_recheck: float = 10.0
