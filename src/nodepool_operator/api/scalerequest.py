"""ScaleRequest (``sr``): one request to set a NodePool's size, handed between controllers.

The autoscaler never writes ``NodePool.spec``; it creates a ScaleRequest and the NodePool
controller decides what to do with it, reporting in ``status.phase``. The target is
absolute, so that repeating a request never counts twice, and the spec is immutable
(enforced by the server), so that a request's status always answers the spec it was
created with.

A request may state the pool's ``spec.targetNodes`` it was computed from
(``basedOnTargetNodes``); if the pool's target has moved since (the user scaled in
between), the request is Superseded rather than applied over the newer value.

``answer_requests`` is the one rule for what a pool's Pending requests do to its target:
the NodePool controller applies it, and the Autoscaler predicts with it what the requests
it handed over will set. Both controllers import it from here, so they cannot drift.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, get_args

from nodepool_operator.api import fields, meta, nodepool, nodepool_schema, wellknown

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "MAX_AWAIT_NOMINATIONS_SECONDS",
    "MAX_NEW_NODE_OFFERINGS",
    "MAX_NEW_NODE_ZONES",
    "MAX_REMOVE_NODES",
    "MAX_REQUESTER_LENGTH",
    "PHASES",
    "PLURAL",
    "PRINTER_COLUMNS",
    "SCHEMA",
    "SHORT_NAMES",
    "SINGULAR",
    "SPEC_SCHEMA",
    "STATUS_SCHEMA",
    "SUBRESOURCES",
    "VERSION",
    "Answer",
    "OfferingCount",
    "Order",
    "Outcome",
    "Phase",
    "RequestFacts",
    "ScaleRequestSpec",
    "ScaleRequestStatus",
    "answer_requests",
    "crd",
    "manifest",
    "missing_pool",
    "reject_requests",
    "spec_of",
    "status_of",
]

GROUP: Final = meta.GROUP
VERSION: Final = meta.VERSION
API_VERSION: Final = meta.API_VERSION
KIND: Final = "ScaleRequest"
PLURAL: Final = "scalerequests"
SINGULAR: Final = "scalerequest"
SHORT_NAMES: Final = ("sr",)

# Room for "autoscaler/" and the longest object name (253): an Autoscaler's own requests
# must never be refused for the name it was given.
MAX_REQUESTER_LENGTH: Final = len("autoscaler/") + 253

#: Nodes one request may name for removal (bounds the cost of comparing two specs in CEL).
MAX_REMOVE_NODES: Final = 100
#: Zones one request may name (as many as a template may list).
MAX_NEW_NODE_ZONES: Final = 32
#: Offerings one request may name.
MAX_NEW_NODE_OFFERINGS: Final = 64
#: The longest a scale-up may hold its new Nodes for nominations (``api.nominations``).
MAX_AWAIT_NOMINATIONS_SECONDS: Final = 300

Phase = Literal["Pending", "Applied", "Rejected", "Superseded"]
PHASES: Final[tuple[Phase, ...]] = get_args(Phase)


@dataclasses.dataclass(frozen=True, kw_only=True)
class OfferingCount:
    """``count`` new nodes of one catalog offering: an instance type sold in a zone as a
    capacity type (a pool with requirements)."""

    instance_type: str
    zone: str
    capacity_type: wellknown.CapacityType
    count: int

    @property
    def key(self) -> tuple[str, str, str]:
        """The offering, without the count."""
        return (self.instance_type, self.zone, self.capacity_type)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OfferingCount:
        return cls(
            instance_type=fields.required_string(d, "instanceType"),
            zone=fields.required_string(d, "zone"),
            capacity_type=fields.choice(
                d, "capacityType", choices=wellknown.CAPACITY_TYPES, default=None
            ),
            count=fields.required_integer(d, "count"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "instanceType": self.instance_type,
            "zone": self.zone,
            "capacityType": self.capacity_type,
            "count": self.count,
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScaleRequestSpec:
    """Which pool, to how many Nodes, from which target, why, and who asks.

    ``based_on_target_nodes``: the pool's ``spec.targetNodes`` the requester computed
    from; None (a hand-made request) skips the check. ``new_node_zones``: how many of the
    new nodes go to which zone (``api.zones``); the rest go where the pool stays balanced.
    ``new_node_offerings`` (a pool with requirements): which catalog offerings the new
    nodes are, and how many of each; ``target_nodes`` stays the one number.
    ``await_nominations_seconds``: the new Nodes keep the unregistered taint until the
    requester has nominated its pods on them, at most this long (``api.nominations``).
    """

    node_pool_name: str
    target_nodes: int
    based_on_target_nodes: int | None = None
    reason: str | None = None
    requester: str | None = None
    remove_nodes: tuple[str, ...] = ()
    new_node_zones: Mapping[str, int] = dataclasses.field(default_factory=dict)
    new_node_offerings: tuple[OfferingCount, ...] = ()
    await_nominations_seconds: int | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ScaleRequestSpec:
        return cls(
            node_pool_name=fields.required_string(d, "nodePoolName"),
            target_nodes=fields.required_integer(d, "targetNodes"),
            based_on_target_nodes=fields.optional_integer(d, "basedOnTargetNodes"),
            reason=fields.optional_string(d, "reason"),
            requester=fields.optional_string(d, "requester"),
            remove_nodes=fields.string_list(d, "removeNodes"),
            new_node_zones=fields.integer_map(d, "newNodeZones"),
            new_node_offerings=fields.nested_list(
                d, "newNodeOfferings", parse=OfferingCount.from_dict
            ),
            await_nominations_seconds=fields.optional_integer(d, "awaitNominationsSeconds"),
        )

    def to_dict(self) -> dict[str, Any]:
        return fields.compact(
            {
                "nodePoolName": self.node_pool_name,
                "targetNodes": self.target_nodes,
                "basedOnTargetNodes": self.based_on_target_nodes,
                "reason": self.reason,
                "requester": self.requester,
                "removeNodes": list(self.remove_nodes),
                "newNodeZones": dict(self.new_node_zones),
                "newNodeOfferings": [o.to_dict() for o in self.new_node_offerings],
                "awaitNominationsSeconds": self.await_nominations_seconds,
            }
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScaleRequestStatus:
    """The NodePool controller's answer; a request without status yet reads as Pending."""

    phase: Phase = "Pending"
    observed_generation: int = 0
    applied_target_nodes: int | None = None
    message: str | None = None
    # Every node ``spec.newNodeZones`` asked for is a Node made since, in its zone: the
    # zones steer no later launch, even when one of those Nodes goes (``api.zones``).
    # None until then: the NodePool controller writes only true.
    zones_served: bool | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ScaleRequestStatus:
        return cls(
            phase=fields.choice(d, "phase", choices=PHASES, default="Pending"),
            observed_generation=fields.integer(d, "observedGeneration", default=0),
            applied_target_nodes=fields.optional_integer(d, "appliedTargetNodes"),
            message=fields.optional_string(d, "message"),
            zones_served=(
                fields.boolean(d, "zonesServed", default=False) if "zonesServed" in d else None
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        return fields.compact(
            {
                "phase": self.phase,
                "observedGeneration": self.observed_generation,
                "appliedTargetNodes": self.applied_target_nodes,
                "message": self.message,
                "zonesServed": self.zones_served,
            }
        )


def spec_of(obj: Mapping[str, Any]) -> ScaleRequestSpec:
    """The typed spec of a ScaleRequest object (a dict as the API returns it)."""
    return fields.nested(obj, "spec", parse=ScaleRequestSpec.from_dict)


def status_of(obj: Mapping[str, Any]) -> ScaleRequestStatus:
    """The typed status of a ScaleRequest object; Pending when it has none yet."""
    return fields.nested(obj, "status", parse=ScaleRequestStatus.from_dict)


#: The sort key of a request by when it was made, oldest first: creationTimestamp, then
#: resourceVersion as a number, then the name (``runtime.versions.creation_order``, which
#: the callers compute: this layer does not read resourceVersions).
Order = tuple[str, int, str]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RequestFacts:
    """What the rule needs of one ScaleRequest (one not being deleted)."""

    name: str
    order: Order
    phase: Phase
    target_nodes: int
    based_on_target_nodes: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Answer:
    """The status one Pending request gets."""

    name: str
    phase: Phase
    applied_target_nodes: int | None
    message: str

    def status(self, *, observed_generation: int) -> ScaleRequestStatus:
        return ScaleRequestStatus(
            phase=self.phase,
            observed_generation=observed_generation,
            applied_target_nodes=self.applied_target_nodes,
            message=self.message,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Outcome:
    """What a pool's Pending requests do: its target after them, and their answers
    (oldest first; the newest request's answer is the last)."""

    target_nodes: int
    answers: tuple[Answer, ...]

    @property
    def decisive(self) -> Answer | None:
        """The answer of the newest request, the one that decided the target."""
        return self.answers[-1] if self.answers else None


def missing_pool(pool_name: str) -> str:
    """Why a request for ``pool_name`` is Rejected when there is no such pool."""
    return f"NodePool {pool_name!r} does not exist"


def answer_requests(requests: Sequence[RequestFacts], *, pool: nodepool.NodePoolSpec) -> Outcome:
    """What the Pending ones of ``requests`` do to the pool whose spec is ``pool``.

    Order: oldest first by ``RequestFacts.order``; the newest Pending request decides and
    every older one is Superseded (targets are absolute: the newest already includes what
    the older asked for). Basis: a newest request computed from another target than the
    pool's (``basedOnTargetNodes``; the user scaled in between) is Superseded and changes
    nothing. Bounds: the target becomes the request's within [minNodes, maxNodes]; a
    request that a limit leaves without effect is Rejected with the limit named.
    """
    pending = _pending(requests)
    if not pending:
        return Outcome(target_nodes=pool.target_nodes, answers=())
    newest = pending[-1]
    older = tuple(
        Answer(
            name=r.name,
            phase="Superseded",
            applied_target_nodes=None,
            message=f"superseded by {newest.name}",
        )
        for r in pending[:-1]
    )
    decided = _answer_one(newest, pool)
    target = (
        pool.target_nodes if decided.applied_target_nodes is None else decided.applied_target_nodes
    )
    return Outcome(target_nodes=target, answers=(*older, decided))


def reject_requests(requests: Sequence[RequestFacts], *, pool_name: str) -> tuple[Answer, ...]:
    """The answers of the Pending ones of ``requests`` when their pool does not exist."""
    message = missing_pool(pool_name)
    return tuple(
        Answer(name=r.name, phase="Rejected", applied_target_nodes=None, message=message)
        for r in _pending(requests)
    )


def _pending(requests: Sequence[RequestFacts]) -> list[RequestFacts]:
    return sorted((r for r in requests if r.phase == "Pending"), key=lambda r: r.order)


def _answer_one(request: RequestFacts, pool: nodepool.NodePoolSpec) -> Answer:
    """A scale-up never lowers the target, a scale-down never goes below minNodes; a
    Rejected answer reports the target the pool kept, a Superseded one nothing."""
    current, requested = pool.target_nodes, request.target_nodes
    based_on = request.based_on_target_nodes
    if based_on is not None and based_on != current:
        message = (
            f"based on targetNodes={based_on}, but the pool's targetNodes is now {current}; "
            "not applied"
        )
        return Answer(
            name=request.name, phase="Superseded", applied_target_nodes=None, message=message
        )
    new = nodepool.within_bounds(
        max(current, requested) if requested >= current else requested,
        min_nodes=pool.min_nodes,
        max_nodes=pool.max_nodes,
    )
    if new == current and requested > current:
        message = f"pool is at maxNodes={pool.max_nodes}; cannot grow"
    elif new == current and requested < current:
        message = f"pool is at minNodes={pool.min_nodes}; cannot shrink"
    else:
        clamped = (
            " (clamped to maxNodes)"
            if new < requested
            else " (clamped to minNodes)"
            if new > requested
            else ""
        )
        message = f"targetNodes {current} -> {new}{clamped}"
        return Answer(name=request.name, phase="Applied", applied_target_nodes=new, message=message)
    return Answer(
        name=request.name, phase="Rejected", applied_target_nodes=current, message=message
    )


def manifest(name: str, spec: ScaleRequestSpec, *, pool_uid: str | None = None) -> dict[str, Any]:
    """A ScaleRequest object ready to be created.

    It carries the pool label, so that a pool's requests can be listed with a label
    selector; with ``pool_uid`` it is also owned by its NodePool, so that the garbage
    collector deletes it with the pool.
    """
    metadata: dict[str, Any] = {
        "name": name,
        "labels": {wellknown.POOL_LABEL: spec.node_pool_name},
    }
    if pool_uid is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": nodepool.API_VERSION,
                "kind": nodepool.KIND,
                "name": spec.node_pool_name,
                "uid": pool_uid,
            }
        ]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec.to_dict()}


SPEC_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": "The request. Immutable once created.",
    "required": ["nodePoolName", "targetNodes"],
    "properties": {
        "nodePoolName": {
            **nodepool_schema.POOL_NAME_SCHEMA,
            "description": "Name of the NodePool to scale.",
        },
        "targetNodes": {
            "type": "integer",
            "description": "The absolute number of Nodes asked for.",
            "format": "int32",
            "minimum": 0,
            "maximum": nodepool.MAX_NODES_PER_POOL,
        },
        "basedOnTargetNodes": {
            "type": "integer",
            "description": (
                "The pool's spec.targetNodes this request was computed from; if the pool's "
                "target differs when the request is handled, it is Superseded, not applied."
            ),
            "format": "int32",
            "minimum": 0,
        },
        "reason": {
            "type": "string",
            "description": "Why the Nodes are needed, for people reading the request.",
            "maxLength": 1024,
        },
        "requester": {
            "type": "string",
            "description": "Who asks, for example the name of an Autoscaler.",
            "maxLength": MAX_REQUESTER_LENGTH,
        },
        "removeNodes": {
            "type": "array",
            "description": (
                "The Nodes to remove, when the requester chose them (a scale-down only): the "
                "NodePool controller drains exactly these, and rejects the request if one is "
                "gone or not in the pool."
            ),
            "maxItems": MAX_REMOVE_NODES,
            "x-kubernetes-list-type": "set",
            "items": {"type": "string", "minLength": 1, "maxLength": 253},
        },
        "newNodeZones": {
            "type": "object",
            "description": (
                "Where new Nodes go (a scale-up only): how many in each zone of the pool's "
                "template. New Nodes not named here, or named in a zone the template does "
                "not list or that is backed off, go to the zone with the fewest of the "
                "pool's Nodes. targetNodes alone sets how many Nodes the pool has."
            ),
            "maxProperties": MAX_NEW_NODE_ZONES,
            "additionalProperties": {
                "type": "integer",
                "format": "int32",
                "minimum": 1,
                "maximum": nodepool.MAX_NODES_PER_POOL,
            },
        },
        "newNodeOfferings": {
            "type": "array",
            "description": (
                "Which catalog offerings the new Nodes are (a scale-up of a pool with "
                "requirements): how many of each instance type in each zone as each "
                "capacity type. The NodePool controller launches exactly these; one the "
                "cloud refuses for capacity falls back to the next cheapest the pool allows, "
                "and the answer says so. targetNodes alone sets how many Nodes the pool has."
            ),
            "maxItems": MAX_NEW_NODE_OFFERINGS,
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["instanceType", "zone", "capacityType"],
            "items": {
                "type": "object",
                "required": ["instanceType", "zone", "capacityType", "count"],
                "properties": {
                    "instanceType": {
                        **nodepool_schema.TOPOLOGY_NAME_SCHEMA,
                        "description": "The instance type, as the catalog names it.",
                    },
                    "zone": {
                        **nodepool_schema.TOPOLOGY_NAME_SCHEMA,
                        "description": "The zone the offering is sold in.",
                    },
                    "capacityType": {
                        "type": "string",
                        "description": "on-demand or spot.",
                        "enum": list(wellknown.CAPACITY_TYPES),
                    },
                    "count": {
                        "type": "integer",
                        "description": "How many new Nodes of this offering.",
                        "format": "int32",
                        "minimum": 1,
                        "maximum": nodepool.MAX_NODES_PER_POOL,
                    },
                },
            },
        },
        "awaitNominationsSeconds": {
            "type": "integer",
            "description": (
                "A scale-up: the Nodes made for it keep the nodepool.dev/unregistered taint "
                "after their kubelet reports Ready, until the requester has set "
                "status.nominatedNodeName on the pending pods it planned there and marked "
                "the Node nodepool.dev/nominated, or until this many seconds after the "
                "Node turned Ready. Absent or 0: no wait."
            ),
            "format": "int32",
            "minimum": 0,
            "maximum": MAX_AWAIT_NOMINATIONS_SECONDS,
        },
    },
    # Every string is bounded above, which keeps the estimated cost of comparing two
    # specs far below the server's per-rule CEL budget.
    "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "spec is immutable"}],
}

STATUS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": "The NodePool controller's answer. Written only by that controller.",
    "properties": {
        "phase": {
            "type": "string",
            "description": "Pending until the NodePool controller has decided.",
            "enum": list(PHASES),
            "default": "Pending",
        },
        "observedGeneration": {
            "type": "integer",
            "description": "The metadata.generation this status was computed for.",
            "format": "int64",
            "minimum": 0,
            "default": 0,
        },
        "appliedTargetNodes": {
            "type": "integer",
            "description": "The targetNodes actually set on the pool (it may be clamped).",
            "format": "int32",
            "minimum": 0,
        },
        "message": {
            "type": "string",
            "description": "Why the request was applied, rejected or superseded.",
            "maxLength": 32768,
        },
        "zonesServed": {
            "type": "boolean",
            "description": "Every node newNodeZones asked for is a Node made since, in its"
            " zone: the zones steer no later launch.",
        },
    },
}

SCHEMA: Final[dict[str, Any]] = meta.root_schema(
    description="A request to set the number of Nodes of a NodePool.",
    spec=SPEC_SCHEMA,
    status=STATUS_SCHEMA,
    spec_required=True,
)

SUBRESOURCES: Final[dict[str, Any]] = {"status": {}}

PRINTER_COLUMNS: Final[list[dict[str, Any]]] = [
    {"name": "Pool", "type": "string", "jsonPath": ".spec.nodePoolName"},
    {"name": "Target", "type": "integer", "jsonPath": ".spec.targetNodes"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    meta.AGE_COLUMN,
]


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition of ScaleRequest (a fresh copy)."""
    return meta.custom_resource_definition(
        kind=KIND,
        plural=PLURAL,
        singular=SINGULAR,
        short_names=SHORT_NAMES,
        schema=SCHEMA,
        subresources=SUBRESOURCES,
        printer_columns=PRINTER_COLUMNS,
    )
