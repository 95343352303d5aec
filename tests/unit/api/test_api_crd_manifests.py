"""The CRDs are what the API server needs: structural, strict, defaulted and validated."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from nodepool_operator.api import (
    autoscaler,
    crds,
    nodepool,
    nodepool_schema,
    scalerequest,
)

KINDS = [nodepool, scalerequest, autoscaler]
QUALIFIED = (
    'an optional DNS subdomain prefix of at most 253 characters and "/", then at most 63 '
    'letters, digits, "-", "_" or ".", starting and ending with a letter or digit'
)
LABEL_KEYS = "label keys must be qualified names"
TAINT_KEY = "a taint key must be a qualified name"
PREFIX_253 = "a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "." + "d" * 61  # 253 characters
KIND_IDS = ["NodePool", "ScaleRequest", "Autoscaler"]


def _crd(kind: Any) -> dict[str, Any]:
    """The kind's CRD as ``crds`` assembles it (NodePool's schema lives in its own module)."""
    [crd] = [c for c in crds.all_crds() if c["spec"]["names"]["kind"] == kind.KIND]
    return crd


def _schema(kind: Any) -> Mapping[str, Any]:
    crd = _crd(kind)
    schema: Mapping[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _version(kind: Any) -> Mapping[str, Any]:
    version: Mapping[str, Any] = _crd(kind)["spec"]["versions"][0]
    return version


def _node_at(schema: Mapping[str, Any], json_path: str) -> Mapping[str, Any]:
    node = schema
    for part in json_path.lstrip(".").split("."):
        node = node["properties"][part]
    return node


def _column_node(schema: Mapping[str, Any], json_path: str) -> Mapping[str, Any]:
    """The schema a printer column points at; a condition's field by its type, as
    ``.status.conditions[?(@.type=="Ready")].status``, is the field of one list item."""
    found = re.fullmatch(r'(\.[\w.]+)\[\?\(@\.type=="(\w+)"\)\]\.(\w+)', json_path)
    if found is None:
        return _node_at(schema, json_path)
    items = _node_at(schema, found.group(1))["items"]
    assert "type" in items["properties"], json_path  # the filter's key is a field of each item
    node: Mapping[str, Any] = items["properties"][found.group(3)]
    return node


def _created(server_model: Any, kind: Any, *, obj: dict[str, Any]) -> list[str]:
    """The errors the server would report when creating ``obj`` (after defaulting it)."""
    schema = _schema(kind)
    return list(server_model.validate(schema, server_model.apply_defaults(schema, obj)))


@pytest.mark.parametrize(
    ("kind", "name", "short_name"),
    [
        (nodepool, "nodepools.nodepool.dev", "np"),
        (scalerequest, "scalerequests.nodepool.dev", "sr"),
        (autoscaler, "autoscalers.nodepool.dev", "nas"),
    ],
    ids=KIND_IDS,
)
def test_each_kind_is_a_cluster_scoped_v1alpha1_resource_of_the_group(
    kind: Any, name: str, short_name: str
) -> None:
    crd = _crd(kind)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == name == f"{kind.PLURAL}.{kind.GROUP}"
    assert crd["spec"]["group"] == "nodepool.dev"
    assert crd["spec"]["scope"] == "Cluster"
    names = crd["spec"]["names"]
    assert names == {
        "kind": kind.KIND,
        "listKind": f"{kind.KIND}List",
        "plural": kind.PLURAL,
        "singular": kind.SINGULAR,
        "shortNames": [short_name],
    }
    assert kind.API_VERSION == "nodepool.dev/v1alpha1"
    [version] = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_schemas_are_structural_and_prune_unknown_fields(kind: Any, server_model: Any) -> None:
    for path, node in server_model.walk(_schema(kind)):
        if node.get("x-kubernetes-int-or-string"):
            # Structural: no type, and anyOf may only say "an integer or a string".
            assert "type" not in node, path
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            continue
        assert "type" in node, f"{path}: every node needs a type"
        assert "x-kubernetes-preserve-unknown-fields" not in node, path
        # Forbidden next to properties, and a boolean would not be structural anyway.
        assert not isinstance(node.get("additionalProperties"), bool), path
        assert not ("properties" in node and "additionalProperties" in node), path
        if node["type"] == "object" and path not in ("", ".metadata"):
            assert "properties" in node or "additionalProperties" in node, path
        if "x-kubernetes-list-map-keys" in node:
            items = node["items"]
            for key in node["x-kubernetes-list-map-keys"]:
                assert key in items.get("required", []) or "default" in items["properties"][key]
    metadata = _schema(kind)["properties"]["metadata"]
    # At the root, the server lets a CRD restrict only metadata's name and generateName.
    assert metadata["type"] == "object"
    assert set(metadata.get("properties", {})) <= {"name", "generateName"}


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_every_default_is_valid_as_written(kind: Any, server_model: Any) -> None:
    # The server checks defaults against the schema and CEL rules when the CRD is
    # created, without filling in nested defaults first.
    for path, node in server_model.walk(_schema(kind)):
        if "default" in node:
            assert server_model.validate(node, node["default"], path=path) == [], path


def test_every_cel_rule_has_a_python_mirror_and_the_rules_are_the_contract(
    server_model: Any,
) -> None:
    rules = {
        (kind.KIND, path, rule["rule"], rule["message"])
        for kind in KINDS
        for path, node in server_model.walk(_schema(kind))
        for rule in node.get("x-kubernetes-validations", [])
    }
    positive = (
        "type(self) == int ? self > 0"
        " : (!isQuantity(self) || quantity(self).isGreaterThan(quantity('0')))"
    )
    whole = "type(self) == int || !isQuantity(self) || quantity(self).isInteger()"
    short_rules = {
        (
            "NodePool",
            ".spec",
            "self.minNodes <= self.maxNodes",
            "minNodes must be less than or equal to maxNodes",
        ),
        (
            "NodePool",
            ".spec",
            "self.targetNodes <= self.maxNodes",
            "targetNodes must be less than or equal to maxNodes",
        ),
        ("NodePool", ".spec.template.cpu", positive, "cpu must be a quantity greater than zero"),
        (
            "NodePool",
            ".spec.template.memory",
            positive,
            "memory must be a quantity greater than zero",
        ),
        (
            "NodePool",
            ".spec.template.ephemeralStorage",
            positive,
            "ephemeralStorage must be a quantity greater than zero",
        ),
        (
            "NodePool",
            ".spec.template.extendedResources.*",
            whole,
            "extended resources must be whole numbers",
        ),
        ("ScaleRequest", ".spec", "self == oldSelf", "spec is immutable"),
    }
    # The longer rules (names and reserves) are the contract by where they sit and what
    # they say; the mirrors and the cases below pin down what they accept.
    long_rules = {
        *(
            (f".spec.template.{field}", f"must be {nodepool_schema.QUANTITY_HELP}")
            for field in ("cpu", "memory", "ephemeralStorage", "extendedResources.*", "reserved.*")
        ),
        *(
            (f".spec.limits.{field}", f"must be {nodepool_schema.QUANTITY_HELP}")
            for field in ("cpu", "memory")
        ),
        (".spec.requirements[].key", f"a requirement key must be a qualified name: {QUALIFIED}"),
        (".spec.requirements[]", "In and NotIn need at least one value"),
        (".spec.disruption.budgets[]", "schedule and duration go together: set both or neither"),
        (".spec.requirements[]", "Exists and DoesNotExist take no values"),
        (".spec.requirements[]", "Gt and Lt need exactly one whole number as their value"),
        (
            ".spec.template.extendedResources",
            "extendedResources names must be qualified names outside kubernetes.io, "
            "such as example.com/gpu",
        ),
        (
            ".spec.template",
            "reserved may name only cpu, memory, pods, ephemeral-storage (when "
            "ephemeralStorage is set) and the template's extendedResources",
        ),
        (".spec.template.labels", f"label keys must be qualified names: {QUALIFIED}"),
        (
            ".spec.template.labels",
            "labels may not set nodepool.dev/pool, kubernetes.io/hostname, "
            "topology.kubernetes.io/zone, topology.kubernetes.io/region: the operator sets "
            "them (the zone and region from zones and region)",
        ),
        (
            ".spec.template.labels",
            "kubernetes.io/arch must be one of amd64, arm64, arm, ppc64le, s390x, 386, riscv64",
        ),
        (".spec.template.labels", "kubernetes.io/os must be one of linux, windows"),
        (
            ".spec.template.startupTaints[].key",
            f"a taint key must be a qualified name: {QUALIFIED}",
        ),
        (".spec.template.taints[].key", f"a taint key must be a qualified name: {QUALIFIED}"),
        (".spec.template", "reserved.cpu must be less than cpu"),
        (".spec.template", "reserved.memory must be less than memory"),
        (".spec.template", "reserved.pods must be a whole number less than pods"),
        (".spec.template", "reserved.ephemeral-storage must not exceed ephemeralStorage"),
        (
            ".spec.template",
            "a reserved extended resource must be a whole number no larger than "
            "in extendedResources",
        ),
        (
            ".spec.template",
            "provider.aws.subnets must name a subnet for every zone of the template",
        ),
        (
            ".spec.template.provider.aws.tags",
            'tag keys starting with "aws:" or "nodepool.dev/" are reserved '
            "(the operator tags instances with its own)",
        ),
        (".spec.template.provider.aws.tags", "tag keys are 1-128 characters"),
    }
    assert short_rules <= rules
    assert {(path, message) for _, path, _, message in rules - short_rules} == long_rules
    assert {rule for _, _, rule, _ in rules} == set(server_model.cel_mirrors)


def test_a_nodepool_without_spec_gets_a_complete_default_spec(server_model: Any) -> None:
    obj: dict[str, Any] = {"apiVersion": nodepool.API_VERSION, "kind": "NodePool"}
    assert _created(server_model, nodepool, obj=obj) == []
    assert obj["spec"] == nodepool.NodePoolSpec().to_dict()


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"minNodes": 5, "maxNodes": 2}, ".spec: minNodes must be less than or equal to maxNodes"),
        ({"targetNodes": 11}, ".spec: targetNodes must be less than or equal to maxNodes"),
        ({"targetNodes": -1}, ".spec.targetNodes: should be greater than or equal to 0"),
        (
            {"template": {"cpu": "0"}},
            ".spec.template.cpu: cpu must be a quantity greater than zero",
        ),
        ({"template": {"memory": "-1Gi"}}, ".spec.template.memory: must be a quantity such as"),
        ({"template": {"memory": "16GB"}}, ".spec.template.memory: must be a quantity such as"),
        ({"template": {"cpu": -4}}, ".spec.template.cpu: must be a quantity such as"),
        ({"template": {"cpu": 0}}, ".spec.template.cpu: cpu must be a quantity greater than zero"),
        ({"template": {"cpu": 1.5}}, ".spec.template.cpu: must be of type int-or-string"),
        (
            {"template": {"cpu": 2, "reserved": {"cpu": 2}}},
            ".spec.template: reserved.cpu must be less than cpu",
        ),
        ({"template": {"pods": 0}}, ".spec.template.pods: should be greater than or equal to 1"),
        ({"template": {"taints": [{"key": "a", "effect": "Never"}]}}, "Unsupported value"),
        (
            {"template": {"taints": [{"key": "a", "effect": "NoSchedule"}] * 2}},
            ".spec.template.taints: Duplicate value",
        ),
        ({"replicas": 3}, '.spec: unknown field "replicas"'),
        ({"targetNodes": 1001, "maxNodes": 1001}, ".spec.targetNodes: should be less than or"),
        ({"maxNodes": 2147483647}, ".spec.maxNodes: should be less than or equal to 1000"),
        ({"minNodes": 1001}, ".spec.minNodes: should be less than or equal to 1000"),
        ({"template": {"labels": {"bad key": "v"}}}, f".spec.template.labels: {LABEL_KEYS}"),
        ({"template": {"labels": {"": "v"}}}, LABEL_KEYS),
        ({"template": {"labels": {"-a": "v"}}}, LABEL_KEYS),
        ({"template": {"labels": {"a-": "v"}}}, LABEL_KEYS),
        ({"template": {"labels": {"a" * 64: "v"}}}, LABEL_KEYS),
        ({"template": {"labels": {"example.com/" + "a" * 64: "v"}}}, LABEL_KEYS),
        ({"template": {"labels": {PREFIX_253 + "d/a": "v"}}}, LABEL_KEYS),
        ({"template": {"labels": {"Example.com/a": "v"}}}, LABEL_KEYS),
        ({"template": {"labels": {"example..com/a": "v"}}}, LABEL_KEYS),
        ({"template": {"labels": {"/a": "v"}}}, LABEL_KEYS),
        ({"template": {"labels": {"a/b/c": "v"}}}, LABEL_KEYS),
        ({"template": {"labels": {"a\n": "v"}}}, LABEL_KEYS),
        ({"template": {"labels": {"a": "v" * 64}}}, ".spec.template.labels.a: may not be more"),
        ({"template": {"labels": {"a": "-v"}}}, ".spec.template.labels.a: should match"),
        ({"template": {"labels": {"a": "v w"}}}, ".spec.template.labels.a: should match"),
        ({"template": {"labels": {"a": "v\n"}}}, ".spec.template.labels.a: should match"),
        (
            {"template": {"labels": {f"l{i}": "v" for i in range(65)}}},
            ".spec.template.labels: must have at most 64 items",
        ),
        (
            {"template": {"taints": [{"key": "a b", "effect": "NoSchedule"}]}},
            f".spec.template.taints[0].key: {TAINT_KEY}",
        ),
        (
            {"template": {"taints": [{"key": "x/" + "a" * 64, "effect": "NoSchedule"}]}},
            f".spec.template.taints[0].key: {TAINT_KEY}",
        ),
        (
            {"template": {"taints": [{"key": "a", "value": "x y", "effect": "NoSchedule"}]}},
            ".spec.template.taints[0].value: should match",
        ),
        (
            {"template": {"taints": [{"key": "a", "value": "v" * 64, "effect": "NoSchedule"}]}},
            ".spec.template.taints[0].value: may not be more than 63",
        ),
        (
            {"template": {"taints": [{"key": f"t{i}", "effect": "NoSchedule"} for i in range(33)]}},
            ".spec.template.taints: must have at most 32 items",
        ),
        ({"template": {"memory": "1e100"}}, ".spec.template.memory: must be a quantity such as"),
        ({"template": {"cpu": "4\n"}}, ".spec.template.cpu: must be a quantity such as"),
        ({"template": {"cpu": "0" * 64 + "1"}}, ".spec.template.cpu: may not be more than 64"),
        ({"drainTimeoutSeconds": -1}, ".spec.drainTimeoutSeconds: should be greater than"),
        ({"notReadyTimeoutSeconds": -1}, ".spec.notReadyTimeoutSeconds: should be greater"),
        ({"registrationTimeoutSeconds": -1}, ".spec.registrationTimeoutSeconds: should be"),
        ({"weight": 101}, ".spec.weight: should be less than or equal to 100"),
        ({"weight": -1}, ".spec.weight: should be greater than or equal to 0"),
        ({"template": {"zones": ["a", "a"]}}, ".spec.template.zones: Duplicate value"),
        ({"template": {"zones": [""]}}, ".spec.template.zones[0]: should be at least 1"),
        ({"template": {"zones": ["eu west"]}}, ".spec.template.zones[0]: should match"),
        ({"template": {"region": "-eu"}}, ".spec.template.region: should match"),
        (
            {"template": {"ephemeralStorage": "0"}},
            "ephemeralStorage must be a quantity greater than zero",
        ),
        (
            {"template": {"ephemeralStorage": "10GB"}},
            ".spec.template.ephemeralStorage: must be a quantity",
        ),
        (
            {"template": {"extendedResources": {"gpu": "1"}}},
            "extendedResources names must be qualified names outside kubernetes.io",
        ),
        (
            {"template": {"extendedResources": {"kubernetes.io/gpu": "1"}}},
            "extendedResources names must be qualified names outside kubernetes.io",
        ),
        (
            {"template": {"extendedResources": {"requests.example.com/gpu": "1"}}},
            "extendedResources names must be qualified names outside kubernetes.io",
        ),
        (
            {"template": {"extendedResources": {"example.com/gpu": "1.5"}}},
            "extended resources must be whole numbers",
        ),
        (
            {"template": {"extendedResources": {f"example.com/r{i}": "1" for i in range(17)}}},
            ".spec.template.extendedResources: must have at most 16 items",
        ),
        (
            {"template": {"reserved": {"cpu": "-1"}}},
            ".spec.template.reserved.cpu: must be a quantity such as",
        ),
        ({"template": {"reserved": {"disk": "1"}}}, "reserved may name only cpu, memory"),
        (
            {"template": {"reserved": {"ephemeral-storage": "1Gi"}}},
            "reserved may name only cpu, memory",
        ),
        (
            {"template": {"reserved": {"example.com/gpu": "1"}}},
            "reserved may name only cpu, memory",
        ),
        ({"template": {"cpu": "4", "reserved": {"cpu": "4"}}}, "reserved.cpu must be less than"),
        (
            {"template": {"memory": "1Gi", "reserved": {"memory": "2Gi"}}},
            "reserved.memory must be less than memory",
        ),
        ({"template": {"pods": 10, "reserved": {"pods": "10"}}}, "reserved.pods must be a whole"),
        ({"template": {"reserved": {"pods": "1.5"}}}, "reserved.pods must be a whole"),
        (
            {"template": {"ephemeralStorage": "10Gi", "reserved": {"ephemeral-storage": "11Gi"}}},
            "reserved.ephemeral-storage must not exceed ephemeralStorage",
        ),
        (
            {
                "template": {
                    "extendedResources": {"example.com/gpu": "2"},
                    "reserved": {"example.com/gpu": "3"},
                }
            },
            "a reserved extended resource must be a whole number no larger than",
        ),
        (
            {"template": {"labels": {"nodepool.dev/pool": "other"}}},
            ".spec.template.labels: labels may not set nodepool.dev/pool",
        ),
        (
            {"template": {"labels": {"topology.kubernetes.io/zone": "a"}}},
            "labels may not set nodepool.dev/pool, kubernetes.io/hostname",
        ),
        (
            {"template": {"labels": {"kubernetes.io/arch": "sparc"}}},
            ".spec.template.labels: kubernetes.io/arch must be one of amd64, arm64",
        ),
        (
            {"template": {"labels": {"kubernetes.io/os": "plan9"}}},
            ".spec.template.labels: kubernetes.io/os must be one of linux, windows",
        ),
        (
            {"template": {"startupTaints": [{"key": "a b", "effect": "NoSchedule"}]}},
            f".spec.template.startupTaints[0].key: {TAINT_KEY}",
        ),
    ],
)
def test_an_invalid_nodepool_is_refused_with_the_reason(
    spec: dict[str, Any], error: str, server_model: Any
) -> None:
    errors = _created(server_model, nodepool, obj={"spec": spec})
    assert any(e.startswith(error) or error in e for e in errors), errors


def test_a_nodepool_within_bounds_is_accepted(server_model: Any) -> None:
    spec = {"targetNodes": 3, "minNodes": 1, "maxNodes": 3, "template": {"cpu": "500m"}}
    assert _created(server_model, nodepool, obj={"spec": spec}) == []


@pytest.mark.parametrize(
    "spec",
    [
        {"targetNodes": 1000, "minNodes": 1000, "maxNodes": 1000},
        {"template": {"labels": {"a" * 63: "b" * 63}}},
        {"template": {"labels": {PREFIX_253 + "/" + "a" * 63: ""}}},
        {"template": {"labels": {"example.com/gpu-kind": "A100_80GB.v2", "x": "1"}}},
        {"template": {"labels": {f"l{i}": "v" for i in range(64)}}},
        {"template": {"taints": [{"key": "example.com/dedicated", "effect": "NoExecute"}]}},
        {"template": {"taints": [{"key": "a" * 63, "value": "b" * 63, "effect": "NoSchedule"}]}},
        {"template": {"cpu": "1" + "0" * 63, "memory": ".5e99"}},
        {"drainTimeoutSeconds": 0, "notReadyTimeoutSeconds": 0, "registrationTimeoutSeconds": 0},
        {"template": {"labels": {"kubernetes.io/arch": "arm64", "kubernetes.io/os": "linux"}}},
        {
            "template": {
                "startupTaints": [{"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"}]
            }
        },
    ],
    ids=[
        "max-nodes",
        "63-char-key-and-value",
        "253-char-prefix",
        "prefixed-key",
        "64-labels",
        "prefixed-taint",
        "63-char-taint",
        "64-char-quantity",
        "zero-timeouts",
        "arm64-platform",
        "startup-taint",
    ],
)
def test_valid_edge_cases_are_accepted(spec: dict[str, Any], server_model: Any) -> None:
    assert _created(server_model, nodepool, obj={"spec": spec}) == []


def test_a_scale_request_for_more_than_a_pool_may_have_is_refused(server_model: Any) -> None:
    spec = {"nodePoolName": "p", "targetNodes": nodepool.MAX_NODES_PER_POOL + 1}
    errors = _created(server_model, scalerequest, obj={"spec": spec})
    assert errors == [".spec.targetNodes: should be less than or equal to 1000"]


def test_a_nodepool_using_every_template_field_is_accepted(server_model: Any) -> None:
    template = {
        "cpu": "4",
        "memory": "16Gi",
        "pods": 110,
        "ephemeralStorage": "100Gi",
        "extendedResources": {"example.com/gpu": "2", "fpga.example.com/slot": "1k"},
        "reserved": {
            "cpu": "500m",
            "memory": "1Gi",
            "pods": "10",
            "ephemeral-storage": "100Gi",
            "example.com/gpu": "2",
        },
        "zones": ["eu-west-1a", "eu-west-1b"],
        "region": "eu-west-1",
    }
    spec = {"weight": 100, "template": template}
    assert _created(server_model, nodepool, obj={"spec": spec}) == []
    assert nodepool.NodePoolSpec.from_dict(spec).to_dict() == {
        **nodepool.NodePoolSpec().to_dict(),
        **spec,
    }


def test_a_scale_request_spec_cannot_change_but_its_status_can(server_model: Any) -> None:
    schema = _schema(scalerequest)
    old = {"spec": {"nodePoolName": "p", "targetNodes": 2}}
    new = copy.deepcopy(old)
    assert server_model.validate(schema, new, old=old) == []
    new["spec"]["targetNodes"] = 3
    assert server_model.validate(schema, new, old=old) == [".spec: spec is immutable"]
    with_status = {**old, "status": {"phase": "Applied", "appliedTargetNodes": 2}}
    assert server_model.validate(schema, with_status, old=old) == []


@pytest.mark.parametrize(
    ("kind", "obj", "error"),
    [
        (scalerequest, {}, ".spec: Required value"),
        (scalerequest, {"spec": {"nodePoolName": "", "targetNodes": 1}}, "at least 1 chars"),
        (scalerequest, {"spec": {"nodePoolName": "p"}}, ".spec.targetNodes: Required value"),
        (
            scalerequest,
            {"spec": {"nodePoolName": "p", "targetNodes": 1, "basedOnTargetNodes": -1}},
            ".spec.basedOnTargetNodes: should be greater than or equal to 0",
        ),
        (autoscaler, {"spec": {}}, ".spec.nodePoolName: Required value"),
        (autoscaler, {"spec": {"nodePoolName": "p", "scanIntervalSeconds": 0}}, "greater than"),
        (autoscaler, {"spec": {"nodePoolName": "p", "batchWindowSeconds": 61}}, "less than"),
        (autoscaler, {"spec": {"nodePoolName": "p", "namespaces": ["a", "a"]}}, "Duplicate"),
    ],
)
def test_required_fields_and_bounds_of_the_other_kinds_are_enforced(
    kind: Any, obj: dict[str, Any], error: str, server_model: Any
) -> None:
    errors = _created(server_model, kind, obj=obj)
    assert any(error in e for e in errors), errors


def test_nodepool_has_the_status_and_scale_subresources_kubectl_scale_needs() -> None:
    version = _version(nodepool)
    scale = version["subresources"]["scale"]
    assert version["subresources"]["status"] == {}
    schema = _schema(nodepool)
    assert _node_at(schema, scale["specReplicasPath"])["type"] == "integer"
    assert _node_at(schema, scale["statusReplicasPath"])["type"] == "integer"
    assert _node_at(schema, scale["labelSelectorPath"])["type"] == "string"
    assert scale["specReplicasPath"] == ".spec.targetNodes"


@pytest.mark.parametrize("kind", [scalerequest, autoscaler], ids=KIND_IDS[1:])
def test_the_other_kinds_have_the_status_subresource_only(kind: Any) -> None:
    assert _version(kind)["subresources"] == {"status": {}}


@pytest.mark.parametrize(
    ("kind", "columns"),
    [
        (
            nodepool,
            [
                "Target",
                "Current",
                "Ready",
                "Operation",
                "Drifted",
                "Cost/h",
                "Degraded",
                "Reason",
                "Age",
                "Message",
            ],
        ),
        (scalerequest, ["Pool", "Target", "Phase", "Age"]),
        (
            autoscaler,
            ["Pool", "Pending", "LastTarget", "LimitReached", "Ready", "Age", "Reason", "Limit"],
        ),
    ],
    ids=KIND_IDS,
)
def test_printer_columns_point_at_fields_of_their_type(kind: Any, columns: list[str]) -> None:
    printed = _version(kind)["additionalPrinterColumns"]
    assert [c["name"] for c in printed] == columns
    for column in printed:
        if column["name"] == "Age":
            assert column == {
                "name": "Age",
                "type": "date",
                "jsonPath": ".metadata.creationTimestamp",
            }
        else:
            assert _column_node(_schema(kind), column["jsonPath"])["type"] == column["type"]


def test_crds_render_to_yaml_that_parses_back_identical() -> None:
    text = crds.render_yaml()
    assert text.startswith("---\n")
    assert list(yaml.safe_load_all(text)) == crds.all_crds()


def test_rendering_is_stable_and_sorted_by_name() -> None:
    assert crds.render_yaml() == crds.render_yaml()
    names = [crd["metadata"]["name"] for crd in crds.all_crds()]
    assert names == [
        "autoscalers.nodepool.dev",
        "nodepools.nodepool.dev",
        "scalerequests.nodepool.dev",
    ]


def test_all_crds_returns_copies_that_callers_may_change() -> None:
    first = crds.all_crds()
    first[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"].clear()
    assert crds.all_crds() != first
    assert "spec" in nodepool_schema.SCHEMA["properties"]
