"""What a Node of a pool looks like: capacity, allocatable, zone and labels, from the template."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodepool_operator.api import nodepool as np

GI = 1024**3


def test_capacity_is_in_integer_units_with_storage_only_when_set() -> None:
    template = np.NodeTemplate(cpu="3500m", memory="16Gi", pods=110)
    assert np.template_capacity(template) == {"cpu": 3500, "memory": 16 * GI, "pods": 110}


def test_capacity_has_ephemeral_storage_and_every_extended_resource() -> None:
    template = np.NodeTemplate(
        cpu="4",
        memory="1G",
        pods=8,
        ephemeral_storage="100Gi",
        extended_resources={"example.com/gpu": "2", "example.com/slot": "1k"},
    )
    assert np.template_capacity(template) == {
        "cpu": 4000,
        "memory": 10**9,
        "pods": 8,
        "ephemeral-storage": 100 * GI,
        "example.com/gpu": 2,
        "example.com/slot": 1000,
    }


def test_an_extended_resource_that_is_not_whole_is_an_error_naming_it() -> None:
    template = np.NodeTemplate(extended_resources={"example.com/gpu": "1500m"})
    with pytest.raises(ValueError, match=r"extendedResources\[example.com/gpu\]"):
        np.template_capacity(template)


def test_without_reserve_allocatable_is_the_capacity() -> None:
    template = np.NodeTemplate(ephemeral_storage="10Gi", extended_resources={"example.com/a": "1"})
    assert np.template_allocatable(template) == np.template_capacity(template)


def test_allocatable_is_capacity_minus_reserved_for_every_resource() -> None:
    template = np.NodeTemplate(
        cpu="4",
        memory="16Gi",
        pods=110,
        ephemeral_storage="100Gi",
        extended_resources={"example.com/gpu": "4"},
        reserved={
            "cpu": "500m",
            "memory": "1Gi",
            "pods": "10",
            "ephemeral-storage": "10Gi",
            "example.com/gpu": "1",
        },
    )
    assert np.template_allocatable(template) == {
        "cpu": 3500,
        "memory": 15 * GI,
        "pods": 100,
        "ephemeral-storage": 90 * GI,
        "example.com/gpu": 3,
    }


def test_a_reserve_is_rounded_up_as_kubelet_rounds_quantities() -> None:
    template = np.NodeTemplate(cpu="1", reserved={"cpu": "100.5m"})
    assert np.template_allocatable(template)["cpu"] == 1000 - 101


def test_allocatable_never_goes_below_zero_and_ignores_unknown_reserves() -> None:
    # The CRD refuses both; an object stored before a rule existed must still not crash.
    template = np.NodeTemplate(
        cpu="1", reserved={"cpu": "2", "ephemeral-storage": "1Gi", "example.com/x": "1"}
    )
    allocatable = np.template_allocatable(template)
    assert allocatable["cpu"] == 0
    assert set(allocatable) == {"cpu", "memory", "pods"}


def test_without_zones_a_vm_has_no_zone() -> None:
    assert np.zone_of("pool-3", np.NodeTemplate()) is None


def test_zones_go_round_by_the_vm_index() -> None:
    template = np.NodeTemplate(zones=("a", "b", "c"))
    names = [f"my-pool-{i}" for i in range(7)]
    assert [np.zone_of(n, template) for n in names] == ["a", "b", "c", "a", "b", "c", "a"]


@given(st.integers(0, 10_000), st.lists(st.text(min_size=1), min_size=1, unique=True))
def test_a_vm_zone_depends_only_on_its_name(index: int, zones: list[str]) -> None:
    template = np.NodeTemplate(zones=tuple(zones))
    zone = np.zone_of(f"p-{index}", template)
    assert zone == zones[index % len(zones)]
    assert zone == np.zone_of(f"p-{index}", np.NodeTemplate(zones=tuple(zones), cpu="8"))


def test_a_name_without_an_index_still_gets_one_stable_zone() -> None:
    template = np.NodeTemplate(zones=("a", "b"))
    zone = np.zone_of("hand-made", template)
    assert zone in ("a", "b")
    assert np.zone_of("hand-made", template) == zone


def test_node_labels_carry_the_pool_the_template_labels_and_the_platform() -> None:
    template = np.NodeTemplate(labels={"tier": "web"})
    assert np.node_labels("web", template) == {
        "tier": "web",
        np.POOL_LABEL: "web",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
    }


def test_node_labels_carry_the_zone_given_and_the_template_region() -> None:
    template = np.NodeTemplate(zones=("eu-1a", "eu-1b"), region="eu-1")
    labels = np.node_labels("p", template, zone=np.zone_of("p-1", template))
    assert labels[np.ZONE_LABEL] == "eu-1b"
    assert labels[np.REGION_LABEL] == "eu-1"
    assert np.ZONE_LABEL not in np.node_labels("p", template)


def test_topology_labels_are_the_well_known_ones() -> None:
    assert np.ZONE_LABEL == "topology.kubernetes.io/zone"
    assert np.REGION_LABEL == "topology.kubernetes.io/region"
    assert np.HOSTNAME_LABEL == "kubernetes.io/hostname"


def test_weight_defaults_to_zero_and_reads_back() -> None:
    assert np.NodePoolSpec().weight == 0
    assert np.NodePoolSpec.from_dict({"weight": 7}).weight == 7
