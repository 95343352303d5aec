"""A lower bound on the $/h of any set of nodes that runs a workload's pods, from a catalog.

Two bounds, both pure functions of the pods and the catalog (its instance types'
allocatable, capacity minus overhead, and the price of their offerings):

* ``lp_bound``, the LP relaxation of the cheapest packing. Variables: ``x[t]``, how many
  nodes of type ``t`` (its cheapest allowed offering), and ``y[s, t]``, how many pods of
  shape ``s`` go on them, only for the types that can hold one such pod. Minimise
  ``sum(price[t] * x[t])`` such that every pod is placed (``sum_t y[s, t] = count[s]``)
  and, per type and resource (cpu, memory, pod slots), the pods placed there fit in its
  nodes (``sum_s request[s, r] * y[s, t] <= allocatable[t, r] * x[t]``). Any real set of
  nodes with its pods on them is a solution (``x`` its node counts, ``y`` its placement),
  so the optimum is at most the price of the cheapest real cluster: a lower bound. Only
  the integrality of nodes is relaxed, so a pod larger than the cheap types still pays
  for a type that holds it. Solved by HiGHS (``highspy``).
* ``unit_price_bound``, weaker: per resource, the demand times the cheapest price of one
  unit of it over the types (every node pays at least that for what it offers of that
  resource); the largest over cpu, memory and pod slots. ``lp_bound`` is never below it.

A pod no allowed type can hold has no bound (``UnplaceableError``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections import Counter
from collections.abc import Collection, Iterable, Mapping

import highspy
import numpy as np

from nodepool_operator.cloud import catalog as catalog_api

GIB = 2**30


@dataclasses.dataclass(frozen=True, order=True)
class PodRequest:
    """What one pod requests: cpu in millicores, memory in bytes (one pod slot each)."""

    cpu_millis: int
    memory_bytes: int


class UnplaceableError(ValueError):
    """A pod that no allowed instance type can hold: no set of nodes runs the workload."""


@dataclasses.dataclass(frozen=True)
class Bound:
    """A lower bound in $/h, and the (fractional) nodes of each type the LP chose."""

    dollars_per_hour: float
    nodes: Mapping[str, float]


def cheapest_prices(
    sold: catalog_api.Catalog, *, capacity_types: Collection[str] = (catalog_api.ON_DEMAND,)
) -> dict[str, float]:
    """Per instance type, the price of its cheapest available offering of ``capacity_types``
    (any zone); types with none are left out."""
    prices: dict[str, float] = {}
    for offering in sold.offerings:  # cheapest first
        if offering.available and offering.capacity_type in capacity_types:
            prices.setdefault(offering.instance_type, offering.price_per_hour)
    return prices


def _resources(found: catalog_api.InstanceType) -> tuple[float, float, float]:
    return (
        found.allocatable_cpu_millis / 1000,
        found.allocatable_memory_bytes / GIB,
        float(found.pods),
    )


def _request(pod: PodRequest) -> tuple[float, float, float]:
    return (pod.cpu_millis / 1000, pod.memory_bytes / GIB, 1.0)


def holds(found: catalog_api.InstanceType, pod: PodRequest) -> bool:
    return (
        pod.cpu_millis <= found.allocatable_cpu_millis
        and pod.memory_bytes <= found.allocatable_memory_bytes
        and found.pods >= 1
    )


def _priced_types(
    sold: catalog_api.Catalog, capacity_types: Collection[str]
) -> list[tuple[catalog_api.InstanceType, float]]:
    prices = cheapest_prices(sold, capacity_types=capacity_types)
    return [(sold.types[name], price) for name, price in sorted(prices.items())]


def unit_price_bound(
    pods: Iterable[PodRequest],
    sold: catalog_api.Catalog,
    *,
    capacity_types: Collection[str] = (catalog_api.ON_DEMAND,),
) -> float:
    """The per-resource bound: max over cpu, memory and pod slots of the demand times the
    cheapest price per allocatable unit of it."""
    demand = [0.0, 0.0, 0.0]
    for pod in pods:
        for index, amount in enumerate(_request(pod)):
            demand[index] += amount
    priced = _priced_types(sold, capacity_types)
    if not priced:
        raise UnplaceableError("no instance type has an allowed offering")
    bound = 0.0
    for index, needed in enumerate(demand):
        units = [price / _resources(t)[index] for t, price in priced if _resources(t)[index] > 0]
        if needed > 0 and not units:
            raise UnplaceableError("no instance type has any of a resource the pods request")
        if needed > 0:
            bound = max(bound, needed * min(units))
    return bound


def _solver() -> highspy.Highs:
    """A silent HiGHS. Its first one in a process prints a banner from C++ on file
    descriptor 1, which would land in the bench's table: sent to stderr instead."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        solver = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    solver.setOptionValue("output_flag", False)
    return solver


def lp_bound(
    pods: Iterable[PodRequest],
    sold: catalog_api.Catalog,
    *,
    capacity_types: Collection[str] = (catalog_api.ON_DEMAND,),
) -> Bound:
    """The LP relaxation's optimum (see the module's docstring); ``UnplaceableError`` if a pod
    fits no type with an allowed offering."""
    shapes = Counter(pods)
    if not shapes:
        return Bound(0.0, {})
    priced = _priced_types(sold, capacity_types)
    ordered = sorted(shapes)
    # Columns: one x per type, then one y per (shape, type that holds it).
    placements: list[tuple[int, int]] = []
    for s, pod in enumerate(ordered):
        holders = [t for t, (found, _) in enumerate(priced) if holds(found, pod)]
        if not holders:
            raise UnplaceableError(
                f"a pod of {pod.cpu_millis}m cpu and {pod.memory_bytes / GIB:g}Gi fits no "
                "instance type with an allowed offering"
            )
        placements += [(s, t) for t in holders]
    types = len(priced)
    columns = types + len(placements)
    cost = np.zeros(columns)
    cost[:types] = [price for _, price in priced]
    # Rows: one "every pod placed" per shape, then three "fits" per type.
    rows = len(ordered) + 3 * types
    lower = np.concatenate([[float(shapes[pod]) for pod in ordered], np.full(3 * types, -np.inf)])
    upper = np.concatenate([[float(shapes[pod]) for pod in ordered], np.zeros(3 * types)])
    entries: dict[int, list[tuple[int, float]]] = {c: [] for c in range(columns)}
    for t, (found, _) in enumerate(priced):
        for r, amount in enumerate(_resources(found)):
            entries[t].append((len(ordered) + 3 * t + r, -amount))
    for column, (s, t) in enumerate(placements, start=types):
        entries[column].append((s, 1.0))
        for r, amount in enumerate(_request(ordered[s])):
            entries[column].append((len(ordered) + 3 * t + r, amount))
    model = highspy.HighsLp()
    model.num_col_, model.num_row_ = columns, rows
    model.col_cost_ = cost
    model.col_lower_ = np.zeros(columns)
    model.col_upper_ = np.full(columns, np.inf)
    model.row_lower_, model.row_upper_ = lower, upper
    model.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    starts, indices, values = [0], [], []
    for column in range(columns):
        for row, value in entries[column]:
            indices.append(row)
            values.append(value)
        starts.append(len(indices))
    model.a_matrix_.start_ = np.array(starts, dtype=np.int32)
    model.a_matrix_.index_ = np.array(indices, dtype=np.int32)
    model.a_matrix_.value_ = np.array(values)
    solver = _solver()
    solver.passModel(model)
    solver.run()
    status = solver.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"HiGHS ended with {solver.modelStatusToString(status)}")
    solution = list(solver.getSolution().col_value)
    nodes = {found.name: solution[t] for t, (found, _) in enumerate(priced) if solution[t] > 1e-6}
    return Bound(float(solver.getInfo().objective_function_value), nodes)


def main() -> None:
    """The bounds of bench/peers.py's cost workloads on its catalogs (no cluster)."""
    import argparse

    import peers  # the workloads and the catalog file; imported here: peers imports this

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--mixed-pods", type=int, default=40)
    parser.add_argument("--seed", type=int, default=49)
    arguments = parser.parse_args()
    mixed = peers.mixed_sizes(arguments.mixed_pods, arguments.seed)
    workloads = {
        "mixed-sizes": [peers.pod_request(shape) for shape in mixed.shapes],
        "scale-down (after)": [
            peers.pod_request(d.shape) for d in peers.SCALE_DOWN for _ in range(d.remain)
        ],
    }
    print("| catalog | workload | LP bound $/h | unit-price bound $/h | LP's nodes |")
    print("|---|---|---|---|---|")
    for name, capacity_types in peers.CATALOGS.items():
        sold = catalog_api.parse(peers.generic_catalog(capacity_types))
        for workload, pods in workloads.items():
            bound = lp_bound(pods, sold, capacity_types=capacity_types)
            unit = unit_price_bound(pods, sold, capacity_types=capacity_types)
            nodes = ", ".join(
                f"{n:.3f} {t.removesuffix('-amd64-linux')}" for t, n in sorted(bound.nodes.items())
            )
            print(f"| {name} | {workload} | {bound.dollars_per_hour:.3f} | {unit:.3f} | {nodes} |")


if __name__ == "__main__":
    main()
