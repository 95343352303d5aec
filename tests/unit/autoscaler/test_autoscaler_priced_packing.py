"""Cost-aware packing (simulation/priced_packing.py) and its lower bound
(simulation/price_bound.py): plans are valid, every node is right-sized, the price is
within a measured factor of the bound and never above Karpenter's packing rule on the
same mixes; the bound is below the exact optimum of small problems."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import priced_mixes
from nodepool_operator.controllers.autoscaler.simulation.price_bound import (
    price_lower_bound,
    weight_grid,
)
from nodepool_operator.controllers.autoscaler.simulation.priced_packing import (
    LARGEST,
    MATCHED,
    RATIO,
    PackingPlan,
    PodDemand,
    PricedCandidate,
    pack,
    plan_cheapest,
)

GI = 1024**3


def offering(
    name: str,
    cpu: int,
    memory_gi: int,
    price: float,
    *,
    pool: str = "general",
    zone: str = "zone-a",
    capacity_type: str = "on-demand",
    pods: int = 110,
    weight: int = 0,
    headroom: int | None = None,
) -> PricedCandidate:
    return PricedCandidate(
        pool=pool,
        instance_type=name,
        zone=zone,
        capacity_type=capacity_type,
        price=price,
        allocatable={"cpu": cpu * 1000, "memory": memory_gi * GI, "pods": pods},
        weight=weight,
        headroom=headroom,
    )


def pods(cpu_millis: int, memory_gi: float, count: int, allowed: Sequence[int]) -> PodDemand:
    return PodDemand(
        {"cpu": cpu_millis, "memory": int(memory_gi * GI), "pods": 1}, frozenset(allowed), count
    )


def assert_valid(
    plan: PackingPlan, demands: Sequence[PodDemand], candidates: Sequence[PricedCandidate]
) -> None:
    """Every pod once (on a node or unplaced); each node's offering is allowed by every pod
    on it and holds them all; the price is the nodes'; each node is right-sized: no cheaper
    offering its pods all allow holds them."""
    placed = [0] * len(demands)
    for node in plan.nodes:
        used: dict[str, int] = {}
        for d, count in node.pods:
            assert count > 0
            assert node.candidate in demands[d].allowed
            placed[d] += count
            for name, amount in demands[d].requests.items():
                used[name] = used.get(name, 0) + amount * count
        have = candidates[node.candidate].allocatable
        assert all(amount <= have.get(name, 0) for name, amount in used.items())
        allowed_by_all = set.intersection(*(set(demands[d].allowed) for d, _ in node.pods))
        cheaper_holding = [
            c
            for c in allowed_by_all
            if candidates[c].price < candidates[node.candidate].price - 1e-9
            and all(amount <= candidates[c].allocatable.get(n, 0) for n, amount in used.items())
            and candidates[c].headroom is None
        ]
        assert cheaper_holding == [], f"node {node} could be {cheaper_holding}"
    for d, demand in enumerate(demands):
        assert placed[d] + plan.unplaced.get(d, 0) == demand.count
    assert plan.price == pytest.approx(sum(candidates[n.candidate].price for n in plan.nodes))


def partitions(items: list[int]) -> Iterator[list[list[int]]]:
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for smaller in partitions(rest):
        for index in range(len(smaller)):
            yield [*smaller[:index], [first, *smaller[index]], *smaller[index + 1 :]]
        yield [[first], *smaller]


def optimum(demands: Sequence[PodDemand], candidates: Sequence[PricedCandidate]) -> float:
    """The exact least price, over every partition of the pods into nodes (tiny inputs)."""
    flat = [d for d, demand in enumerate(demands) for _ in range(demand.count)]
    best = math.inf
    for blocks in partitions(list(range(len(flat)))):
        total = 0.0
        for block in blocks:
            members = [demands[flat[i]] for i in block]
            allowed = set.intersection(*(set(m.allowed) for m in members))
            used = {
                name: sum(m.requests.get(name, 0) for m in members)
                for name in ("cpu", "memory", "pods")
            }
            prices = [
                candidates[c].price
                for c in allowed
                if all(used[n] <= candidates[c].allocatable.get(n, 0) for n in used)
            ]
            if not prices:
                total = math.inf
                break
            total += min(prices)
        best = min(best, total)
    return best


CATALOG = [
    offering("small", 2, 4, 0.10),
    offering("medium", 4, 16, 0.21),
    offering("large", 32, 64, 1.30),
    offering("large", 32, 64, 1.20, zone="zone-b"),
]


@st.composite
def tiny_problems(draw: st.DrawFn) -> tuple[list[PodDemand], list[PricedCandidate]]:
    candidates = [
        offering(
            f"t{i}",
            draw(st.integers(1, 8)),
            draw(st.integers(1, 16)),
            draw(st.floats(0.05, 2.0)),
            zone=draw(st.sampled_from(["zone-a", "zone-b"])),
            pods=draw(st.integers(1, 6)),
        )
        for i in range(draw(st.integers(1, 4)))
    ]
    every = range(len(candidates))
    demands = [
        pods(
            draw(st.integers(100, 6000)),
            draw(st.integers(0, 12)) / 2,
            draw(st.integers(1, 3)),
            draw(st.sets(st.sampled_from(list(every)), min_size=1)),
        )
        for _ in range(draw(st.integers(1, 3)))
    ]
    return demands, candidates


@settings(max_examples=150, deadline=None)
@given(tiny_problems())
def test_bound_optimum_and_plan_are_in_order_on_small_problems(
    problem: tuple[list[PodDemand], list[PricedCandidate]],
) -> None:
    demands, candidates = problem
    plan = plan_cheapest(demands, candidates)
    assert_valid(plan, demands, candidates)
    placeable = [
        PodDemand(d.requests, d.allowed, d.count - plan.unplaced.get(i, 0))
        for i, d in enumerate(demands)
    ]
    placeable = [d for d in placeable if d.count]
    best = optimum(placeable, candidates)
    assert price_lower_bound(demands, candidates) <= best + 1e-9
    assert best <= plan.price + 1e-9


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(priced_mixes.MIXES), st.integers(1, 400))
def test_every_packing_is_valid_on_generated_mixes(seed: int, mix: str, count: int) -> None:
    candidates = priced_mixes.catalog(30)
    demands = priced_mixes.mix(mix, count, random.Random(seed), candidates)
    for strategy in (RATIO, MATCHED, LARGEST):
        assert_valid(pack(demands, candidates, strategy), demands, candidates)
    assert_valid(plan_cheapest(demands, candidates), demands, candidates)


def test_weight_grid_covers_every_resource_alone_and_sums_to_one() -> None:
    for dimensions in range(1, 6):
        grid = weight_grid(dimensions)
        assert all(sum(weights) == pytest.approx(1) for weights in grid)
        assert all(min(weights) >= 0 for weights in grid)
        for axis in range(dimensions):
            assert tuple(float(i == axis) for i in range(dimensions)) in grid


def test_bound_of_one_resource_is_the_cheapest_unit_price_times_the_demand() -> None:
    # 10 pods of 1 cpu; 4 cpu for 0.4/h is 0.1 per cpu, 2 cpu for 0.3/h is 0.15.
    candidates = [offering("four", 4, 64, 0.4), offering("two", 2, 64, 0.3)]
    demands = [PodDemand({"cpu": 1000}, frozenset({0, 1}), 10)]
    assert price_lower_bound(demands, candidates) == pytest.approx(1.0)
    # The optimum: two "four" nodes for 8 pods, the last 2 on a "two" (not a third "four").
    assert plan_cheapest(demands, candidates).price == pytest.approx(1.1)


def test_bound_counts_a_pod_only_at_the_offerings_that_hold_it() -> None:
    # The cheap type per cpu cannot hold the 30-cpu pod: it pays the large type's rate.
    candidates = [offering("small", 2, 8, 0.05), offering("large", 32, 128, 2.0)]
    demands = [pods(30_000, 1, 1, [0, 1])]
    assert price_lower_bound(demands, candidates) >= 2.0 * 30 / 32 - 1e-9


def test_bound_takes_the_lp_relaxation_where_cheap_types_differ_by_resource() -> None:
    # cpu-cheap and memory-cheap types; pods that need both. Any mix of nodes covering
    # 8 cpu and 32 GiB costs at least what the fluid LP says: 1 x cpu-type + 1 x mem-type.
    candidates = [offering("cpu", 8, 8, 0.2), offering("mem", 2, 32, 0.2)]
    demands = [pods(1000, 4, 8, [0, 1])]
    assert price_lower_bound(demands, candidates) >= 0.4 - 1e-6


def test_the_issues_example_lands_on_the_cheapest_nodes_that_hold_it() -> None:
    # A pool allowing three types in two zones; a 30-cpu pod and twenty 250m pods.
    catalog = (
        [offering("m.large", 2, 8, 0.096, zone=zone, pods=29) for zone in ("zone-a", "zone-b")]
        + [offering("m.2xlarge", 8, 32, 0.384, zone=zone, pods=58) for zone in ("zone-a", "zone-b")]
        + [
            offering("m.8xlarge", 32, 128, 1.536, zone=zone, pods=234)
            for zone in ("zone-a", "zone-b")
        ]
    )
    catalog[1] = offering("m.large", 2, 8, 0.090, zone="zone-b", pods=29)  # b is cheaper
    every = range(len(catalog))
    demands = [pods(30_000, 8, 1, every), pods(250, 0.25, 20, every)]
    plan = plan_cheapest(demands, catalog)
    assert_valid(plan, demands, catalog)
    # The 30-cpu pod needs an 8xlarge, whose 2 cpu left hold 8 of the small pods; the 12
    # left (3 cpu) need two m.large, the cheaper zone's: cheaper than a 2xlarge.
    chosen = sorted(
        (catalog[n.candidate].instance_type, catalog[n.candidate].zone) for n in plan.nodes
    )
    assert plan.price == pytest.approx(1.536 + 2 * 0.090)
    assert chosen == [("m.8xlarge", "zone-a"), ("m.large", "zone-b"), ("m.large", "zone-b")] or (
        chosen == [("m.8xlarge", "zone-b"), ("m.large", "zone-b"), ("m.large", "zone-b")]
    )
    karpenter = priced_mixes.karpenter(demands, catalog)
    assert plan.price <= karpenter.price + 1e-9


def test_price_per_worth_beats_karpenters_rule_where_pod_slots_bind() -> None:
    # 200 pods of 100m: the large type fits their cpu but only 110 pods, the small ones
    # 14 pods for a fifth of the price per cpu of the slots used.
    catalog = [offering("big", 64, 256, 3.2, pods=110), offering("tiny", 2, 8, 0.1, pods=14)]
    demands = [pods(100, 0.1, 200, [0, 1])]
    plan = plan_cheapest(demands, catalog)
    karpenter = priced_mixes.karpenter(demands, catalog)
    assert_valid(plan, demands, catalog)
    assert karpenter.price == pytest.approx(2 * 3.2)  # two big nodes, as Karpenter packs
    assert plan.price == pytest.approx(15 * 0.1)  # 200 / 14 -> 15 tiny nodes
    assert price_lower_bound(demands, catalog) <= plan.price


def test_equal_prices_go_to_the_higher_weight_pool_then_the_least_waste() -> None:
    catalog = [
        offering("a", 4, 16, 0.2, pool="low"),
        offering("a", 4, 16, 0.2, pool="high", weight=10),
        offering("b", 8, 16, 0.2, pool="high", weight=10),
    ]
    demands = [pods(1000, 1, 3, [0, 1, 2])]
    plan = plan_cheapest(demands, catalog)
    assert [catalog[n.candidate].pool for n in plan.nodes] == ["high"]
    assert [catalog[n.candidate].instance_type for n in plan.nodes] == ["a"]


def test_a_pool_at_its_headroom_opens_no_more_nodes() -> None:
    catalog = [
        offering("cheap", 4, 16, 0.1, pool="capped", headroom=1),
        offering("dear", 4, 16, 0.5, pool="open"),
    ]
    demands = [pods(3000, 1, 3, [0, 1])]
    plan = plan_cheapest(demands, catalog)
    assert sorted(catalog[n.candidate].pool for n in plan.nodes) == ["capped", "open", "open"]
    only_capped = [pods(3000, 1, 3, [0])]
    plan = plan_cheapest(only_capped, catalog)
    assert len(plan.nodes) == 1
    assert plan.unplaced == {0: 2}


def test_pods_no_offering_holds_are_unplaced() -> None:
    demands = [pods(64_000, 1, 2, [0, 1]), pods(1000, 1, 1, [0])]
    plan = plan_cheapest(demands, CATALOG[:2])
    assert plan.unplaced == {0: 2}
    assert len(plan.nodes) == 1


def test_zone_pinned_pods_land_in_their_zone_and_share_nodes_with_any_zone_pods() -> None:
    demands = [pods(8000, 8, 3, [2]), pods(500, 0.5, 10, [0, 1, 2, 3])]
    plan = plan_cheapest(demands, CATALOG)
    assert_valid(plan, demands, CATALOG)
    assert all(CATALOG[n.candidate].zone == "zone-a" for n in plan.nodes if (0, 3) in n.pods)
    assert len(plan.nodes) == 1  # 24 + 5 cpu fit one large node in zone-a


# Price over the bound, summed over seeds 0-2 at 600 pods, as measured when the packing
# was written (mixed-sizes 1.090, small 1.092, random 1.181, zonal 1.115; Karpenter's rule
# 1.108, 1.353, 1.327, 1.177), with 3 % to spare: a change that packs worse fails here.
MEASURED_RATIO = {"mixed-sizes": 1.12, "small": 1.12, "random": 1.20, "zonal": 1.15}


@pytest.mark.parametrize("mix", priced_mixes.MIXES)
def test_price_stays_near_the_bound_and_below_karpenters_rule(mix: str) -> None:
    candidates = priced_mixes.catalog(100)
    totals = {"plan": 0.0, "bound": 0.0, "karpenter": 0.0}
    for seed in range(3):
        demands = priced_mixes.mix(mix, 600, random.Random(seed), candidates)
        plan = plan_cheapest(demands, candidates)
        assert not plan.unplaced
        totals["plan"] += plan.price
        totals["bound"] += price_lower_bound(demands, candidates, steps=6)
        totals["karpenter"] += priced_mixes.karpenter(demands, candidates).price
    assert totals["plan"] <= totals["karpenter"]
    assert totals["plan"] <= MEASURED_RATIO[mix] * totals["bound"]


def test_partitions_enumerates_every_set_partition() -> None:
    # Bell numbers: 1, 1, 2, 5, 15, 52.
    assert [sum(1 for _ in partitions(list(range(n)))) for n in range(6)] == [1, 1, 2, 5, 15, 52]
    assert sorted(map(sorted, itertools.chain.from_iterable(partitions([0, 1])))) == [
        [0],
        [0, 1],
        [1],
    ]


def test_a_pools_limits_are_never_passed_and_a_smaller_node_fits_under_them() -> None:
    # The 8-cpu spot node is larger and cheaper than the 2-cpu one (it would drop it as
    # dominated), but under 5 cpu of limits left only 2-cpu nodes fit: two of them, and
    # the pods a third would need stay unplaced.
    left = {"cpu": 5000}
    candidates = [
        dataclasses.replace(
            offering(name, cpu, cpu * 2, price), capacity={"cpu": cpu * 1000}, limits_left=left
        )
        for name, cpu, price in (("big-spot", 8, 0.05), ("small", 2, 0.10))
    ]
    demands = [pods(1000, 1, 6, [0, 1])]

    plan = plan_cheapest(demands, candidates)

    assert [candidates[n.candidate].instance_type for n in plan.nodes] == ["small", "small"]
    assert plan.unplaced == {0: 2}
    assert all(dict(n.pods) == {0: 2} for n in plan.nodes)
    # Without limits the big node takes all six.
    free = [dataclasses.replace(c, limits_left=None) for c in candidates]
    assert [free[n.candidate].instance_type for n in plan_cheapest(demands, free).nodes] == [
        "big-spot"
    ]
