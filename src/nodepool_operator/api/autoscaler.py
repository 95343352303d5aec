"""Autoscaler (``nas``): which pods to watch and which pool to grow for them.

The Autoscaler controller reads ``spec``, watches Pending pods the scheduler could not
place for lack of CPU or memory, and creates ScaleRequests for ``spec.nodePoolName``. It
is the one writer of ``status``, which says what it saw and the last request it made.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from nodepool_operator.api import fields, meta, nodepool_schema

__all__ = [
    "API_VERSION",
    "DEFAULT_BATCH_WINDOW_SECONDS",
    "DEFAULT_DRY_RUN",
    "DEFAULT_MAX_CONCURRENT",
    "DEFAULT_SCALE_DOWN_ENABLED",
    "DEFAULT_SCAN_INTERVAL_SECONDS",
    "DEFAULT_UNNEEDED_SECONDS",
    "DEFAULT_UTILIZATION_THRESHOLD",
    "GROUP",
    "KIND",
    "PLURAL",
    "PRINTER_COLUMNS",
    "SCHEMA",
    "SHORT_NAMES",
    "SINGULAR",
    "SPEC_SCHEMA",
    "STATUS_SCHEMA",
    "SUBRESOURCES",
    "VERSION",
    "AutoscalerSpec",
    "AutoscalerStatus",
    "LastScaleRequest",
    "ScaleDownPolicy",
    "WouldRequest",
    "crd",
    "manifest",
    "spec_of",
    "status_of",
]

GROUP: Final = meta.GROUP
VERSION: Final = meta.VERSION
API_VERSION: Final = meta.API_VERSION
KIND: Final = "Autoscaler"
PLURAL: Final = "autoscalers"
SINGULAR: Final = "autoscaler"
SHORT_NAMES: Final = ("nas",)

DEFAULT_SCAN_INTERVAL_SECONDS: Final = 10
DEFAULT_BATCH_WINDOW_SECONDS: Final = 1.0
DEFAULT_SCALE_DOWN_ENABLED: Final = True
DEFAULT_UNNEEDED_SECONDS: Final = 600
DEFAULT_DRY_RUN: Final = False
#: Below this share of a Node's allocatable CPU and memory requested, a Node is underused
#: (cluster-autoscaler's --scale-down-utilization-threshold).
DEFAULT_UTILIZATION_THRESHOLD: Final = 0.5
#: Underused Nodes with pods to move that are drained at a time (empty Nodes are not counted).
DEFAULT_MAX_CONCURRENT: Final = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScaleDownPolicy:
    """Whether, and after how long, Nodes that no pod needs are given back."""

    enabled: bool = DEFAULT_SCALE_DOWN_ENABLED
    unneeded_seconds: int = DEFAULT_UNNEEDED_SECONDS
    utilization_threshold: float = DEFAULT_UTILIZATION_THRESHOLD
    max_concurrent: int = DEFAULT_MAX_CONCURRENT

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ScaleDownPolicy:
        return cls(
            enabled=fields.boolean(d, "enabled", default=DEFAULT_SCALE_DOWN_ENABLED),
            unneeded_seconds=fields.integer(d, "unneededSeconds", default=DEFAULT_UNNEEDED_SECONDS),
            utilization_threshold=fields.number(
                d, "utilizationThreshold", default=DEFAULT_UTILIZATION_THRESHOLD
            ),
            max_concurrent=fields.integer(d, "maxConcurrent", default=DEFAULT_MAX_CONCURRENT),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "unneededSeconds": self.unneeded_seconds,
            "utilizationThreshold": self.utilization_threshold,
            "maxConcurrent": self.max_concurrent,
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class AutoscalerSpec:
    """Which pool to scale, for pods of which namespaces (none listed means all), how often."""

    node_pool_name: str
    namespaces: tuple[str, ...] = ()
    scan_interval_seconds: int = DEFAULT_SCAN_INTERVAL_SECONDS
    batch_window_seconds: float = DEFAULT_BATCH_WINDOW_SECONDS
    scale_down: ScaleDownPolicy = dataclasses.field(default_factory=ScaleDownPolicy)
    dry_run: bool = DEFAULT_DRY_RUN

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AutoscalerSpec:
        return cls(
            node_pool_name=fields.required_string(d, "nodePoolName"),
            namespaces=fields.string_list(d, "namespaces"),
            scan_interval_seconds=fields.integer(
                d, "scanIntervalSeconds", default=DEFAULT_SCAN_INTERVAL_SECONDS
            ),
            batch_window_seconds=fields.number(
                d, "batchWindowSeconds", default=DEFAULT_BATCH_WINDOW_SECONDS
            ),
            scale_down=fields.nested(d, "scaleDown", parse=ScaleDownPolicy.from_dict),
            dry_run=fields.boolean(d, "dryRun", default=DEFAULT_DRY_RUN),
        )

    def to_dict(self) -> dict[str, Any]:
        return fields.compact(
            {
                "nodePoolName": self.node_pool_name,
                "namespaces": list(self.namespaces),
                "scanIntervalSeconds": self.scan_interval_seconds,
                "batchWindowSeconds": self.batch_window_seconds,
                "scaleDown": self.scale_down.to_dict(),
                "dryRun": self.dry_run,
            }
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class LastScaleRequest:
    """The last ScaleRequest the autoscaler created: its name, target and reason."""

    name: str
    target_nodes: int
    reason: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LastScaleRequest:
        return cls(
            name=fields.required_string(d, "name"),
            target_nodes=fields.required_integer(d, "targetNodes"),
            reason=fields.optional_string(d, "reason"),
        )

    def to_dict(self) -> dict[str, Any]:
        return fields.compact(
            {"name": self.name, "targetNodes": self.target_nodes, "reason": self.reason}
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class WouldRequest:
    """The ScaleRequest a dry-run Autoscaler would create now: its target and reason."""

    target_nodes: int
    reason: str

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WouldRequest:
        return cls(
            target_nodes=fields.required_integer(d, "targetNodes"),
            reason=fields.required_string(d, "reason"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {"targetNodes": self.target_nodes, "reason": self.reason}


@dataclasses.dataclass(frozen=True, kw_only=True)
class AutoscalerStatus:
    """What the autoscaler saw on its last scan, and the last request it made.

    The pod counts change only when the pods do, not on every scan, so an idle cluster
    costs no status writes.
    """

    observed_generation: int = 0
    conditions: tuple[meta.Condition, ...] = ()
    last_request: LastScaleRequest | None = None
    would_request: WouldRequest | None = None
    pending_pods: int = 0
    unschedulable_pods: int = 0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AutoscalerStatus:
        return cls(
            observed_generation=fields.integer(d, "observedGeneration", default=0),
            conditions=fields.nested_list(d, "conditions", parse=meta.Condition.from_dict),
            last_request=fields.optional_nested(d, "lastRequest", parse=LastScaleRequest.from_dict),
            would_request=fields.optional_nested(d, "wouldRequest", parse=WouldRequest.from_dict),
            pending_pods=fields.integer(d, "pendingPods", default=0),
            unschedulable_pods=fields.integer(d, "unschedulablePods", default=0),
        )

    def to_dict(self) -> dict[str, Any]:
        return fields.compact(
            {
                "observedGeneration": self.observed_generation,
                "conditions": [c.to_dict() for c in self.conditions],
                "lastRequest": None if self.last_request is None else self.last_request.to_dict(),
                "wouldRequest": (
                    None if self.would_request is None else self.would_request.to_dict()
                ),
                "pendingPods": self.pending_pods,
                "unschedulablePods": self.unschedulable_pods,
            }
        )


def spec_of(obj: Mapping[str, Any]) -> AutoscalerSpec:
    """The typed spec of an Autoscaler object (a dict as the API returns it)."""
    return fields.nested(obj, "spec", parse=AutoscalerSpec.from_dict)


def status_of(obj: Mapping[str, Any]) -> AutoscalerStatus:
    """The typed status of an Autoscaler object; all defaults when it has none yet."""
    return fields.nested(obj, "status", parse=AutoscalerStatus.from_dict)


def manifest(name: str, spec: AutoscalerSpec) -> dict[str, Any]:
    """An Autoscaler object ready to be created."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name},
        "spec": spec.to_dict(),
    }


_COUNT: Final[dict[str, Any]] = {"type": "integer", "format": "int32", "minimum": 0}

_SCALE_DOWN_PROPERTIES: Final[dict[str, Any]] = {
    "enabled": {
        "type": "boolean",
        "description": "Whether Nodes that no pod needs are removed.",
        "default": DEFAULT_SCALE_DOWN_ENABLED,
    },
    "unneededSeconds": {
        "type": "integer",
        "description": "How long a Node must have been unneeded before it is removed.",
        "format": "int32",
        "minimum": 0,
        "default": DEFAULT_UNNEEDED_SECONDS,
    },
    "utilizationThreshold": {
        "type": "number",
        "description": (
            "A Node whose pods request less than this share of its allocatable CPU and of "
            "its memory is underused: removed when its pods can move and fit on other Nodes."
        ),
        "minimum": 0,
        "maximum": 1,
        "default": DEFAULT_UTILIZATION_THRESHOLD,
    },
    "maxConcurrent": {
        "type": "integer",
        "description": (
            "How many underused Nodes with pods to move are drained at a time; empty "
            "Nodes are not counted."
        ),
        "format": "int32",
        "minimum": 1,
        "maximum": 100,
        "default": DEFAULT_MAX_CONCURRENT,
    },
}

_SPEC_PROPERTIES: Final[dict[str, Any]] = {
    "nodePoolName": {
        **nodepool_schema.POOL_NAME_SCHEMA,
        "description": "Name of the NodePool to scale.",
    },
    "namespaces": {
        "type": "array",
        "description": "Namespaces whose pods are considered; empty means all.",
        "x-kubernetes-list-type": "set",
        # A namespace's name is a DNS label: a name no namespace can have (a typo such as
        # "Default") would match no pod and make the Autoscaler watch nothing, silently.
        "items": {
            "type": "string",
            "minLength": 1,
            "maxLength": 63,
            "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        },
    },
    "scanIntervalSeconds": {
        "type": "integer",
        "description": "Seconds between two full scans of the pending pods.",
        "format": "int32",
        "minimum": 1,
        "maximum": 3600,
        "default": DEFAULT_SCAN_INTERVAL_SECONDS,
    },
    "batchWindowSeconds": {
        "type": "number",
        "description": (
            "Seconds to wait after a pod event for more events, so that a burst of "
            "pending pods leads to one request instead of many."
        ),
        "minimum": 0,
        "maximum": 60,
        "default": DEFAULT_BATCH_WINDOW_SECONDS,
    },
    "scaleDown": {
        "type": "object",
        "description": "Whether and when Nodes that no pod needs are removed.",
        "default": meta.object_defaults(_SCALE_DOWN_PROPERTIES),
        "properties": _SCALE_DOWN_PROPERTIES,
    },
    "dryRun": {
        "type": "boolean",
        "description": (
            "Make every decision and report it (status.wouldRequest, events on the pods) "
            "but create no ScaleRequest: to try the autoscaler before letting it act."
        ),
        "default": DEFAULT_DRY_RUN,
    },
}

SPEC_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": "What to watch and which pool to scale. Owned by the user.",
    "required": ["nodePoolName"],
    "properties": _SPEC_PROPERTIES,
}

STATUS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": "What the autoscaler saw. Written only by the Autoscaler controller.",
    "properties": {
        "observedGeneration": {
            "type": "integer",
            "description": "The metadata.generation this status was computed for.",
            "format": "int64",
            "minimum": 0,
            "default": 0,
        },
        "conditions": meta.CONDITIONS_SCHEMA,
        "lastRequest": {
            "type": "object",
            "description": "The last ScaleRequest this autoscaler created.",
            "required": ["name", "targetNodes"],
            "properties": {
                "name": {"type": "string", "description": "Name of the ScaleRequest."},
                "targetNodes": {
                    "type": "integer",
                    "description": "The targetNodes it asked for.",
                    "format": "int32",
                    "minimum": 0,
                },
                "reason": {"type": "string", "description": "The reason it gave."},
            },
        },
        "wouldRequest": {
            "type": "object",
            "description": (
                "With spec.dryRun: the ScaleRequest it would create now; absent when it "
                "would ask for nothing."
            ),
            "required": ["targetNodes", "reason"],
            "properties": {
                "targetNodes": {
                    "type": "integer",
                    "description": "The targetNodes it would ask for.",
                    "format": "int32",
                    "minimum": 0,
                },
                "reason": {"type": "string", "description": "The reason it would give."},
            },
        },
        "pendingPods": {
            **_COUNT,
            "description": (
                "Pending pods this Autoscaler answers for: those the plan gives its pool "
                "(its nodes or new ones) and those of its namespaces no pool can host. "
                "Pods the scheduler has not judged yet, and pods planned onto other pools "
                "or nodes, are not counted."
            ),
            "default": 0,
        },
        "unschedulablePods": {
            **_COUNT,
            "description": (
                "Of those, how many the scheduler marked unschedulable (all of them: only "
                "such pods are planned)."
            ),
            "default": 0,
        },
    },
}

SCHEMA: Final[dict[str, Any]] = meta.root_schema(
    description="Grows a NodePool when pods cannot be scheduled for lack of room.",
    spec=SPEC_SCHEMA,
    status=STATUS_SCHEMA,
    spec_required=True,
)

SUBRESOURCES: Final[dict[str, Any]] = {"status": {}}

PRINTER_COLUMNS: Final[list[dict[str, Any]]] = [
    {"name": "Pool", "type": "string", "jsonPath": ".spec.nodePoolName"},
    {"name": "Pending", "type": "integer", "jsonPath": ".status.pendingPods"},
    {"name": "LastTarget", "type": "integer", "jsonPath": ".status.lastRequest.targetNodes"},
    # Pods left Pending because the pool is at maxNodes look served without this column.
    {
        "name": "LimitReached",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="LimitReached")].status',
    },
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
    },
    meta.AGE_COLUMN,
    {
        "name": "Reason",
        "type": "string",
        "priority": 1,
        "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
    },
    {
        "name": "Limit",
        "type": "string",
        "priority": 1,
        "jsonPath": '.status.conditions[?(@.type=="LimitReached")].message',
    },
]


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition of Autoscaler (a fresh copy)."""
    return meta.custom_resource_definition(
        kind=KIND,
        plural=PLURAL,
        singular=SINGULAR,
        short_names=SHORT_NAMES,
        schema=SCHEMA,
        subresources=SUBRESOURCES,
        printer_columns=PRINTER_COLUMNS,
    )
