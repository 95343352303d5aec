"""A lower bound on the price of any set of new nodes that holds the pending pods, to judge
a packing against: no packing, however found, costs less.

Why it holds: a node of offering ``c`` (price ``p``, allocatable ``a``) hosting pods ``S``
has ``sum(s.r for s in S) <= a.r`` for every resource ``r``, so for any weights ``λ >= 0``
with ``sum(λ) == 1``,

    p >= sum(λ.r * p * sum(s.r for s in S) / a.r for r)
      = sum(s: sum(λ.r * s.r * p / a.r for r) for s in S)
      >= sum(s: unit(s, λ) for s in S)

where ``unit(s, λ)`` is the least of ``sum(λ.r * s.r * p_c / a_c.r)`` over the offerings
``c`` the pod may use and that hold it alone. Summed over the nodes, every pod once: the
price of the plan is at least ``sum(unit(s, λ))``, for every ``λ``. The bound is the
largest over a grid of ``λ`` (every vertex, so each resource's cheapest unit price alone,
and the points between them in steps of ``1 / GRID_STEPS``). It is the LP relaxation's
dual restricted to prices proportional to each offering's: exact when one resource binds
every node, below the optimum by the waste a whole-node packing cannot avoid otherwise.

And at the same grid of weights, the LP relaxation's own dual (``_fluid``): nodes of any
offering in fractions, covering only the pods' summed requests; it is the stronger of the
two when the cheapest nodes are cheap on different resources (a cpu-cheap type and a
memory-cheap one mixed), the per-pod bound when pods are too large for the cheapest types.
The bound is the larger of the two.

Pure: no I/O, no clock; the demands and offerings are ``priced_packing``'s.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Final

from nodepool_operator.controllers.autoscaler.simulation.priced_packing import (
    PodDemand,
    PricedCandidate,
)

__all__ = ["GRID_STEPS", "price_lower_bound", "weight_grid"]

#: Steps between two vertices of the weight grid (for up to three resources in use;
#: beyond that, the vertices, the centre and the midpoints of every pair).
GRID_STEPS: Final = 10


def weight_grid(dimensions: int, steps: int = GRID_STEPS) -> list[tuple[float, ...]]:
    """Weights ``λ`` (non-negative, summing to 1) over ``dimensions`` resources."""
    if dimensions <= 0:
        return []
    if dimensions <= 3:
        points = [
            tuple(part / steps for part in parts)
            for parts in itertools.product(range(steps + 1), repeat=dimensions)
            if sum(parts) == steps
        ]
        return points
    vertices = [tuple(float(i == j) for i in range(dimensions)) for j in range(dimensions)]
    centre = [tuple(1 / dimensions for _ in range(dimensions))]
    pairs = [
        tuple(0.5 if i in (a, b) else 0.0 for i in range(dimensions))
        for a, b in itertools.combinations(range(dimensions), 2)
    ]
    return vertices + centre + pairs


def price_lower_bound(
    demands: Sequence[PodDemand],
    candidates: Sequence[PricedCandidate],
    *,
    steps: int = GRID_STEPS,
) -> float:
    """The least price per hour any set of new nodes holding every pod of ``demands``
    could cost (module docstring). Pods that no offering they allow holds are left out:
    no plan places them."""
    resources = sorted(
        {name for demand in demands for name, amount in demand.requests.items() if amount > 0}
    )
    if not resources:
        return 0.0
    # Per demand: the offerings it allows that hold one of its pods, as their price per
    # unit of each resource (the cheapest offering of each allocatable alone, and only
    # those no other beats on every unit price: the least is among them). Worked out per
    # allowed set and per set of shapes that hold the pod, which pods share.
    shapes_of: dict[frozenset[int], list[tuple[tuple[int, ...], tuple[float, ...]]]] = {}
    pareto_of: dict[tuple[frozenset[int], tuple[int, ...]], list[tuple[float, ...]]] = {}
    shares: list[tuple[int, tuple[int, ...], list[tuple[float, ...]]]] = []
    for demand in demands:
        if demand.count <= 0:
            continue
        shapes = shapes_of.get(demand.allowed)
        if shapes is None:
            shapes = _cheapest_shapes(demand.allowed, candidates, resources)
            shapes_of[demand.allowed] = shapes
        need = tuple(demand.requests.get(name, 0) for name in resources)
        holding = tuple(
            i
            for i, (have, _) in enumerate(shapes)
            if all(n <= a for n, a in zip(need, have, strict=True))
        )
        if not holding:
            continue
        key = (demand.allowed, holding)
        rows = pareto_of.get(key)
        if rows is None:
            rows = _pareto([shapes[i][1] for i in holding])
            pareto_of[key] = rows
        shares.append((demand.count, need, rows))
    # The fluid bound's data: the requests of the pods some offering holds, summed, and
    # the allocatable of every offering some pod may use (whether or not it holds any one
    # pod alone).
    totals = tuple(
        float(sum(count * need[r] for count, need, _ in shares)) for r in range(len(resources))
    )
    usable = sorted({i for demand in demands for i in demand.allowed if 0 <= i < len(candidates)})
    offered = [
        (candidates[i].price, tuple(float(candidates[i].allocatable.get(r, 0)) for r in resources))
        for i in usable
    ]
    best = 0.0
    for weights in weight_grid(len(resources), steps):
        per_pod = 0.0
        for count, need, rows in shares:
            weighted = tuple(w * n for w, n in zip(weights, need, strict=True))
            per_pod += count * min(_dot(weighted, row) for row in rows)
        best = max(best, per_pod, _fluid(weights, totals, offered))
    return best


def _cheapest_shapes(
    allowed: frozenset[int], candidates: Sequence[PricedCandidate], resources: Sequence[str]
) -> list[tuple[tuple[int, ...], tuple[float, ...]]]:
    """Per allocatable among ``allowed``: the allocatable and the cheapest offering's price
    per unit of each resource (0 where it has none: only pods asking none fit there)."""
    cheapest: dict[tuple[int, ...], float] = {}
    for index in allowed:
        if not 0 <= index < len(candidates):
            continue
        candidate = candidates[index]
        have = tuple(candidate.allocatable.get(name, 0) for name in resources)
        if have not in cheapest or candidate.price < cheapest[have]:
            cheapest[have] = candidate.price
    return [
        (have, tuple(price / a if a > 0 else 0.0 for a in have))
        for have, price in sorted(cheapest.items())
    ]


def _fluid(
    weights: tuple[float, ...],
    totals: tuple[float, ...],
    shapes: list[tuple[float, tuple[float, ...]]],
) -> float:
    """The LP relaxation's dual at prices ``t * weights`` per unit of each resource, ``t``
    as large as every offering allows (``t * weights . allocatable <= price``): any plan's
    nodes cover the pods' totals, so they cost at least ``t * weights . totals``."""
    scale = min(
        (price / _dot(weights, have) for price, have in shapes if _dot(weights, have) > 0),
        default=0.0,
    )
    return scale * _dot(weights, totals)


def _pareto(rows: list[tuple[float, ...]]) -> list[tuple[float, ...]]:
    """The rows no other row is at most in every column (those alone can be the least)."""
    unique = sorted(set(rows))
    return [
        row for row in unique if not any(other != row and _at_most(other, row) for other in unique)
    ]


def _dot(weights: tuple[float, ...], row: tuple[float, ...]) -> float:
    return sum(w * s for w, s in zip(weights, row, strict=True))


def _at_most(other: tuple[float, ...], row: tuple[float, ...]) -> bool:
    return all(o <= r for o, r in zip(other, row, strict=True))
