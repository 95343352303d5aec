"""How much chaos a run injects: the short run (default) or the full one.

The short run is part of the default ``pytest`` run and must stay within about three
minutes on a loaded two-core machine; ``NODEPOOL_CHAOS=full`` is the run whose figures
docs/reliability.md reports.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

__all__ = ["SETTINGS", "ChaosSettings"]


@dataclass(frozen=True)
class ChaosSettings:
    mode: str
    seed: int
    operator_kills: int
    apiserver_restarts: int
    cloud_restarts: int
    leader_kills: int
    leader_pauses: int
    timeout: float


SHORT = ChaosSettings(
    mode="short",
    seed=11,
    operator_kills=4,
    apiserver_restarts=1,
    cloud_restarts=1,
    leader_kills=0,  # each costs a lease (15 s); the full run has them, e2e has one
    leader_pauses=1,
    timeout=300,
)
FULL = ChaosSettings(
    mode="full",
    seed=11,
    operator_kills=50,
    apiserver_restarts=3,
    cloud_restarts=3,
    leader_kills=3,
    leader_pauses=3,
    timeout=1800,
)


def _settings() -> ChaosSettings:
    chosen = FULL if os.environ.get("NODEPOOL_CHAOS", "short") == "full" else SHORT
    seed = os.environ.get("NODEPOOL_CHAOS_SEED")
    if seed is None:
        return chosen
    return dataclasses.replace(chosen, seed=int(seed))


SETTINGS = _settings()
