"""What a Node of a pool looks like: capacity, allocatable, zone and labels, from the template."""

from __future__ import annotations

import pytest

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown

GI = 1024**3


def test_capacity_is_in_integer_units_with_storage_only_when_set() -> None:
    template = nodepool_api.NodeTemplate(cpu="3500m", memory="16Gi", pods=110)
    assert nodepool_api.template_capacity(template) == {"cpu": 3500, "memory": 16 * GI, "pods": 110}


def test_capacity_has_ephemeral_storage_and_every_extended_resource() -> None:
    template = nodepool_api.NodeTemplate(
        cpu="4",
        memory="1G",
        pods=8,
        ephemeral_storage="100Gi",
        extended_resources={"example.com/gpu": "2", "example.com/slot": "1k"},
    )
    assert nodepool_api.template_capacity(template) == {
        "cpu": 4000,
        "memory": 10**9,
        "pods": 8,
        "ephemeral-storage": 100 * GI,
        "example.com/gpu": 2,
        "example.com/slot": 1000,
    }


def test_an_extended_resource_that_is_not_whole_is_an_error_naming_it() -> None:
    template = nodepool_api.NodeTemplate(extended_resources={"example.com/gpu": "1500m"})
    with pytest.raises(ValueError, match=r"extendedResources\[example.com/gpu\]"):
        nodepool_api.template_capacity(template)


def test_without_reserve_allocatable_is_the_capacity() -> None:
    template = nodepool_api.NodeTemplate(
        ephemeral_storage="10Gi", extended_resources={"example.com/a": "1"}
    )
    assert nodepool_api.template_allocatable(template) == nodepool_api.template_capacity(template)


def test_allocatable_is_capacity_minus_reserved_for_every_resource() -> None:
    template = nodepool_api.NodeTemplate(
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
    assert nodepool_api.template_allocatable(template) == {
        "cpu": 3500,
        "memory": 15 * GI,
        "pods": 100,
        "ephemeral-storage": 90 * GI,
        "example.com/gpu": 3,
    }


def test_a_reserve_is_rounded_up_as_kubelet_rounds_quantities() -> None:
    template = nodepool_api.NodeTemplate(cpu="1", reserved={"cpu": "100.5m"})
    assert nodepool_api.template_allocatable(template)["cpu"] == 1000 - 101


def test_allocatable_never_goes_below_zero_and_ignores_unknown_reserves() -> None:
    # The CRD refuses both; an object stored before a rule existed must still not crash.
    template = nodepool_api.NodeTemplate(
        cpu="1", reserved={"cpu": "2", "ephemeral-storage": "1Gi", "example.com/x": "1"}
    )
    allocatable = nodepool_api.template_allocatable(template)
    assert allocatable["cpu"] == 0
    assert set(allocatable) == {"cpu", "memory", "pods"}


def test_node_labels_carry_the_pool_the_template_labels_and_the_platform() -> None:
    template = nodepool_api.NodeTemplate(labels={"tier": "web"})
    assert nodepool_api.node_labels("web", template) == {
        "tier": "web",
        wellknown.POOL_LABEL: "web",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
    }


def test_the_template_may_set_the_architecture_and_os_but_not_the_pool_label() -> None:
    template = nodepool_api.NodeTemplate(
        labels={"kubernetes.io/arch": "arm64", wellknown.POOL_LABEL: "other"}
    )
    labels = nodepool_api.node_labels("web", template)
    assert labels["kubernetes.io/arch"] == "arm64"
    assert labels["kubernetes.io/os"] == "linux"
    assert labels[wellknown.POOL_LABEL] == "web"


def test_node_labels_carry_the_zone_given_and_the_template_region() -> None:
    template = nodepool_api.NodeTemplate(zones=("eu-1a", "eu-1b"), region="eu-1")
    labels = nodepool_api.node_labels("p", template, zone="eu-1b")
    assert labels[wellknown.ZONE_LABEL] == "eu-1b"
    assert labels[wellknown.REGION_LABEL] == "eu-1"
    assert wellknown.ZONE_LABEL not in nodepool_api.node_labels("p", template)


def test_topology_labels_are_the_well_known_ones() -> None:
    assert wellknown.ZONE_LABEL == "topology.kubernetes.io/zone"
    assert wellknown.REGION_LABEL == "topology.kubernetes.io/region"
    assert wellknown.HOSTNAME_LABEL == "kubernetes.io/hostname"


def test_weight_defaults_to_zero_and_reads_back() -> None:
    assert nodepool_api.NodePoolSpec().weight == 0
    assert nodepool_api.NodePoolSpec.from_dict({"weight": 7}).weight == 7
