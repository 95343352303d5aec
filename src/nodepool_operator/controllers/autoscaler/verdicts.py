"""The planner's last result for each Autoscaler: what its status reports.

The planner (``planner``) writes a verdict per Autoscaler after each batch; the
Autoscaler's reconcile (``controller``) reads its own and reports it. One writer, one
reader per key, on one event loop: a dict suffices.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.controllers.autoscaler.decide import scaling
from nodepool_operator.controllers.autoscaler.decide.batch_plan import Part

__all__ = ["AutoscalerVerdicts", "Verdict"]


@dataclass(frozen=True)
class Verdict:
    """One Autoscaler's part of a plan and what was decided from it."""

    generation: int  # the Autoscaler's metadata.generation the plan read
    part: Part
    decision: scaling.ScalingDecision | None
    # The newest request this process made for it (its status keeps older ones).
    last_request: autoscaler_api.LastScaleRequest | None


class AutoscalerVerdicts:
    """Verdicts by Autoscaler name."""

    def __init__(self) -> None:
        self._by_name: dict[str, Verdict] = {}

    def get(self, name: str) -> Verdict | None:
        return self._by_name.get(name)

    def put(self, name: str, verdict: Verdict) -> None:
        self._by_name[name] = verdict

    def keep_only(self, names: set[str]) -> None:
        for gone in self._by_name.keys() - names:
            del self._by_name[gone]
