"""Instance types in Karpenter kwok's ``instance_types.json`` form, for the tests of the
cost bench (``bench/cost_bound.py``, ``bench/peers.py --cost``): the file form both systems
are given, with the kwok provider's reserve as each type's ``overhead``."""

from __future__ import annotations

from collections.abc import Sequence

#: What Karpenter's kwok provider keeps on every type (``bench/peers.py`` ``RESERVED``).
KWOK_RESERVE = {"cpu": "100m", "memory": "10Mi"}


def kwok_type(
    name: str,
    cpu: int,
    memory_gi: int,
    pods: int,
    price: float,
    *,
    zones: Sequence[str],
    capacity_types: Sequence[str] = ("spot", "on-demand"),
    architecture: str = "amd64",
) -> dict[str, object]:
    """One type sold in each of ``zones`` as each of ``capacity_types``: on-demand at
    ``price``, spot at 0.7 of it (the generic catalog's ratio)."""
    return {
        "name": name,
        "architecture": architecture,
        "operatingSystems": ["linux"],
        "resources": {"cpu": str(cpu), "memory": f"{memory_gi}Gi", "pods": str(pods)},
        "overhead": dict(KWOK_RESERVE),
        "offerings": [
            {
                "Price": price * (0.7 if capacity == "spot" else 1.0),
                "Available": True,
                "Requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity]},
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]},
                ],
            }
            for zone in zones
            for capacity in capacity_types
        ],
    }
