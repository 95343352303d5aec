"""NodePool (``np``): a set of identical Nodes, and how many of them there should be.

The user (or GitOps, or ``kubectl scale``) owns ``spec``; the NodePool controller is the
one writer of ``status`` and the one that turns accepted ScaleRequests into
``spec.targetNodes``. Every Node of a pool carries the label ``wellknown.POOL_LABEL=<pool name>``,
which is also what ``status.selector`` says, so that the ``/scale`` subresource (and an
HPA) can find the pool's Nodes.

What a Node of the pool looks like (its capacity, allocatable and labels) is computed
here once, by ``template_capacity``, ``template_allocatable`` and ``node_labels`` (its zone
is its VM's, chosen by ``api.zones``): the NodePool controller registers Nodes with them
and the Autoscaler simulates Nodes that do not exist yet with them, so the two always agree.

The types, their defaults and bounds are here; the CRD schema the API server validates
them with is ``api.nodepool_schema``, and the labels, taints and annotations on a pool's
Nodes are ``api.wellknown``. The schema and the dataclasses are two views of one contract;
the unit tests prove they agree field by field, type by type, and default by default.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final, Literal, get_args

from nodepool_operator.api import disruption as disruption_api
from nodepool_operator.api import (
    fields,
    launch,
    meta,
    quantity,
    requirements,
    wellknown,
)

__all__ = [
    "API_VERSION",
    "BACKOFF_REASONS",
    "DEFAULT_CPU",
    "DEFAULT_MAX_NODES",
    "DEFAULT_MEMORY",
    "DEFAULT_MIN_NODES",
    "DEFAULT_NOT_READY_TIMEOUT_SECONDS",
    "DEFAULT_PODS",
    "DEFAULT_REGISTRATION_TIMEOUT_SECONDS",
    "DEFAULT_TARGET_NODES",
    "DEFAULT_WEIGHT",
    "GROUP",
    "KIND",
    "MAX_NODES_PER_POOL",
    "MAX_PAUSE_MESSAGE",
    "MAX_TEMPLATE_LABELS",
    "MAX_TEMPLATE_TAINTS",
    "MAX_WEIGHT",
    "MAX_ZONE_BACKOFFS",
    "PLURAL",
    "SCALE_OPERATIONS",
    "SHORT_NAMES",
    "SINGULAR",
    "TAINT_EFFECTS",
    "VERSION",
    "BackoffReason",
    "CloudPause",
    "Limits",
    "NodePoolSpec",
    "NodePoolStatus",
    "NodeTemplate",
    "ReportedAllocatable",
    "ScaleOperation",
    "Taint",
    "TaintEffect",
    "ZoneBackoff",
    "amount_of",
    "is_settled",
    "manifest",
    "names_taken",
    "node_labels",
    "quantity_texts",
    "spec_of",
    "status_of",
    "template_allocatable",
    "template_capacity",
    "vm_names",
    "within_bounds",
]

GROUP: Final = meta.GROUP
VERSION: Final = meta.VERSION
API_VERSION: Final = meta.API_VERSION
KIND: Final = "NodePool"
PLURAL: Final = "nodepools"
SINGULAR: Final = "nodepool"
SHORT_NAMES: Final = ("np",)


DEFAULT_TARGET_NODES: Final = 0
DEFAULT_MIN_NODES: Final = 0
DEFAULT_MAX_NODES: Final = 10
DEFAULT_CPU: Final = "4"
DEFAULT_MEMORY: Final = "16Gi"
DEFAULT_PODS: Final = 110
DEFAULT_WEIGHT: Final = 0
MAX_WEIGHT: Final = 100
DEFAULT_NOT_READY_TIMEOUT_SECONDS: Final = 600
# The most Nodes one pool may ask for (targetNodes, minNodes, maxNodes): the server
# refuses more, so a typo such as 2147483647 never makes the operator plan 2^31 VMs.
MAX_NODES_PER_POOL: Final = 1000
# Few enough that the server's estimated cost of the CEL rule checking every key stays
# within its budget; a Node's labels are a handful.
MAX_TEMPLATE_LABELS: Final = 64
MAX_TEMPLATE_TAINTS: Final = 32
DEFAULT_REGISTRATION_TIMEOUT_SECONDS: Final = 900

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
TAINT_EFFECTS: Final[tuple[TaintEffect, ...]] = get_args(TaintEffect)

ScaleOperation = Literal["inactive", "active"]
SCALE_OPERATIONS: Final[tuple[ScaleOperation, ...]] = get_args(ScaleOperation)


def within_bounds(nodes: int, *, min_nodes: int, max_nodes: int) -> int:
    """``nodes`` brought within [minNodes, maxNodes] (minNodes wins if they cross).

    The one rule for a pool's node count: the NodePool controller applies it to
    ``targetNodes`` and to every ScaleRequest it applies, and the Autoscaler applies it
    when it predicts what a request it handed over will set.
    """
    return max(min_nodes, min(nodes, max_nodes))


def node_labels(pool: str, template: NodeTemplate, *, zone: str | None = None) -> dict[str, str]:
    """The labels a Node of the pool carries (its own hostname label aside).

    ``zone`` is the Node's zone (its VM's, as the cloud reports it); the region label comes from
    the template. The NodePool controller puts these labels on the Nodes it registers,
    and the Autoscaler matches pods' node selectors and topology keys against them, so
    the two always agree.
    """
    labels = {
        wellknown.OS_LABEL: wellknown.DEFAULT_OS,
        wellknown.ARCH_LABEL: wellknown.DEFAULT_ARCH,
        **template.labels,  # may set the os and architecture, not the operator's own labels
        wellknown.POOL_LABEL: pool,
    }
    if zone is not None:
        labels[wellknown.ZONE_LABEL] = zone
    if template.region is not None:
        labels[wellknown.REGION_LABEL] = template.region
    return labels


def vm_names(pool: str, taken: Iterable[str]) -> Iterator[str]:
    """The names of the pool's next VMs, in the order they are created: ``<pool>-<index>``,
    lowest free index first.

    ``taken`` is every name that is not free (``names_taken``): the pool's own VMs, and
    the names held by something the pool does not own. The NodePool controller creates
    VMs by these names (a retry or a restart asks for the same ones, so the cloud's
    idempotent create makes no duplicate), and the Autoscaler names its new nodes by them:
    one rule, so the two never disagree on a node's name (its zone is the cloud's record,
    ``api.zones``).
    """
    used = set(taken)
    for index in itertools.count():
        name = f"{pool}-{index}"
        if name not in used:
            yield name


def names_taken(
    *, own: Iterable[str], nodes: Iterable[Mapping[str, Any]] = (), held: Iterable[str] = ()
) -> set[str]:
    """The names ``vm_names`` must not give: a name is free only when neither the pool nor
    anything else has it.

    ``own``: the pool's VMs (any state) or, for a planner that sees no cloud, its Nodes.
    ``nodes``: Nodes of the cluster, any of them (one of the pool's own is in ``own``
    anyway; one it does not own holds its name for good, so the pool skips that index).
    ``held``: names the cloud reports held by a VM of another pool or cluster. What is
    taken follows from the world alone, so a restarted operator skips the same names.
    """
    taken = set(own)
    taken.update(str((node.get("metadata") or {}).get("name", "")) for node in nodes)
    taken.update(held)
    taken.discard("")
    return taken


def _whole(text: str, what: str) -> int:
    value = quantity.parse_quantity(text)
    if value < 0 or value.denominator != 1:
        raise ValueError(f"{what}: {text!r} is not a whole non-negative number")
    return int(value)


def amount_of(resource: str, text: str) -> int:
    """A quantity in the integer unit ``template_capacity`` uses for ``resource``
    (ValueError when it is not one: malformed, or a count that is not whole)."""
    if resource == "cpu":
        return quantity.parse_cpu_millicores(text)
    if resource in ("memory", "ephemeral-storage"):
        return quantity.parse_memory_bytes(text)
    return _whole(text, resource)


def template_capacity(template: NodeTemplate) -> dict[str, int]:
    """The capacity of one Node of the template, by resource name, in integer units.

    ``cpu`` in millicores, ``memory`` and ``ephemeral-storage`` (only when the template
    sets it) in bytes, ``pods`` and each extended resource as counts. Raises
    ``ValueError`` for an extended resource that is not a whole number (the CRD refuses
    those).
    """
    capacity = {
        "cpu": template.cpu_millicores,
        "memory": template.memory_bytes,
        "pods": template.pods,
    }
    if template.ephemeral_storage is not None:
        capacity["ephemeral-storage"] = amount_of("ephemeral-storage", template.ephemeral_storage)
    for name, text in template.extended_resources.items():
        capacity[name] = _whole(text, f"extendedResources[{name}]")
    return capacity


def template_allocatable(template: NodeTemplate) -> dict[str, int]:
    """What pods may use on one Node of the template: capacity minus ``reserved``.

    As kubelet computes ``status.allocatable`` from its system-reserved: never below
    zero, and a reserve for a resource the template does not have is ignored (the CRD
    refuses both).
    """
    capacity = template_capacity(template)
    allocatable = dict(capacity)
    for name, text in template.reserved.items():
        if name in capacity:
            allocatable[name] = max(0, capacity[name] - amount_of(name, text))
    return allocatable


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
            key=fields.required_string(d, "key"),
            effect=fields.choice(d, "effect", choices=TAINT_EFFECTS, default=None),
            value=fields.optional_string(d, "value"),
        )

    def to_dict(self) -> dict[str, Any]:
        return fields.compact({"key": self.key, "value": self.value, "effect": self.effect})


@dataclasses.dataclass(frozen=True, kw_only=True)
class NodeTemplate:
    """The shape of one Node of the pool: its capacity, reserve, zones, labels and taints.

    Quantities keep their text as written; ``template_capacity`` and
    ``template_allocatable`` give the exact integer values to compute with. Values
    compare by equality but are not hashable, because ``labels`` is a mapping.
    """

    cpu: str = DEFAULT_CPU
    memory: str = DEFAULT_MEMORY
    pods: int = DEFAULT_PODS
    ephemeral_storage: str | None = None
    extended_resources: Mapping[str, str] = dataclasses.field(default_factory=dict)
    reserved: Mapping[str, str] = dataclasses.field(default_factory=dict)
    zones: tuple[str, ...] = ()
    region: str | None = None
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    # Taints a Node starts with and an agent on it (CNI, CSI) removes once it is ready:
    # put on the Node at registration, ignored when planning where pods go.
    startup_taints: tuple[Taint, ...] = ()
    provider: launch.ProviderSection | None = None

    @property
    def cpu_millicores(self) -> int:
        return quantity.parse_cpu_millicores(self.cpu)

    @property
    def memory_bytes(self) -> int:
        return quantity.parse_memory_bytes(self.memory)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodeTemplate:
        return cls(
            cpu=fields.quantity(d, "cpu", default=DEFAULT_CPU),
            memory=fields.quantity(d, "memory", default=DEFAULT_MEMORY),
            pods=fields.integer(d, "pods", default=DEFAULT_PODS),
            ephemeral_storage=fields.optional_quantity(d, "ephemeralStorage"),
            extended_resources=fields.quantity_map(d, "extendedResources"),
            reserved=fields.quantity_map(d, "reserved"),
            zones=fields.string_list(d, "zones"),
            region=fields.optional_string(d, "region"),
            labels=fields.string_map(d, "labels"),
            taints=fields.nested_list(d, "taints", parse=Taint.from_dict),
            startup_taints=fields.nested_list(d, "startupTaints", parse=Taint.from_dict),
            provider=fields.optional_nested(d, "provider", parse=launch.ProviderSection.from_dict),
        )

    def to_dict(self) -> dict[str, Any]:
        d = fields.compact(
            {
                "cpu": self.cpu,
                "memory": self.memory,
                "pods": self.pods,
                "ephemeralStorage": self.ephemeral_storage,
                "extendedResources": dict(self.extended_resources),
                "reserved": dict(self.reserved),
                "zones": list(self.zones),
                "region": self.region,
                "labels": dict(self.labels),
                "taints": [t.to_dict() for t in self.taints],
                "startupTaints": [t.to_dict() for t in self.startup_taints],
            }
        )
        if self.provider is not None:
            # Even when empty: an empty section still reads back as a section, not None.
            d["provider"] = self.provider.to_dict()
        return d


@dataclasses.dataclass(frozen=True, kw_only=True)
class Limits:
    """The most the pool's Nodes may have in total, beside ``maxNodes``: a launch that
    would take their capacity beyond either is refused (Karpenter's NodePool limits).
    None: no limit on that resource."""

    cpu: str | None = None
    memory: str | None = None

    def exceeded(self, *, cpu_millicores: int, memory_bytes: int) -> str | None:
        """Which limit nodes of that total capacity exceed, in words, or None."""
        if self.cpu is not None and cpu_millicores > quantity.parse_cpu_millicores(self.cpu):
            return f"limits.cpu={self.cpu} (the nodes would have {cpu_millicores}m)"
        if self.memory is not None and memory_bytes > quantity.parse_memory_bytes(self.memory):
            return f"limits.memory={self.memory} (the nodes would have {memory_bytes} bytes)"
        return None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Limits:
        return cls(
            cpu=fields.optional_quantity(d, "cpu"), memory=fields.optional_quantity(d, "memory")
        )

    def to_dict(self) -> dict[str, Any]:
        return fields.compact({"cpu": self.cpu, "memory": self.memory})


def _expire_after(d: Mapping[str, Any]) -> str:
    text = fields.string(d, "expireAfter", default=disruption_api.NEVER)
    try:
        disruption_api.parse_expire_after(text)
    except ValueError as e:
        raise fields.FieldError("expireAfter", str(e)) from e
    return text


@dataclasses.dataclass(frozen=True, kw_only=True)
class NodePoolSpec:
    """What the user asks for: how many Nodes, within which bounds, of which shape.

    ``weight`` ranks pools that could all host a pod: the Autoscaler prefers the highest
    (as Karpenter's NodePool weight).

    ``drain_timeout_seconds``: once a Node has been draining this long, the pods still on
    it are deleted (their grace period capped to what is left) and the Node goes, as
    Karpenter's ``terminationGracePeriod``; None, a drain is never forced.
    ``not_ready_timeout_seconds``: a Node NotReady this long is replaced.
    ``registration_timeout_seconds``: a VM Running without a Ready Node this long is
    replaced.
    ``disruption``: the budgets that cap how many Nodes are disrupted at once
    (``api.disruption``); ``expire_after``: how long a Node lives before it is replaced
    (``"720h"``; ``"Never"``, the default, for ever).
    """

    target_nodes: int = DEFAULT_TARGET_NODES
    min_nodes: int = DEFAULT_MIN_NODES
    max_nodes: int = DEFAULT_MAX_NODES
    weight: int = DEFAULT_WEIGHT
    drain_timeout_seconds: int | None = None
    not_ready_timeout_seconds: int = DEFAULT_NOT_READY_TIMEOUT_SECONDS
    registration_timeout_seconds: int = DEFAULT_REGISTRATION_TIMEOUT_SECONDS
    template: NodeTemplate = dataclasses.field(default_factory=NodeTemplate)
    # Which catalog offerings the pool's Nodes may be (``api.requirements``); none: every
    # Node has the template's shape, as a pool without them always had.
    requirements: requirements.Requirements = dataclasses.field(
        default_factory=requirements.Requirements
    )
    limits: Limits | None = None
    disruption: disruption_api.Disruption = dataclasses.field(
        default_factory=disruption_api.Disruption
    )
    expire_after: str = disruption_api.NEVER

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodePoolSpec:
        return cls(
            target_nodes=fields.integer(d, "targetNodes", default=DEFAULT_TARGET_NODES),
            min_nodes=fields.integer(d, "minNodes", default=DEFAULT_MIN_NODES),
            max_nodes=fields.integer(d, "maxNodes", default=DEFAULT_MAX_NODES),
            weight=fields.integer(d, "weight", default=DEFAULT_WEIGHT),
            drain_timeout_seconds=fields.optional_integer(d, "drainTimeoutSeconds"),
            not_ready_timeout_seconds=fields.integer(
                d, "notReadyTimeoutSeconds", default=DEFAULT_NOT_READY_TIMEOUT_SECONDS
            ),
            registration_timeout_seconds=fields.integer(
                d, "registrationTimeoutSeconds", default=DEFAULT_REGISTRATION_TIMEOUT_SECONDS
            ),
            template=fields.nested(d, "template", parse=NodeTemplate.from_dict),
            requirements=requirements.Requirements(
                fields.nested_list(d, "requirements", parse=requirements.Requirement.from_dict)
            ),
            limits=fields.optional_nested(d, "limits", parse=Limits.from_dict),
            disruption=fields.nested(d, "disruption", parse=disruption_api.Disruption.from_dict),
            expire_after=_expire_after(d),
        )

    def to_dict(self) -> dict[str, Any]:
        return fields.compact(
            {
                "targetNodes": self.target_nodes,
                "minNodes": self.min_nodes,
                "maxNodes": self.max_nodes,
                "weight": self.weight,
                "drainTimeoutSeconds": self.drain_timeout_seconds,
                "notReadyTimeoutSeconds": self.not_ready_timeout_seconds,
                "registrationTimeoutSeconds": self.registration_timeout_seconds,
                "template": self.template.to_dict(),
                "requirements": self.requirements.to_list(),
                "limits": None if self.limits is None else self.limits.to_dict(),
                "disruption": self.disruption.to_dict(),
                "expireAfter": self.expire_after,
            }
        )


#: The reasons a zone of a pool is backed off: the cloud had no capacity there, or a VM
#: launched there never got a Ready Node within ``registrationTimeoutSeconds``.
BackoffReason = Literal["InsufficientCapacity", "RegistrationTimeout"]
BACKOFF_REASONS: Final[tuple[BackoffReason, ...]] = get_args(BackoffReason)
#: The most zone backoffs a pool's status holds (one per zone and shape).
MAX_ZONE_BACKOFFS: Final = 32
#: The longest refusal message a pool's cloud pause keeps.
MAX_PAUSE_MESSAGE: Final = 1024


@dataclasses.dataclass(frozen=True, kw_only=True)
class ZoneBackoff:
    """A zone where the pool's VMs are not launched until ``until`` (RFC 3339).

    ``zone`` is empty when the VM's zone was the cloud's to choose (a pool without zones):
    then the whole pool waits. ``shape`` is the machine the cloud had no room for, as the
    provider names it (empty if it did not say). ``failures`` counts the refusals in a
    row: each doubles the wait, from one minute up to thirty.

    ``instance_type`` and ``capacity_type`` (a pool with requirements): only that catalog
    offering, in ``zone``, is backed off; the pool's other offerings there are not.
    """

    zone: str = ""
    shape: str = ""
    reason: BackoffReason
    failures: int
    until: str
    message: str = ""
    instance_type: str | None = None
    capacity_type: wellknown.CapacityType | None = None

    @property
    def is_offering(self) -> bool:
        """Backs off one offering, not the zone."""
        return self.instance_type is not None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ZoneBackoff:
        return cls(
            zone=fields.string(d, "zone", default=""),
            shape=fields.string(d, "shape", default=""),
            reason=fields.choice(d, "reason", choices=BACKOFF_REASONS, default=None),
            failures=fields.required_integer(d, "failures"),
            until=fields.required_string(d, "until"),
            message=fields.string(d, "message", default=""),
            instance_type=fields.optional_string(d, "instanceType"),
            capacity_type=(
                fields.choice(d, "capacityType", choices=wellknown.CAPACITY_TYPES, default=None)
                if d.get("capacityType") is not None
                else None
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "zone": self.zone,
            "shape": self.shape,
            "reason": self.reason,
            "failures": self.failures,
            "until": self.until,
            "message": self.message,
        } | fields.compact({"instanceType": self.instance_type, "capacityType": self.capacity_type})


@dataclasses.dataclass(frozen=True, kw_only=True)
class CloudPause:
    """The pool's VM creations paused until ``until`` (RFC 3339) after a refusal that
    asking again would not change: the cloud's (quota, an invalid machine) or the API
    server's 422 on a Node create.

    ``reason`` is the refusal's code (``QuotaExceeded``, ``NodeInvalid``, ...).
    ``failures`` counts the refusals in a row under ``generation`` (the pool's
    ``metadata.generation`` when it was recorded): each doubles the wait; a new
    generation (the user changed the spec) ends the pause at once.
    """

    reason: str
    message: str = ""
    failures: int
    until: str
    generation: int

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CloudPause:
        return cls(
            reason=fields.required_string(d, "reason"),
            message=fields.string(d, "message", default=""),
            failures=fields.required_integer(d, "failures"),
            until=fields.required_string(d, "until"),
            generation=fields.required_integer(d, "generation"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "message": self.message,
            "failures": self.failures,
            "until": self.until,
            "generation": self.generation,
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReportedAllocatable:
    """What the pool's kubelets report against its template's allocatable.

    ``template_allocatable``: the template's allocatable these reports were measured against (as
    ``quantity_texts`` writes it); a template whose figures differ starts a new record.
    ``since`` (RFC 3339): when that template was first seen; Nodes created before it are
    of an earlier template and do not count (None: every Node of the pool counts).
    ``lowest``: per resource, the lower median of what the pool's Ready Nodes report
    (kept as it was while none is Ready), only where it is below the template's figure.
    """

    template_allocatable: Mapping[str, str]
    since: str | None = None
    lowest: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ReportedAllocatable:
        return cls(
            template_allocatable=fields.string_map(d, "templateAllocatable"),
            since=fields.optional_string(d, "since"),
            lowest=fields.string_map(d, "lowest"),
        )

    def to_dict(self) -> dict[str, Any]:
        # The template figures stay even when empty: they are what the record is about.
        return {"templateAllocatable": dict(self.template_allocatable)} | fields.compact(
            {"since": self.since, "lowest": dict(self.lowest)}
        )


def quantity_texts(amounts: Mapping[str, int]) -> dict[str, str]:
    """Amounts in ``template_capacity``'s units as the quantity text a Node carries:
    cpu in millicores ("3500m"), everything else a plain integer (bytes or a count)."""
    return {
        resource: f"{amount}m" if resource == "cpu" else str(amount)
        for resource, amount in amounts.items()
    }


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
    zone_backoffs: tuple[ZoneBackoff, ...] = ()
    cloud_pause: CloudPause | None = None
    reported_allocatable: ReportedAllocatable | None = None
    # What the pool's Nodes cost per hour, by their offerings' catalog prices (a pool with
    # requirements, when the cloud has a catalog); None: not known.
    cost_per_hour: float | None = None
    # How many of the pool's Nodes differ from its spec (``api.drift``); None: none.
    drifted_nodes: int | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodePoolStatus:
        return cls(
            observed_generation=fields.integer(d, "observedGeneration", default=0),
            scale_operation=fields.choice(
                d, "scaleOperation", choices=SCALE_OPERATIONS, default="inactive"
            ),
            current_nodes=fields.integer(d, "currentNodes", default=0),
            ready_nodes=fields.integer(d, "readyNodes", default=0),
            selector=fields.optional_string(d, "selector"),
            conditions=fields.nested_list(d, "conditions", parse=meta.Condition.from_dict),
            zone_backoffs=fields.nested_list(d, "zoneBackoffs", parse=ZoneBackoff.from_dict),
            cloud_pause=fields.optional_nested(d, "cloudPause", parse=CloudPause.from_dict),
            reported_allocatable=fields.optional_nested(
                d, "reportedAllocatable", parse=ReportedAllocatable.from_dict
            ),
            cost_per_hour=fields.optional_number(d, "costPerHour"),
            drifted_nodes=fields.optional_integer(d, "driftedNodes"),
        )

    def to_dict(self) -> dict[str, Any]:
        return fields.compact(
            {
                "observedGeneration": self.observed_generation,
                "scaleOperation": self.scale_operation,
                "currentNodes": self.current_nodes,
                "readyNodes": self.ready_nodes,
                "selector": self.selector,
                "conditions": [c.to_dict() for c in self.conditions],
                "zoneBackoffs": [b.to_dict() for b in self.zone_backoffs] or None,
                "cloudPause": None if self.cloud_pause is None else self.cloud_pause.to_dict(),
                "reportedAllocatable": (
                    None
                    if self.reported_allocatable is None
                    else self.reported_allocatable.to_dict()
                ),
                "costPerHour": self.cost_per_hour,
                "driftedNodes": self.drifted_nodes,
            }
        )


def spec_of(obj: Mapping[str, Any]) -> NodePoolSpec:
    """The typed spec of a NodePool object (a dict as the API returns it)."""
    return fields.nested(obj, "spec", parse=NodePoolSpec.from_dict)


def status_of(obj: Mapping[str, Any]) -> NodePoolStatus:
    """The typed status of a NodePool object; all defaults when it has none yet."""
    return fields.nested(obj, "status", parse=NodePoolStatus.from_dict)


def manifest(name: str, spec: NodePoolSpec) -> dict[str, Any]:
    """A NodePool object ready to be created."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name},
        "spec": spec.to_dict(),
    }
