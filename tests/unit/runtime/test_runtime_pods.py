"""Pods that come with every node, and pods that are finished."""

from __future__ import annotations

from typing import Any

from nodepool_operator.runtime import pods


def pod(**metadata: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", **metadata}, "status": {"phase": "Running"}}


def test_daemonset_and_mirror_pods_are_recognised() -> None:
    assert pods.is_daemon_or_mirror(pod(ownerReferences=[{"kind": "DaemonSet", "name": "d"}]))
    assert pods.is_daemon_or_mirror(pod(annotations={pods.MIRROR_POD_ANNOTATION: "x"}))
    assert not pods.is_daemon_or_mirror(pod(ownerReferences=[{"kind": "ReplicaSet", "name": "r"}]))
    assert not pods.is_daemon_or_mirror(pod())


def test_only_succeeded_and_failed_pods_are_terminal() -> None:
    finished = [pod() | {"status": {"phase": phase}} for phase in ("Succeeded", "Failed")]
    assert all(pods.is_terminal(p) for p in finished)
    assert not pods.is_terminal(pod())
    assert not pods.is_terminal({"metadata": {"name": "new"}})


def test_node_name_index_gives_the_node_a_pod_is_bound_to() -> None:
    assert pods.node_name_index({"spec": {"nodeName": "node-1"}}) == ["node-1"]
    assert pods.node_name_index({"spec": {}}) == []
    assert pods.node_name_index({}) == []
