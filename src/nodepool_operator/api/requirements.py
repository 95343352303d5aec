"""A pool's requirements: which labels a node of the pool may carry, as Karpenter's.

A NodePool with requirements allows every catalog offering whose labels
(``cloud.catalog.offering_labels``: instance type, architecture, os, zone, capacity type,
cpu and memory) together with the template's labels satisfy each requirement. Requirements
are judged over labels, never over catalog objects, so this layer needs no cloud: the
NodePool controller, which launches the offerings, and the Autoscaler, which plans with
them, apply the same ``Requirements.allows`` to the same labels.

Operators, as ``NodeSelectorRequirement``'s: ``In`` / ``NotIn`` (one of the values, or the
label absent for NotIn), ``Exists`` / ``DoesNotExist`` (no values), ``Gt`` / ``Lt`` (one
whole number; the label's value read as one, absent or not a whole number: false).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, get_args

from nodepool_operator.api import fields

__all__ = [
    "MAX_REQUIREMENTS",
    "MAX_REQUIREMENT_VALUES",
    "OPERATORS",
    "Operator",
    "Requirement",
    "Requirements",
]

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
OPERATORS: Final[tuple[Operator, ...]] = get_args(Operator)
#: Bounds the CRD sets, so the cost of the server's CEL rules over them stays small.
MAX_REQUIREMENTS: Final = 32
MAX_REQUIREMENT_VALUES: Final = 64


_WHOLE: Final = re.compile(r"[0-9]{1,18}")


def _integer(text: str | None) -> int | None:
    """A label value (or a Gt or Lt bound) read as a whole number, or None when it is
    not one: at most 18 decimal digits, as the CRD takes a bound."""
    if text is None or _WHOLE.fullmatch(text) is None:
        return None
    return int(text)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Requirement:
    """One condition on one label key."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem is not None:
            raise fields.FieldError("values", problem)

    def problem(self) -> str | None:
        """What makes the requirement unusable (the CRD refuses it with 422), or None."""
        if self.operator in ("In", "NotIn") and not self.values:
            return f"{self.operator} needs at least one value"
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            return f"{self.operator} takes no values"
        if self.operator in ("Gt", "Lt") and (
            len(self.values) != 1 or _integer(self.values[0]) is None
        ):
            return f"{self.operator} needs exactly one whole number as its value"
        return None

    def allows(self, labels: Mapping[str, str]) -> bool:
        """Does a node carrying ``labels`` satisfy this requirement?"""
        value = labels.get(self.key)
        if self.operator == "In":
            return value in self.values
        if self.operator == "NotIn":
            return value not in self.values
        if self.operator == "Exists":
            return value is not None
        if self.operator == "DoesNotExist":
            return value is None
        have, bound = _integer(value), _integer(self.values[0])
        if have is None or bound is None:
            return False
        return have > bound if self.operator == "Gt" else have < bound

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Requirement:
        return cls(
            key=fields.required_string(d, "key"),
            operator=fields.choice(d, "operator", choices=OPERATORS, default=None),
            values=fields.string_list(d, "values"),
        )

    def to_dict(self) -> dict[str, Any]:
        return fields.compact(
            {"key": self.key, "operator": self.operator, "values": list(self.values)}
        )


class Requirements(tuple[Requirement, ...]):
    """Every requirement of a pool; a node is allowed when it satisfies them all (none:
    every node is)."""

    __slots__ = ()

    def allows(self, labels: Mapping[str, str]) -> bool:
        return all(requirement.allows(labels) for requirement in self)

    def values_of(self, key: str) -> frozenset[str] | None:
        """The values an ``In`` on ``key`` allows (the intersection when several do), or
        None when no ``In`` names the key."""
        allowed: frozenset[str] | None = None
        for requirement in self:
            if requirement.key == key and requirement.operator == "In":
                values = frozenset(requirement.values)
                allowed = values if allowed is None else allowed & values
        return allowed

    @classmethod
    def of(cls, requirements: Iterable[Requirement]) -> Requirements:
        return cls(requirements)

    @classmethod
    def from_list(cls, items: Sequence[Mapping[str, Any]]) -> Requirements:
        """The requirements of a list as the API carries it; ``FieldError`` naming the
        index of the first one that is wrong."""
        return cls(
            fields.nested_list({"requirements": items}, "requirements", parse=Requirement.from_dict)
        )

    def to_list(self) -> list[dict[str, Any]]:
        return [requirement.to_dict() for requirement in self]
