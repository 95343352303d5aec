"""What a pod asks for and whether a node of the pool's template could ever hold it."""

from __future__ import annotations

from typing import Any

import pytest

from nodepool_operator.api import nodepool as np
from nodepool_operator.controllers.autoscaler import fit
from nodepool_operator.controllers.autoscaler.fit import NodeShape, Resources

GI = 1024**3


def container(cpu: str | None = None, memory: str | None = None, **extra: Any) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": "c", "image": "pause", "resources": {"requests": requests}, **extra}


def pod(
    *containers: dict[str, Any],
    init: list[dict[str, Any]] | None = None,
    unschedulable: bool = True,
    **spec: Any,
) -> dict[str, Any]:
    conditions = (
        [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
        if unschedulable
        else []
    )
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "1"},
        "spec": {"containers": list(containers), "initContainers": init or [], **spec},
        "status": {"phase": "Pending", "conditions": conditions},
    }


def shape(
    *, cpu: str = "4", memory: str = "16Gi", labels: dict[str, str] | None = None, taints: Any = ()
) -> NodeShape:
    template = np.NodeTemplate(cpu=cpu, memory=memory, labels=labels or {}, taints=tuple(taints))
    return NodeShape.of_pool("small", template)


def requests_of(p: dict[str, Any]) -> Resources:
    return fit.pod_requests(p).resources


# -- requests -------------------------------------------------------------------------


def test_requests_sum_the_app_containers() -> None:
    p = pod(container("500m", "1Gi"), container("1500m", "512Mi"))
    assert requests_of(p) == Resources(cpu=2000, memory=GI + 512 * 1024**2)


def test_largest_init_container_is_a_floor_not_an_addition() -> None:
    p = pod(container("1", "1Gi"), init=[container("3", "512Mi"), container("2", "4Gi")])
    assert requests_of(p) == Resources(cpu=3000, memory=4 * GI)


def test_sidecars_add_to_app_containers_and_to_later_init_containers() -> None:
    sidecar = container("1", "1Gi", restartPolicy="Always")
    p = pod(container("1", "1Gi"), init=[sidecar, container("2500m", "1Gi")])
    # running: app 1 + sidecar 1 = 2 cpu; init step: 2.5 + sidecar 1 = 3.5 cpu
    assert requests_of(p) == Resources(cpu=3500, memory=2 * GI)


def test_pod_level_requests_replace_the_aggregate_and_overhead_is_added() -> None:
    p = pod(container("1", "1Gi"), resources={"requests": {"cpu": "3"}}, overhead={"cpu": "250m"})
    assert requests_of(p) == Resources(cpu=3250, memory=GI)


def test_no_requests_is_zero_and_still_one_pod_slot() -> None:
    assert requests_of(pod({"name": "c", "image": "pause"})) == Resources(cpu=0, memory=0, pods=1)


def test_other_resources_are_named() -> None:
    p = pod(container("1", **{"resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}))
    assert fit.pod_requests(p).other == ("nvidia.com/gpu",)


def test_malformed_quantity_raises_value_error() -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        fit.pod_requests(pod(container("lots")))


# -- pod state ------------------------------------------------------------------------


def test_unschedulable_needs_the_scheduler_condition_and_no_node() -> None:
    assert fit.is_unschedulable(pod(container("1")))
    assert not fit.is_unschedulable(pod(container("1"), unschedulable=False))
    assert not fit.is_unschedulable(pod(container("1"), nodeName="n1"))
    nominated = pod(container("1"))
    nominated["status"]["nominatedNodeName"] = "n1"
    assert not fit.is_unschedulable(nominated)
    leaving = pod(container("1"))
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not fit.is_unschedulable(leaving)


# -- placement rules ------------------------------------------------------------------


def why(p: dict[str, Any], s: NodeShape | None = None) -> str | None:
    return fit.why_not_fit(p, fit.pod_requests(p), shape=s or shape())


def test_a_pod_within_the_template_fits() -> None:
    assert why(pod(container("4", "16Gi"))) is None


@pytest.mark.parametrize(
    ("c", "expected"),
    [
        (container("8"), "requests cpu 8000m but a node of the pool has 4000m"),
        (container("1", "32Gi"), "requests memory"),
        (
            {"name": "c", "resources": {"requests": {"ephemeral-storage": "1Gi"}}},
            "ephemeral-storage",
        ),
    ],
)
def test_too_big_or_unknown_resources_never_fit(c: dict[str, Any], expected: str) -> None:
    reason = why(pod(c))
    assert reason is not None
    assert expected in reason


def test_node_selector_is_matched_against_template_pool_and_well_known_labels() -> None:
    s = shape(labels={"disk": "ssd"})
    ok = {"disk": "ssd", np.POOL_LABEL: "small", "kubernetes.io/os": "linux"}
    assert why(pod(container("1"), nodeSelector=ok), s) is None
    assert "nodeSelector disk=hdd" in str(why(pod(container("1"), nodeSelector={"disk": "hdd"}), s))
    other_pool = {np.POOL_LABEL: "big"}
    assert why(pod(container("1"), nodeSelector=other_pool), s) is not None


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]}


@pytest.mark.parametrize(
    ("terms", "fits"),
    [
        ([expr("zone", "In", "a", "b")], True),
        ([expr("zone", "In", "c")], False),
        ([expr("zone", "NotIn", "c")], True),
        ([expr("gpu", "Exists")], False),
        ([expr("gpu", "DoesNotExist")], True),
        ([expr("cores", "Gt", "8")], True),
        ([expr("cores", "Lt", "8")], False),
        ([expr("zone", "In", "c"), expr("zone", "In", "a")], True),  # terms are ORed
        ([{}], False),  # an empty term matches nothing
        ([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}], False),
        ([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n"]}]}], True),
    ],
)
def test_required_node_affinity(terms: list[dict[str, Any]], fits: bool) -> None:
    s = shape(labels={"zone": "a", "cores": "16"})
    assert (why(pod(container("1"), affinity=affinity(*terms)), s) is None) is fits


def test_blocking_taints_need_a_toleration_and_prefer_no_schedule_does_not() -> None:
    taints = [
        np.Taint(key="team", value="ml", effect="NoSchedule"),
        np.Taint(key="soft", effect="PreferNoSchedule"),
    ]
    s = shape(taints=taints)
    reason = why(pod(container("1")), s)
    assert reason == "does not tolerate the pool's taint team=ml:NoSchedule"
    for toleration in (
        {"key": "team", "operator": "Equal", "value": "ml"},
        {"key": "team", "value": "ml", "effect": "NoSchedule"},
        {"key": "team", "operator": "Exists"},
        {"operator": "Exists"},
    ):
        assert why(pod(container("1"), tolerations=[toleration]), s) is None, toleration
    wrong = [
        {"key": "team", "value": "web"},
        {"key": "team", "operator": "Exists", "effect": "NoExecute"},
    ]
    assert why(pod(container("1"), tolerations=wrong), s) is not None
