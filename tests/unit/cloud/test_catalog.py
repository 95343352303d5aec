"""The catalog a cloud sells, read from Karpenter kwok's instance_types.json form."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodepool_operator.api import wellknown
from nodepool_operator.api.requirements import Requirements
from nodepool_operator.cloud import catalog


def kwok_type(name: str, cpu: str, memory: str, offerings: list[dict[str, Any]]) -> dict[str, Any]:
    """One entry as Karpenter's kwok provider ships them."""
    return {
        "name": name,
        "offerings": offerings,
        "architecture": "amd64",
        "operatingSystems": ["linux"],
        "resources": {"cpu": cpu, "ephemeral-storage": "20Gi", "memory": memory, "pods": "16"},
    }


def offering_1x(price: float, *, zones: list[str], capacity: str = "on-demand") -> dict[str, Any]:
    """An offering as Karpenter 1.x writes it: requirements on zone and capacity type."""
    return {
        "Price": price,
        "Available": True,
        "Requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": zones},
        ],
    }


def test_both_offering_forms_of_karpenter_kwok_are_read() -> None:
    older = {"CapacityType": "spot", "Zone": "test-zone-a", "Price": 0.019, "Available": True}
    found = catalog.parse(
        [
            kwok_type("c-1x-amd64-linux", "1", "2Gi", [older]),
            kwok_type("s-2x-amd64-linux", "2", "8Gi", [offering_1x(0.058, zones=["test-zone-b"])]),
        ]
    )
    small = found.type("c-1x-amd64-linux")
    assert small is not None
    assert (small.cpu_millis, small.memory_bytes, small.pods) == (1000, 2 * 2**30, 16)
    assert small.ephemeral_storage_bytes == 20 * 2**30
    assert found.offering(
        instance_type="c-1x-amd64-linux", zone="test-zone-a", capacity_type="spot"
    ) == catalog.Offering(
        instance_type="c-1x-amd64-linux",
        zone="test-zone-a",
        capacity_type="spot",
        price_per_hour=0.019,
    )
    assert found.offerings_of("s-2x-amd64-linux")[0].zone == "test-zone-b"
    assert not found.sells_any_shape


def test_an_offering_naming_several_zones_is_one_per_zone_and_cheapest_comes_first() -> None:
    found = catalog.parse(
        [
            kwok_type("big", "8", "32Gi", [offering_1x(0.4, zones=["b", "a"])]),
            kwok_type("small", "2", "8Gi", [offering_1x(0.1, zones=["a"], capacity="spot")]),
        ]
    )
    assert [(o.instance_type, o.zone, o.capacity_type) for o in found.offerings] == [
        ("small", "a", "spot"),
        ("big", "a", "on-demand"),
        ("big", "b", "on-demand"),
    ]
    assert found.zones() == ("a", "b")


def test_extended_resources_and_overhead_are_kept() -> None:
    entry = kwok_type("gpu", "8", "32Gi", [offering_1x(2.5, zones=["a"])])
    entry["resources"]["nvidia.com/gpu"] = "1"
    entry["overhead"] = {"cpu": "100m", "memory": "512Mi"}
    [found] = catalog.parse([entry]).types.values()
    assert found.extended == {"nvidia.com/gpu": 1}
    assert (found.allocatable_cpu_millis, found.allocatable_memory_bytes) == (
        7900,
        32 * 2**30 - 512 * 2**20,
    )


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda e: e["resources"].pop("cpu"), "instance type 't': 'resources' has no 'cpu'"),
        (lambda e: e["resources"].update(memory="lots"), "instance type 't': memory 'lots'"),
        (lambda e: e["offerings"][0].update(Price="cheap"), "offering 0: 'Price' must be a number"),
        (lambda e: e["offerings"][0].update(Price=-1), "'Price' must not be negative"),
        (
            lambda e: e["offerings"][0]["Requirements"][0].update(values=["reserved"]),
            "its capacity type must be one of on-demand, spot",
        ),
        (lambda e: e["offerings"].clear(), "'offerings' must be a non-empty list"),
        (lambda e: e["offerings"].append(e["offerings"][0]), "offered twice in zone 'a'"),
    ],
)
def test_a_wrong_entry_is_refused_with_its_name_and_what_is_wrong(change: Any, said: str) -> None:
    entry = kwok_type("t", "2", "8Gi", [offering_1x(0.1, zones=["a"])])
    change(entry)
    with pytest.raises(catalog.CatalogError) as raised:
        catalog.parse([entry])
    assert said in str(raised.value)


def test_a_file_that_is_not_a_catalog_is_named(tmp_path: Path) -> None:
    path = tmp_path / "types.json"
    path.write_text('{"name": "not a list"}')
    with pytest.raises(catalog.CatalogError) as raised:
        catalog.load(path)
    assert str(raised.value) == f"{path}: a catalog is a JSON list of instance types"
    with pytest.raises(catalog.CatalogError, match="cannot read the catalog"):
        catalog.load(tmp_path / "missing.json")


def test_no_catalog_sells_any_shape() -> None:
    assert catalog.parse([]).sells_any_shape


@given(
    st.lists(
        st.tuples(
            st.integers(1, 256),  # cpu
            st.sampled_from([2, 4, 8]),  # GiB per cpu
            st.floats(0, 50, allow_nan=False),  # price
            st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True),
            st.sampled_from(["on-demand", "spot"]),
        ),
        max_size=8,
    )
)
def test_the_file_form_written_reads_back_equal(
    rows: list[tuple[int, int, float, list[str], str]],
) -> None:
    entries = [
        kwok_type(
            f"t{i}", str(cpu), f"{cpu * factor}Gi", [offering_1x(price, zones=zones, capacity=kind)]
        )
        for i, (cpu, factor, price, zones, kind) in enumerate(rows)
    ]
    found = catalog.parse(entries)
    again = catalog.parse(json.loads(json.dumps(found.to_json())))
    assert again == found


def test_an_offering_s_labels_are_what_requirements_judge_and_nodes_carry() -> None:
    kind = catalog.InstanceType(
        name="c-4x-arm",
        cpu_millis=4000,
        memory_bytes=8 * 2**30 + 5,
        pods=58,
        ephemeral_storage_bytes=0,
        architecture="arm64",
        operating_systems=("linux",),
    )
    spot = catalog.Offering(
        instance_type="c-4x-arm", zone="zone-b", capacity_type="spot", price_per_hour=0.05
    )
    labels = catalog.offering_labels(kind, spot)
    assert labels == {
        wellknown.INSTANCE_TYPE_LABEL: "c-4x-arm",
        wellknown.ARCH_LABEL: "arm64",
        wellknown.OS_LABEL: "linux",
        wellknown.ZONE_LABEL: "zone-b",
        wellknown.CAPACITY_TYPE_LABEL: "spot",
        wellknown.KARPENTER_CAPACITY_TYPE_LABEL: "spot",
        wellknown.INSTANCE_CPU_LABEL: "4",
        wellknown.INSTANCE_MEMORY_LABEL: "8192",
    }
    assert set(labels) == set(wellknown.OFFERING_LABELS)
    arm_spot_4 = Requirements.from_list(
        [
            {"key": wellknown.ARCH_LABEL, "operator": "In", "values": ["arm64"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
            {"key": wellknown.INSTANCE_CPU_LABEL, "operator": "Gt", "values": ["3"]},
        ]
    )
    assert arm_spot_4.allows(labels)
