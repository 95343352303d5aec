"""A pod's scheduling constraints as one hashable value (``PodProfile``) and its parts:
what its volumes ask of a node, its inter-pod terms and spread, its host ports. Equal
profiles are placed as one class.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from nodepool_operator.controllers.autoscaler.constraints.matching import (
    Selector,
    Toleration,
    term_holds,
    terms_name_nodes,
)

__all__ = [
    "MAIN_RESOURCES",
    "VOLUME_TOPOLOGY_LABELS",
    "AffinityTerm",
    "HostPort",
    "PodProfile",
    "SpreadConstraint",
    "VolumeRules",
    "freeze",
    "with_volumes",
]

#: The resources every node has and the room search reads: cpu (millicores), memory
#: (bytes) and pod slots.
MAIN_RESOURCES: Final = ("cpu", "memory", "pods")
_MAIN_SET: Final = frozenset(MAIN_RESOURCES)

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
    the refusal to give. ``zones``: (label, values, whose) of bound PVs' topology labels,
    ``whose`` naming the claim and its PV in the refusal.
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
            if not any(term_holds(term, labels, name) for term in terms):
                return why
        if self.zones and any(key in labels for key in VOLUME_TOPOLOGY_LABELS):
            # VolumeZone: a node with no topology label at all is compatible.
            for key, values, whose in self.zones:
                value = labels.get(key, labels.get(VOLUME_TOPOLOGY_LABELS[key]))
                if value not in values:
                    return f"{whose}, which is in {key} {'/'.join(sorted(values))}"
        return None


def with_volumes(profile: PodProfile, volumes: VolumeRules | str) -> PodProfile:
    """``profile`` with what its volumes ask of a node, or unfit for the reason given."""
    if isinstance(volumes, str):
        return dataclasses.replace(profile, unsupported=volumes, key=(*profile.key, volumes))
    frozen = freeze((volumes.choices, volumes.zones))
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
    # Terms key the simulation's counters and memos: a deep value hashed once, not at
    # every lookup.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.selector, self.namespaces, self.topology_key)))

    def __hash__(self) -> int:
        return self._hash

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
    _hash: int = field(init=False, repr=False, compare=False)  # as ``AffinityTerm``'s

    def __post_init__(self) -> None:
        fields = (self.max_skew, self.topology_key, self.selector, self.min_domains)
        object.__setattr__(
            self, "_hash", hash((*fields, self.honor_node_affinity, self.honor_taints))
        )

    def __hash__(self) -> int:
        return self._hash


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
    # The hash of ``unlabelled_key``, taken once with the key's: the simulation groups
    # pods whose labels no selector reads by it, and hashing the key anew for each
    # pending pod at every plan is what that grouping would cost.
    unlabelled_hash: int = field(init=False, repr=False, compare=False)
    # What the simulation's room search reads of every pod it places, worked out once
    # with the profile (which the operator keeps per pod version), not at every plan:
    # its ``MAIN_RESOURCES`` requests; whether it asks for nothing else; and whether, on
    # top of that, it has no pod constraint, so only room can refuse it where the static
    # filters pass.
    main_need: tuple[int, int, int] = field(init=False, repr=False, compare=False)
    main_only: bool = field(init=False, repr=False, compare=False)
    room_only: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(self.key))
        object.__setattr__(self, "unlabelled_hash", hash(self.unlabelled_key))
        requests = self.requests
        need = tuple(requests.get(name, 0) for name in MAIN_RESOURCES)
        object.__setattr__(self, "main_need", need)
        main_only = requests.keys() <= _MAIN_SET
        object.__setattr__(self, "main_only", main_only)
        object.__setattr__(self, "room_only", main_only and not self.has_pod_constraints)

    @property
    def unlabelled_key(self) -> tuple[Any, ...]:
        """The key without the pod's labels (``key[1]``): equal for pods that differ only
        by their labels."""
        return (self.key[0], *self.key[2:])

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


def freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value
