"""NodePool (``np``): a set of identical Nodes, and how many of them there should be.

The user (or GitOps, or ``kubectl scale``) owns ``spec``; the NodePool controller is the
one writer of ``status`` and the one that turns accepted ScaleRequests into
``spec.targetNodes``. Every Node of a pool carries the label ``POOL_LABEL=<pool name>``,
which is also what ``status.selector`` says, so that the ``/scale`` subresource (and an
HPA) can find the pool's Nodes.

The CRD schema below and the dataclasses are two views of one contract; the unit tests
prove they agree field by field, type by type, and default by default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final, Literal, get_args

from nodepool_operator.api import _fields, meta, quantity

__all__ = [
    "API_VERSION",
    "DEFAULT_CPU",
    "DEFAULT_MAX_NODES",
    "DEFAULT_MEMORY",
    "DEFAULT_MIN_NODES",
    "DEFAULT_PODS",
    "DEFAULT_TARGET_NODES",
    "GROUP",
    "KIND",
    "PLURAL",
    "POOL_LABEL",
    "PRINTER_COLUMNS",
    "SCALE_OPERATIONS",
    "SCHEMA",
    "SHORT_NAMES",
    "SINGULAR",
    "SPEC_SCHEMA",
    "STATUS_SCHEMA",
    "SUBRESOURCES",
    "TAINT_EFFECTS",
    "VERSION",
    "NodePoolSpec",
    "NodePoolStatus",
    "NodeTemplate",
    "ScaleOperation",
    "Taint",
    "TaintEffect",
    "crd",
    "is_settled",
    "manifest",
    "node_labels",
    "pool_of",
    "pool_selector",
    "spec_of",
    "status_of",
]

GROUP: Final = meta.GROUP
VERSION: Final = meta.VERSION
API_VERSION: Final = meta.API_VERSION
KIND: Final = "NodePool"
PLURAL: Final = "nodepools"
SINGULAR: Final = "nodepool"
SHORT_NAMES: Final = ("np",)

POOL_LABEL: Final = "nodepool.dev/pool"

DEFAULT_TARGET_NODES: Final = 0
DEFAULT_MIN_NODES: Final = 0
DEFAULT_MAX_NODES: Final = 10
DEFAULT_CPU: Final = "4"
DEFAULT_MEMORY: Final = "16Gi"
DEFAULT_PODS: Final = 110

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
TAINT_EFFECTS: Final[tuple[TaintEffect, ...]] = get_args(TaintEffect)

ScaleOperation = Literal["inactive", "active"]
SCALE_OPERATIONS: Final[tuple[ScaleOperation, ...]] = get_args(ScaleOperation)


def pool_selector(name: str) -> str:
    """The label selector, in its string form, that matches the Nodes of pool ``name``."""
    return f"{POOL_LABEL}={name}"


def pool_of(node: Mapping[str, Any]) -> str | None:
    """The pool a Node belongs to (its ``POOL_LABEL``), or None for other Nodes."""
    pool = ((node.get("metadata") or {}).get("labels") or {}).get(POOL_LABEL)
    return str(pool) if pool else None


def node_labels(pool: str, template: NodeTemplate) -> dict[str, str]:
    """The labels every Node of the pool carries (its own name's label aside).

    The NodePool controller puts them on the Nodes it registers, and the Autoscaler
    matches pods' node selectors against them, so the two always agree.
    """
    return {
        **template.labels,
        POOL_LABEL: pool,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
    }


def is_settled(obj: Mapping[str, Any], nodes: int) -> bool:
    """Has the pool finished converging on ``nodes`` nodes, for its latest spec?

    True when its status reports that many current and Ready nodes, no scale operation,
    and an ``observedGeneration`` equal to the object's generation (so the status speaks
    of the spec as it is now, not of an older one).
    """
    status = obj.get("status") or {}
    return bool(
        status.get("currentNodes") == nodes
        and status.get("readyNodes") == nodes
        and status.get("scaleOperation") == "inactive"
        and status.get("observedGeneration") == obj.get("metadata", {}).get("generation")
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Taint:
    """A taint put on every Node of the pool, as in ``core/v1.Taint``."""

    key: str
    effect: TaintEffect
    value: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Taint:
        return cls(
            key=_fields.required_string(d, "key"),
            effect=_fields.choice(d, "effect", choices=TAINT_EFFECTS, default=None),
            value=_fields.optional_string(d, "value"),
        )

    def to_dict(self) -> dict[str, Any]:
        return _fields.compact({"key": self.key, "value": self.value, "effect": self.effect})


@dataclasses.dataclass(frozen=True, kw_only=True)
class NodeTemplate:
    """The shape of one Node of the pool: its capacity, labels and taints.

    ``cpu`` and ``memory`` keep the quantity text as written; ``cpu_millicores`` and
    ``memory_bytes`` give the exact integer values to compute with. Values compare by
    equality but are not hashable, because ``labels`` is a mapping.
    """

    cpu: str = DEFAULT_CPU
    memory: str = DEFAULT_MEMORY
    pods: int = DEFAULT_PODS
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    taints: tuple[Taint, ...] = ()

    @property
    def cpu_millicores(self) -> int:
        return quantity.parse_cpu_millicores(self.cpu)

    @property
    def memory_bytes(self) -> int:
        return quantity.parse_memory_bytes(self.memory)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodeTemplate:
        return cls(
            cpu=_fields.string(d, "cpu", default=DEFAULT_CPU),
            memory=_fields.string(d, "memory", default=DEFAULT_MEMORY),
            pods=_fields.integer(d, "pods", default=DEFAULT_PODS),
            labels=_fields.string_map(d, "labels"),
            taints=_fields.nested_list(d, "taints", parse=Taint.from_dict),
        )

    def to_dict(self) -> dict[str, Any]:
        return _fields.compact(
            {
                "cpu": self.cpu,
                "memory": self.memory,
                "pods": self.pods,
                "labels": dict(self.labels),
                "taints": [t.to_dict() for t in self.taints],
            }
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class NodePoolSpec:
    """What the user asks for: how many Nodes, within which bounds, of which shape."""

    target_nodes: int = DEFAULT_TARGET_NODES
    min_nodes: int = DEFAULT_MIN_NODES
    max_nodes: int = DEFAULT_MAX_NODES
    template: NodeTemplate = dataclasses.field(default_factory=NodeTemplate)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodePoolSpec:
        return cls(
            target_nodes=_fields.integer(d, "targetNodes", default=DEFAULT_TARGET_NODES),
            min_nodes=_fields.integer(d, "minNodes", default=DEFAULT_MIN_NODES),
            max_nodes=_fields.integer(d, "maxNodes", default=DEFAULT_MAX_NODES),
            template=_fields.nested(d, "template", parse=NodeTemplate.from_dict),
        )

    def to_dict(self) -> dict[str, Any]:
        return _fields.compact(
            {
                "targetNodes": self.target_nodes,
                "minNodes": self.min_nodes,
                "maxNodes": self.max_nodes,
                "template": self.template.to_dict(),
            }
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class NodePoolStatus:
    """What the NodePool controller observed; written only through ``/status``.

    An object that has no status yet reads as all defaults: nothing observed
    (generation 0), no Nodes, no scale operation under way.
    """

    observed_generation: int = 0
    scale_operation: ScaleOperation = "inactive"
    current_nodes: int = 0
    ready_nodes: int = 0
    selector: str | None = None
    conditions: tuple[meta.Condition, ...] = ()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodePoolStatus:
        return cls(
            observed_generation=_fields.integer(d, "observedGeneration", default=0),
            scale_operation=_fields.choice(
                d, "scaleOperation", choices=SCALE_OPERATIONS, default="inactive"
            ),
            current_nodes=_fields.integer(d, "currentNodes", default=0),
            ready_nodes=_fields.integer(d, "readyNodes", default=0),
            selector=_fields.optional_string(d, "selector"),
            conditions=_fields.nested_list(d, "conditions", parse=meta.Condition.from_dict),
        )

    def to_dict(self) -> dict[str, Any]:
        return _fields.compact(
            {
                "observedGeneration": self.observed_generation,
                "scaleOperation": self.scale_operation,
                "currentNodes": self.current_nodes,
                "readyNodes": self.ready_nodes,
                "selector": self.selector,
                "conditions": [c.to_dict() for c in self.conditions],
            }
        )


def spec_of(obj: Mapping[str, Any]) -> NodePoolSpec:
    """The typed spec of a NodePool object (a dict as the API returns it)."""
    return _fields.nested(obj, "spec", parse=NodePoolSpec.from_dict)


def status_of(obj: Mapping[str, Any]) -> NodePoolStatus:
    """The typed status of a NodePool object; all defaults when it has none yet."""
    return _fields.nested(obj, "status", parse=NodePoolStatus.from_dict)


def manifest(name: str, spec: NodePoolSpec) -> dict[str, Any]:
    """A NodePool object ready to be created."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name},
        "spec": spec.to_dict(),
    }


_NODE_COUNT_BOUNDS: Final[dict[str, Any]] = {"format": "int32", "minimum": 0}

_QUANTITY_LIMITS: Final[dict[str, Any]] = {
    "maxLength": 64,
    "pattern": quantity.NON_NEGATIVE_QUANTITY_PATTERN,
}


def _positive_quantity_rule(field: str) -> dict[str, str]:
    # The pattern already refuses malformed text and minus signs; only CEL's quantity
    # library can also refuse zero ("0", "0.0Gi", "0e3"), which would make a Node that
    # fits no pod and make the autoscaler divide by zero.
    return {
        "rule": "isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))",
        "message": f"{field} must be a quantity greater than zero",
    }


_TAINT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": "A taint put on every Node of the pool.",
    "required": ["key", "effect"],
    "properties": {
        "key": {
            "type": "string",
            "description": "The taint key.",
            "minLength": 1,
            "maxLength": 316,
        },
        "value": {"type": "string", "description": "The taint value.", "maxLength": 63},
        "effect": {
            "type": "string",
            "description": "What happens to pods that do not tolerate the taint.",
            "enum": list(TAINT_EFFECTS),
        },
    },
}

_TEMPLATE_PROPERTIES: Final[dict[str, Any]] = {
    "cpu": {
        "type": "string",
        "description": 'CPU capacity of one Node, as a quantity ("4", "3500m").',
        "default": DEFAULT_CPU,
        **_QUANTITY_LIMITS,
        "x-kubernetes-validations": [_positive_quantity_rule("cpu")],
    },
    "memory": {
        "type": "string",
        "description": 'Memory capacity of one Node, as a quantity ("16Gi", "512Mi").',
        "default": DEFAULT_MEMORY,
        **_QUANTITY_LIMITS,
        "x-kubernetes-validations": [_positive_quantity_rule("memory")],
    },
    "pods": {
        "type": "integer",
        "description": "How many pods one Node can run.",
        "format": "int32",
        "minimum": 1,
        "default": DEFAULT_PODS,
    },
    "labels": {
        "type": "object",
        "description": "Labels put on every Node of the pool, besides the pool label.",
        "additionalProperties": {"type": "string"},
    },
    "taints": {
        "type": "array",
        "description": "Taints put on every Node of the pool.",
        # Keyed like Node.spec.taints, which the server keeps unique by key and effect.
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["key", "effect"],
        "items": _TAINT_SCHEMA,
    },
}

_TEMPLATE_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": "The shape of one Node of the pool.",
    "required": ["cpu"],
    "default": meta.object_defaults(_TEMPLATE_PROPERTIES),
    "properties": _TEMPLATE_PROPERTIES,
}

_SPEC_PROPERTIES: Final[dict[str, Any]] = {
    "targetNodes": {
        "type": "integer",
        "description": "How many Nodes the pool should have.",
        **_NODE_COUNT_BOUNDS,
        "default": DEFAULT_TARGET_NODES,
    },
    "minNodes": {
        "type": "integer",
        "description": "The autoscaler never asks for fewer Nodes than this.",
        **_NODE_COUNT_BOUNDS,
        "default": DEFAULT_MIN_NODES,
    },
    "maxNodes": {
        "type": "integer",
        "description": "The pool never has more Nodes than this.",
        **_NODE_COUNT_BOUNDS,
        "default": DEFAULT_MAX_NODES,
    },
    "template": _TEMPLATE_SCHEMA,
}

SPEC_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": "The desired state of the pool. Owned by the user.",
    # A fully defaulted spec rather than {}: the server checks a default against the CEL
    # rules below as written, and on {} "self.minNodes" has no such key.
    "default": meta.object_defaults(_SPEC_PROPERTIES),
    "properties": _SPEC_PROPERTIES,
    # Defaults are applied before validation, so these fields are always present here.
    "x-kubernetes-validations": [
        {
            "rule": "self.minNodes <= self.maxNodes",
            "message": "minNodes must be less than or equal to maxNodes",
        },
        {
            "rule": "self.targetNodes <= self.maxNodes",
            "message": "targetNodes must be less than or equal to maxNodes",
        },
    ],
}

STATUS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": "The observed state of the pool. Written only by the NodePool controller.",
    "properties": {
        "observedGeneration": {
            "type": "integer",
            "description": "The metadata.generation this status was computed for.",
            "format": "int64",
            "minimum": 0,
            "default": 0,
        },
        "scaleOperation": {
            "type": "string",
            "description": "active while Nodes are being created or removed.",
            "enum": list(SCALE_OPERATIONS),
            "default": "inactive",
        },
        "currentNodes": {
            "type": "integer",
            "description": "How many Nodes the pool has.",
            **_NODE_COUNT_BOUNDS,
            "default": 0,
        },
        "readyNodes": {
            "type": "integer",
            "description": "How many of them are Ready.",
            **_NODE_COUNT_BOUNDS,
            "default": 0,
        },
        "selector": {
            "type": "string",
            "description": "Label selector of the pool's Nodes, for the scale subresource.",
        },
        "conditions": meta.CONDITIONS_SCHEMA,
    },
}

SCHEMA: Final[dict[str, Any]] = meta.root_schema(
    description="A set of identical Nodes, created through a cloud provider.",
    spec=SPEC_SCHEMA,
    status=STATUS_SCHEMA,
)

SUBRESOURCES: Final[dict[str, Any]] = {
    "status": {},
    # Makes `kubectl scale np/NAME --replicas=N` (and an HPA) work on a pool.
    "scale": {
        "specReplicasPath": ".spec.targetNodes",
        "statusReplicasPath": ".status.currentNodes",
        "labelSelectorPath": ".status.selector",
    },
}

PRINTER_COLUMNS: Final[list[dict[str, Any]]] = [
    {"name": "Target", "type": "integer", "jsonPath": ".spec.targetNodes"},
    {"name": "Current", "type": "integer", "jsonPath": ".status.currentNodes"},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyNodes"},
    {"name": "Operation", "type": "string", "jsonPath": ".status.scaleOperation"},
    meta.AGE_COLUMN,
]


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition of NodePool (a fresh copy)."""
    return meta.custom_resource_definition(
        kind=KIND,
        plural=PLURAL,
        singular=SINGULAR,
        short_names=SHORT_NAMES,
        schema=SCHEMA,
        subresources=SUBRESOURCES,
        printer_columns=PRINTER_COLUMNS,
    )
