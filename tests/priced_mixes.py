"""Priced catalogs, pod mixes and Karpenter's packing rule, for the cost-aware packing's
unit tests and ``bench/autoscaler_planning.py`` (one generator, so the figures the bench
records are the ones the tests assert on).

* ``catalog(types)``: a generic catalog like Karpenter kwok's: families ``c`` (2 GiB per
  cpu), ``m`` (4 GiB) and ``r`` (8 GiB), sizes from 1 to 192 cpu, a price per hour linear
  in cpu and memory with a family discount, in three zones (the zones' prices differ by a
  few percent) and two capacity types (spot at about a third).
* ``mix(name, count, rng)``: pods as ``PodDemand``s: ``mixed-sizes`` (250m to 30 cpu,
  memory-heavy and cpu-heavy Deployments), ``small`` (100m-1 cpu), ``random`` (every pod
  its own request), ``zonal`` (a third of the Deployments pinned to zone-b or zone-c, where
  nodes cost more than in zone-a).
* ``karpenter(demands, candidates)``: Karpenter's provisioner as it packs: pods sorted by
  cpu then memory, descending; each goes to the first node opened in this round whose
  remaining types still hold all its pods with it, else opens a node with every type that
  holds it; each node is launched as the cheapest type left.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from nodepool_operator.controllers.autoscaler.simulation.priced_packing import (
    PackingPlan,
    PlannedNode,
    PodDemand,
    PricedCandidate,
)

GI = 1024**3
ZONES = ("zone-a", "zone-b", "zone-c")
FAMILIES = {"c": (2, 0.85), "m": (4, 1.0), "r": (8, 0.9)}  # GiB per cpu, price factor
SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 72, 96, 128, 144, 160, 192)
MIXES = ("mixed-sizes", "small", "random", "zonal")


def catalog(
    types: int = 100, *, zones: Sequence[str] = ZONES, spot: bool = True, pool: str = "general"
) -> list[PricedCandidate]:
    """``types`` instance types (families over sizes, then generations), every offering."""
    found: list[PricedCandidate] = []
    made = 0
    generation = 0
    while made < types:
        for family, (ratio, factor) in FAMILIES.items():
            for cpu in SIZES:
                if made == types:
                    break
                name = f"{family}{generation + 5}.{cpu}x"
                memory = cpu * ratio * GI
                # Newer generations are a little cheaper per cpu and reserve a little more.
                base = (0.031 * cpu + 0.004 * cpu * ratio) * factor * (1 - 0.03 * generation)
                allocatable = {
                    "cpu": cpu * 1000 - 100 - 10 * cpu,
                    "memory": memory - (255 + 11 * cpu * ratio) * 1024**2,
                    "pods": min(110, 8 + 6 * cpu),
                }
                for z, zone in enumerate(zones):
                    kinds = (
                        (("on-demand", 1.0), ("spot", 0.3 + 0.02 * z))
                        if spot
                        else (("on-demand", 1.0),)
                    )
                    for kind, discount in kinds:
                        found.append(
                            PricedCandidate(
                                pool=pool,
                                instance_type=name,
                                zone=zone,
                                capacity_type=kind,
                                price=round(base * discount * (1 + 0.02 * z), 5),
                                allocatable=allocatable,
                            )
                        )
                made += 1
        generation += 1
    return found


def demand(cpu_millis: int, memory: int, allowed: frozenset[int], count: int) -> PodDemand:
    return PodDemand({"cpu": cpu_millis, "memory": memory, "pods": 1}, allowed, count)


def mix(
    name: str, count: int, rng: random.Random, candidates: Sequence[PricedCandidate]
) -> list[PodDemand]:
    """``count`` pods of mix ``name``, allowed on every candidate (``zonal``: some on one
    zone's only)."""
    every = frozenset(range(len(candidates)))
    if name == "random":
        return [
            demand(rng.randrange(50, 4000), rng.randrange(64, 16384) * 1024**2, every, 1)
            for _ in range(count)
        ]
    if name == "small":
        shapes = [
            (rng.choice([100, 250, 500, 1000]), rng.choice([1, 2, 4]) * GI // 4) for _ in range(8)
        ]
    else:
        shapes = []
        for _ in range(12):
            kind = rng.choice(("cpu-heavy", "memory-heavy", "balanced", "tiny"))
            if kind == "tiny":
                shapes.append((250, rng.choice([256, 512]) * 1024**2))
            else:
                cpu = rng.choice([250, 500, 1000, 2000, 4000, 8000, 16000, 30000])
                per_cpu = {"cpu-heavy": 1, "memory-heavy": 7, "balanced": 4}[kind]
                shapes.append((cpu, cpu * per_cpu * GI // 1000))
    per_shape = [0] * len(shapes)
    for _ in range(count):
        per_shape[rng.randrange(len(shapes))] += 1
    found = []
    for index, ((cpu, memory), pods) in enumerate(zip(shapes, per_shape, strict=True)):
        if not pods:
            continue
        allowed = every
        if name == "zonal" and index % 3 == 0:
            # Not the cheapest zone (zone-a): pinned pods cannot share its nodes.
            zone = ZONES[1 + index % 2]
            allowed = frozenset(i for i, c in enumerate(candidates) if c.zone == zone)
        found.append(demand(cpu, memory, allowed, pods))
    return found


def karpenter(demands: Sequence[PodDemand], candidates: Sequence[PricedCandidate]) -> PackingPlan:
    """Karpenter's packing (module docstring), one pod at a time: for small mixes only."""
    resources = sorted({r for c in candidates for r in c.allocatable})
    pods = sorted(
        (d for d, found in enumerate(demands) for _ in range(found.count)),
        key=lambda d: (-demands[d].requests.get("cpu", 0), -demands[d].requests.get("memory", 0)),
    )
    nodes: list[tuple[list[int], dict[str, int], dict[int, int]]] = []  # types, used, pods

    def holds(c: int, used: dict[str, int]) -> bool:
        return all(used.get(r, 0) <= candidates[c].allocatable.get(r, 0) for r in resources)

    unplaced: dict[int, int] = {}
    for d in pods:
        need = demands[d].requests
        for types, used, placed in nodes:
            after = {r: used.get(r, 0) + need.get(r, 0) for r in resources}
            left = [c for c in types if c in demands[d].allowed and holds(c, after)]
            if left:
                types[:] = left
                used.update(after)
                placed[d] = placed.get(d, 0) + 1
                break
        else:
            alone = {r: need.get(r, 0) for r in resources}
            types = [c for c in sorted(demands[d].allowed) if holds(c, alone)]
            if not types:
                unplaced[d] = unplaced.get(d, 0) + 1
                continue
            nodes.append((types, alone, {d: 1}))
    planned = [
        PlannedNode(
            min(types, key=lambda c: (candidates[c].price, c)), tuple(sorted(placed.items()))
        )
        for types, _, placed in nodes
    ]
    price = sum(candidates[n.candidate].price for n in planned)
    return PackingPlan(tuple(planned), price, unplaced, "karpenter")
