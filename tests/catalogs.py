"""Small catalogs of instance types for the tests of pools with requirements: types of
one shape family sold on-demand in a few zones, each zone after the first a cent dearer,
and a pool allowing every one of them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.api.requirements import Requirements
from nodepool_operator.cloud import catalog

GIB = 2**30
#: (name, cores, GiB, price per hour in the first zone)
TypeRow = tuple[str, int, int, float]


def instance_types(types: Sequence[TypeRow]) -> dict[str, catalog.InstanceType]:
    """The types of the rows, by name: amd64 linux, 58 pods, 20 GiB of disk."""
    return {
        name: catalog.InstanceType(
            name=name,
            cpu_millis=cores * 1000,
            memory_bytes=gib * GIB,
            pods=58,
            ephemeral_storage_bytes=20 * GIB,
            architecture="amd64",
            operating_systems=("linux",),
        )
        for name, cores, gib, _ in types
    }


def catalog_of(types: Sequence[TypeRow], zones: Sequence[str]) -> catalog.Catalog:
    offerings = [
        catalog.Offering(
            instance_type=name,
            zone=zone,
            capacity_type="on-demand",
            price_per_hour=round(price + 0.01 * position, 6),
        )
        for name, _, _, price in types
        for position, zone in enumerate(zones)
    ]
    return catalog.Catalog.of(instance_types(types), offerings)


def catalog_file(path: Path, types: Sequence[TypeRow], zones: Sequence[str]) -> Path:
    """The catalog as simcloud's ``--catalog`` reads it (Karpenter kwok's file form)."""
    path.write_text(json.dumps(catalog_of(types, zones).to_json()))
    return path


def requirements(types: Sequence[TypeRow], zones: Sequence[str]) -> list[dict[str, Any]]:
    """Every type in every zone, on-demand."""
    return [
        {"key": wellknown.INSTANCE_TYPE_LABEL, "operator": "In", "values": [t[0] for t in types]},
        {"key": wellknown.ZONE_LABEL, "operator": "In", "values": list(zones)},
        {"key": wellknown.CAPACITY_TYPE_LABEL, "operator": "In", "values": ["on-demand"]},
    ]


def many_types_pool(
    name: str, types: Sequence[TypeRow], zones: Sequence[str], *, max_nodes: int = 10
) -> dict[str, Any]:
    """A NodePool allowing every type in every zone; its template reserves 100m cpu."""
    spec = nodepool_api.NodePoolSpec(
        max_nodes=max_nodes,
        requirements=Requirements.from_list(requirements(types, zones)),
        template=nodepool_api.NodeTemplate(reserved={"cpu": "100m"}),
    )
    return nodepool_api.manifest(name, spec)
