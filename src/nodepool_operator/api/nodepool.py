"""NodePool (``np``): a set of identical Nodes, and how many of them there should be.

The user (or GitOps, or ``kubectl scale``) owns ``spec``; the NodePool controller is the
one writer of ``status`` and the one that turns accepted ScaleRequests into
``spec.targetNodes``. Every Node of a pool carries the label ``POOL_LABEL=<pool name>``,
which is also what ``status.selector`` says, so that the ``/scale`` subresource (and an
HPA) can find the pool's Nodes.

What a Node of the pool looks like (its capacity, allocatable and labels) is computed
here once, by ``template_capacity``, ``template_allocatable`` and ``node_labels`` (its zone
is its VM's, chosen by ``api.zones``): the NodePool controller registers Nodes with them
and the Autoscaler simulates Nodes that do not exist yet with them, so the two always agree.

The CRD schema below and the dataclasses are two views of one contract; the unit tests
prove they agree field by field, type by type, and default by default.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final, Literal, get_args

from nodepool_operator.api import fields, launch, meta, quantity

__all__ = [
    "API_VERSION",
    "ARCHITECTURES",
    "ARCH_LABEL",
    "BACKOFF_REASONS",
    "DEFAULT_ARCH",
    "DEFAULT_CPU",
    "DEFAULT_MAX_NODES",
    "DEFAULT_MEMORY",
    "DEFAULT_MIN_NODES",
    "DEFAULT_NOT_READY_TIMEOUT_SECONDS",
    "DEFAULT_OS",
    "DEFAULT_PODS",
    "DEFAULT_REGISTRATION_TIMEOUT_SECONDS",
    "DEFAULT_TARGET_NODES",
    "DEFAULT_WEIGHT",
    "DISRUPTION_ANNOTATIONS",
    "DO_NOT_DISRUPT_ANNOTATION",
    "EXTENDED_RESOURCE_NAME_PATTERN",
    "GROUP",
    "HOSTNAME_LABEL",
    "KARPENTER_DO_NOT_DISRUPT_ANNOTATION",
    "KIND",
    "LABEL_KEY_PATTERN",
    "LABEL_VALUE_PATTERN",
    "MAX_LABEL_VALUE_LENGTH",
    "MAX_NODES_PER_POOL",
    "MAX_PAUSE_MESSAGE",
    "MAX_POOL_NAME_LENGTH",
    "MAX_TEMPLATE_LABELS",
    "MAX_TEMPLATE_TAINTS",
    "MAX_WEIGHT",
    "MAX_ZONE_BACKOFFS",
    "OPERATING_SYSTEMS",
    "OPERATOR_LABELS",
    "OS_LABEL",
    "PLURAL",
    "POOL_LABEL",
    "POOL_NAME_SCHEMA",
    "PRINTER_COLUMNS",
    "REGION_LABEL",
    "SAFE_TO_EVICT_ANNOTATION",
    "SCALE_DOWN_ANNOTATION",
    "SCALE_DOWN_DISABLED_ANNOTATION",
    "SCALE_OPERATIONS",
    "SCHEMA",
    "SHORT_NAMES",
    "SINGULAR",
    "SPEC_SCHEMA",
    "STATUS_SCHEMA",
    "SUBRESOURCES",
    "TAINT_EFFECTS",
    "UNREGISTERED_TAINT_KEY",
    "VERSION",
    "VM_DELETED_ANNOTATION",
    "ZONE_LABEL",
    "BackoffReason",
    "CloudPause",
    "NodePoolSpec",
    "NodePoolStatus",
    "NodeTemplate",
    "ReportedAllocatable",
    "ScaleOperation",
    "Taint",
    "TaintEffect",
    "ZoneBackoff",
    "amount_of",
    "crd",
    "do_not_disrupt_reason",
    "is_being_removed",
    "is_settled",
    "is_unregistered",
    "manifest",
    "names_taken",
    "node_labels",
    "pool_of",
    "pool_selector",
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

POOL_LABEL: Final = "nodepool.dev/pool"
ZONE_LABEL: Final = "topology.kubernetes.io/zone"
REGION_LABEL: Final = "topology.kubernetes.io/region"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
ARCH_LABEL: Final = "kubernetes.io/arch"
OS_LABEL: Final = "kubernetes.io/os"
DEFAULT_ARCH: Final = "amd64"
DEFAULT_OS: Final = "linux"
#: What a template may set ``ARCH_LABEL`` and ``OS_LABEL`` to: the values kubelets report
#: (Go's GOARCH and GOOS for the platforms Kubernetes ships nodes for).
ARCHITECTURES: Final = ("amd64", "arm64", "arm", "ppc64le", "s390x", "386", "riscv64")
OPERATING_SYSTEMS: Final = ("linux", "windows")
#: Labels the operator alone puts on a pool's Nodes (zone and region from ``zones`` and
#: ``region``): a template setting one would contradict what the Node must say.
OPERATOR_LABELS: Final = (POOL_LABEL, HOSTNAME_LABEL, ZONE_LABEL, REGION_LABEL)

# On every Node the NodePool controller creates, until its kubelet has reported Ready and
# its own capacity: no pod is bound to a machine still booting (Karpenter's
# karpenter.sh/unregistered). The NodePool controller alone adds and removes it.
UNREGISTERED_TAINT_KEY: Final = "nodepool.dev/unregistered"

# "true" on a Pod (or a Node): the Autoscaler never chooses to remove the Node it runs on,
# and an explicit scale-down removes such Nodes last (Karpenter's karpenter.sh/do-not-disrupt).
DO_NOT_DISRUPT_ANNOTATION: Final = "nodepool.dev/do-not-disrupt"
# "false" on a Pod means the same as do-not-disrupt, as cluster-autoscaler reads it.
SAFE_TO_EVICT_ANNOTATION: Final = "cluster-autoscaler.kubernetes.io/safe-to-evict"
# The NodePool controller's marks on a Node it is removing: draining (value: when the drain
# started) and its VM deleted (value: when). Both controllers read them: a Node carrying
# one is on its way out, never a consolidation candidate again.
SCALE_DOWN_ANNOTATION: Final = f"{GROUP}/scale-down"
VM_DELETED_ANNOTATION: Final = f"{GROUP}/vm-deleted"


def is_unregistered(node: Mapping[str, Any]) -> bool:
    """The Node still carries ``UNREGISTERED_TAINT_KEY``: its kubelet has not yet reported
    Ready and its own allocatable to the NodePool controller."""
    taints = (node.get("spec") or {}).get("taints") or ()
    return any(t.get("key") == UNREGISTERED_TAINT_KEY for t in taints)


def is_being_removed(node: Mapping[str, Any]) -> bool:
    """The NodePool controller is draining the Node or has deleted its VM."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return SCALE_DOWN_ANNOTATION in annotations or VM_DELETED_ANNOTATION in annotations


# The annotations users migrating from Karpenter or cluster-autoscaler already carry: "true"
# on a Pod or Node (Karpenter), "true" on a Node (cluster-autoscaler) means do-not-disrupt.
KARPENTER_DO_NOT_DISRUPT_ANNOTATION: Final = "karpenter.sh/do-not-disrupt"
SCALE_DOWN_DISABLED_ANNOTATION: Final = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
#: Every annotation that can forbid a voluntary disruption, with the value that does.
_POD_REFUSALS: Final = (
    (DO_NOT_DISRUPT_ANNOTATION, "true"),
    (KARPENTER_DO_NOT_DISRUPT_ANNOTATION, "true"),
    (SAFE_TO_EVICT_ANNOTATION, "false"),
)
_NODE_REFUSALS: Final = (
    (DO_NOT_DISRUPT_ANNOTATION, "true"),
    (KARPENTER_DO_NOT_DISRUPT_ANNOTATION, "true"),
    (SCALE_DOWN_DISABLED_ANNOTATION, "true"),
)
DISRUPTION_ANNOTATIONS: Final = frozenset(key for key, _ in (*_POD_REFUSALS, *_NODE_REFUSALS))


def do_not_disrupt_reason(obj: Mapping[str, Any], *, node: bool) -> str | None:
    """The annotation (``key: "value"``) by which the Pod's (or, with ``node``, the Node's)
    owner asked that it not be disrupted voluntarily, or None: the one rule the Autoscaler's
    consolidation and the NodePool controller's drains both read."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    for key, value in _NODE_REFUSALS if node else _POD_REFUSALS:
        if annotations.get(key) == value:
            return f'{key}: "{value}"'
    return None


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


def pool_selector(name: str) -> str:
    """The label selector, in its string form, that matches the Nodes of pool ``name``."""
    return f"{POOL_LABEL}={name}"


def pool_of(node: Mapping[str, Any]) -> str | None:
    """The pool a Node belongs to (its ``POOL_LABEL``), or None for other Nodes."""
    pool = ((node.get("metadata") or {}).get("labels") or {}).get(POOL_LABEL)
    return str(pool) if pool else None


def node_labels(pool: str, template: NodeTemplate, *, zone: str | None = None) -> dict[str, str]:
    """The labels a Node of the pool carries (its own ``HOSTNAME_LABEL`` aside).

    ``zone`` is the Node's zone (its VM's, as the cloud reports it); the region label comes from
    the template. The NodePool controller puts these labels on the Nodes it registers,
    and the Autoscaler matches pods' node selectors and topology keys against them, so
    the two always agree.
    """
    labels = {
        OS_LABEL: DEFAULT_OS,
        ARCH_LABEL: DEFAULT_ARCH,
        **template.labels,  # may set the os and architecture, not the operator's own labels
        POOL_LABEL: pool,
    }
    if zone is not None:
        labels[ZONE_LABEL] = zone
    if template.region is not None:
        labels[REGION_LABEL] = template.region
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
    """

    target_nodes: int = DEFAULT_TARGET_NODES
    min_nodes: int = DEFAULT_MIN_NODES
    max_nodes: int = DEFAULT_MAX_NODES
    weight: int = DEFAULT_WEIGHT
    drain_timeout_seconds: int | None = None
    not_ready_timeout_seconds: int = DEFAULT_NOT_READY_TIMEOUT_SECONDS
    registration_timeout_seconds: int = DEFAULT_REGISTRATION_TIMEOUT_SECONDS
    template: NodeTemplate = dataclasses.field(default_factory=NodeTemplate)

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
    """

    zone: str = ""
    shape: str = ""
    reason: BackoffReason
    failures: int
    until: str
    message: str = ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ZoneBackoff:
        return cls(
            zone=fields.string(d, "zone", default=""),
            shape=fields.string(d, "shape", default=""),
            reason=fields.choice(d, "reason", choices=BACKOFF_REASONS, default=None),
            failures=fields.required_integer(d, "failures"),
            until=fields.required_string(d, "until"),
            message=fields.string(d, "message", default=""),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "zone": self.zone,
            "shape": self.shape,
            "reason": self.reason,
            "failures": self.failures,
            "until": self.until,
            "message": self.message,
        }


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


_NODE_COUNT_BOUNDS: Final[dict[str, Any]] = {"format": "int32", "minimum": 0}
_SPEC_NODE_COUNT_BOUNDS: Final[dict[str, Any]] = {
    **_NODE_COUNT_BOUNDS,
    "maximum": MAX_NODES_PER_POOL,
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
    "rule": f"!self.exists(k, k in {_cel_list(OPERATOR_LABELS)})",
    "message": (
        f"labels may not set {', '.join(OPERATOR_LABELS)}: the operator sets them "
        "(the zone and region from zones and region)"
    ),
}

_PLATFORM_LABEL_RULES: Final[list[dict[str, str]]] = [
    {
        "rule": f"!('{label}' in self) || self['{label}'] in {_cel_list(values)}",
        "message": f"{label} must be one of {', '.join(values)}",
    }
    for label, values in ((ARCH_LABEL, ARCHITECTURES), (OS_LABEL, OPERATING_SYSTEMS))
]

_TAINT_KEY_RULE: Final[dict[str, str]] = {
    "rule": _qualified_name_rule("self"),
    "message": f"a taint key must be a qualified name: {_QUALIFIED_NAME_HELP}",
}

# Zones and the region become the values of the topology labels.
_TOPOLOGY_NAME_SCHEMA: Final[dict[str, Any]] = {**_LABEL_VALUE_SCHEMA, "minLength": 1}

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
            "enum": list(TAINT_EFFECTS),
        },
    },
}

_TEMPLATE_PROPERTIES: Final[dict[str, Any]] = {
    "cpu": _quantity_schema(
        f'CPU capacity of one Node, as a quantity (4, "3500m"); default "{DEFAULT_CPU}".',
        _positive_quantity_rule("cpu"),
        default=DEFAULT_CPU,
    ),
    "memory": _quantity_schema(
        "Memory capacity of one Node, as a quantity "
        f'("16Gi", "512Mi"); default "{DEFAULT_MEMORY}".',
        _positive_quantity_rule("memory"),
        default=DEFAULT_MEMORY,
    ),
    "pods": {
        "type": "integer",
        "description": "How many pods one Node can run.",
        "format": "int32",
        "minimum": 1,
        "default": DEFAULT_PODS,
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
        "items": _TOPOLOGY_NAME_SCHEMA,
    },
    "region": {
        **_TOPOLOGY_NAME_SCHEMA,
        "description": "The region label put on every Node of the pool.",
    },
    "labels": {
        "type": "object",
        "description": (
            "Labels put on every Node of the pool, besides the pool label; keys and "
            "values as the API server accepts them on a Node."
        ),
        "maxProperties": MAX_TEMPLATE_LABELS,
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
        "maxItems": MAX_TEMPLATE_TAINTS,
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
        "maxItems": MAX_TEMPLATE_TAINTS,
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

_SPEC_PROPERTIES: Final[dict[str, Any]] = {
    "targetNodes": {
        "type": "integer",
        "description": f"How many Nodes the pool should have (at most {MAX_NODES_PER_POOL}).",
        **_SPEC_NODE_COUNT_BOUNDS,
        "default": DEFAULT_TARGET_NODES,
    },
    "minNodes": {
        "type": "integer",
        "description": "The autoscaler never asks for fewer Nodes than this.",
        **_SPEC_NODE_COUNT_BOUNDS,
        "default": DEFAULT_MIN_NODES,
    },
    "maxNodes": {
        "type": "integer",
        "description": f"The pool never has more Nodes than this (at most {MAX_NODES_PER_POOL}).",
        **_SPEC_NODE_COUNT_BOUNDS,
        "default": DEFAULT_MAX_NODES,
    },
    "weight": {
        "type": "integer",
        "description": "Preference among pools that could all host a pod; higher first.",
        "format": "int32",
        "minimum": 0,
        "maximum": MAX_WEIGHT,
        "default": DEFAULT_WEIGHT,
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
        "default": DEFAULT_NOT_READY_TIMEOUT_SECONDS,
    },
    "registrationTimeoutSeconds": {
        "type": "integer",
        "description": "How long a running VM may go without a Ready Node before it is replaced.",
        **_TIMEOUT_BOUNDS,
        "default": DEFAULT_REGISTRATION_TIMEOUT_SECONDS,
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
        "zoneBackoffs": {
            "type": "array",
            "description": (
                "Zones where no VM of the pool is launched until a time: the cloud had no"
                " capacity there, or a VM launched there never got a Ready Node. Each"
                " refusal in a row doubles the wait, from 1 minute up to 30; a launch that"
                " succeeds there ends it. The Autoscaler plans a pool whose every zone is"
                " backed off as unable to grow."
            ),
            "maxItems": MAX_ZONE_BACKOFFS,
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
                        "enum": list(BACKOFF_REASONS),
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
                    "maxLength": MAX_PAUSE_MESSAGE,
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
        kind=KIND,
        plural=PLURAL,
        singular=SINGULAR,
        short_names=SHORT_NAMES,
        schema=SCHEMA,
        subresources=SUBRESOURCES,
        printer_columns=PRINTER_COLUMNS,
    )
