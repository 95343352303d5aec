"""The budget for removing a pool's Nodes on the controller's own initiative.

Repairs, VMs that never registered and Nodes whose VM is gone are removed because the
controller judged them broken, not because anyone asked: a wrong verdict about many of
them at once must cost a few, not the pool. Each such removal takes a token from the
pool's bucket (``node_deletions_per_minute``, ``node_deletion_burst``). A token not there
yet is reserved: the bucket counts it as taken, and the removal waits until it is due,
never asking the bucket again meanwhile (that would reserve a second one).

A rate, not a timer: it bounds how fast the controller acts, whatever it decides, so it
is kept in memory; a restart starts with a full bucket, at most one burst more.
"""

from __future__ import annotations

import dataclasses

from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import ratelimit

__all__ = ["RemovalBudget"]


@dataclasses.dataclass(kw_only=True, eq=False)
class RemovalBudget:
    config: NodePoolConfig
    clock: clock_module.Clock
    _buckets: dict[str, ratelimit.BucketRateLimiter[str]] = dataclasses.field(
        default_factory=dict, init=False
    )
    # Per pool: when the token it reserved is due.
    _reserved_at: dict[str, float] = dataclasses.field(default_factory=dict, init=False)

    def take(self, pool: str) -> float:
        """0 when a Node of ``pool`` may be removed now (a token is taken), else the
        seconds until the token reserved for the next removal is there."""
        now = self.clock.now()
        reserved = self._reserved_at.get(pool)
        if reserved is not None:
            if reserved > now:
                return reserved - now
            del self._reserved_at[pool]
            return 0.0
        bucket = self._buckets.get(pool)
        if bucket is None:
            bucket = ratelimit.BucketRateLimiter[str](
                clock=self.clock,
                qps=self.config.node_deletions_per_minute / 60.0,
                burst=self.config.node_deletion_burst,
            )
            self._buckets[pool] = bucket
        delay = bucket.when(pool)
        if delay > 0:
            self._reserved_at[pool] = now + delay
        return delay

    def reserved_in(self, pool: str) -> float | None:
        """Seconds until the token reserved for ``pool`` is due, if one is reserved."""
        reserved = self._reserved_at.get(pool)
        now = self.clock.now()
        return reserved - now if reserved is not None and reserved > now else None

    def forget_pool(self, pool: str) -> None:
        self._buckets.pop(pool, None)
        self._reserved_at.pop(pool, None)
