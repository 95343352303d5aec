"""The command lines the local control plane starts its components with."""

from __future__ import annotations

from pathlib import Path

from nodepool_operator.cluster import controlplane

WORKLOAD_CONTROLLERS = {
    "deployment-controller",
    "replicaset-controller",
    "daemonset-controller",
    "statefulset-controller",
    "job-controller",
    "cronjob-controller",
    "ttl-after-finished-controller",
    "endpoints-controller",
    "endpointslice-controller",
    "endpointslice-mirroring-controller",
    "pod-garbage-collector-controller",
}


def _controllers_flag(tmp_path: Path) -> list[str]:
    plane = controlplane.ControlPlane(tmp_path)
    arguments = plane._arguments("kube-controller-manager", {"ports": {}})
    [flag] = [a for a in arguments if a.startswith("--controllers=")]
    return flag.removeprefix("--controllers=").split(",")


def test_controller_manager_runs_the_controllers_of_ordinary_workloads(tmp_path: Path) -> None:
    enabled = _controllers_flag(tmp_path)
    assert set(enabled) >= WORKLOAD_CONTROLLERS
    assert len(enabled) == len(set(enabled))
