"""A pod's scheduling constraints, parsed once, and the matching rules kube-scheduler uses.

A ``PodProfile`` is everything the simulation needs to know of one pod: its namespace and
labels (what other pods' terms match), its effective requests, and its required
constraints (node selector and affinity, tolerations, inter-pod affinity and
anti-affinity, topology spread with ``DoNotSchedule``, host ports). Replicas of one
Deployment have equal profiles, and equal profiles are placed as one class; that is what
keeps planning tens of thousands of pods fast.

The matching rules follow the API's definitions (``k8s.io/apimachinery`` label selectors,
``core/v1`` node selector terms and ``Toleration.ToleratesTaint``, the scheduler's
``InterPodAffinity`` and ``PodTopologySpread`` plugins). Preferred (soft) terms do not
decide feasibility, so they are not parsed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.controllers.autoscaler import fit

__all__ = [
    "DAEMON_TOLERATIONS",
    "AffinityTerm",
    "HostPort",
    "PodProfile",
    "Selector",
    "SpreadConstraint",
    "Taint",
    "Toleration",
    "VolumeRules",
    "node_affinity_problem",
    "profile_of",
    "terms_name_nodes",
    "untolerated",
    "with_volumes",
]

# Taint effects that keep a pod off a node; PreferNoSchedule is only a preference.
BLOCKING_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})
UNSCHEDULABLE_TAINT: Final = "node.kubernetes.io/unschedulable"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str

    def tolerates(self, taint: Taint) -> bool:
        # core/v1 Toleration.ToleratesTaint: an empty effect or key matches any.
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator in ("", "Equal") and self.value == taint.value


#: What the DaemonSet controller adds to every DaemonSet pod, so that it runs on nodes
#: that are not ready, unreachable, under pressure or cordoned.
DAEMON_TOLERATIONS: Final = tuple(
    Toleration(key=f"node.kubernetes.io/{key}", operator="Exists", value="", effect=effect)
    for key, effect in (
        ("not-ready", "NoExecute"),
        ("unreachable", "NoExecute"),
        ("disk-pressure", "NoSchedule"),
        ("memory-pressure", "NoSchedule"),
        ("pid-pressure", "NoSchedule"),
        ("unschedulable", "NoSchedule"),
        ("network-unavailable", "NoSchedule"),
    )
)


def untolerated(tolerations: Sequence[Toleration], taints: Sequence[Taint]) -> Taint | None:
    """The first taint that keeps a pod with ``tolerations`` off the node, or None."""
    for taint in taints:
        if taint.effect in BLOCKING_EFFECTS and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


# -- label selectors ------------------------------------------------------------------

Requirement = tuple[str, str, frozenset[str]]  # key, operator, values


@dataclass(frozen=True, slots=True)
class Selector:
    """A ``metav1.LabelSelector``; ``None`` in a term means it matches nothing."""

    requirements: tuple[Requirement, ...]

    @property
    def keys(self) -> frozenset[str]:
        """The label keys it reads: a pod's other labels never change what it matches."""
        return frozenset(key for key, _, _ in self.requirements)

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, operator, values in self.requirements:
            present = key in labels
            if operator == "In":
                if not present or labels[key] not in values:
                    return False
            elif operator == "NotIn":
                if present and labels[key] in values:
                    return False
            elif operator == "Exists":
                if not present:
                    return False
            elif operator == "DoesNotExist":
                if present:
                    return False
            else:
                return False
        return True


def _selector(
    raw: Mapping[str, Any] | None,
    *,
    pod_labels: Mapping[str, str],
    match_keys: Sequence[str] = (),
    mismatch_keys: Sequence[str] = (),
) -> Selector | None:
    if raw is None:
        return None
    found: list[Requirement] = [
        (str(k), "In", frozenset({str(v)}))
        for k, v in sorted((raw.get("matchLabels") or {}).items())
    ]
    for expression in raw.get("matchExpressions") or ():
        found.append(
            (
                str(expression.get("key", "")),
                str(expression.get("operator", "")),
                frozenset(str(v) for v in expression.get("values") or ()),
            )
        )
    # matchLabelKeys / mismatchLabelKeys: the incoming pod's own values join the selector.
    for key in match_keys:
        if key in pod_labels:
            found.append((key, "In", frozenset({pod_labels[key]})))
    for key in mismatch_keys:
        if key in pod_labels:
            found.append((key, "NotIn", frozenset({pod_labels[key]})))
    return Selector(tuple(found))


# -- node affinity --------------------------------------------------------------------


def _requirement_holds(requirement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = requirement.get("key", "")
    operator = requirement.get("operator")
    values: Sequence[str] = requirement.get("values") or ()
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            label, bound = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return label > bound if operator == "Gt" else label < bound
    return False


def _term_holds(term: Mapping[str, Any], labels: Mapping[str, str], name: str) -> bool:
    expressions = term.get("matchExpressions") or ()
    fields = term.get("matchFields") or ()
    if not expressions and not fields:
        return False  # an empty term matches no node (core/v1 NodeSelectorTerm)
    # The only field a node selector term may name is metadata.name.
    return all(_requirement_holds(e, labels) for e in expressions) and all(
        _requirement_holds(f, {"metadata.name": name}) for f in fields
    )


def terms_name_nodes(terms: Sequence[Mapping[str, Any]]) -> bool:
    """Whether node selector terms name nodes one by one (by hostname or by field), so
    that nodes alike in every other label may still be judged differently."""
    return any(
        term.get("matchFields")
        or any(
            e.get("key") == nodepool_api.HOSTNAME_LABEL for e in term.get("matchExpressions") or ()
        )
        for term in terms
    )


def node_affinity_problem(
    node_selector: Mapping[str, str],
    affinity_terms: Sequence[Mapping[str, Any]] | None,
    *,
    labels: Mapping[str, str],
    name: str,
) -> str | None:
    """Why ``nodeSelector`` or required node affinity refuse a node, or None."""
    for key, value in sorted(node_selector.items()):
        if labels.get(key) != value:
            return f"nodeSelector {key}={value}"
    if affinity_terms is not None and not any(
        _term_holds(term, labels, name) for term in affinity_terms
    ):
        return "required node affinity"
    return None


# -- volumes ------------------------------------------------------------------------------

#: The topology labels VolumeZone compares between a PersistentVolume and a node, each with
#: its counterpart (the GA and the deprecated beta name are matched with each other).
VOLUME_TOPOLOGY_LABELS: Final = {
    "topology.kubernetes.io/zone": "failure-domain.beta.kubernetes.io/zone",
    "topology.kubernetes.io/region": "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
}


@dataclass(frozen=True, slots=True, eq=False)
class VolumeRules:
    """What a pod's volumes ask of a node, as the scheduler's VolumeBinding and VolumeZone
    filters judge them.

    ``choices``: per claim, the node selector terms of which a node must match one (a
    bound PV's node affinity; for an unbound claim, the node affinities of the PVs it
    could bind, and the StorageClass's ``allowedTopologies`` when it provisions), with
    the refusal to give. ``zones``: (label, values, PV) of bound PVs' topology labels.
    """

    choices: tuple[tuple[str, tuple[Any, ...]], ...]
    zones: tuple[tuple[str, frozenset[str], str], ...]

    @property
    def names_nodes(self) -> bool:
        """Whether a term names nodes one by one (a local PV's hostname, a field)."""
        return any(terms_name_nodes(terms) for _, terms in self.choices)

    def problem(self, labels: Mapping[str, str], name: str) -> str | None:
        """Why the node cannot hold the pod's volumes, or None."""
        for why, terms in self.choices:
            if not any(_term_holds(term, labels, name) for term in terms):
                return why
        if self.zones and any(key in labels for key in VOLUME_TOPOLOGY_LABELS):
            # VolumeZone: a node with no topology label at all is compatible.
            for key, values, volume in self.zones:
                value = labels.get(key, labels.get(VOLUME_TOPOLOGY_LABELS[key]))
                if value not in values:
                    return f"persistentvolume {volume} is in {key} {'/'.join(sorted(values))}"
        return None


def with_volumes(profile: PodProfile, volumes: VolumeRules | str) -> PodProfile:
    """``profile`` with what its volumes ask of a node, or unfit for the reason given."""
    if isinstance(volumes, str):
        return dataclasses.replace(profile, unsupported=volumes, key=(*profile.key, volumes))
    frozen = _freeze((volumes.choices, volumes.zones))
    return dataclasses.replace(
        profile,
        volumes=volumes,
        key=(*profile.key, frozen),
        node_rules=(*profile.node_rules, frozen),
    )


# -- inter-pod terms and spread ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A required pod (anti-)affinity term: pods it matches, and over which topology."""

    selector: Selector | None
    namespaces: frozenset[str] | None  # None: every namespace
    topology_key: str

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if self.selector is None:
            return False
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        return self.selector.matches(labels)


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A ``topologySpreadConstraints`` entry with ``whenUnsatisfiable: DoNotSchedule``."""

    max_skew: int
    topology_key: str
    selector: Selector | None
    min_domains: int
    honor_node_affinity: bool  # nodeAffinityPolicy (default Honor)
    honor_taints: bool  # nodeTaintsPolicy (default Ignore)


@dataclass(frozen=True, slots=True)
class HostPort:
    protocol: str
    ip: str
    port: int

    def conflicts(self, other: HostPort) -> bool:
        if self.port != other.port or self.protocol != other.protocol:
            return False
        wildcard = ("", "0.0.0.0", "::")
        return self.ip in wildcard or other.ip in wildcard or self.ip == other.ip


@dataclass(frozen=True, slots=True, eq=False)
class PodProfile:
    """One pod as the scheduler judges it. ``key`` is equal for pods that are placed alike."""

    key: tuple[Any, ...]
    namespace: str
    labels: Mapping[str, str]
    requests: Mapping[str, int]  # cpu in millicores, memory and storage in bytes, "pods": 1
    node_selector: Mapping[str, str]
    node_affinity: tuple[Mapping[str, Any], ...] | None  # required terms; None: no rule
    tolerations: tuple[Toleration, ...]
    affinity: tuple[AffinityTerm, ...]
    anti_affinity: tuple[AffinityTerm, ...]
    spread: tuple[SpreadConstraint, ...]
    ports: tuple[HostPort, ...]
    priority: int
    unsupported: str | None = None  # a constraint the simulation cannot judge
    volumes: VolumeRules | None = None  # what its PersistentVolumeClaims ask of a node
    # What the node-level filters read (node selector, required node affinity,
    # tolerations): pods of any size with equal rules get equal verdicts on a node.
    node_rules: tuple[Any, ...] = ()
    # The key is a deep tuple; hashing it once, not at every dictionary lookup, is what
    # keeps the simulation's per-class memos cheap.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(self.key))

    @property
    def has_pod_constraints(self) -> bool:
        """Whether placing one copy changes where the next may go (beyond resources)."""
        return bool(self.affinity or self.anti_affinity or self.spread or self.ports)

    @property
    def label_keys_read(self) -> frozenset[str]:
        """The pod label keys its own pod affinity, anti-affinity and spread selectors read."""
        selectors = [
            *(term.selector for term in (*self.affinity, *self.anti_affinity)),
            *(constraint.selector for constraint in self.spread),
        ]
        return frozenset().union(*(s.keys for s in selectors if s is not None))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, PodProfile) and self._hash == other._hash and self.key == other.key
        )


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _namespaces(term: Mapping[str, Any], own: str) -> tuple[frozenset[str] | None, str | None]:
    listed = frozenset(str(n) for n in term.get("namespaces") or ())
    chooser = term.get("namespaceSelector")
    if chooser is None:
        return (listed or frozenset({own})), None
    if not chooser.get("matchLabels") and not chooser.get("matchExpressions"):
        return None, None  # an empty namespaceSelector selects every namespace
    return listed, "a namespaceSelector with labels (namespace labels are not simulated)"


def _affinity_terms(
    raw: Sequence[Mapping[str, Any]], *, namespace: str, labels: Mapping[str, str]
) -> tuple[tuple[AffinityTerm, ...], str | None]:
    terms: list[AffinityTerm] = []
    unsupported = None
    for term in raw:
        namespaces, problem = _namespaces(term, namespace)
        unsupported = unsupported or problem
        selector = _selector(
            term.get("labelSelector"),
            pod_labels=labels,
            match_keys=term.get("matchLabelKeys") or (),
            mismatch_keys=term.get("mismatchLabelKeys") or (),
        )
        terms.append(AffinityTerm(selector, namespaces, str(term.get("topologyKey", ""))))
    return tuple(terms), unsupported


def _spread(
    raw: Sequence[Mapping[str, Any]], *, labels: Mapping[str, str]
) -> tuple[SpreadConstraint, ...]:
    found = []
    for entry in raw:
        if entry.get("whenUnsatisfiable", "DoNotSchedule") != "DoNotSchedule":
            continue  # ScheduleAnyway is a preference
        selector = _selector(
            entry.get("labelSelector"),
            pod_labels=labels,
            match_keys=entry.get("matchLabelKeys") or (),
        )
        found.append(
            SpreadConstraint(
                max_skew=max(1, int(entry.get("maxSkew", 1))),
                topology_key=str(entry.get("topologyKey", "")),
                selector=selector,
                min_domains=max(1, int(entry.get("minDomains") or 1)),
                honor_node_affinity=entry.get("nodeAffinityPolicy", "Honor") == "Honor",
                honor_taints=entry.get("nodeTaintsPolicy", "Ignore") == "Honor",
            )
        )
    return tuple(found)


def _ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    found = []
    containers = [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]
    for container in containers:
        for port in container.get("ports") or ():
            host_port = int(port.get("hostPort") or 0)
            if host_port > 0:
                found.append(
                    HostPort(
                        str(port.get("protocol") or "TCP"), str(port.get("hostIP") or ""), host_port
                    )
                )
    return tuple(found)


def _tolerations(raw: Sequence[Mapping[str, Any]]) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(
            key=str(t.get("key") or ""),
            operator=str(t.get("operator") or "Equal"),
            value=str(t.get("value") or ""),
            effect=str(t.get("effect") or ""),
        )
        for t in raw
    )


def profile_of(
    pod: Mapping[str, Any], *, extra_tolerations: Sequence[Toleration] = ()
) -> PodProfile:
    """The pod's profile; raises ``ValueError`` on a request that cannot be read."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    namespace = str(meta.get("namespace", ""))
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    requests = fit.pod_requests(pod)
    affinity = spec.get("affinity") or {}
    required_nodes = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    node_terms = (
        None if required_nodes is None else tuple(required_nodes.get("nodeSelectorTerms") or ())
    )
    pod_affinity, unsupported_a = _affinity_terms(
        (affinity.get("podAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        or (),
        namespace=namespace,
        labels=labels,
    )
    pod_anti, unsupported_b = _affinity_terms(
        (affinity.get("podAntiAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or (),
        namespace=namespace,
        labels=labels,
    )
    tolerations = (*_tolerations(spec.get("tolerations") or ()), *extra_tolerations)
    spread = _spread(spec.get("topologySpreadConstraints") or (), labels=labels)
    ports = _ports(spec)
    node_selector = {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}
    node_rules = (_freeze(node_selector), _freeze(required_nodes), tolerations)
    key = (
        namespace,
        _freeze(labels),
        _freeze(requests),
        *node_rules,
        pod_affinity,
        pod_anti,
        spread,
        ports,
        int(spec.get("priority") or 0),
    )
    return PodProfile(
        key=key,
        namespace=namespace,
        labels=labels,
        requests=requests,
        node_selector=node_selector,
        node_affinity=node_terms,
        tolerations=tolerations,
        affinity=pod_affinity,
        anti_affinity=pod_anti,
        spread=spread,
        ports=ports,
        priority=int(spec.get("priority") or 0),
        unsupported=unsupported_a or unsupported_b,
        node_rules=node_rules,
    )
