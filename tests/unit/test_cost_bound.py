"""bench/cost_bound.py: the lower bounds on a workload's $/h that bench/peers.py's cost table
prints beside what each system paid."""

from __future__ import annotations

import pytest

from nodepool_operator.cloud import catalog
from unit import bench_scripts
from unit.kwok_types import kwok_type

cost_bound = bench_scripts.load("cost_bound")

GI = 2**30
Pod = cost_bound.PodRequest


def kind(name: str, cpu: int, memory_gi: int, pods: int, price: float) -> dict[str, object]:
    """One type in Karpenter kwok's file form, on-demand at ``price`` and spot at 0.7 of it,
    in two zones; 100m / 10Mi kept by the system as the kwok provider keeps."""
    return kwok_type(name, cpu, memory_gi, pods, price, zones=("z-a", "z-b"))


SMALL = kind("small-4x", 4, 16, 64, 0.10)  # 0.025 $/cpu
BIG = kind("big-32x", 32, 128, 512, 1.60)  # 0.05 $/cpu: twice the unit price


def test_pods_that_fill_whole_nodes_cost_exactly_those_nodes() -> None:
    sold = catalog.parse([SMALL])
    # 3.9 cpu allocatable: 13 pods of 300m fill one node exactly (3 900m).
    bound = cost_bound.lp_bound([Pod(300, GI // 4)] * 26, sold)
    assert bound.dollars_per_hour == pytest.approx(0.20)
    assert bound.nodes == {"small-4x": pytest.approx(2.0)}


def test_a_pod_larger_than_the_cheap_type_pays_for_a_type_that_holds_it() -> None:
    sold = catalog.parse([SMALL, BIG])
    pods = [Pod(30_000, 8 * GI)]
    # Per unit of cpu the small type is cheapest, and the per-resource bound believes that;
    # the pod fits only the big type, 30 of its 31.9 allocatable cpu.
    assert cost_bound.unit_price_bound(pods, sold) == pytest.approx(30 * 0.10 / 3.9)
    assert cost_bound.lp_bound(pods, sold).dollars_per_hour == pytest.approx(1.60 * 30 / 31.9)


def test_memory_bound_pods_are_priced_by_memory() -> None:
    sold = catalog.parse([SMALL])
    pods = [Pod(250, 8 * GI)] * 8  # 64Gi: memory, not cpu, needs over four nodes
    allocatable_gi = 16 - 10 / 1024
    expected = 0.10 * 64 / allocatable_gi
    assert cost_bound.unit_price_bound(pods, sold) == pytest.approx(expected)
    assert cost_bound.lp_bound(pods, sold).dollars_per_hour == pytest.approx(expected)


def test_spot_offerings_count_only_when_allowed() -> None:
    sold = catalog.parse([SMALL])
    pods = [Pod(300, GI // 4)] * 13
    on_demand = cost_bound.lp_bound(pods, sold).dollars_per_hour
    either = cost_bound.lp_bound(pods, sold, capacity_types=("on-demand", "spot"))
    assert on_demand == pytest.approx(0.10)
    assert either.dollars_per_hour == pytest.approx(0.07)


def test_the_bound_is_never_above_a_real_packing_nor_below_the_unit_price_one() -> None:
    sold = catalog.parse([SMALL, BIG, kind("mem-4x", 4, 32, 64, 0.13)])
    pods = [Pod(250, GI // 2)] * 20 + [Pod(2000, 12 * GI)] * 3 + [Pod(16_000, 20 * GI)]
    bound = cost_bound.lp_bound(pods, sold).dollars_per_hour
    # A real cluster: the 16-cpu pod on one big node with the 250m pods (21 cpu, 30Gi),
    # each 12Gi pod on a mem-4x: 1.60 + 3 * 0.13.
    assert bound <= 1.60 + 3 * 0.13
    assert bound >= cost_bound.unit_price_bound(pods, sold) - 1e-9


def test_a_pod_no_type_holds_has_no_bound() -> None:
    sold = catalog.parse([SMALL])
    with pytest.raises(cost_bound.UnplaceableError, match="30000m cpu"):
        cost_bound.lp_bound([Pod(30_000, GI)], sold)


def test_no_pods_cost_nothing() -> None:
    assert cost_bound.lp_bound([], catalog.parse([SMALL])).dollars_per_hour == 0.0


def test_unavailable_offerings_are_not_counted() -> None:
    dear = kind("small-4x", 4, 16, 64, 0.10)
    for offering in dear["offerings"]:  # type: ignore[attr-defined]
        if "on-demand" in offering["Requirements"][0]["values"]:
            offering["Available"] = False
    cheap_elsewhere = kind("other-4x", 4, 16, 64, 0.12)
    prices = cost_bound.cheapest_prices(catalog.parse([dear, cheap_elsewhere]))
    assert prices == {"other-4x": pytest.approx(0.12)}


# -- bench/peers.py's cost table: what it prices and which pools it gives the operator ------

peers = bench_scripts.load("peers")


def generic(family: str, cpu: int, price: float) -> dict[str, object]:
    memory = {"c": 2, "s": 4, "m": 8}[family] * cpu
    return kind(f"{family}-{cpu}x-amd64-linux", cpu, memory, 16 * cpu, price)


GENERIC = catalog.parse(
    [
        generic(f, cpu, cpu * {"c": 0.027, "s": 0.029, "m": 0.034}[f])
        for f in "csm"
        for cpu in (1, 2, 4, 8)
    ]
)


def test_nodes_are_priced_by_the_offering_their_labels_name() -> None:
    nodes = {
        "kwok-a": {  # as Karpenter's kwok provider labels its Nodes
            "node.kubernetes.io/instance-type": "c-4x-amd64-linux",
            "topology.kubernetes.io/zone": "z-a",
            "karpenter.sh/capacity-type": "spot",
        },
        "peers-s-2x-0": {  # as the operator's pool-per-type template labels them
            "node.kubernetes.io/instance-type": "s-2x-amd64-linux",
            "topology.kubernetes.io/zone": "z-b",
            "karpenter.sh/capacity-type": "on-demand",
        },
        "elsewhere": {"node.kubernetes.io/instance-type": "s-2x-amd64-linux"},  # no zone
    }
    priced = peers.price_nodes(nodes, GENERIC)
    assert priced.dollars_per_hour == pytest.approx(4 * 0.027 * 0.7 + 2 * 0.029)
    assert priced.unpriced == 1
    assert priced.nodes == 3
    assert priced.type_list() == "1 c-4x spot, 1 s-2x on-demand"


def test_the_operator_gets_karpenters_types_their_family_neighbours_and_a_holder_for_each_pod() -> (
    None
):
    pods = [cost_bound.PodRequest(250, GI // 4), cost_bound.PodRequest(7000, 40 * GI)]
    types = peers.pool_types(["s-2x-amd64-linux"], GENERIC, pods)
    # s-2x and its neighbours s-1x, s-4x hold the small pod; only m-8x holds 7 cpu / 40Gi.
    assert types == ["s-1x-amd64-linux", "s-2x-amd64-linux", "s-4x-amd64-linux", "m-8x-amd64-linux"]


def test_mixed_sizes_is_seeded_and_spans_250m_to_30_cpu_and_both_memory_extremes() -> None:
    first, again = peers.mixed_sizes(40, 49), peers.mixed_sizes(40, 49)
    assert first.shapes == again.shapes
    assert first.shapes != peers.mixed_sizes(40, 50).shapes
    requests = [peers.pod_request(shape) for shape in first.shapes]
    cpus = {r.cpu_millis for r in requests}
    assert min(cpus) == 250
    assert max(cpus) == 30000
    per_cpu = {r.memory_bytes * 1000 // (r.cpu_millis * GI) for r in requests}
    assert per_cpu == {1, 4, 7}  # cpu-heavy, standard and memory-heavy GiB per cpu


def test_a_pool_per_type_has_the_types_shape_reserve_zones_and_labels() -> None:
    (pool,) = peers.pool_per_type(GENERIC, ["m-8x-amd64-linux"])
    assert pool.name == "peers-m-8x"
    template = pool.spec.template
    assert (template.cpu_millicores, template.memory_bytes, template.pods) == (8000, 64 * GI, 128)
    assert template.reserved == {"cpu": "100m", "memory": "10Mi"}
    assert template.zones == ("z-a", "z-b")
    assert template.labels == {
        "node.kubernetes.io/instance-type": "m-8x-amd64-linux",
        "karpenter.sh/capacity-type": "on-demand",
    }
