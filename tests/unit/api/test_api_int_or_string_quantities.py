"""A quantity written as an integer (``cpu: 4``, as every Pod spec writes it) is read as its
digits, everywhere the NodePool template has a quantity; anything else is a named error."""

from __future__ import annotations

from typing import Any

import pytest

from nodepool_operator.api import fields, nodepool


def test_integer_quantities_read_as_their_digits_and_plan_as_the_strings_would() -> None:
    written_as_integers = nodepool.NodeTemplate.from_dict(
        {
            "cpu": 4,
            "memory": 17179869184,
            "ephemeralStorage": 100,
            "extendedResources": {"example.com/gpu": 2},
            "reserved": {"cpu": 1, "pods": 10, "example.com/gpu": 1},
        }
    )
    written_as_strings = nodepool.NodeTemplate.from_dict(
        {
            "cpu": "4",
            "memory": "16Gi",
            "ephemeralStorage": "100",
            "extendedResources": {"example.com/gpu": "2"},
            "reserved": {"cpu": "1", "pods": "10", "example.com/gpu": "1"},
        }
    )
    assert written_as_integers.cpu == "4"
    assert written_as_integers.extended_resources == {"example.com/gpu": "2"}
    assert written_as_integers.to_dict()["reserved"] == {
        "cpu": "1",
        "pods": "10",
        "example.com/gpu": "1",
    }
    assert nodepool.template_allocatable(written_as_integers) == nodepool.template_allocatable(
        written_as_strings
    )
    assert nodepool.template_allocatable(written_as_integers)["cpu"] == 3000


@pytest.mark.parametrize(
    ("template", "error"),
    [
        ({"cpu": True}, "cpu: expected a quantity (string or integer), got bool"),
        ({"memory": 1.5}, "memory: expected a quantity (string or integer), got float"),
        (
            {"reserved": {"cpu": [1]}},
            "reserved.cpu: expected a quantity (string or integer), got list",
        ),
    ],
)
def test_a_quantity_of_another_type_is_a_named_field_error(
    template: dict[str, Any], error: str
) -> None:
    with pytest.raises(fields.FieldError, match=error.replace("(", r"\(").replace(")", r"\)")):
        nodepool.NodeTemplate.from_dict(template)
