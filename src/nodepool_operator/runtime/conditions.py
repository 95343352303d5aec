"""Pure helpers for `status.conditions` lists (metav1.Condition) held as plain dicts.

`set_condition` follows apimachinery's `meta.SetStatusCondition`: `lastTransitionTime`
moves only when `status` changes. That is what keeps a status writer from looping: a
reconcile that finds the world as it was produces conditions equal to the stored ones,
so the compare-before-write sends nothing. Order is stable (existing conditions keep
their place, new ones are appended) for the same reason.

The caller passes `now` (``rfc3339(wall_clock.time())`` in production, a constant in tests),
which keeps these functions pure.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

__all__ = [
    "ConditionList",
    "ConditionStatus",
    "find_condition",
    "is_false",
    "is_true",
    "rfc3339",
    "set_condition",
]

ConditionStatus = Literal["True", "False", "Unknown"]

_STATUSES: Final = frozenset({"True", "False", "Unknown"})

# Limits and the reason pattern from the metav1.Condition schema: checked here so that a
# bad condition fails in the controller with a clear message instead of as a 422 from the
# status write, which would never succeed on retry.
_REASON: Final = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
_MAX_TYPE: Final = 316
_MAX_REASON: Final = 1024
_MAX_MESSAGE: Final = 32768


def set_condition(
    conditions: Sequence[Mapping[str, Any]] | None,
    *,
    type: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    observed_generation: int,
    now: str,
) -> list[dict[str, Any]]:
    """A new list with condition `type` set; the input is not modified.

    An existing condition keeps its position and its `lastTransitionTime` unless `status`
    changes; a new one is appended with `lastTransitionTime = now`. Other fields of the
    existing condition, if any, are kept.
    """
    _validate(type=type, status=status, reason=reason, message=message)
    if observed_generation < 0:
        raise ValueError(f"observedGeneration must not be negative, got {observed_generation}")
    result = [dict(condition) for condition in conditions or ()]
    for condition in result:
        if condition.get("type") != type:
            continue
        if condition.get("status") != status or not condition.get("lastTransitionTime"):
            condition["lastTransitionTime"] = now
        condition["status"] = status
        condition["reason"] = reason
        condition["message"] = message
        condition["observedGeneration"] = observed_generation
        return result
    result.append(
        {
            "type": type,
            "status": status,
            "observedGeneration": observed_generation,
            "lastTransitionTime": now,
            "reason": reason,
            "message": message,
        }
    )
    return result


class ConditionList:
    """The conditions of a status being built, starting from the stored ones.

    Each ``set`` goes through :func:`set_condition`, so a condition whose status did not
    change keeps its ``lastTransitionTime``, and a status built twice from the same
    observations is equal (and so is not written again).
    """

    def __init__(
        self, existing: Sequence[Mapping[str, Any]] | None, *, observed_generation: int, now: str
    ) -> None:
        self.items: list[dict[str, Any]] = [dict(c) for c in existing or ()]
        self.observed_generation = observed_generation
        self.now = now

    def set(self, type: str, holds: bool, *, reason: str, message: str) -> None:
        self.items = set_condition(
            self.items,
            type=type,
            status="True" if holds else "False",
            reason=reason,
            message=message,
            observed_generation=self.observed_generation,
            now=self.now,
        )


def find_condition(
    conditions: Sequence[Mapping[str, Any]] | None, type: str
) -> Mapping[str, Any] | None:
    """The condition of `type`, or None."""
    for condition in conditions or ():
        if condition.get("type") == type:
            return condition
    return None


def is_true(conditions: Sequence[Mapping[str, Any]] | None, type: str) -> bool:
    """Whether condition `type` is present with status "True"."""
    condition = find_condition(conditions, type)
    return condition is not None and condition.get("status") == "True"


def is_false(conditions: Sequence[Mapping[str, Any]] | None, type: str) -> bool:
    """Whether condition `type` is present with status "False" (absent is neither)."""
    condition = find_condition(conditions, type)
    return condition is not None and condition.get("status") == "False"


def rfc3339(seconds: float) -> str:
    """A moment (seconds since the epoch) as metav1.Time serialises it: seconds, `Z`."""
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _validate(*, type: str, status: str, reason: str, message: str) -> None:
    if not type or len(type) > _MAX_TYPE:
        raise ValueError(f"condition type must have 1 to {_MAX_TYPE} characters: {type!r}")
    if status not in _STATUSES:
        raise ValueError(f"condition status must be True, False or Unknown, got {status!r}")
    if len(reason) > _MAX_REASON or not _REASON.fullmatch(reason):
        raise ValueError(f"condition reason must be a CamelCase identifier, got {reason!r}")
    if len(message) > _MAX_MESSAGE:
        raise ValueError(f"condition message is longer than {_MAX_MESSAGE} characters")
