"""Fixtures for the api tests: a small model of what the API server does with a CRD schema.

``apply_defaults`` follows apiextensions' ``defaulting.Default``: a missing (or null)
property gets a deep copy of its default, then defaulting goes on inside it. ``validate``
checks the OpenAPI keywords these schemas use, refuses unknown fields (as
``fieldValidation=Strict`` does), and evaluates each ``x-kubernetes-validations`` rule
through a hand-written Python mirror. A rule without a mirror is an error, so that a new
or changed CEL rule cannot go untested. The real server remains the judge: the
integration tests send these objects to it.

The model is handed to tests as the ``server_model`` fixture, because the suite imports
test modules in importlib mode, where they cannot import a helper module by name.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from typing import Any

import pytest

from nodepool_operator.api import launch, nodepool_schema, quantity, wellknown


def re2_search(pattern: str, text: str) -> bool:
    """Does RE2 (OpenAPI ``pattern``, CEL ``matches``) find ``pattern`` in ``text``?

    Python's ``re`` reads these patterns as RE2 does but for one thing: its ``$`` also
    matches before a final newline, where RE2's matches only at the end of the text.
    """
    if pattern.endswith("$"):
        pattern = pattern[:-1] + r"\Z"
    assert "$" not in pattern, f"only a final $ is translated: {pattern}"
    return re.search(pattern, text) is not None


def _is_qualified_name(name: str) -> bool:
    """CEL's ``matches(LABEL_KEY_PATTERN) && indexOf('/') <= 253``."""
    return re2_search(nodepool_schema.LABEL_KEY_PATTERN, name) and name.find("/") <= 253


def _value(text: Any) -> Fraction | None:
    """CEL's ``quantity(string(text))``, or None where ``isQuantity(string(text))`` is
    false: an integer (an int-or-string quantity written ``4``) reads as its digits."""
    try:
        return quantity.parse_quantity(str(text) if isinstance(text, int) else text)
    except ValueError:
        return None


def _is_quantity_text(value: Any) -> bool:
    """The format rule: a non-negative integer, or a text in the parser's grammar."""
    if isinstance(value, int):
        return value >= 0
    return re2_search(quantity.NON_NEGATIVE_QUANTITY_PATTERN, value)


def _positive_or_malformed(value: Any) -> bool:
    """The positive rule: an integer above zero; a text that is no quantity passes (the
    format rule refuses it), any other must be above zero."""
    if isinstance(value, int):
        return value > 0
    amount = _value(value)
    return amount is None or amount > 0


def _is_whole(text: Any) -> bool:
    value = _value(text)
    return value is not None and value.denominator == 1 and abs(value) < 2**63


def _reserve_below(template: Mapping[str, Any], resource: str, capacity: Any) -> bool:
    """The reserve of ``resource``, if any, is a quantity less than ``capacity``."""
    if resource not in template.get("reserved", {}):
        return True
    reserve, limit = _value(template["reserved"][resource]), _value(capacity)
    return reserve is None or limit is None or reserve < limit


def _reserve_at_most(template: Mapping[str, Any], resource: str, capacity: Any) -> bool:
    if resource not in template.get("reserved", {}):
        return True
    reserve, limit = _value(template["reserved"][resource]), _value(capacity)
    return reserve is None or limit is None or reserve <= limit


def _reserved_names_known(t: Mapping[str, Any]) -> bool:
    return all(
        k in ("cpu", "memory", "pods")
        or (k == "ephemeral-storage" and "ephemeralStorage" in t)
        or k in t.get("extendedResources", {})
        for k in t.get("reserved", {})
    )


def _extended_reserves_fit(t: Mapping[str, Any]) -> bool:
    extended = t.get("extendedResources", {})
    return all(
        _value(t["reserved"][k]) is None
        or _value(extended[k]) is None
        or (_is_whole(t["reserved"][k]) and _reserve_at_most(t, k, extended[k]))
        for k in t.get("reserved", {})
        if k in extended
    )


def _extended_names_valid(resources: Mapping[str, Any]) -> bool:
    return all(
        re2_search(nodepool_schema.EXTENDED_RESOURCE_NAME_PATTERN, k)
        and "kubernetes.io/" not in k
        and not k.startswith("requests.")
        for k in resources
    )


def _rule_at(path: str, index: int = 0) -> str:
    """The ``index``-th CEL rule of the NodePool spec's schema node at ``path``
    (``.template.labels``)."""
    node: Mapping[str, Any] = nodepool_schema.SPEC_SCHEMA
    for part in path.lstrip(".").split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return str(node["x-kubernetes-validations"][index]["rule"])


def _platform_label_holds(labels: Mapping[str, Any], label: str, values: Iterable[str]) -> bool:
    return label not in labels or labels[label] in values


def _template_rule(message: str) -> str:
    [rule] = [
        r["rule"]
        for r in nodepool_schema.SPEC_SCHEMA["properties"]["template"]["x-kubernetes-validations"]
        if r["message"] == message
    ]
    return str(rule)


# Each CEL rule used in the CRDs, as a Python predicate of (self, oldSelf); oldSelf is
# None on create, where the server skips transition rules. The template's reserve rules
# are long, so they are found by their message; each mirror still covers one rule.
_AWS_TAG_RULES = launch.AWS_SCHEMA["properties"]["tags"]["x-kubernetes-validations"]

CEL_MIRRORS: dict[str, Callable[[Any, Any], bool]] = {
    "self.minNodes <= self.maxNodes": lambda s, _: bool(s["minNodes"] <= s["maxNodes"]),
    "self.targetNodes <= self.maxNodes": lambda s, _: bool(s["targetNodes"] <= s["maxNodes"]),
    "self == oldSelf": lambda s, old: old is None or bool(s == old),
    "has(self.schedule) == has(self.duration)": lambda s, _: ("schedule" in s) == ("duration" in s),
    nodepool_schema.SPEC_SCHEMA["properties"]["template"]["properties"]["cpu"][
        "x-kubernetes-validations"
    ][0]["rule"]: lambda s, _: _is_quantity_text(s),
    nodepool_schema.SPEC_SCHEMA["properties"]["template"]["properties"]["cpu"][
        "x-kubernetes-validations"
    ][1]["rule"]: lambda s, _: _positive_or_malformed(s),
    "type(self) == int || !isQuantity(self) || quantity(self).isInteger()": (
        lambda s, _: isinstance(s, int) or _value(s) is None or _is_whole(s)
    ),
    nodepool_schema.SPEC_SCHEMA["properties"]["template"]["properties"]["extendedResources"][
        "x-kubernetes-validations"
    ][0]["rule"]: lambda s, _: _extended_names_valid(s),
    _rule_at(".template.labels"): lambda s, _: all(_is_qualified_name(k) for k in s),
    _rule_at(".template.labels", 1): lambda s, _: (
        not any(k in wellknown.OPERATOR_LABELS for k in s)
    ),
    _rule_at(".template.labels", 2): lambda s, _: _platform_label_holds(
        s, wellknown.ARCH_LABEL, wellknown.ARCHITECTURES
    ),
    _rule_at(".template.labels", 3): lambda s, _: _platform_label_holds(
        s, wellknown.OS_LABEL, wellknown.OPERATING_SYSTEMS
    ),
    _rule_at(".template.taints.[].key"): lambda s, _: _is_qualified_name(s),
    _template_rule(
        "reserved may name only cpu, memory, pods, ephemeral-storage (when "
        "ephemeralStorage is set) and the template's extendedResources"
    ): lambda s, _: _reserved_names_known(s),
    _template_rule("reserved.cpu must be less than cpu"): (
        lambda s, _: _reserve_below(s, "cpu", s["cpu"])
    ),
    _template_rule("reserved.memory must be less than memory"): (
        lambda s, _: _reserve_below(s, "memory", s["memory"])
    ),
    _template_rule("reserved.pods must be a whole number less than pods"): (
        lambda s, _: (
            "pods" not in s.get("reserved", {})
            or _value(s["reserved"]["pods"]) is None
            or (_is_whole(s["reserved"]["pods"]) and _reserve_below(s, "pods", str(s["pods"])))
        )
    ),
    _template_rule("reserved.ephemeral-storage must not exceed ephemeralStorage"): (
        lambda s, _: (
            "ephemeralStorage" not in s
            or _reserve_at_most(s, "ephemeral-storage", s["ephemeralStorage"])
        )
    ),
    _template_rule(
        "a reserved extended resource must be a whole number no larger than in extendedResources"
    ): lambda s, _: _extended_reserves_fit(s),
    launch.SUBNETS_COVER_ZONES_RULE["rule"]: lambda s, _: (
        "aws" not in s.get("provider", {})
        or all(z in s["provider"]["aws"]["subnets"] for z in s.get("zones", ()))
    ),
    _AWS_TAG_RULES[0]["rule"]: lambda s, _: (
        not any(k.startswith(launch.RESERVED_TAG_PREFIXES) for k in s)
    ),
    _AWS_TAG_RULES[1]["rule"]: lambda s, _: all(1 <= len(k) <= 128 for k in s),
    _rule_at(".requirements.[]"): lambda s, _: (
        s["operator"] not in ("In", "NotIn") or len(s.get("values", [])) > 0
    ),
    _rule_at(".requirements.[]", 1): lambda s, _: (
        s["operator"] not in ("Exists", "DoesNotExist") or len(s.get("values", [])) == 0
    ),
    _rule_at(".requirements.[]", 2): lambda s, _: (
        s["operator"] not in ("Gt", "Lt")
        or (len(s.get("values", [])) == 1 and re2_search("^[0-9]{1,18}$", s["values"][0]))
    ),
}


def walk(schema: Mapping[str, Any], path: str = "") -> list[tuple[str, Mapping[str, Any]]]:
    """Every schema node with its path, depth first."""
    nodes: list[tuple[str, Mapping[str, Any]]] = [(path, schema)]
    for name, sub in schema.get("properties", {}).items():
        nodes += walk(sub, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), Mapping):
        nodes += walk(schema["additionalProperties"], f"{path}.*")
    if "items" in schema:
        nodes += walk(schema["items"], f"{path}[]")
    return nodes


def apply_defaults(schema: Mapping[str, Any], value: Any) -> Any:
    """``value`` (mutated in place and returned) with the schema's defaults applied."""
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name, sub in properties.items():
            if "default" in sub and value.get(name) is None:
                value[name] = copy.deepcopy(sub["default"])
        for name, item in value.items():
            if name in properties:
                apply_defaults(properties[name], item)
            elif isinstance(schema.get("additionalProperties"), Mapping):
                apply_defaults(schema["additionalProperties"], item)
    elif isinstance(value, list) and "items" in schema:
        for item in value:
            apply_defaults(schema["items"], item)
    return value


def _has_type(kind: str, value: Any) -> bool:
    if kind == "int-or-string":
        return _has_type("integer", value) or isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, {"object": dict, "array": list, "string": str, "boolean": bool}[kind])


def _scalar_errors(schema: Mapping[str, Any], value: Any, *, path: str) -> list[str]:
    errors = []
    if not isinstance(value, str):
        # Only a string has a length or a pattern (an int-or-string may be an integer).
        schema = {k: v for k, v in schema.items() if k not in ("minLength", "maxLength", "pattern")}
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: Unsupported value: {value!r}")
    if "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{path}: should be greater than or equal to {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        errors.append(f"{path}: should be less than or equal to {schema['maximum']}")
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(f"{path}: should be at least {schema['minLength']} chars long")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(f"{path}: may not be more than {schema['maxLength']} bytes")
    if "pattern" in schema and not re2_search(schema["pattern"], value):
        errors.append(f"{path}: should match '{schema['pattern']}'")
    return errors


def _object_errors(
    schema: Mapping[str, Any], value: dict[str, Any], *, path: str, old: Any
) -> list[str]:
    errors = [
        f"{path}.{name}: Required value" for name in schema.get("required", []) if name not in value
    ]
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        errors.append(f"{path}: must have at most {schema['maxProperties']} items")
    properties = schema.get("properties", {})
    for name, item in value.items():
        old_item = old.get(name) if isinstance(old, dict) else None
        if name in properties:
            errors += validate(properties[name], item, path=f"{path}.{name}", old=old_item)
        elif isinstance(schema.get("additionalProperties"), Mapping):
            errors += validate(schema["additionalProperties"], item, path=f"{path}.{name}")
        else:
            errors.append(f'{path}: unknown field "{name}"')
    return errors


def _array_errors(schema: Mapping[str, Any], value: list[Any], *, path: str) -> list[str]:
    errors = []
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(f"{path}: must have at most {schema['maxItems']} items")
    for i, item in enumerate(value):
        errors += validate(schema["items"], item, path=f"{path}[{i}]")
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "set":
        keys = [repr(item) for item in value]
    elif list_type == "map":
        names = schema["x-kubernetes-list-map-keys"]
        keys = [repr([item.get(n) for n in names]) for item in value if isinstance(item, dict)]
    else:
        keys = []
    if len(set(keys)) != len(keys):
        errors.append(f"{path}: Duplicate value")
    return errors


def type_of(schema: Mapping[str, Any]) -> str:
    """The node's ``type``; "int-or-string" for an ``x-kubernetes-int-or-string`` node,
    which structural schemas give no type."""
    if schema.get("x-kubernetes-int-or-string"):
        return "int-or-string"
    return str(schema["type"])


def validate(
    schema: Mapping[str, Any], value: Any, *, path: str = "", old: Any = None
) -> list[str]:
    """The errors the server would report for ``value``; empty when it is valid."""
    if path == ".metadata":
        return []  # ObjectMeta is validated by the server's own rules, not by this schema.
    kind = type_of(schema)
    if not _has_type(kind, value):
        return [f"{path}: must be of type {kind}"]
    if kind == "object":
        errors = _object_errors(schema, value, path=path, old=old)
    elif kind == "array":
        errors = _array_errors(schema, value, path=path)
    else:
        errors = _scalar_errors(schema, value, path=path)
    for rule in schema.get("x-kubernetes-validations", []):
        mirror = CEL_MIRRORS[rule["rule"]]  # KeyError: a rule with no Python mirror yet
        if not errors and not mirror(value, old):
            errors.append(f"{path}: {rule['message']}")
    return errors


class ServerModel:
    """The functions above, bundled for the ``server_model`` fixture."""

    cel_mirrors = CEL_MIRRORS
    re2_search = staticmethod(re2_search)
    walk = staticmethod(walk)
    type_of = staticmethod(type_of)
    apply_defaults = staticmethod(apply_defaults)
    validate = staticmethod(validate)


@pytest.fixture(scope="session")
def server_model() -> ServerModel:
    return ServerModel()
