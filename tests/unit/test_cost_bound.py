"""bench/cost_bound.py: the lower bounds on a workload's $/h that bench/peers.py's cost table
prints beside what each system paid."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from nodepool_operator.cloud import catalog

_BENCH = Path(__file__).resolve().parents[2] / "bench" / "cost_bound.py"
_spec = importlib.util.spec_from_file_location("cost_bound", _BENCH)
assert _spec is not None
assert _spec.loader is not None
cost_bound = importlib.util.module_from_spec(_spec)
sys.modules["cost_bound"] = cost_bound  # its dataclasses look their module up by name
_spec.loader.exec_module(cost_bound)

GI = 2**30
Pod = cost_bound.PodRequest


def kind(name: str, cpu: int, memory_gi: int, pods: int, price: float) -> dict[str, object]:
    """One type in Karpenter kwok's file form, on-demand at ``price`` and spot at 0.7 of it,
    in two zones; 100m / 10Mi kept by the system as the kwok provider keeps."""
    return {
        "name": name,
        "architecture": "amd64",
        "operatingSystems": ["linux"],
        "resources": {"cpu": str(cpu), "memory": f"{memory_gi}Gi", "pods": str(pods)},
        "overhead": {"cpu": "100m", "memory": "10Mi"},
        "offerings": [
            {
                "Price": price * (0.7 if capacity == "spot" else 1.0),
                "Available": True,
                "Requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity]},
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]},
                ],
            }
            for zone in ("z-a", "z-b")
            for capacity in ("spot", "on-demand")
        ],
    }


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
