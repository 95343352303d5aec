"""A pool's requirements and limits, and a ScaleRequest's offerings: what they allow, how
they read and write, and what the CRD refuses (the schema model here; the real server in
tests/e2e/test_pool_offerings.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from nodepool_operator.api import crds, fields, nodepool, scalerequest, wellknown
from nodepool_operator.api.requirements import Requirement, Requirements

LABELS = {
    wellknown.INSTANCE_TYPE_LABEL: "c-4x",
    wellknown.ZONE_LABEL: "zone-a",
    wellknown.CAPACITY_TYPE_LABEL: "spot",
    wellknown.INSTANCE_CPU_LABEL: "4",
}


def _schema(kind: str) -> Mapping[str, Any]:
    [crd] = [c for c in crds.all_crds() if c["spec"]["names"]["kind"] == kind]
    schema: Mapping[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _errors(server_model: Any, kind: str, spec: dict[str, Any]) -> list[str]:
    schema = _schema(kind)
    return list(server_model.validate(schema, server_model.apply_defaults(schema, {"spec": spec})))


@pytest.mark.parametrize(
    ("requirement", "allowed"),
    [
        ({"key": wellknown.INSTANCE_TYPE_LABEL, "operator": "In", "values": ["c-4x"]}, True),
        ({"key": wellknown.INSTANCE_TYPE_LABEL, "operator": "In", "values": ["m-8x"]}, False),
        ({"key": wellknown.ZONE_LABEL, "operator": "NotIn", "values": ["zone-b"]}, True),
        ({"key": wellknown.ZONE_LABEL, "operator": "NotIn", "values": ["zone-a"]}, False),
        ({"key": "example.com/absent", "operator": "NotIn", "values": ["x"]}, True),
        ({"key": wellknown.CAPACITY_TYPE_LABEL, "operator": "Exists"}, True),
        ({"key": "example.com/absent", "operator": "Exists"}, False),
        ({"key": "example.com/absent", "operator": "DoesNotExist"}, True),
        ({"key": wellknown.INSTANCE_CPU_LABEL, "operator": "Gt", "values": ["3"]}, True),
        ({"key": wellknown.INSTANCE_CPU_LABEL, "operator": "Gt", "values": ["4"]}, False),
        ({"key": wellknown.INSTANCE_CPU_LABEL, "operator": "Lt", "values": ["5"]}, True),
        ({"key": wellknown.INSTANCE_CPU_LABEL, "operator": "Lt", "values": ["4"]}, False),
        # Gt and Lt on a label that is absent or not an integer allow nothing.
        ({"key": "example.com/absent", "operator": "Lt", "values": ["5"]}, False),
        ({"key": wellknown.ZONE_LABEL, "operator": "Gt", "values": ["0"]}, False),
    ],
)
def test_one_requirement_judges_labels_as_a_node_selector_does(
    requirement: dict[str, Any], allowed: bool
) -> None:
    assert Requirements.from_list([requirement]).allows(LABELS) is allowed


def test_requirements_allow_a_node_only_when_every_one_does() -> None:
    spot_small = Requirements.from_list(
        [
            {"key": wellknown.CAPACITY_TYPE_LABEL, "operator": "In", "values": ["spot"]},
            {"key": wellknown.INSTANCE_CPU_LABEL, "operator": "Lt", "values": ["8"]},
        ]
    )
    assert spot_small.allows(LABELS)
    assert not spot_small.allows({**LABELS, wellknown.INSTANCE_CPU_LABEL: "16"})
    assert Requirements().allows({})  # none: every node


def test_values_of_intersects_the_in_requirements_on_a_key() -> None:
    zones = Requirements.from_list(
        [
            {"key": wellknown.ZONE_LABEL, "operator": "In", "values": ["a", "b"]},
            {"key": wellknown.ZONE_LABEL, "operator": "In", "values": ["b", "c"]},
        ]
    )
    assert zones.values_of(wellknown.ZONE_LABEL) == {"b"}
    assert zones.values_of(wellknown.INSTANCE_TYPE_LABEL) is None


@pytest.mark.parametrize(
    ("item", "problem"),
    [
        ({"key": "k", "operator": "In"}, "requirements[0].values: In needs at least one value"),
        (
            {"key": "k", "operator": "Exists", "values": ["x"]},
            "requirements[0].values: Exists takes no values",
        ),
        (
            {"key": "k", "operator": "Gt", "values": ["four"]},
            "requirements[0].values: Gt needs exactly one whole number",
        ),
        ({"key": "k", "operator": "Near", "values": ["x"]}, "requirements[0].operator"),
    ],
)
def test_a_wrong_requirement_read_from_an_object_names_where(
    item: dict[str, Any], problem: str
) -> None:
    with pytest.raises(fields.FieldError) as raised:
        nodepool.NodePoolSpec.from_dict({"requirements": [item]})
    assert str(raised.value).startswith(problem)


@pytest.mark.parametrize(
    ("requirement", "error"),
    [
        (
            {"key": "k", "operator": "Near", "values": ["x"]},
            ".spec.requirements[0].operator: Unsupported value",
        ),
        (
            {"key": "bad key", "operator": "Exists"},
            ".spec.requirements[0].key: a requirement key must be a qualified name",
        ),
        ({"key": "k", "operator": "In"}, ".spec.requirements[0]: In and NotIn need"),
        ({"key": "k", "operator": "NotIn", "values": []}, ".spec.requirements[0]: In and NotIn"),
        (
            {"key": "k", "operator": "DoesNotExist", "values": ["x"]},
            ".spec.requirements[0]: Exists and DoesNotExist take no values",
        ),
        (
            {"key": "k", "operator": "Lt", "values": ["1", "2"]},
            ".spec.requirements[0]: Gt and Lt need exactly one whole number as their value",
        ),
        ({"key": "k", "operator": "Gt", "values": ["2.5"]}, ".spec.requirements[0]: Gt and Lt"),
        ({"key": "k", "operator": "Gt", "values": ["-1"]}, ".spec.requirements[0].values[0]"),
        ({"key": "k", "operator": "Gt", "values": ["1e3"]}, ".spec.requirements[0]: Gt and Lt"),
        ({"key": "k", "operator": "In", "values": ["a b"]}, ".spec.requirements[0].values[0]"),
        ({"operator": "Exists"}, ".spec.requirements[0].key: Required value"),
    ],
)
def test_the_crd_refuses_a_wrong_requirement_naming_it(
    requirement: dict[str, Any], error: str, server_model: Any
) -> None:
    errors = _errors(server_model, "NodePool", {"requirements": [requirement]})
    assert any(e.startswith(error) for e in errors), errors


def test_the_crd_refuses_a_malformed_limit(server_model: Any) -> None:
    errors = _errors(server_model, "NodePool", {"limits": {"cpu": "lots"}})
    assert [e.split(":")[0] for e in errors] == [".spec.limits.cpu"]


def test_the_crd_accepts_requirements_and_limits_as_documented(server_model: Any) -> None:
    spec = {
        "requirements": [
            {"key": wellknown.INSTANCE_TYPE_LABEL, "operator": "In", "values": ["a", "b", "c"]},
            {"key": wellknown.ZONE_LABEL, "operator": "NotIn", "values": ["zone-c"]},
            {"key": wellknown.CAPACITY_TYPE_LABEL, "operator": "Exists"},
            {"key": wellknown.INSTANCE_MEMORY_LABEL, "operator": "Gt", "values": ["0"]},
        ],
        "limits": {"cpu": 64, "memory": "256Gi"},
    }
    assert _errors(server_model, "NodePool", spec) == []
    read = nodepool.NodePoolSpec.from_dict(spec)
    assert len(read.requirements) == 4
    assert read.limits == nodepool.Limits(cpu="64", memory="256Gi")


def test_limits_name_the_one_a_total_exceeds() -> None:
    limits = nodepool.Limits(cpu="8", memory="16Gi")
    assert limits.exceeded(cpu_millicores=8000, memory_bytes=16 * 2**30) is None
    assert limits.exceeded(cpu_millicores=8001, memory_bytes=0) == (
        "limits.cpu=8 (the nodes would have 8001m)"
    )
    assert "limits.memory=16Gi" in str(limits.exceeded(cpu_millicores=0, memory_bytes=2**40))
    assert nodepool.Limits().exceeded(cpu_millicores=10**9, memory_bytes=10**15) is None


def test_a_pool_without_requirements_reads_and_writes_as_before() -> None:
    spec = nodepool.NodePoolSpec.from_dict({"targetNodes": 2})
    assert spec.requirements == ()
    assert spec.limits is None
    assert "requirements" not in spec.to_dict()
    assert "limits" not in spec.to_dict()


def test_a_scale_request_names_offerings_and_the_crd_checks_them(server_model: Any) -> None:
    offerings = [
        {"instanceType": "c-4x", "zone": "zone-a", "capacityType": "spot", "count": 2},
        {"instanceType": "m-8x", "zone": "zone-b", "capacityType": "on-demand", "count": 1},
    ]
    spec = {"nodePoolName": "p", "targetNodes": 3, "newNodeOfferings": offerings}
    assert _errors(server_model, "ScaleRequest", spec) == []
    read = scalerequest.ScaleRequestSpec.from_dict(spec)
    assert [o.key for o in read.new_node_offerings] == [
        ("c-4x", "zone-a", "spot"),
        ("m-8x", "zone-b", "on-demand"),
    ]
    assert read.to_dict()["newNodeOfferings"] == offerings
    bad = [{**offerings[0], "capacityType": "reserved", "count": 0}]
    errors = _errors(server_model, "ScaleRequest", {**spec, "newNodeOfferings": bad})
    assert sorted(e.split(":")[0] for e in errors) == [
        ".spec.newNodeOfferings[0].capacityType",
        ".spec.newNodeOfferings[0].count",
    ]
    twice = [offerings[0], {**offerings[0], "count": 1}]
    errors = _errors(server_model, "ScaleRequest", {**spec, "newNodeOfferings": twice})
    assert errors == [".spec.newNodeOfferings: Duplicate value"]


def test_an_offering_backoff_reads_back_and_a_zone_backoff_writes_as_before() -> None:
    zone_only = nodepool.ZoneBackoff(reason="InsufficientCapacity", failures=1, until="t")
    assert set(zone_only.to_dict()) == {"zone", "shape", "reason", "failures", "until", "message"}
    assert not zone_only.is_offering
    offering = nodepool.ZoneBackoff(
        zone="zone-a",
        shape="c-4x",
        reason="InsufficientCapacity",
        failures=2,
        until="t",
        instance_type="c-4x",
        capacity_type="spot",
    )
    assert offering.is_offering
    assert nodepool.ZoneBackoff.from_dict(offering.to_dict()) == offering
    assert isinstance(Requirement(key="k", operator="Exists"), Requirement)
