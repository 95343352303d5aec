"""A small catalog for the planner's tests of pools with requirements: three types of one
shape family in two zones, the second zone a cent dearer."""

from __future__ import annotations

from typing import Any

from nodepool_operator.api import wellknown
from nodepool_operator.cloud import catalog

GIB = 2**30
ZONES = ("z-a", "z-b")
#: (name, cores, GiB, price in z-a; z-b costs 0.01 more)
TYPES = (("c2", 2, 4, 0.10), ("c8", 8, 16, 0.36), ("c32", 32, 64, 1.30))


class Sells:
    """A catalog given whole, as the cloud's ``CatalogSource``."""

    def __init__(self, found: catalog.Catalog) -> None:
        self.found = found

    async def catalog(self) -> catalog.Catalog:
        return self.found


def small_catalog() -> catalog.Catalog:
    types = {
        name: catalog.InstanceType(
            name=name,
            cpu_millis=cores * 1000,
            memory_bytes=gib * GIB,
            pods=110,
            ephemeral_storage_bytes=20 * GIB,
            architecture="amd64",
            operating_systems=("linux",),
        )
        for name, cores, gib, _ in TYPES
    }
    return catalog.Catalog.of(
        types,
        [
            catalog.Offering(
                instance_type=name,
                zone=zone,
                capacity_type="on-demand",
                price_per_hour=price + (0.01 if zone == "z-b" else 0.0),
            )
            for name, _, _, price in TYPES
            for zone in ZONES
        ],
    )


def requirements() -> list[dict[str, Any]]:
    """Every type of the catalog, in both zones."""
    return [
        {"key": wellknown.INSTANCE_TYPE_LABEL, "operator": "In", "values": [t[0] for t in TYPES]},
        {"key": wellknown.ZONE_LABEL, "operator": "In", "values": list(ZONES)},
    ]
