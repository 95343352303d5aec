"""The NodePool CRD: its OpenAPI schema (with the CEL rules the API server checks),
subresources and printer columns; ``crds`` assembles it with the other kinds'.

The schema and the dataclasses of ``api.nodepool`` are two views of one contract: the
defaults and bounds here are the types' own constants, and the unit tests prove the two
agree field by field, type by type, and default by default. ``POOL_NAME_SCHEMA`` is also
what the other kinds' references to a pool (``nodePoolName``) are checked with.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from nodepool_operator.api import (
    disruption,
    launch,
    meta,
    nodepool,
    quantity,
    requirements,
    wellknown,
)

__all__ = [
    "EXTENDED_RESOURCE_NAME_PATTERN",
    "LABEL_KEY_PATTERN",
    "LABEL_VALUE_PATTERN",
    "MAX_LABEL_VALUE_LENGTH",
    "MAX_POOL_NAME_LENGTH",
    "POOL_NAME_SCHEMA",
    "PRINTER_COLUMNS",
    "QUANTITY_HELP",
    "SCHEMA",
    "SPEC_SCHEMA",
    "STATUS_SCHEMA",
    "SUBRESOURCES",
    "TOPOLOGY_NAME_SCHEMA",
    "crd",
]

_NODE_COUNT_BOUNDS: Final[dict[str, Any]] = {"format": "int32", "minimum": 0}
_SPEC_NODE_COUNT_BOUNDS: Final[dict[str, Any]] = {
    **_NODE_COUNT_BOUNDS,
    "maximum": nodepool.MAX_NODES_PER_POOL,
}

# int32 like the node counts, so that a controller adding seconds to a timestamp never
# overflows; 2^31 s is 68 years.
_TIMEOUT_BOUNDS: Final[dict[str, Any]] = {"format": "int32", "minimum": 0}

# What a quantity looks like, for the messages of a refused one (no raw regular
# expression: the user reads this). Double quotes inside, so it can sit in a CEL string.
QUANTITY_HELP: Final = (
    'a quantity such as 4, "500m" or "16Gi": a number without a sign, then optionally '
    "m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3"
)

# The format, as a CEL rule rather than an OpenAPI ``pattern`` so that a refusal says what
# a quantity looks like instead of printing the expression. An integer is a quantity
# (``cpu: 4``, as every Pod spec writes it) when it is not negative; a string when it
# matches the parser's own grammar (RE2 reads it as Python's ``re`` does).
_QUANTITY_FORMAT_RULE: Final[dict[str, str]] = {
    "rule": (
        f"type(self) == int ? self >= 0 : self.matches('{quantity.NON_NEGATIVE_QUANTITY_PATTERN}')"
    ),
    "message": f"must be {QUANTITY_HELP}",
}


def _quantity_schema(
    description: str, *rules: dict[str, str], default: str | None = None
) -> dict[str, Any]:
    """A quantity as Kubernetes takes one: a string or an integer
    (``x-kubernetes-int-or-string``), at most ``MAX_LENGTH`` characters, in the parser's
    grammar, and whatever ``rules`` add."""
    schema: dict[str, Any] = {
        "description": description,
        "x-kubernetes-int-or-string": True,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "maxLength": quantity.MAX_LENGTH,
        "x-kubernetes-validations": [_QUANTITY_FORMAT_RULE, *rules],
    }
    if default is not None:
        schema["default"] = default
    return schema


def _positive_quantity_rule(field: str) -> dict[str, str]:
    # The format rule refuses malformed text and minus signs; only CEL's quantity library
    # can also refuse zero ("0", "0.0Gi", "0e3"), which would make a Node that fits no pod
    # and make the autoscaler divide by zero. A malformed text passes here, so that it
    # gets the format rule's message alone.
    return {
        "rule": (
            "type(self) == int ? self > 0"
            " : (!isQuantity(self) || quantity(self).isGreaterThan(quantity('0')))"
        ),
        "message": f"{field} must be a quantity greater than zero",
    }


# The API server's own rules for the labels and taints of a Node (apimachinery's
# IsQualifiedName, IsDNS1123Subdomain and IsValidLabelValue), so that a template the CRD
# accepts never makes a Node the server refuses. "[.]" rather than an escaped dot, so the
# text needs no escaping inside a CEL string.
_DNS_SUBDOMAIN: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_MAX_NAME_PREFIX_LENGTH: Final = 253
# At most 63 characters: one, or a first, up to 61 middle and a last one.
_QUALIFIED_NAME_PART: Final = r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"

LABEL_KEY_PATTERN: Final = rf"^({_DNS_SUBDOMAIN}/)?{_QUALIFIED_NAME_PART}$"
MAX_LABEL_VALUE_LENGTH: Final = 63

# A pool's name is the value of its Nodes' POOL_LABEL, and "<pool>-<index>" is each Node's
# name and HOSTNAME_LABEL: label values, at most 63 characters. 58 leaves room for "-" and
# four digits of index (a pool has at most MAX_NODES_PER_POOL Nodes, plus replacements),
# so a pool the server accepts never makes a Node it refuses.
MAX_POOL_NAME_LENGTH: Final = 58
# What a reference to a pool (an Autoscaler's or a ScaleRequest's nodePoolName) may be:
# a name a NodePool can have. Anything else can never name one, and a name such as ".."
# or "x/status" would make a request path of its own.
POOL_NAME_SCHEMA: Final[dict[str, Any]] = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_POOL_NAME_LENGTH,
    "pattern": f"^{_DNS_SUBDOMAIN}$",
}
LABEL_VALUE_PATTERN: Final = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"


def _qualified_name_rule(subject: str) -> str:
    """The CEL test that ``subject`` is a qualified name: the pattern fixes the name part's
    length, and the prefix, a DNS subdomain, is at most 253 characters (indexOf is -1 when
    there is no prefix)."""
    return (
        f"{subject}.matches('{LABEL_KEY_PATTERN}')"
        f" && {subject}.indexOf('/') <= {_MAX_NAME_PREFIX_LENGTH}"
    )


# Double quotes inside, so that the text can also sit in a CEL string.
_QUALIFIED_NAME_HELP: Final = (
    'an optional DNS subdomain prefix of at most 253 characters and "/", then at most 63 '
    'letters, digits, "-", "_" or ".", starting and ending with a letter or digit'
)

_LABEL_VALUE_SCHEMA: Final[dict[str, Any]] = {
    "type": "string",
    "maxLength": MAX_LABEL_VALUE_LENGTH,
    "pattern": LABEL_VALUE_PATTERN,
}

_LABEL_KEYS_RULE: Final[dict[str, str]] = {
    "rule": f"self.all(k, {_qualified_name_rule('k')})",
    "message": f"label keys must be qualified names: {_QUALIFIED_NAME_HELP}",
    # Names the keys at fault, which the message cannot.
    "messageExpression": (
        f"'label keys must be qualified names ({_QUALIFIED_NAME_HELP}); the first refused: '"
        f" + self.filter(k, !({_qualified_name_rule('k')}))[0]"
    ),
}


def _cel_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


_OPERATOR_LABELS_RULE: Final[dict[str, str]] = {
    "rule": f"!self.exists(k, k in {_cel_list(wellknown.OPERATOR_LABELS)})",
    "message": (
        f"labels may not set {', '.join(wellknown.OPERATOR_LABELS)}: the operator sets them "
        "(the zone and region from zones and region)"
    ),
}

_PLATFORM_LABEL_RULES: Final[list[dict[str, str]]] = [
    {
        "rule": f"!('{label}' in self) || self['{label}'] in {_cel_list(values)}",
        "message": f"{label} must be one of {', '.join(values)}",
    }
    for label, values in (
        (wellknown.ARCH_LABEL, wellknown.ARCHITECTURES),
        (wellknown.OS_LABEL, wellknown.OPERATING_SYSTEMS),
    )
]

_TAINT_KEY_RULE: Final[dict[str, str]] = {
    "rule": _qualified_name_rule("self"),
    "message": f"a taint key must be a qualified name: {_QUALIFIED_NAME_HELP}",
}

# Zones and the region become the values of the topology labels (and an instance type
# the value of its label).
TOPOLOGY_NAME_SCHEMA: Final[dict[str, Any]] = {**_LABEL_VALUE_SCHEMA, "minLength": 1}

# Few enough that the server's estimated cost of the CEL rules over these maps stays
# small; real nodes have a handful of extended resources.
_MAX_RESOURCE_ENTRIES: Final = 16

# A Node accepts an extended resource only as a qualified name outside kubernetes.io
# (apimachinery's IsExtendedResourceName), and a pod can only request it then. "[.]"
# rather than an escaped dot, so the text needs no escaping inside a CEL string.
EXTENDED_RESOURCE_NAME_PATTERN: Final = rf"^{_DNS_SUBDOMAIN}/{_QUALIFIED_NAME_PART}$"

_EXTENDED_RESOURCE_NAMES_RULE: Final[dict[str, str]] = {
    "rule": (
        f"self.all(k, k.matches('{EXTENDED_RESOURCE_NAME_PATTERN}')"
        " && !k.contains('kubernetes.io/') && !k.startsWith('requests.'))"
    ),
    "message": (
        "extendedResources names must be qualified names outside kubernetes.io, "
        "such as example.com/gpu"
    ),
}

_WHOLE_QUANTITY_RULE: Final[dict[str, str]] = {
    "rule": "type(self) == int || !isQuantity(self) || quantity(self).isInteger()",
    "message": "extended resources must be whole numbers",
}

# Rules on the template, since each compares a reserve with a sibling field. Defaults
# fill cpu, memory and pods before these run; isQuantity keeps a malformed value (which
# the format rule already refuses) from failing the rule with an evaluation error, and
# string() reads a quantity written as an integer as its digits.
_RESERVED_RULES: Final[list[dict[str, str]]] = [
    {
        "rule": (
            "!has(self.reserved) || self.reserved.all(k, k in ['cpu', 'memory', 'pods']"
            " || (k == 'ephemeral-storage' && has(self.ephemeralStorage))"
            " || (has(self.extendedResources) && k in self.extendedResources))"
        ),
        "message": (
            "reserved may name only cpu, memory, pods, ephemeral-storage (when "
            "ephemeralStorage is set) and the template's extendedResources"
        ),
    },
    {
        "rule": (
            "!has(self.reserved) || !('cpu' in self.reserved)"
            " || !isQuantity(string(self.reserved['cpu'])) || !isQuantity(string(self.cpu))"
            " || quantity(string(self.reserved['cpu'])).isLessThan(quantity(string(self.cpu)))"
        ),
        "message": "reserved.cpu must be less than cpu",
    },
    {
        "rule": (
            "!has(self.reserved) || !('memory' in self.reserved)"
            " || !isQuantity(string(self.reserved['memory']))"
            " || !isQuantity(string(self.memory))"
            " || quantity(string(self.reserved['memory']))"
            ".isLessThan(quantity(string(self.memory)))"
        ),
        "message": "reserved.memory must be less than memory",
    },
    {
        "rule": (
            "!has(self.reserved) || !('pods' in self.reserved)"
            " || !isQuantity(string(self.reserved['pods']))"
            " || (quantity(string(self.reserved['pods'])).isInteger()"
            " && quantity(string(self.reserved['pods'])).asInteger() < self.pods)"
        ),
        "message": "reserved.pods must be a whole number less than pods",
    },
    {
        "rule": (
            "!has(self.reserved) || !('ephemeral-storage' in self.reserved)"
            " || !has(self.ephemeralStorage)"
            " || !isQuantity(string(self.reserved['ephemeral-storage']))"
            " || !isQuantity(string(self.ephemeralStorage))"
            " || quantity(string(self.reserved['ephemeral-storage'])).compareTo("
            "quantity(string(self.ephemeralStorage))) <= 0"
        ),
        "message": "reserved.ephemeral-storage must not exceed ephemeralStorage",
    },
    {
        "rule": (
            "!has(self.reserved) || !has(self.extendedResources)"
            " || self.reserved.all(k, !(k in self.extendedResources)"
            " || !isQuantity(string(self.reserved[k]))"
            " || !isQuantity(string(self.extendedResources[k]))"
            " || (quantity(string(self.reserved[k])).isInteger()"
            " && quantity(string(self.reserved[k]))"
            ".compareTo(quantity(string(self.extendedResources[k]))) <= 0))"
        ),
        "message": (
            "a reserved extended resource must be a whole number no larger than "
            "in extendedResources"
        ),
    },
]

_TAINT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": "A taint put on every Node of the pool.",
    "required": ["key", "effect"],
    "properties": {
        "key": {
            "type": "string",
            "description": "The taint key, a qualified name like a label key.",
            "minLength": 1,
            # A 253-character prefix, "/" and a 63-character name.
            "maxLength": 317,
            "x-kubernetes-validations": [_TAINT_KEY_RULE],
        },
        "value": {
            **_LABEL_VALUE_SCHEMA,
            "description": "The taint value, which has the form of a label value.",
        },
        "effect": {
            "type": "string",
            "description": "What happens to pods that do not tolerate the taint.",
            "enum": list(nodepool.TAINT_EFFECTS),
        },
    },
}

_TEMPLATE_PROPERTIES: Final[dict[str, Any]] = {
    "cpu": _quantity_schema(
        f'CPU capacity of one Node, as a quantity (4, "3500m"); default "{nodepool.DEFAULT_CPU}".',
        _positive_quantity_rule("cpu"),
        default=nodepool.DEFAULT_CPU,
    ),
    "memory": _quantity_schema(
        "Memory capacity of one Node, as a quantity "
        f'("16Gi", "512Mi"); default "{nodepool.DEFAULT_MEMORY}".',
        _positive_quantity_rule("memory"),
        default=nodepool.DEFAULT_MEMORY,
    ),
    "pods": {
        "type": "integer",
        "description": "How many pods one Node can run.",
        "format": "int32",
        "minimum": 1,
        "default": nodepool.DEFAULT_PODS,
    },
    "ephemeralStorage": _quantity_schema(
        'Local ephemeral storage of one Node, as a quantity ("100Gi").',
        _positive_quantity_rule("ephemeralStorage"),
    ),
    "extendedResources": {
        "type": "object",
        "description": (
            "Extended resources of one Node, by name, as whole quantities "
            '({"example.com/gpu": "2"}).'
        ),
        "maxProperties": _MAX_RESOURCE_ENTRIES,
        "additionalProperties": _quantity_schema(
            "How many of the resource one Node has, a whole number.", _WHOLE_QUANTITY_RULE
        ),
        "x-kubernetes-validations": [_EXTENDED_RESOURCE_NAMES_RULE],
    },
    "reserved": {
        "type": "object",
        "description": (
            "What the system keeps of each resource, as kubelet's system-reserved: "
            "allocatable = capacity - reserved."
        ),
        "maxProperties": _MAX_RESOURCE_ENTRIES,
        "additionalProperties": _quantity_schema("What the system keeps of the resource."),
    },
    "zones": {
        "type": "array",
        "description": (
            "Zones the pool's VMs go to: where the Autoscaler's pods need them, else "
            "the zone with the fewest of the pool's VMs; none: no zone label."
        ),
        "x-kubernetes-list-type": "set",
        "maxItems": 32,
        "items": TOPOLOGY_NAME_SCHEMA,
    },
    "region": {
        **TOPOLOGY_NAME_SCHEMA,
        "description": "The region label put on every Node of the pool.",
    },
    "labels": {
        "type": "object",
        "description": (
            "Labels put on every Node of the pool, besides the pool label; keys and "
            "values as the API server accepts them on a Node."
        ),
        "maxProperties": nodepool.MAX_TEMPLATE_LABELS,
        "additionalProperties": _LABEL_VALUE_SCHEMA,
        "x-kubernetes-validations": [
            _LABEL_KEYS_RULE,
            _OPERATOR_LABELS_RULE,
            *_PLATFORM_LABEL_RULES,
        ],
    },
    "taints": {
        "type": "array",
        "description": "Taints put on every Node of the pool.",
        # Keyed like Node.spec.taints, which the server keeps unique by key and effect.
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["key", "effect"],
        "maxItems": nodepool.MAX_TEMPLATE_TAINTS,
        "items": _TAINT_SCHEMA,
    },
    "startupTaints": {
        "type": "array",
        "description": (
            "Taints every Node of the pool starts with, which an agent on the Node (a CNI "
            "or CSI driver) removes once it is ready: the autoscaler plans as if they "
            "were gone."
        ),
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["key", "effect"],
        "maxItems": nodepool.MAX_TEMPLATE_TAINTS,
        "items": _TAINT_SCHEMA,
    },
    "provider": launch.PROVIDER_SCHEMA,
}

_TEMPLATE_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": "The shape of one Node of the pool.",
    "required": ["cpu"],
    "default": meta.object_defaults(_TEMPLATE_PROPERTIES),
    "properties": _TEMPLATE_PROPERTIES,
    "x-kubernetes-validations": [*_RESERVED_RULES, launch.SUBNETS_COVER_ZONES_RULE],
}

# A requirement's operators and its values must agree, as NodeSelectorRequirement's do;
# has() first, since an absent list reads as no values.
_REQUIREMENT_RULES: Final[list[dict[str, str]]] = [
    {
        "rule": (
            "!(self.operator in ['In', 'NotIn']) || (has(self.values) && size(self.values) > 0)"
        ),
        "message": "In and NotIn need at least one value",
    },
    {
        "rule": (
            "!(self.operator in ['Exists', 'DoesNotExist'])"
            " || !has(self.values) || size(self.values) == 0"
        ),
        "message": "Exists and DoesNotExist take no values",
    },
    {
        "rule": (
            "!(self.operator in ['Gt', 'Lt']) || (has(self.values) && size(self.values) == 1"
            " && self.values[0].matches('^[0-9]{1,18}$'))"
        ),
        "message": "Gt and Lt need exactly one whole number as their value",
    },
]

_REQUIREMENT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": (
        "A condition on one label of the pool's nodes, as a NodeSelectorRequirement: "
        "instance type, architecture, os, zone, capacity type, cpu or memory of the "
        "catalog offering, or a label of the template."
    ),
    "required": ["key", "operator"],
    "properties": {
        "key": {
            "type": "string",
            "description": "The label key, a qualified name.",
            "minLength": 1,
            "maxLength": 317,
            "x-kubernetes-validations": [
                {
                    "rule": _qualified_name_rule("self"),
                    "message": (
                        f"a requirement key must be a qualified name: {_QUALIFIED_NAME_HELP}"
                    ),
                }
            ],
        },
        "operator": {
            "type": "string",
            "description": "In, NotIn, Exists, DoesNotExist, Gt or Lt (integers).",
            "enum": list(requirements.OPERATORS),
        },
        "values": {
            "type": "array",
            "description": "The values: one or more for In and NotIn, one integer for Gt and Lt.",
            "maxItems": requirements.MAX_REQUIREMENT_VALUES,
            "x-kubernetes-list-type": "set",
            "items": {**_LABEL_VALUE_SCHEMA},  # a copy: YAML would alias a shared dict
        },
    },
    "x-kubernetes-validations": _REQUIREMENT_RULES,
}

_LIMITS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": (
        "The most the pool's Nodes may have in total (their capacity), beside maxNodes: "
        "a launch beyond either is refused."
    ),
    "properties": {
        "cpu": _quantity_schema('Total CPU of the pool\'s Nodes (64, "100500m").'),
        "memory": _quantity_schema('Total memory of the pool\'s Nodes ("256Gi").'),
    },
}

# Go's duration as people write it in a spec: whole hours, minutes, seconds, in order.
_DURATION_PATTERN: Final = r"^(?:[0-9]+h)?(?:[0-9]+m)?(?:[0-9]+s)?$"
# Five cron fields (croniter judges each when the operator reads the spec), or a macro.
_SCHEDULE_PATTERN: Final = (
    r"^(?:@(?:annually|yearly|monthly|weekly|daily|midnight|hourly)"
    r"|[^ ]+ [^ ]+ [^ ]+ [^ ]+ [^ ]+)$"
)
_BUDGET_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": (
        "At most this many of the pool's Nodes disrupted at once, for these reasons, "
        "within this window."
    ),
    "properties": {
        "nodes": {
            "type": "string",
            "description": (
                'A count ("2") or a share of the pool\'s registered Nodes, rounded up ("10%").'
            ),
            "pattern": r"^((100|[0-9]{1,2})%|[0-9]+)$",
            "maxLength": 10,
            "default": disruption.DEFAULT_BUDGET_NODES,
        },
        "reasons": {
            "type": "array",
            "description": "The reasons it caps; absent, every reason.",
            "maxItems": len(disruption.DISRUPTION_REASONS),
            "items": {"type": "string", "enum": list(disruption.DISRUPTION_REASONS)},
        },
        "schedule": {
            "type": "string",
            "description": (
                'When the budget comes into force: cron, five fields, UTC ("0 9 * * 1-5"), '
                "for duration. Absent, always."
            ),
            "pattern": _SCHEDULE_PATTERN,
            "maxLength": 100,
        },
        "duration": {
            "type": "string",
            "description": 'How long it stays in force each time the schedule fires ("8h").',
            "pattern": _DURATION_PATTERN,
            "minLength": 2,
            "maxLength": 20,
        },
    },
    "x-kubernetes-validations": [
        {
            "rule": "has(self.schedule) == has(self.duration)",
            "message": "schedule and duration go together: set both or neither",
        }
    ],
}

_DISRUPTION_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": "How the pool's Nodes may be disrupted of the controllers' own accord.",
    "properties": {
        "budgets": {
            "type": "array",
            "description": (
                "The most restrictive budget in force caps how many of the pool's Nodes are "
                "being disrupted at once, counted across every reason. Absent: 10%."
            ),
            "maxItems": disruption.MAX_BUDGETS,
            "items": _BUDGET_SCHEMA,
            "default": [b.to_dict() for b in disruption.Disruption().budgets],
        },
        "rebalanceRecommendation": {
            "type": "string",
            "description": (
                "What the cloud's rebalance recommendation (a spot VM at elevated risk of "
                "being taken back) does to its Node. Ignore: nothing. Replace: the Node is "
                "cordoned and its replacement launched at once, without draining it; a "
                "spot interruption notice that follows drains it as usual."
            ),
            "enum": list(disruption.REBALANCE_ACTIONS),
            "default": disruption.REBALANCE_IGNORE,
        },
    },
    "default": disruption.Disruption().to_dict(),
}

_SPEC_PROPERTIES: Final[dict[str, Any]] = {
    "targetNodes": {
        "type": "integer",
        "description": (
            f"How many Nodes the pool should have (at most {nodepool.MAX_NODES_PER_POOL})."
        ),
        **_SPEC_NODE_COUNT_BOUNDS,
        "default": nodepool.DEFAULT_TARGET_NODES,
    },
    "minNodes": {
        "type": "integer",
        "description": "The autoscaler never asks for fewer Nodes than this.",
        **_SPEC_NODE_COUNT_BOUNDS,
        "default": nodepool.DEFAULT_MIN_NODES,
    },
    "maxNodes": {
        "type": "integer",
        "description": (
            f"The pool never has more Nodes than this (at most {nodepool.MAX_NODES_PER_POOL})."
        ),
        **_SPEC_NODE_COUNT_BOUNDS,
        "default": nodepool.DEFAULT_MAX_NODES,
    },
    "weight": {
        "type": "integer",
        "description": "Preference among pools that could all host a pod; higher first.",
        "format": "int32",
        "minimum": 0,
        "maximum": nodepool.MAX_WEIGHT,
        "default": nodepool.DEFAULT_WEIGHT,
    },
    "drainTimeoutSeconds": {
        "type": "integer",
        "description": (
            "How long a Node may drain before the pods still on it are deleted and the "
            "Node goes anyway; absent, a drain is never forced."
        ),
        **_TIMEOUT_BOUNDS,
    },
    "notReadyTimeoutSeconds": {
        "type": "integer",
        "description": "How long a Node may stay NotReady before it is replaced.",
        **_TIMEOUT_BOUNDS,
        "default": nodepool.DEFAULT_NOT_READY_TIMEOUT_SECONDS,
    },
    "registrationTimeoutSeconds": {
        "type": "integer",
        "description": "How long a running VM may go without a Ready Node before it is replaced.",
        **_TIMEOUT_BOUNDS,
        "default": nodepool.DEFAULT_REGISTRATION_TIMEOUT_SECONDS,
    },
    "template": _TEMPLATE_SCHEMA,
    "requirements": {
        "type": "array",
        "description": (
            "Which catalog offerings the pool's Nodes may be: each Node is the offering "
            "(instance type, zone, capacity type) the autoscaler chose, with that type's "
            "shape, and carries its labels. Absent: every Node has the template's shape."
        ),
        "maxItems": requirements.MAX_REQUIREMENTS,
        "items": _REQUIREMENT_SCHEMA,
    },
    "limits": _LIMITS_SCHEMA,
    "disruption": _DISRUPTION_SCHEMA,
    "expireAfter": {
        "type": "string",
        "description": (
            'How long a Node lives before it is replaced ("720h", "60s"); "Never", for ever.'
        ),
        "pattern": rf"^(?:{disruption.NEVER}|(?:[0-9]+h)?(?:[0-9]+m)?(?:[0-9]+s)?)$",
        "minLength": 2,
        "maxLength": 20,
        "default": disruption.NEVER,
    },
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

#: A backoff's count of refusals in a row (zone backoffs and the cloud pause alike).
_REFUSALS_IN_A_ROW: Final[dict[str, Any]] = {
    "type": "integer",
    "description": "Refusals in a row; each doubles the wait.",
    "format": "int32",
    "minimum": 1,
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
            "enum": list(nodepool.SCALE_OPERATIONS),
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
        "zoneBackoffs": {
            "type": "array",
            "description": (
                "Zones where no VM of the pool is launched until a time: the cloud had no"
                " capacity there, or a VM launched there never got a Ready Node. Each"
                " refusal in a row doubles the wait, from 1 minute up to 30; a launch that"
                " succeeds there ends it. The Autoscaler plans a pool whose every zone is"
                " backed off as unable to grow."
            ),
            "maxItems": nodepool.MAX_ZONE_BACKOFFS,
            "items": {
                "type": "object",
                "required": ["reason", "failures", "until"],
                "properties": {
                    "zone": {
                        "type": "string",
                        "description": "The zone; empty: the cloud chose it (the whole pool).",
                        "maxLength": 253,
                        "default": "",
                    },
                    "shape": {
                        "type": "string",
                        "description": "The machine refused, as the cloud names it.",
                        "maxLength": 253,
                        "default": "",
                    },
                    "reason": {
                        "type": "string",
                        "description": "Why the zone is backed off.",
                        "enum": list(nodepool.BACKOFF_REASONS),
                    },
                    "failures": {**_REFUSALS_IN_A_ROW},  # a copy: YAML would alias a shared dict
                    "until": {
                        "type": "string",
                        "description": "When VMs may be launched in the zone again.",
                        "format": "date-time",
                    },
                    "message": {
                        "type": "string",
                        "description": "The last refusal, as the cloud or the pool put it.",
                        "maxLength": 1024,
                        "default": "",
                    },
                    "instanceType": {
                        "type": "string",
                        "description": (
                            "A pool with requirements: only this instance type's offering in"
                            " the zone is backed off, not the zone."
                        ),
                        "maxLength": MAX_LABEL_VALUE_LENGTH,
                    },
                    "capacityType": {
                        "type": "string",
                        "description": "The backed-off offering's capacity type.",
                        "enum": list(wellknown.CAPACITY_TYPES),
                    },
                },
            },
        },
        "cloudPause": {
            "type": "object",
            "description": (
                "The pool's VM creations paused after a refusal that asking again would"
                " not change (a quota, an invalid machine, a Node the API server refused):"
                " from 10 seconds, doubling with each refusal in a row up to 5 minutes; a"
                " new generation or a pass the cloud accepts ends it."
            ),
            "required": ["reason", "failures", "until", "generation"],
            "properties": {
                "reason": {
                    "type": "string",
                    "description": "The refusal's code, as the cloud or the API server gave it.",
                    "maxLength": 253,
                },
                "message": {
                    "type": "string",
                    "description": "The last refusal, in words.",
                    "maxLength": nodepool.MAX_PAUSE_MESSAGE,
                    "default": "",
                },
                "failures": {**_REFUSALS_IN_A_ROW},  # a copy: YAML would alias a shared dict
                "until": {
                    "type": "string",
                    "description": "When VM creations may be asked for again.",
                    "format": "date-time",
                },
                "generation": {
                    "type": "integer",
                    "description": "The metadata.generation the refusal was met under.",
                    "format": "int64",
                    "minimum": 0,
                },
            },
        },
        "reportedAllocatable": {
            "type": "object",
            "description": (
                "What the pool's kubelets report against the template's allocatable: per"
                " resource, the lower median of what the pool's Ready Nodes report (kept"
                " while none is Ready), where it is below the template. The Autoscaler plans"
                " new Nodes of the pool with it. Reset when the template's figures change."
            ),
            "required": ["templateAllocatable"],
            "properties": {
                "templateAllocatable": {
                    "type": "object",
                    "description": "The template's allocatable the reports were measured against.",
                    "maxProperties": 32,
                    "additionalProperties": {"type": "string", "maxLength": 64},
                },
                "since": {
                    "type": "string",
                    "description": "When this template was first seen; older Nodes do not count.",
                    "format": "date-time",
                },
                "lowest": {
                    "type": "object",
                    "description": "Per resource, the figure the Ready Nodes report below it.",
                    "maxProperties": 32,
                    "additionalProperties": {"type": "string", "maxLength": 64},
                },
            },
        },
        "costPerHour": {
            "type": "number",
            "description": (
                "What the pool's Nodes cost per hour, by their offerings' catalog prices"
                " (a pool with requirements); absent: not known."
            ),
            "minimum": 0,
        },
        "driftedNodes": {
            "type": "integer",
            "description": (
                "How many of the pool's Nodes differ from its spec and wait for their "
                "replacement or are being replaced; absent: none."
            ),
            "format": "int32",
            "minimum": 1,
        },
    },
}

SCHEMA: Final[dict[str, Any]] = meta.root_schema(
    description="A set of identical Nodes, created through a cloud provider.",
    spec=SPEC_SCHEMA,
    status=STATUS_SCHEMA,
    max_name_length=MAX_POOL_NAME_LENGTH,
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
    # Empty while every Node is as the spec makes them.
    {"name": "Drifted", "type": "integer", "jsonPath": ".status.driftedNodes"},
    # Empty for a pool without requirements (its nodes have no catalog price). Priority 1
    # (``kubectl get np -o wide``): the default table stays as it was for every pool.
    {"name": "Cost/h", "type": "number", "priority": 1, "jsonPath": ".status.costPerHour"},
    # A pool short of its target for a reason (the cloud refuses, a Node is invalid) reads
    # "inactive" and 0 ready: Degraded and its reason say why on the same row.
    {
        "name": "Degraded",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Degraded")].status',
    },
    {
        "name": "Reason",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Degraded")].reason',
    },
    meta.AGE_COLUMN,
    {
        "name": "Message",
        "type": "string",
        "priority": 1,
        "jsonPath": '.status.conditions[?(@.type=="Degraded")].message',
    },
]


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition of NodePool (a fresh copy)."""
    return meta.custom_resource_definition(
        kind=nodepool.KIND,
        plural=nodepool.PLURAL,
        singular=nodepool.SINGULAR,
        short_names=nodepool.SHORT_NAMES,
        schema=SCHEMA,
        subresources=SUBRESOURCES,
        printer_columns=PRINTER_COLUMNS,
    )
