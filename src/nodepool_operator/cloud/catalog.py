"""What a cloud sells: instance types, and per zone and capacity type an offering with a
price per hour and whether it can be had now.

The catalog is the cloud's fact, never a constant of the planner: simcloud serves one from
a file (``simcloud --catalog FILE``), the EC2 provider reads its instance types from
``DescribeInstanceTypes`` and their prices from a table. A cloud that sells any shape
asked for (simcloud without a catalog, the pools' single-shape ``template``) has an empty
catalog: ``Catalog.sells_any_shape``.

The file form is Karpenter kwok's ``instance_types.json``, so both systems can be given
one catalog: a list of types, each ``{"name", "architecture", "operatingSystems",
"resources": {"cpu", "memory", "pods", "ephemeral-storage", ...}, "offerings": [...]}``,
an offering either ``{"Price", "Available", "Requirements": [{"key":
"topology.kubernetes.io/zone", "operator": "In", "values": [...]}, {"key":
"karpenter.sh/capacity-type", ...}]}`` (Karpenter 1.x) or ``{"Price", "Available",
"Zone", "CapacityType"}`` (its older form). An offering's requirement naming several
zones is one offering per zone. An optional ``"overhead"`` (resources the kubelet and the
system keep) is ours; Karpenter's kwok provider has none.

Pure: parsing and queries, no I/O but ``load``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal

from nodepool_operator.api import quantity, wellknown

__all__ = [
    "CAPACITY_TYPES",
    "CAPACITY_TYPE_LABEL",
    "NOTHING",
    "ON_DEMAND",
    "SPOT",
    "CapacityType",
    "Catalog",
    "CatalogError",
    "InstanceType",
    "Offering",
    "load",
    "offering_labels",
    "parse",
]

CapacityType = Literal["on-demand", "spot"]
ON_DEMAND: Final = "on-demand"
SPOT: Final = "spot"
CAPACITY_TYPES: Final[tuple[CapacityType, ...]] = (ON_DEMAND, SPOT)
#: The label that names a Node's capacity type (Karpenter's, so pods written for
#: Karpenter select the same nodes here).
CAPACITY_TYPE_LABEL: Final = "karpenter.sh/capacity-type"
_ZONE_KEY: Final = "topology.kubernetes.io/zone"
#: Resources every type states, kept apart from its extended resources.
_MAIN: Final = ("cpu", "memory", "pods", "ephemeral-storage")


class CatalogError(ValueError):
    """The catalog cannot be read; the message names the entry and what is wrong."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class InstanceType:
    """One machine type: what it has (capacity) and what the system keeps of it."""

    name: str
    cpu_millis: int
    memory_bytes: int
    pods: int
    ephemeral_storage_bytes: int
    architecture: str
    operating_systems: tuple[str, ...]
    #: Other resources (GPUs, hugepages...), in their base unit.
    extended: Mapping[str, int] = dataclasses.field(default_factory=dict)
    #: What the kubelet and the system reserve: capacity minus this is allocatable.
    overhead_cpu_millis: int = 0
    overhead_memory_bytes: int = 0

    @property
    def allocatable_cpu_millis(self) -> int:
        return max(0, self.cpu_millis - self.overhead_cpu_millis)

    @property
    def allocatable_memory_bytes(self) -> int:
        return max(0, self.memory_bytes - self.overhead_memory_bytes)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Offering:
    """One type sold in one zone as one capacity type, at a price per hour."""

    instance_type: str
    zone: str
    capacity_type: CapacityType
    price_per_hour: float
    available: bool = True


@dataclasses.dataclass(frozen=True)
class Catalog:
    """Types by name and their offerings, cheapest first (ties by type, zone, capacity)."""

    types: Mapping[str, InstanceType]
    offerings: tuple[Offering, ...]

    @classmethod
    def of(cls, types: Mapping[str, InstanceType], offerings: Iterable[Offering]) -> Catalog:
        """The catalog of ``types`` and ``offerings``, cheapest first (ties by type, zone,
        capacity type); ``CatalogError`` on an offering of a type it does not hold, or
        one sold twice in a zone as one capacity type."""
        seen: set[tuple[str, str, str]] = set()
        ordered = sorted(offerings, key=_cheapest_first)
        for offering in ordered:
            key = (offering.instance_type, offering.zone, offering.capacity_type)
            if key[0] not in types:
                raise CatalogError(f"an offering names instance type {key[0]!r}, not a type held")
            if key in seen:
                raise CatalogError(
                    f"instance type {key[0]!r} is offered twice in zone {key[1]!r} as {key[2]}"
                )
            seen.add(key)
        return cls(dict(types), tuple(ordered))

    @property
    def sells_any_shape(self) -> bool:
        """No catalog: the cloud makes whatever cpu and memory it is asked for."""
        return not self.types

    def type(self, name: str) -> InstanceType | None:
        return self.types.get(name)

    def offering(self, *, instance_type: str, zone: str, capacity_type: str) -> Offering | None:
        for found in self.offerings:
            if (found.instance_type, found.zone, found.capacity_type) == (
                instance_type,
                zone,
                capacity_type,
            ):
                return found
        return None

    def offerings_of(self, instance_type: str) -> tuple[Offering, ...]:
        return tuple(o for o in self.offerings if o.instance_type == instance_type)

    def zones(self) -> tuple[str, ...]:
        return tuple(sorted({o.zone for o in self.offerings}))

    def to_json(self) -> list[dict[str, Any]]:
        """The catalog in the file form (Karpenter kwok's, 1.x offerings), which ``parse``
        reads back to an equal catalog."""
        return [_type_to_json(t, self.offerings_of(t.name)) for t in self.types.values()]


_MIB: Final = 1024 * 1024


def offering_labels(instance_type: InstanceType, offering: Offering) -> dict[str, str]:
    """The labels of a Node that is ``offering`` of ``instance_type``
    (``wellknown.OFFERING_LABELS``): what a pool's requirements are judged over, and what
    the NodePool controller puts on the Node, so that the two never disagree. The os is
    the type's first (a Node runs one); cpu in whole cores and memory in MiB, rounded down."""
    return {
        wellknown.INSTANCE_TYPE_LABEL: instance_type.name,
        wellknown.ARCH_LABEL: instance_type.architecture,
        wellknown.OS_LABEL: (instance_type.operating_systems or (wellknown.DEFAULT_OS,))[0],
        wellknown.ZONE_LABEL: offering.zone,
        wellknown.CAPACITY_TYPE_LABEL: offering.capacity_type,
        wellknown.KARPENTER_CAPACITY_TYPE_LABEL: offering.capacity_type,
        wellknown.INSTANCE_CPU_LABEL: str(instance_type.cpu_millis // 1000),
        wellknown.INSTANCE_MEMORY_LABEL: str(instance_type.memory_bytes // _MIB),
    }


#: No catalog: a cloud that makes whatever cpu and memory it is asked for.
NOTHING: Final = Catalog({}, ())


def _cheapest_first(offering: Offering) -> tuple[float, str, str, int]:
    kind = CAPACITY_TYPES.index(offering.capacity_type)
    return (offering.price_per_hour, offering.instance_type, offering.zone, kind)


def _type_to_json(found: InstanceType, offerings: Sequence[Offering]) -> dict[str, Any]:
    resources = {
        "cpu": f"{found.cpu_millis}m",
        "memory": str(found.memory_bytes),
        "pods": str(found.pods),
        "ephemeral-storage": str(found.ephemeral_storage_bytes),
        **{name: str(value) for name, value in sorted(found.extended.items())},
    }
    body: dict[str, Any] = {
        "name": found.name,
        "architecture": found.architecture,
        "operatingSystems": list(found.operating_systems),
        "resources": resources,
        "offerings": [
            {
                "Price": o.price_per_hour,
                "Available": o.available,
                "Requirements": [
                    {"key": _ZONE_KEY, "operator": "In", "values": [o.zone]},
                    {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": [o.capacity_type]},
                ],
            }
            for o in offerings
        ],
    }
    if found.overhead_cpu_millis or found.overhead_memory_bytes:
        body["overhead"] = {
            "cpu": f"{found.overhead_cpu_millis}m",
            "memory": str(found.overhead_memory_bytes),
        }
    return body


def load(path: str | Path) -> Catalog:
    """The catalog in the file at ``path``; ``CatalogError`` naming the file otherwise."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise CatalogError(f"cannot read the catalog {path}: {error}") from error
    try:
        return parse(data)
    except CatalogError as error:
        raise CatalogError(f"{path}: {error}") from error


def parse(data: object) -> Catalog:
    """The catalog in ``data`` (the decoded file); ``CatalogError`` on the first wrong entry,
    naming it."""
    if not isinstance(data, list):
        raise CatalogError("a catalog is a JSON list of instance types")
    types: dict[str, InstanceType] = {}
    offerings: list[Offering] = []
    for index, entry in enumerate(data):
        where = f"entry {index}"
        if not isinstance(entry, Mapping):
            raise CatalogError(f"{where}: an instance type is a JSON object")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise CatalogError(f"{where}: 'name' must be a non-empty string")
        where = f"instance type {name!r}"
        if name in types:
            raise CatalogError(f"{where} is listed twice")
        types[name] = _instance_type(name, entry, where)
        offerings.extend(_offerings(name, entry.get("offerings"), where))
    return Catalog.of(types, offerings)


def _instance_type(name: str, entry: Mapping[str, Any], where: str) -> InstanceType:
    resources = entry.get("resources")
    if not isinstance(resources, Mapping):
        raise CatalogError(f"{where}: 'resources' must be an object")
    for needed in ("cpu", "memory", "pods"):
        if needed not in resources:
            raise CatalogError(f"{where}: 'resources' has no {needed!r}")
    overhead = entry.get("overhead") or {}
    if not isinstance(overhead, Mapping):
        raise CatalogError(f"{where}: 'overhead' must be an object")
    systems = entry.get("operatingSystems") or ["linux"]
    if not isinstance(systems, list) or not all(isinstance(s, str) for s in systems):
        raise CatalogError(f"{where}: 'operatingSystems' must be a list of strings")
    architecture = entry.get("architecture") or "amd64"
    if not isinstance(architecture, str):
        raise CatalogError(f"{where}: 'architecture' must be a string")
    return InstanceType(
        name=name,
        cpu_millis=_amount(resources, "cpu", where, quantity.parse_cpu_millicores),
        memory_bytes=_amount(resources, "memory", where, quantity.parse_memory_bytes),
        pods=_amount(resources, "pods", where, _whole),
        ephemeral_storage_bytes=(
            _amount(resources, "ephemeral-storage", where, quantity.parse_memory_bytes)
            if "ephemeral-storage" in resources
            else 0
        ),
        architecture=architecture,
        operating_systems=tuple(systems),
        extended={
            str(key): _amount(resources, str(key), where, _whole)
            for key in sorted(resources)
            if key not in _MAIN
        },
        overhead_cpu_millis=(
            _amount(overhead, "cpu", where, quantity.parse_cpu_millicores)
            if "cpu" in overhead
            else 0
        ),
        overhead_memory_bytes=(
            _amount(overhead, "memory", where, quantity.parse_memory_bytes)
            if "memory" in overhead
            else 0
        ),
    )


def _whole(text: str) -> int:
    value = quantity.parse_non_negative_quantity(text)
    if value.denominator != 1:
        raise ValueError(f"{text!r} is not a whole number")
    return int(value)


def _amount(resources: Mapping[str, Any], key: str, where: str, read: Any) -> int:
    raw = resources[key]
    try:
        value = read(str(raw))
    except ValueError as error:
        raise CatalogError(f"{where}: {key} {raw!r}: {error}") from error
    if not isinstance(value, int) or value < 0:
        raise CatalogError(f"{where}: {key} {raw!r} must not be negative")
    return value


def _offerings(name: str, raw: object, where: str) -> Iterable[Offering]:
    if not isinstance(raw, list) or not raw:
        raise CatalogError(f"{where}: 'offerings' must be a non-empty list")
    for index, entry in enumerate(raw):
        here = f"{where}, offering {index}"
        if not isinstance(entry, Mapping):
            raise CatalogError(f"{here}: an offering is a JSON object")
        price = entry.get("Price")
        if (
            isinstance(price, bool)
            or not isinstance(price, int | float)
            or not math.isfinite(price)
        ):
            raise CatalogError(f"{here}: 'Price' must be a number (per hour)")
        if price < 0:
            raise CatalogError(f"{here}: 'Price' must not be negative")
        available = entry.get("Available", True)
        if not isinstance(available, bool):
            raise CatalogError(f"{here}: 'Available' must be true or false")
        zones, capacity_types = _placement(entry, here)
        for zone in zones:
            for capacity_type in capacity_types:
                yield Offering(
                    instance_type=name,
                    zone=zone,
                    capacity_type=capacity_type,
                    price_per_hour=float(price),
                    available=available,
                )


def _placement(entry: Mapping[str, Any], here: str) -> tuple[list[str], list[CapacityType]]:
    """The zones and capacity types of one offering entry, in either form."""
    requirements = entry.get("Requirements")
    if requirements is None:
        zones: object = [entry.get("Zone")]
        kinds: object = [entry.get("CapacityType")]
    else:
        if not isinstance(requirements, list):
            raise CatalogError(f"{here}: 'Requirements' must be a list")
        by_key = {}
        for requirement in requirements:
            if not isinstance(requirement, Mapping) or requirement.get("operator") != "In":
                raise CatalogError(
                    f"{here}: each requirement must be {{key, operator: In, values}}"
                )
            by_key[requirement.get("key")] = requirement.get("values")
        zones, kinds = by_key.get(_ZONE_KEY), by_key.get(CAPACITY_TYPE_LABEL)
    if not isinstance(zones, list) or not zones or not all(isinstance(z, str) and z for z in zones):
        raise CatalogError(f"{here}: it names no zone")
    if not isinstance(kinds, list) or not kinds or not all(k in CAPACITY_TYPES for k in kinds):
        raise CatalogError(f"{here}: its capacity type must be one of {', '.join(CAPACITY_TYPES)}")
    return [str(z) for z in zones], [k for k in CAPACITY_TYPES if k in kinds]
