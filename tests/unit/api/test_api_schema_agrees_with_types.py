"""The dataclasses and the CRD schemas describe the same objects, field by field.

The schemas are checked as they appear inside the rendered CRDs, so what is proved is
what the server receives.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union

import pytest

from nodepool_operator.api import (
    autoscaler,
    meta,
    nodepool,
    nodepool_schema,
    scalerequest,
)


def _crd_schema(crd: Mapping[str, Any]) -> Mapping[str, Any]:
    schema: Mapping[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


NODEPOOL = _crd_schema(nodepool_schema.crd())["properties"]
SCALEREQUEST = _crd_schema(scalerequest.crd())["properties"]
AUTOSCALER = _crd_schema(autoscaler.crd())["properties"]

# (type, its schema in the CRD, the smallest dict the server accepts for it)
PAIRS: list[tuple[type[Any], Mapping[str, Any], dict[str, Any]]] = [
    (nodepool.NodePoolSpec, NODEPOOL["spec"], {}),
    (nodepool.NodePoolStatus, NODEPOOL["status"], {}),
    (scalerequest.ScaleRequestSpec, SCALEREQUEST["spec"], {"nodePoolName": "p", "targetNodes": 2}),
    (scalerequest.ScaleRequestStatus, SCALEREQUEST["status"], {}),
    (autoscaler.AutoscalerSpec, AUTOSCALER["spec"], {"nodePoolName": "p"}),
    (autoscaler.AutoscalerStatus, AUTOSCALER["status"], {}),
]

NESTED: list[tuple[type[Any], Mapping[str, Any], dict[str, Any]]] = [
    (nodepool.NodeTemplate, NODEPOOL["spec"]["properties"]["template"], {}),
    (
        nodepool.Taint,
        NODEPOOL["spec"]["properties"]["template"]["properties"]["taints"]["items"],
        {"key": "gpu", "effect": "NoSchedule"},
    ),
    (
        meta.Condition,
        NODEPOOL["status"]["properties"]["conditions"]["items"],
        {
            "type": "Ready",
            "status": "True",
            "reason": "NodesReady",
            "message": "",
            "lastTransitionTime": "2025-01-31T12:00:00Z",
        },
    ),
    (autoscaler.ScaleDownPolicy, AUTOSCALER["spec"]["properties"]["scaleDown"], {}),
    (
        autoscaler.LastScaleRequest,
        AUTOSCALER["status"]["properties"]["lastRequest"],
        {"name": "pool-3", "targetNodes": 3},
    ),
]

ALL_PAIRS = PAIRS + NESTED


def _ids(pairs: list[tuple[type[Any], Mapping[str, Any], dict[str, Any]]]) -> list[str]:
    return [cls.__name__ for cls, _, _ in pairs]


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


def _without_none(hint: Any) -> tuple[Any, bool]:
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        assert len(args) == 1, f"unsupported union {hint}"
        return args[0], True
    return hint, False


def _type_mismatches(hint: Any, schema: Mapping[str, Any], *, path: str) -> list[str]:
    """How the Python type ``hint`` and the schema node disagree (empty when they agree)."""
    hint, _ = _without_none(hint)
    if isinstance(hint, type) and issubclass(hint, tuple) and hint is not tuple:
        # A named tuple type with methods (api.requirements.Requirements): its base says
        # what it holds.
        hint = hint.__orig_bases__[0]  # type: ignore[attr-defined]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    kind = schema.get("type")
    scalars = {int: "integer", str: "string", bool: "boolean", float: "number"}
    if hint is str and schema.get("x-kubernetes-int-or-string"):
        return []  # a quantity, written as a string or an integer; Python keeps its text
    if hint in scalars:
        if kind != scalars[hint]:
            return [f"{path}: Python {hint.__name__} but schema {kind}"]
        if "enum" in schema:
            return [f"{path}: schema has an enum but Python has plain {hint.__name__}"]
        return []
    if origin is Literal:
        if kind != "string" or schema.get("enum") != list(args):
            return [f"{path}: Literal{list(args)} but schema {kind} enum {schema.get('enum')}"]
        return []
    if origin is tuple:
        assert len(args) == 2, f"{path}: use tuple[X, ...]"
        assert args[1] is Ellipsis, f"{path}: use tuple[X, ...]"
        if kind != "array":
            return [f"{path}: Python tuple but schema {kind}"]
        return _type_mismatches(args[0], schema["items"], path=f"{path}[]")
    if origin in (Mapping, dict):
        if kind != "object" or "additionalProperties" not in schema:
            return [f"{path}: Python mapping but schema is not a map"]
        return _type_mismatches(args[1], schema["additionalProperties"], path=f"{path}.*")
    if dataclasses.is_dataclass(hint):
        if kind != "object" or "properties" not in schema:
            return [f"{path}: Python dataclass but schema {kind} without properties"]
        return _dataclass_mismatches(typing.cast(type[Any], hint), schema, path=path)
    return [f"{path}: no rule for Python type {hint}"]


def _dataclass_mismatches(cls: type[Any], schema: Mapping[str, Any], *, path: str) -> list[str]:
    hints = typing.get_type_hints(cls)
    fields = {_camel(f.name): f for f in dataclasses.fields(cls)}
    properties: Mapping[str, Any] = schema["properties"]
    problems = [f"{path}.{n}: in {cls.__name__}, not in schema" for n in fields.keys() - properties]
    problems += [
        f"{path}.{n}: in schema, not in {cls.__name__}" for n in properties - fields.keys()
    ]
    required = set(schema.get("required", []))
    for name in fields.keys() & properties.keys():
        field, prop = fields[name], properties[name]
        problems += _type_mismatches(hints[field.name], prop, path=f"{path}.{name}")
        has_default = not (
            field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        )
        must_be_given = name in required and "default" not in prop
        if has_default == must_be_given:
            problems.append(f"{path}.{name}: required in one view, optional in the other")
        # An absent list or map reads as empty; any other absent optional field as None.
        _, nullable = _without_none(hints[field.name])
        collection = prop.get("type") == "array" or "additionalProperties" in prop
        if nullable != (not must_be_given and "default" not in prop and not collection):
            problems.append(f"{path}.{name}: None in Python iff no default and not required")
    return problems


@pytest.mark.parametrize(("cls", "schema", "_minimal"), ALL_PAIRS, ids=_ids(ALL_PAIRS))
def test_every_field_has_a_schema_property_of_the_same_type_and_back(
    cls: type[Any], schema: Mapping[str, Any], _minimal: dict[str, Any]
) -> None:
    assert _dataclass_mismatches(cls, schema, path=cls.__name__) == []


@pytest.mark.parametrize(("cls", "schema", "minimal"), ALL_PAIRS, ids=_ids(ALL_PAIRS))
def test_from_dict_applies_exactly_the_defaults_the_server_applies(
    cls: Any, schema: Mapping[str, Any], minimal: dict[str, Any], server_model: Any
) -> None:
    server_side = server_model.apply_defaults(schema, copy.deepcopy(minimal))
    assert cls.from_dict(minimal).to_dict() == server_side


@pytest.mark.parametrize(("cls", "schema", "minimal"), ALL_PAIRS, ids=_ids(ALL_PAIRS))
def test_an_object_read_back_from_the_server_gives_the_same_value_as_the_one_sent(
    cls: Any, schema: Mapping[str, Any], minimal: dict[str, Any], server_model: Any
) -> None:
    server_side = server_model.apply_defaults(schema, copy.deepcopy(minimal))
    assert cls.from_dict(server_side) == cls.from_dict(minimal)


def test_object_defaults_in_the_schema_are_the_dataclass_defaults() -> None:
    spec = NODEPOOL["spec"]
    assert nodepool.NodePoolSpec.from_dict(spec["default"]) == nodepool.NodePoolSpec()
    template = spec["properties"]["template"]["default"]
    assert nodepool.NodeTemplate.from_dict(template) == nodepool.NodeTemplate()
    scale_down = AUTOSCALER["spec"]["properties"]["scaleDown"]["default"]
    assert autoscaler.ScaleDownPolicy.from_dict(scale_down) == autoscaler.ScaleDownPolicy()


def test_the_brief_defaults_are_the_ones_in_force() -> None:
    spec = nodepool.NodePoolSpec()
    assert (spec.target_nodes, spec.min_nodes, spec.max_nodes) == (0, 0, 10)
    assert spec.drain_timeout_seconds is None
    assert (spec.not_ready_timeout_seconds, spec.registration_timeout_seconds) == (600, 900)
    assert (spec.template.cpu, spec.template.memory, spec.template.pods) == ("4", "16Gi", 110)
    nas = autoscaler.AutoscalerSpec(node_pool_name="p")
    assert (nas.scan_interval_seconds, nas.batch_window_seconds) == (10, 1)
    assert nas.scale_down == autoscaler.ScaleDownPolicy(enabled=True, unneeded_seconds=600)


def test_the_lifecycle_timeouts_read_from_the_spec_and_default_when_absent() -> None:
    given = nodepool.NodePoolSpec.from_dict(
        {"drainTimeoutSeconds": 300, "notReadyTimeoutSeconds": 60, "registrationTimeoutSeconds": 0}
    )
    assert (
        given.drain_timeout_seconds,
        given.not_ready_timeout_seconds,
        given.registration_timeout_seconds,
    ) == (300, 60, 0)
    absent = nodepool.NodePoolSpec.from_dict({})
    assert absent.drain_timeout_seconds is None
    assert absent.not_ready_timeout_seconds == nodepool.DEFAULT_NOT_READY_TIMEOUT_SECONDS
    assert absent.registration_timeout_seconds == nodepool.DEFAULT_REGISTRATION_TIMEOUT_SECONDS
