"""Tunables of the NodePool controller, with the defaults the operator runs with."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NodePoolConfig"]


@dataclass(frozen=True)
class NodePoolConfig:
    create_parallelism: int = 10
    poll_interval: float = 1.0
    request_retention: float = 60.0
    provisioning_timeout: float = 600.0
    simulated_nodes: bool = True
    degraded_backoff: float = 10.0
    degraded_backoff_max: float = 300.0
    max_concurrent_reconciles: int = 4
