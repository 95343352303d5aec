"""What the three kinds share: the group and version, conditions, and the CRD envelope.

``Condition`` has the shape of Kubernetes' ``metav1.Condition`` (same fields, same
server-side constraints), so that ``kubectl wait --for=condition=Ready`` and other
generic tools understand NodePool and Autoscaler status.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, get_args

from nodepool_operator.api import fields

__all__ = [
    "AGE_COLUMN",
    "API_VERSION",
    "CONDITIONS_SCHEMA",
    "CONDITION_STATUSES",
    "GROUP",
    "VERSION",
    "Condition",
    "ConditionStatus",
    "custom_resource_definition",
    "object_defaults",
    "root_schema",
]

GROUP: Final = "nodepool.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

ConditionStatus = Literal["True", "False", "Unknown"]
CONDITION_STATUSES: Final[tuple[ConditionStatus, ...]] = get_args(ConditionStatus)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Condition:
    """One observation about an object, as in ``metav1.Condition``.

    ``last_transition_time`` stays the RFC 3339 text the server stores (for example
    ``"2025-01-31T12:00:00Z"``) rather than a ``datetime``: re-formatting a parsed time
    could change its text, and a status that differs only in formatting would be
    written again on every pass.
    """

    type: str
    status: ConditionStatus
    reason: str
    message: str
    last_transition_time: str
    observed_generation: int | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Condition:
        return cls(
            type=fields.required_string(d, "type"),
            status=fields.choice(d, "status", choices=CONDITION_STATUSES, default=None),
            reason=fields.required_string(d, "reason"),
            message=fields.required_string(d, "message"),
            last_transition_time=fields.required_string(d, "lastTransitionTime"),
            observed_generation=fields.optional_integer(d, "observedGeneration"),
        )

    def to_dict(self) -> dict[str, Any]:
        return fields.compact(
            {
                "type": self.type,
                "status": self.status,
                "reason": self.reason,
                "message": self.message,
                "lastTransitionTime": self.last_transition_time,
                "observedGeneration": self.observed_generation,
            }
        )


# The constraints of metav1.Condition, so that the server refuses what a Go client would.
_CONDITION_TYPE_PATTERN: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
_CONDITION_REASON_PATTERN: Final = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"

CONDITIONS_SCHEMA: Final[dict[str, Any]] = {
    "type": "array",
    "description": "Latest observations of the object's state, one per type.",
    # A map keyed by type lets server-side apply merge conditions per type, and makes the
    # server refuse two conditions of the same type.
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
    "items": {
        "type": "object",
        "required": ["type", "status", "lastTransitionTime", "reason", "message"],
        "properties": {
            "type": {
                "type": "string",
                "description": "Type of condition in CamelCase, for example Ready.",
                "maxLength": 316,
                "pattern": _CONDITION_TYPE_PATTERN,
            },
            "status": {
                "type": "string",
                "description": "Status of the condition.",
                "enum": list(CONDITION_STATUSES),
            },
            "reason": {
                "type": "string",
                "description": "Programmatic identifier of the last transition, in CamelCase.",
                "minLength": 1,
                "maxLength": 1024,
                "pattern": _CONDITION_REASON_PATTERN,
            },
            "message": {
                "type": "string",
                "description": "Human-readable details of the last transition.",
                "maxLength": 32768,
            },
            "lastTransitionTime": {
                "type": "string",
                "description": "When the status last changed.",
                "format": "date-time",
            },
            "observedGeneration": {
                "type": "integer",
                "description": "The metadata.generation the condition was set for.",
                "format": "int64",
                "minimum": 0,
            },
        },
    },
}

AGE_COLUMN: Final[dict[str, Any]] = {
    "name": "Age",
    "type": "date",
    "jsonPath": ".metadata.creationTimestamp",
}


def object_defaults(properties: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The fully defaulted value of an object made only of its properties' defaults.

    An object-valued field gets this as its ``default`` instead of ``{}``: the server
    validates a default as written, before the nested defaults are filled in, so ``{}``
    would fail the object's ``required`` list and any CEL rule that reads its fields,
    and the CRD would be refused.
    """
    return {
        name: copy.deepcopy(schema["default"])
        for name, schema in properties.items()
        if "default" in schema
    }


def root_schema(
    *,
    description: str,
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    spec_required: bool = False,
    max_name_length: int | None = None,
) -> dict[str, Any]:
    """The openAPIV3Schema of a kind: the usual top-level fields, its spec and status.

    ``spec_required`` for kinds whose spec has no complete default (a NodePool's has one,
    so an object without spec is defaulted rather than refused). ``max_name_length``
    bounds ``metadata.name`` below the server's 253 characters (at the root, a CRD may
    restrict only the name and generateName of its metadata).
    """
    schema: dict[str, Any] = {"type": "object", "description": description}
    if spec_required:
        schema["required"] = ["spec"]
    metadata: dict[str, Any] = {"type": "object"}
    if max_name_length is not None:
        metadata["properties"] = {"name": {"type": "string", "maxLength": max_name_length}}
    schema["properties"] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }
    return schema


def custom_resource_definition(
    *,
    kind: str,
    plural: str,
    singular: str,
    short_names: Sequence[str],
    schema: Mapping[str, Any],
    subresources: Mapping[str, Any],
    printer_columns: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """A cluster-scoped ``apiextensions.k8s.io/v1`` CRD serving one version of ``kind``.

    Returns a fresh deep copy: callers may change it without touching the module-level
    schemas it is built from.
    """
    return copy.deepcopy(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{GROUP}"},
            "spec": {
                "group": GROUP,
                "scope": "Cluster",
                "names": {
                    "kind": kind,
                    "listKind": f"{kind}List",
                    "plural": plural,
                    "singular": singular,
                    "shortNames": list(short_names),
                },
                "versions": [
                    {
                        "name": VERSION,
                        "served": True,
                        "storage": True,
                        "schema": {"openAPIV3Schema": dict(schema)},
                        "subresources": dict(subresources),
                        "additionalPrinterColumns": [dict(c) for c in printer_columns],
                    }
                ],
            },
        }
    )
