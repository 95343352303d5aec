"""Which pods the Autoscaler plans for, and what each one asks of a node."""

from __future__ import annotations

from typing import Any

import pytest

from nodepool_operator.controllers.autoscaler.constraints import pending_pods

GI = 1024**3
MI = 1024**2


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


def requests_of(p: dict[str, Any]) -> dict[str, int]:
    return pending_pods.pod_requests(p)


# -- requests -------------------------------------------------------------------------


def test_requests_sum_the_app_containers() -> None:
    p = pod(container("500m", "1Gi"), container("1500m", "512Mi"))
    assert requests_of(p) == {"cpu": 2000, "memory": GI + 512 * MI, "pods": 1}


def test_largest_init_container_is_a_floor_not_an_addition() -> None:
    p = pod(container("1", "1Gi"), init=[container("3", "512Mi"), container("2", "4Gi")])
    assert requests_of(p) == {"cpu": 3000, "memory": 4 * GI, "pods": 1}


def test_sidecars_add_to_app_containers_and_to_later_init_containers() -> None:
    sidecar = container("1", "1Gi", restartPolicy="Always")
    p = pod(container("1", "1Gi"), init=[sidecar, container("2500m", "1Gi")])
    # running: app 1 + sidecar 1 = 2 cpu; init step: 2.5 + sidecar 1 = 3.5 cpu
    assert requests_of(p) == {"cpu": 3500, "memory": 2 * GI, "pods": 1}


def test_pod_level_requests_replace_the_aggregate_and_overhead_is_added() -> None:
    p = pod(container("1", "1Gi"), resources={"requests": {"cpu": "3"}}, overhead={"cpu": "250m"})
    assert requests_of(p) == {"cpu": 3250, "memory": GI, "pods": 1}


def test_no_requests_is_still_one_pod_slot() -> None:
    assert requests_of(pod({"name": "c", "image": "pause"})) == {"pods": 1}


def test_ephemeral_storage_and_extended_resources_are_kept_in_base_units() -> None:
    requests = {"cpu": "1", "ephemeral-storage": "2Gi", "nvidia.com/gpu": "1"}
    p = pod(
        {"name": "c", "resources": {"requests": requests}},
        init=[{"name": "i", "resources": {"requests": {"nvidia.com/gpu": "2"}}}],
    )
    assert requests_of(p) == {
        "cpu": 1000,
        "ephemeral-storage": 2 * GI,
        "nvidia.com/gpu": 2,  # the init container's 2 is the floor
        "pods": 1,
    }


def test_a_pods_request_in_a_container_does_not_take_more_than_one_slot() -> None:
    p = pod({"name": "c", "resources": {"requests": {"pods": "5", "cpu": "1"}}})
    assert requests_of(p) == {"cpu": 1000, "pods": 1}


def test_malformed_quantity_raises_value_error() -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        pending_pods.pod_requests(pod(container("lots")))


# -- pod state ------------------------------------------------------------------------


def test_unschedulable_needs_the_scheduler_condition() -> None:
    assert pending_pods.is_unschedulable(pod(container("1")))
    assert not pending_pods.is_unschedulable(pod(container("1"), unschedulable=False))


def test_a_bound_or_deleted_pod_is_not_unschedulable() -> None:
    assert not pending_pods.is_unschedulable(pod(container("1"), nodeName="n1"))
    leaving = pod(container("1"))
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not pending_pods.is_unschedulable(leaving)
    assert not pending_pods.is_pending_unbound(leaving)


def test_a_nominated_pod_is_not_unschedulable_and_names_its_node() -> None:
    nominated = pod(container("1"))
    nominated["status"]["nominatedNodeName"] = "n1"
    assert not pending_pods.is_unschedulable(nominated)
    assert pending_pods.nominated_node(nominated) == "n1"
    assert pending_pods.nominated_node(pod(container("1"))) is None


def test_a_scheduling_gated_pod_is_not_unschedulable() -> None:
    gated = pod(container("1"), schedulingGates=[{"name": "example.com/wait"}])
    assert not pending_pods.is_unschedulable(gated)


def test_a_pod_for_another_scheduler_is_not_ours_to_plan() -> None:
    assert not pending_pods.is_unschedulable(pod(container("1"), schedulerName="volcano"))
    ours = pod(container("1"), schedulerName=pending_pods.DEFAULT_SCHEDULER)
    assert pending_pods.is_unschedulable(ours)


def test_a_running_pod_is_not_pending() -> None:
    running = pod(container("1"), nodeName="n1")
    running["status"]["phase"] = "Running"
    assert not pending_pods.is_pending_unbound(running)
