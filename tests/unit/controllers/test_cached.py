"""The cache transforms keep every field a controller reads, and share replicas' parts."""

from __future__ import annotations

import copy
import json
from typing import Any

from nodepool_operator.api import wellknown
from nodepool_operator.controllers import cached
from nodepool_operator.controllers.autoscaler import constraints
from nodepool_operator.controllers.autoscaler.constraints import pending_pods
from nodepool_operator.controllers.nodepool import drain
from nodepool_operator.runtime import nodes, pods
from unit import bench_scripts

bench = bench_scripts.load("cache_memory")


def decoded(obj: dict[str, Any]) -> dict[str, Any]:
    """A fresh copy, as each watch event is decoded anew."""
    found: dict[str, Any] = json.loads(json.dumps(obj))
    return found


def pending_pod() -> dict[str, Any]:
    """The bench's Deployment pod, before the scheduler placed it, with every constraint."""
    pod = decoded(bench.POD)
    del pod["spec"]["nodeName"]
    pod["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    }
    pod["metadata"]["annotations"][wellknown.DO_NOT_DISRUPT_ANNOTATION] = "true"
    pod["spec"]["containers"][0]["ports"].append({"containerPort": 9090, "hostPort": 9090})
    pod["spec"]["initContainers"] = [
        {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}}
    ]
    pod["spec"]["volumes"].append({"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}})
    pod["spec"]["nodeSelector"] = {wellknown.ZONE_LABEL: "zone-b"}
    pod["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "h"}
            ]
        }
    }
    pod["spec"]["topologySpreadConstraints"] = [
        {"maxSkew": 1, "topologyKey": wellknown.ZONE_LABEL, "labelSelector": {}}
    ]
    pod["spec"]["overhead"] = {"cpu": "10m"}
    pod["spec"]["priority"] = 1000
    return pod


def test_the_autoscaler_sees_the_same_pod_through_the_cache() -> None:
    pod = pending_pod()
    kept = cached.pod_fields(decoded(pod))
    assert constraints.profile_of(kept).key == constraints.profile_of(pod).key
    assert pending_pods.is_unschedulable(kept)
    assert pending_pods.is_unschedulable(pod)
    assert pending_pods.pod_requests(kept) == pending_pods.pod_requests(pod)


def test_the_drain_sees_the_same_pod_through_the_cache() -> None:
    pod = pending_pod()
    pod["metadata"]["deletionGracePeriodSeconds"] = 45
    kept = cached.pod_fields(decoded(pod))
    assert drain.is_do_not_disrupt(kept)
    assert drain.is_do_not_disrupt(pod)
    assert kept["metadata"]["deletionGracePeriodSeconds"] == 45
    assert kept["spec"]["terminationGracePeriodSeconds"] == 30
    assert kept["spec"]["volumes"] == [{"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}]
    assert pods.is_daemon_or_mirror(kept) == pods.is_daemon_or_mirror(pod)
    assert kept["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"


def test_what_nothing_reads_is_dropped() -> None:
    kept = cached.pod_fields(decoded(bench.POD))
    container = kept["spec"]["containers"][0]
    assert set(container) == {"name", "resources"}  # no image, env, probes, mounts
    assert container["resources"] == {"requests": {"cpu": "250m", "memory": "512Mi"}}
    assert "managedFields" not in kept["metadata"]
    assert "annotations" not in kept["metadata"]  # kubectl's restartedAt is not ours
    assert "volumes" not in kept["spec"]  # the service account volume is not local storage
    assert "conditions" not in kept["status"]  # a bound pod's scheduling is history


def test_replicas_share_their_equal_parts() -> None:
    first, second = decoded(bench.POD), decoded(bench.POD)
    second["metadata"]["name"] = "web-7d9c6b8f5d-other"
    one, two = cached.pod_fields(first), cached.pod_fields(second)
    assert one["spec"]["containers"] is two["spec"]["containers"]
    assert one["spec"]["tolerations"] is two["spec"]["tolerations"]
    assert one["metadata"]["labels"] is two["metadata"]["labels"]
    assert one["metadata"]["name"] != two["metadata"]["name"]


def test_a_node_keeps_what_readiness_room_taints_and_ownership_need() -> None:
    node = decoded(bench.NODE)
    node["metadata"]["annotations"]["nodepool.dev/scale-down"] = "2026-11-30T17:00:00Z"
    node["spec"]["taints"] = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
    node["spec"]["unschedulable"] = True
    kept = cached.node_fields(copy.deepcopy(node))
    assert nodes.is_ready(kept)
    assert nodes.is_ready(node)
    assert wellknown.pool_of(kept) == "general"
    assert kept["status"]["allocatable"] == node["status"]["allocatable"]
    assert kept["spec"] == {
        "taints": node["spec"]["taints"],
        "unschedulable": True,
        "providerID": "simcloud://general-17",
    }
    assert kept["metadata"]["annotations"] == {"nodepool.dev/scale-down": "2026-11-30T17:00:00Z"}
    assert (
        kept["metadata"]["ownerReferences"][0]["uid"]
        == node["metadata"]["ownerReferences"][0]["uid"]
    )
    assert "images" not in kept["status"]
    assert "nodeInfo" not in kept["status"]
    [ready] = kept["status"]["conditions"]
    assert "lastHeartbeatTime" not in ready
    assert ready["lastTransitionTime"] == "2026-11-30T16:00:30Z"
