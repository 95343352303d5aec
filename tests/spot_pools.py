"""A simcloud catalog that sells spot c4s, and a pool of spot nodes over it: what the spot
interruption e2e and chaos tests share."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.api.requirements import Requirements
from nodepool_operator.cloud import catalog, provider

ZONES = ("sim-1a", "sim-1b")
GIB = 2**30


def catalog_file(directory: Path) -> Path:
    """``simcloud --catalog``: c4 (4 CPU, 8 GiB) in both zones, spot and on-demand."""
    c4 = catalog.InstanceType(
        name="c4",
        cpu_millis=4000,
        memory_bytes=8 * GIB,
        pods=58,
        ephemeral_storage_bytes=20 * GIB,
        architecture="amd64",
        operating_systems=("linux",),
    )
    offerings = [
        catalog.Offering(
            instance_type="c4", zone=zone, capacity_type=capacity, price_per_hour=price
        )
        for zone in ZONES
        for capacity, price in (("spot", 0.06), ("on-demand", 0.19))
    ]
    path = directory / "instance_types.json"
    path.write_text(json.dumps(catalog.Catalog.of({"c4": c4}, offerings).to_json()))
    return path


def spot_pool(name: str, *, target: int = 3, max_nodes: int = 6) -> dict[str, Any]:
    """A pool of spot c4s only."""
    spec = nodepool_api.NodePoolSpec(
        target_nodes=target,
        max_nodes=max_nodes,
        requirements=Requirements.from_list(
            [
                {"key": wellknown.INSTANCE_TYPE_LABEL, "operator": "In", "values": ["c4"]},
                {"key": wellknown.ZONE_LABEL, "operator": "In", "values": list(ZONES)},
                {"key": wellknown.CAPACITY_TYPE_LABEL, "operator": "In", "values": ["spot"]},
            ]
        ),
        template=nodepool_api.NodeTemplate(reserved={"cpu": "100m"}),
    )
    return nodepool_api.manifest(name, spec)


def still_up(vms: Iterable[provider.VirtualMachine], taken: provider.VirtualMachine) -> bool:
    """Whether ``taken`` (not a later VM of its name) is in the cloud's listing ``vms`` and
    not being deleted."""
    return any(
        vm.name == taken.name
        and vm.created_at <= taken.created_at
        and vm.state != provider.VmState.DELETING
        for vm in vms
    )
