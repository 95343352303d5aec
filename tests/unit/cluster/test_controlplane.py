"""The command lines the local control plane starts its components with."""

from __future__ import annotations

from pathlib import Path

from nodepool_devtools.cluster import controlplane

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


def _flag(arguments: list[str], name: str) -> str:
    """The value of ``--name=value`` on a command line (exactly one)."""
    [value] = [a.split("=", 1)[1] for a in arguments if a.startswith(f"--{name}=")]
    return value


def _controllers_flag(tmp_path: Path) -> list[str]:
    plane = controlplane.ControlPlane(tmp_path)
    arguments = plane._arguments("kube-controller-manager", {"ports": {}})
    return _flag(arguments, "controllers").split(",")


def test_controller_manager_runs_the_controllers_of_ordinary_workloads(tmp_path: Path) -> None:
    enabled = _controllers_flag(tmp_path)
    assert set(enabled) >= WORKLOAD_CONTROLLERS
    assert len(enabled) == len(set(enabled))


def _rate(arguments: list[str]) -> tuple[float, int]:
    """The client-side QPS and burst a component's command line sets."""
    return float(_flag(arguments, "kube-api-qps")), int(_flag(arguments, "kube-api-burst"))


def test_scheduler_and_controller_manager_talk_to_the_api_server_at_a_large_clusters_rate(
    tmp_path: Path,
) -> None:
    """At their defaults (50 and 20 a second) a burst on thousands of simulated Nodes
    waits minutes for not-ready taints to be lifted; both run far above them."""
    plane = controlplane.ControlPlane(tmp_path)
    for component, default_qps in (("kube-scheduler", 50), ("kube-controller-manager", 20)):
        qps, burst = _rate(plane._arguments(component, {"ports": {}}))
        assert qps >= 10 * default_qps, component
        assert burst >= qps, component


def test_a_node_counts_as_unresponsive_only_after_many_missed_lease_renewals(
    tmp_path: Path,
) -> None:
    """kwok renews every quarter of the lease; a Node whose renewals lag under load must
    not be marked NotReady before several of them are missed."""
    plane = controlplane.ControlPlane(tmp_path)
    lease = int(
        _flag(plane._arguments("kwok", {"ports": {"kwok": 1}}), "node-lease-duration-seconds")
    )
    silence = _flag(
        plane._arguments("kube-controller-manager", {"ports": {}}), "node-monitor-grace-period"
    )
    renewal = lease / 4
    assert float(silence.removesuffix("s")) >= 8 * renewal


def test_telling_a_closed_output_does_not_stop_the_stop(tmp_path: Path) -> None:
    """An interrupt closes the test runner's output while the control plane is stopped:
    what it says then is lost, and every process is still ended."""
    import io

    out = io.StringIO()
    plane = controlplane.ControlPlane(tmp_path, out=out)
    plane._say("stopping kwok")
    assert out.getvalue() == "[cluster] stopping kwok\n"
    out.close()
    # Said to no one: no ValueError escapes into the stop that called it.
    assert plane._say("kwok (pid 1) ignored SIGTERM; killing it") is None
