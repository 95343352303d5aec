"""Objects read through the dataclasses come back unchanged, and bad input says where."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodepool_operator.api import (
    autoscaler,
    disruption,
    meta,
    nodepool,
    requirements,
    scalerequest,
    wellknown,
)


def _every_field(
    cls: type[Any], **given_strategies: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    """Instances of ``cls`` with every field drawn, not only those without a default."""
    fields = {f.name: given_strategies.get(f.name, ...) for f in dataclasses.fields(cls)}
    return st.builds(cls, **fields)


def _tuples(elements: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.lists(elements, max_size=3).map(tuple)


conditions = _every_field(meta.Condition)
taints = _every_field(nodepool.Taint)
templates = _every_field(nodepool.NodeTemplate, taints=_tuples(taints))
scale_down_policies = _every_field(
    autoscaler.ScaleDownPolicy, utilization_threshold=st.floats(min_value=0, max_value=1)
)
label_values = st.text(alphabet="abc123", min_size=1, max_size=5)
requirement_lists = st.lists(
    st.one_of(
        st.builds(
            requirements.Requirement,
            key=st.sampled_from(wellknown.OFFERING_LABELS),
            operator=st.sampled_from(("In", "NotIn")),
            values=_tuples(label_values).filter(bool),
        ),
        st.builds(
            requirements.Requirement,
            key=st.sampled_from(wellknown.OFFERING_LABELS),
            operator=st.sampled_from(("Exists", "DoesNotExist")),
        ),
        st.builds(
            requirements.Requirement,
            key=st.just(wellknown.INSTANCE_CPU_LABEL),
            operator=st.sampled_from(("Gt", "Lt")),
            values=st.integers(0, 500).map(lambda n: (str(n),)),
        ),
    ),
    max_size=3,
).map(requirements.Requirements)
# A Limits with neither field writes nothing, which reads back as no limits.
pool_limits = st.none() | st.builds(
    nodepool.Limits, cpu=st.just("64"), memory=st.none() | st.just("256Gi")
)
windows = st.sampled_from(((None, None), ("0 9 * * 1-5", "8h"), ("@daily", "30m")))
budgets = st.builds(
    lambda nodes, reasons, window: disruption.Budget(
        nodes=nodes, reasons=reasons, schedule=window[0], duration=window[1]
    ),
    st.sampled_from(("0", "3", "10%", "100%")),
    st.lists(st.sampled_from(disruption.DISRUPTION_REASONS), unique=True, max_size=2).map(tuple),
    windows,
)
pool_disruptions = st.builds(disruption.Disruption, budgets=_tuples(budgets))
offering_counts = _every_field(
    scalerequest.OfferingCount, count=st.integers(min_value=1, max_value=5)
)
STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "Condition": conditions,
    "Taint": taints,
    "NodeTemplate": templates,
    "NodePoolSpec": _every_field(
        nodepool.NodePoolSpec,
        template=templates,
        requirements=requirement_lists,
        limits=pool_limits,
        disruption=pool_disruptions,
        expire_after=st.sampled_from(("Never", "60s", "720h", "1h30m")),
    ),
    "NodePoolStatus": _every_field(
        nodepool.NodePoolStatus,
        conditions=_tuples(conditions),
        cost_per_hour=st.none() | st.floats(min_value=0, max_value=1e6),
    ),
    "ScaleRequestSpec": _every_field(
        scalerequest.ScaleRequestSpec, new_node_offerings=_tuples(offering_counts)
    ),
    "ScaleRequestStatus": _every_field(scalerequest.ScaleRequestStatus),
    "ScaleDownPolicy": scale_down_policies,
    "AutoscalerSpec": _every_field(
        autoscaler.AutoscalerSpec,
        batch_window_seconds=st.floats(min_value=0, max_value=60),
        scale_down=scale_down_policies,
    ),
    "LastScaleRequest": _every_field(autoscaler.LastScaleRequest),
    "AutoscalerStatus": _every_field(
        autoscaler.AutoscalerStatus,
        conditions=_tuples(conditions),
        last_request=st.none() | _every_field(autoscaler.LastScaleRequest),
    ),
}


_MAPS = (
    "labels",
    "extendedResources",
    "reserved",
    "subnets",
    "tags",
    "parameters",
    "templateAllocatable",
    "lowest",
    "newNodeZones",
)


def _fields_and_values(value: Any) -> list[tuple[str, Any]]:
    """Every (field name, value) pair in a to_dict() result, at any depth."""
    if isinstance(value, dict):
        pairs = list(value.items())
        # Maps keyed by label or resource names: their keys are data, not field names.
        nested = [kv for k, v in pairs if k not in _MAPS for kv in _fields_and_values(v)]
        return pairs + nested
    if isinstance(value, list):
        return [kv for item in value for kv in _fields_and_values(item)]
    return []


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@given(data=st.data())
def test_from_dict_of_to_dict_gives_back_the_same_value(name: str, data: st.DataObject) -> None:
    value = data.draw(STRATEGIES[name])
    assert type(value).from_dict(value.to_dict()) == value


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@given(data=st.data())
def test_to_dict_is_plain_json_with_camel_case_keys_and_no_nulls(
    name: str, data: st.DataObject
) -> None:
    as_dict = data.draw(STRATEGIES[name]).to_dict()
    assert json.loads(json.dumps(as_dict)) == as_dict
    for key, item in _fields_and_values(as_dict):
        assert item is not None, key
        assert re.fullmatch(r"[a-z][a-zA-Z]*", key), key


def test_missing_optional_fields_read_as_defaults() -> None:
    assert nodepool.NodePoolSpec.from_dict({}) == nodepool.NodePoolSpec()
    assert nodepool.spec_of({"metadata": {"name": "a"}}) == nodepool.NodePoolSpec()
    assert nodepool.status_of({"spec": {}}) == nodepool.NodePoolStatus()
    assert scalerequest.status_of({}).phase == "Pending"
    assert autoscaler.status_of({}).last_request is None
    spec = autoscaler.AutoscalerSpec.from_dict({"nodePoolName": "p"})
    assert spec.namespaces == ()
    assert spec.scale_down.unneeded_seconds == 600


def test_null_reads_as_absent_as_the_server_treats_it() -> None:
    spec = nodepool.NodePoolSpec.from_dict({"maxNodes": None, "template": None})
    assert spec == nodepool.NodePoolSpec()


def test_unknown_fields_are_ignored_so_an_older_operator_reads_newer_objects() -> None:
    spec = nodepool.NodePoolSpec.from_dict({"targetNodes": 3, "futureField": {"x": 1}})
    assert spec == nodepool.NodePoolSpec(target_nodes=3)


def test_partial_template_keeps_the_other_defaults() -> None:
    spec = nodepool.NodePoolSpec.from_dict({"template": {"cpu": "8"}})
    assert spec.template == nodepool.NodeTemplate(cpu="8")


@pytest.mark.parametrize(
    ("read", "obj", "message"),
    [
        (
            nodepool.NodePoolSpec.from_dict,
            {"template": {"pods": "many"}},
            "template.pods: expected integer, got str",
        ),
        (
            nodepool.NodePoolSpec.from_dict,
            {"maxNodes": True},
            "maxNodes: expected integer, got bool",
        ),
        (
            nodepool.NodePoolSpec.from_dict,
            {"template": {"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b"}]}},
            "template.taints[1].effect: required field is missing",
        ),
        (
            nodepool.NodePoolSpec.from_dict,
            {"template": {"taints": [{"key": "a", "effect": "Sometimes"}]}},
            "template.taints[0].effect: expected one of NoSchedule, PreferNoSchedule, NoExecute",
        ),
        (
            nodepool.NodePoolSpec.from_dict,
            {"template": {"labels": {"zone": 1}}},
            "template.labels.zone: expected string, got int",
        ),
        (nodepool.NodePoolSpec.from_dict, {"template": []}, "template: expected object, got list"),
        (nodepool.spec_of, {"spec": {"minNodes": 1.5}}, "spec.minNodes: expected integer"),
        (
            nodepool.status_of,
            {"status": {"conditions": [{"type": "Ready"}]}},
            "status.conditions[0].status: required field is missing",
        ),
        (
            nodepool.status_of,
            {"status": {"scaleOperation": "paused"}},
            "status.scaleOperation: expected one of inactive, active, got 'paused'",
        ),
        (
            scalerequest.ScaleRequestSpec.from_dict,
            {"targetNodes": 3},
            "nodePoolName: required field is missing",
        ),
        (
            autoscaler.AutoscalerSpec.from_dict,
            {"nodePoolName": "p", "namespaces": "default"},
            "namespaces: expected array, got str",
        ),
        (
            autoscaler.AutoscalerSpec.from_dict,
            {"nodePoolName": "p", "batchWindowSeconds": "1s"},
            "batchWindowSeconds: expected number, got str",
        ),
        (
            autoscaler.status_of,
            {"status": {"lastRequest": {"name": "r"}}},
            "status.lastRequest.targetNodes: required field is missing",
        ),
    ],
)
def test_a_malformed_object_raises_value_error_naming_the_field(
    read: Any, obj: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("[", r"\[").replace("]", r"\]")):
        read(obj)


def test_batch_window_accepts_whole_and_fractional_seconds() -> None:
    read = autoscaler.AutoscalerSpec.from_dict
    assert read({"nodePoolName": "p", "batchWindowSeconds": 2}).batch_window_seconds == 2.0
    assert read({"nodePoolName": "p", "batchWindowSeconds": 0.25}).batch_window_seconds == 0.25


def test_template_gives_its_capacity_as_exact_integers() -> None:
    template = nodepool.NodeTemplate(cpu="3500m", memory="1.5Gi")
    assert template.cpu_millicores == 3500
    assert template.memory_bytes == 3 * 512 * 1024 * 1024
    assert nodepool.NodeTemplate().cpu_millicores == 4000


def test_pool_selector_matches_the_pool_label() -> None:
    assert wellknown.pool_selector("gpu") == "nodepool.dev/pool=gpu"


def test_manifests_are_complete_objects_of_their_kind() -> None:
    pool = nodepool.manifest("small", nodepool.NodePoolSpec(max_nodes=3))
    assert pool["apiVersion"] == "nodepool.dev/v1alpha1"
    assert pool["kind"] == "NodePool"
    assert pool["metadata"] == {"name": "small"}
    assert nodepool.spec_of(pool).max_nodes == 3

    nas = autoscaler.manifest("nas", autoscaler.AutoscalerSpec(node_pool_name="small"))
    assert (nas["kind"], autoscaler.spec_of(nas).node_pool_name) == ("Autoscaler", "small")


def test_a_scale_request_is_labelled_with_and_owned_by_its_pool() -> None:
    spec = scalerequest.ScaleRequestSpec(node_pool_name="small", target_nodes=4, reason="3 pods")
    request = scalerequest.manifest("small-4", spec, pool_uid="1234")
    assert request["kind"] == "ScaleRequest"
    assert request["metadata"]["labels"] == {"nodepool.dev/pool": "small"}
    assert request["metadata"]["ownerReferences"] == [
        {"apiVersion": "nodepool.dev/v1alpha1", "kind": "NodePool", "name": "small", "uid": "1234"}
    ]
    assert scalerequest.spec_of(request) == spec
    assert "ownerReferences" not in scalerequest.manifest("x", spec)["metadata"]
