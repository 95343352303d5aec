"""The real API server refuses, with 422 and the field at fault, NodePool input that would
make a Node it refuses or a pool too large to plan; and accepts the edge cases that are valid.

No operator runs: this is the CRD's validation alone, as the server evaluates it (with its
own regular expressions and CEL cost budget), not the unit tests' model of it.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from e2e.scenes import World
from harness import MERGE, POOLS, pool_body
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import nodepool_schema
from nodepool_operator.api import scalerequest as scalerequest_api

REQUESTS = (scalerequest_api.GROUP, scalerequest_api.VERSION, scalerequest_api.PLURAL)
LABEL_KEYS = "label keys must be qualified names"
TAINT_KEY = "a taint key must be a qualified name"
# What a refused quantity's message says, instead of the grammar's regular expression.
QUANTITY = 'must be a quantity such as 4, "500m" or "16Gi"'
QUANTITY_HELP = nodepool_schema.QUANTITY_HELP
PREFIX_253 = "a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "." + "d" * 61


def _body(name: str, *, spec: dict[str, Any] | None = None, **template: Any) -> dict[str, Any]:
    body = pool_body(name)
    body["spec"].update(spec or {})
    body["spec"]["template"].update(template)
    return body


def _refusal(raised: pytest.ExceptionInfo[ApiException]) -> str:
    """The server's message for a refused write, after checking that it is a 422."""
    assert raised.value.status == 422, raised.value.body
    status = json.loads(raised.value.body or "{}")
    assert status["reason"] == "Invalid"
    return str(status["message"])


@pytest.mark.parametrize(
    ("spec", "template", "field", "says"),
    [
        ({}, {"labels": {"bad key": "v"}}, "spec.template.labels", LABEL_KEYS),
        ({}, {"labels": {"-a": "v"}}, "spec.template.labels", "first refused: -a"),
        ({}, {"labels": {"a" * 64: "v"}}, "spec.template.labels", LABEL_KEYS),
        ({}, {"labels": {PREFIX_253 + "d/a": "v"}}, "spec.template.labels", LABEL_KEYS),
        ({}, {"labels": {"Example.com/a": "v"}}, "spec.template.labels", LABEL_KEYS),
        ({}, {"labels": {"a/b/c": "v"}}, "spec.template.labels", LABEL_KEYS),
        ({}, {"labels": {"a": "v" * 64}}, "spec.template.labels.a", "63"),
        ({}, {"labels": {"a": "v w"}}, "spec.template.labels.a", "should match"),
        ({}, {"labels": {"a": "v\n"}}, "spec.template.labels.a", "should match"),
        (
            {},
            {"labels": {f"l{i}": "v" for i in range(nodepool_api.MAX_TEMPLATE_LABELS + 1)}},
            "spec.template.labels",
            "must have at most 64 items",
        ),
        (
            {},
            {"taints": [{"key": "a b", "effect": "NoSchedule"}]},
            "spec.template.taints[0].key",
            TAINT_KEY,
        ),
        (
            {},
            {"taints": [{"key": "x/" + "a" * 64, "effect": "NoSchedule"}]},
            "spec.template.taints[0].key",
            TAINT_KEY,
        ),
        (
            {},
            {"taints": [{"key": "a", "value": "-v", "effect": "NoSchedule"}]},
            "spec.template.taints[0].value",
            "should match",
        ),
        (
            {},
            {"taints": [{"key": "a", "effect": "Never"}]},
            "spec.template.taints[0].effect",
            "Unsupported value",
        ),
        (
            {"targetNodes": 2147483647, "maxNodes": 2147483647},
            {},
            "spec.targetNodes",
            "less than or equal to 1000",
        ),
        ({"maxNodes": 1001}, {}, "spec.maxNodes", "less than or equal to 1000"),
        ({"minNodes": 1001}, {}, "spec.minNodes", "less than or equal to 1000"),
        ({}, {"memory": "16GB"}, "spec.template.memory", QUANTITY),
        ({}, {"memory": "1e100"}, "spec.template.memory", QUANTITY),
        ({}, {"cpu": "4\n"}, "spec.template.cpu", QUANTITY),
        ({}, {"cpu": "-1"}, "spec.template.cpu", QUANTITY),
        ({}, {"cpu": "1" * 65}, "spec.template.cpu", "64"),
        ({}, {"cpu": "four"}, "spec.template.cpu", QUANTITY),
        ({}, {"cpu": -1}, "spec.template.cpu", "greater than zero"),
        ({}, {"cpu": 0}, "spec.template.cpu", "greater than zero"),
        ({}, {"cpu": 1.5}, "spec.template.cpu", "integer"),
        (
            {},
            {"extendedResources": {"example.com/gpu": "1.5"}},
            "spec.template.extendedResources[example.com/gpu]",
            "whole numbers",
        ),
        ({}, {"cpu": 2, "reserved": {"cpu": 2}}, "spec.template", "reserved.cpu must be less"),
        ({}, {"reserved": {"cpu": "1 "}}, "spec.template.reserved[cpu]", QUANTITY),
        ({"drainTimeoutSeconds": -1}, {}, "spec.drainTimeoutSeconds", "greater than or equal"),
    ],
    ids=[
        "label-key-space",
        "label-key-named",
        "label-name-64",
        "label-prefix-254",
        "label-prefix-upper",
        "label-key-two-slashes",
        "label-value-64",
        "label-value-space",
        "label-value-newline",
        "too-many-labels",
        "taint-key-space",
        "taint-name-64",
        "taint-value",
        "taint-effect",
        "huge-target",
        "max-over-limit",
        "min-over-limit",
        "quantity-unit",
        "quantity-exponent",
        "quantity-newline",
        "quantity-negative",
        "quantity-too-long",
        "quantity-word",
        "quantity-negative-integer",
        "quantity-zero-integer",
        "quantity-float",
        "quantity-not-whole",
        "reserved-integer-not-below",
        "reserved-quantity",
        "negative-drain-timeout",
    ],
)
async def test_invalid_input_is_refused_with_422_naming_the_field(
    world: World, spec: dict[str, Any], template: dict[str, Any], field: str, says: str
) -> None:
    with pytest.raises(ApiException) as raised:
        await world.custom.create_cluster_custom_object(
            *POOLS, _body(world.pool, spec=spec, **template)
        )
    message = _refusal(raised)
    assert f"{field}:" in message
    assert says in message
    # A refused quantity says what one looks like, never the grammar's regular expression.
    assert "[0-9]" not in message or "should match" in says


@pytest.mark.parametrize(
    "template",
    [{"cpu": "four"}, {"memory": "16 GiB"}, {"cpu": 2, "reserved": {"cpu": "1 "}}],
    ids=["cpu-word", "memory-spaced-unit", "reserved-trailing-space"],
)
async def test_a_malformed_quantity_gets_one_message_saying_what_a_quantity_looks_like(
    world: World, template: dict[str, Any]
) -> None:
    with pytest.raises(ApiException) as raised:
        await world.custom.create_cluster_custom_object(*POOLS, _body(world.pool, **template))
    details = json.loads(raised.value.body or "{}")["details"]["causes"]
    assert [cause["message"].endswith(QUANTITY_HELP) for cause in details] == [True], details


@pytest.mark.parametrize(
    ("spec", "template"),
    [
        ({"targetNodes": 0, "minNodes": 1000, "maxNodes": 1000}, {}),
        ({}, {"labels": {"a" * 63: "b" * 63}}),
        ({}, {"labels": {PREFIX_253 + "/" + "a" * 63: ""}}),
        ({}, {"labels": {"example.com/gpu-kind": "A100_80GB.v2", "x": "1"}}),
        ({}, {"labels": {f"l{i}": "v" for i in range(nodepool_api.MAX_TEMPLATE_LABELS)}}),
        (
            {},
            {
                "taints": [
                    {"key": "example.com/dedicated", "value": "v" * 63, "effect": "NoExecute"}
                ]
            },
        ),
        ({}, {"cpu": "3500m", "memory": "0.5Gi", "ephemeralStorage": "1e11"}),
        ({}, {"cpu": "1" + "0" * 63}),
        ({}, {"cpu": 4, "memory": 17179869184, "reserved": {"cpu": 1, "pods": 10}}),
        ({}, {"extendedResources": {"example.com/gpu": 2}, "ephemeralStorage": 100}),
        (
            {
                "drainTimeoutSeconds": 0,
                "notReadyTimeoutSeconds": 0,
                "registrationTimeoutSeconds": 0,
            },
            {},
        ),
    ],
    ids=[
        "1000-nodes",
        "63-char-key-and-value",
        "253-char-prefix",
        "prefixed-key",
        "64-labels",
        "prefixed-taint-63-char-value",
        "quantities",
        "64-char-quantity",
        "integer-quantities",
        "integer-extended-resource",
        "zero-timeouts",
    ],
)
async def test_valid_edge_cases_are_accepted_as_written(
    world: World, spec: dict[str, Any], template: dict[str, Any]
) -> None:
    body = _body(world.pool, spec=spec, **template)
    created = await world.custom.create_cluster_custom_object(*POOLS, body)
    assert nodepool_api.spec_of(created) == nodepool_api.spec_of(body)


async def test_a_huge_scale_is_refused_through_the_scale_subresource_and_a_patch(
    world: World,
) -> None:
    await world.custom.create_cluster_custom_object(*POOLS, _body(world.pool))
    with pytest.raises(ApiException) as raised:
        await world.custom.patch_cluster_custom_object_scale(
            *POOLS, world.pool, {"spec": {"replicas": 2147483647}}, _content_type=MERGE
        )
    assert "spec.targetNodes" in _refusal(raised)
    with pytest.raises(ApiException) as raised:
        await world.custom.patch_cluster_custom_object(
            *POOLS,
            world.pool,
            {"spec": {"maxNodes": 2147483647, "targetNodes": 2147483647}},
            _content_type=MERGE,
        )
    assert "spec.maxNodes" in _refusal(raised)
    pool = await world.custom.get_cluster_custom_object(*POOLS, world.pool)
    assert nodepool_api.spec_of(pool) == nodepool_api.spec_of(_body(world.pool))


async def test_a_scale_request_for_more_nodes_than_a_pool_may_have_is_refused(
    api_client: client.ApiClient, crds_installed: None
) -> None:
    custom = client.CustomObjectsApi(api_client)
    spec = scalerequest_api.ScaleRequestSpec(
        node_pool_name="p", target_nodes=nodepool_api.MAX_NODES_PER_POOL + 1
    )
    name = f"too-many-{uuid.uuid4().hex[:6]}"
    try:
        with pytest.raises(ApiException) as raised:
            await custom.create_cluster_custom_object(
                *REQUESTS, scalerequest_api.manifest(name, spec)
            )
        assert "spec.targetNodes" in _refusal(raised)
    finally:
        with contextlib.suppress(ApiException):  # only there if the server let it in
            await custom.delete_cluster_custom_object(*REQUESTS, name)
