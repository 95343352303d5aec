"""A pod whose data lives on its Node's own disk (a local PersistentVolume) holds that Node
against drift and expiry: it could run on no other node. A spot interruption is not held."""

from __future__ import annotations

from typing import Any

from nodepool_operator.api import drift, wellknown
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud.testing import virtual_machine
from nodepool_operator.controllers.nodepool import disruption, plan
from nodepool_operator.controllers.nodepool.local_data import LocalData, pinned_to
from nodepool_operator.runtime import conditions, testing

NOW = 1_800_000_000.0


def _volume(name: str, *terms: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if terms:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": list(terms)}}
    return {"metadata": {"name": name}, "spec": spec}


def _on_host(*hosts: str) -> dict[str, Any]:
    return {
        "matchExpressions": [
            {"key": wellknown.HOSTNAME_LABEL, "operator": "In", "values": list(hosts)}
        ]
    }


def _in_zone(zone: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": wellknown.ZONE_LABEL, "operator": "In", "values": [zone]}]}


def test_a_local_volume_is_pinned_to_the_nodes_its_affinity_names() -> None:
    assert pinned_to(_volume("pv", _on_host("n-1"))) == {"n-1"}
    by_field = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n-2"]}]}
    assert pinned_to(_volume("pv", by_field)) == {"n-2"}
    assert pinned_to(_volume("pv", _on_host("n-1"), _on_host("n-3"))) == {"n-1", "n-3"}


def test_a_zonal_network_or_mixed_volume_is_pinned_to_no_node() -> None:
    assert pinned_to(_volume("pv", _in_zone("zone-a"))) is None
    assert pinned_to(_volume("pv")) is None
    # One term that admits nodes by their zone: the volume is not one node's disk.
    assert pinned_to(_volume("pv", _on_host("n-1"), _in_zone("zone-a"))) is None
    not_in = {
        "matchExpressions": [
            {"key": wellknown.HOSTNAME_LABEL, "operator": "NotIn", "values": ["n-1"]}
        ]
    }
    assert pinned_to(_volume("pv", not_in)) is None


def _pod(name: str, *claims: str) -> dict[str, Any]:
    volumes = [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims]
    return {"metadata": {"name": name, "namespace": "apps"}, "spec": {"volumes": volumes}}


def _local_data(*bindings: tuple[str, dict[str, Any]]) -> LocalData:
    claims, volumes = testing.FakeInformer(), testing.FakeInformer()
    for claim, volume in bindings:
        name = volume["metadata"]["name"]
        claims.store[f"apps/{claim}"] = {
            "metadata": {"name": claim, "namespace": "apps"},
            "spec": {"volumeName": name},
        }
        volumes.store[name] = volume
    return LocalData(claims=claims, volumes=volumes)  # type: ignore[arg-type]


def _node(name: str, *, hostname: str | None = None) -> dict[str, Any]:
    labels = {wellknown.POOL_LABEL: "p", "v": "1"}
    if hostname is not None:
        labels[wellknown.HOSTNAME_LABEL] = hostname
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "creationTimestamp": conditions.rfc3339(NOW - 600),
            "labels": labels,
            "annotations": {},
        },
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_the_pod_on_a_local_volume_of_this_node_holds_it_and_is_named() -> None:
    local = _local_data(("data-db-0", _volume("pv-1", _on_host("n-1"))))
    why = local.holder(_node("n-1"), [_pod("web"), _pod("db-0", "data-db-0")])
    assert why is not None
    assert "pod apps/db-0 keeps its data on this node's disk" in why
    assert "claim data-db-0, local PersistentVolume pv-1" in why
    # By the hostname label too (it may differ from the Node's name).
    assert local.holder(_node("vm-7", hostname="n-1"), [_pod("db-0", "data-db-0")]) is not None


def test_other_nodes_volumes_zonal_volumes_and_unknown_claims_hold_nothing() -> None:
    local = _local_data(
        ("data-db-0", _volume("pv-1", _on_host("n-1"))),
        ("zonal", _volume("pv-z", _in_zone("zone-a"))),
        ("unbound", {"metadata": {"name": "never-read"}, "spec": {}}),
    )
    local.claims.store["apps/unbound"]["spec"] = {}  # type: ignore[attr-defined]
    assert local.holder(_node("n-2"), [_pod("db-0", "data-db-0")]) is None
    assert local.holder(_node("n-1"), [_pod("app", "zonal", "unbound", "missing")]) is None


def _drifted_view(local_data: dict[str, str]) -> tuple[plan.PoolView, nodepool_api.NodePoolSpec]:
    before = nodepool_api.NodePoolSpec.from_dict(
        {"targetNodes": 2, "maxNodes": 10, "template": {"labels": {"v": "1"}}}
    )
    after = nodepool_api.NodePoolSpec.from_dict(
        {
            "targetNodes": 2,
            "maxNodes": 10,
            "template": {"labels": {"v": "2"}},
            "disruption": {"budgets": [{"nodes": "2"}]},
        }
    )
    nodes = {name: _node(name) for name in ("n-1", "n-2")}
    for node in nodes.values():
        node["metadata"]["annotations"][wellknown.SPEC_HASH_ANNOTATION] = drift.spec_hash(
            before
        ).text
    view = plan.PoolView(
        vms=[virtual_machine(name, pool="p") for name in nodes],
        nodes=nodes,
        pods_per_node={},
        local_data=local_data,
    )
    return view, after


def test_drift_holds_the_node_a_pod_keeps_its_data_on_and_replaces_the_other() -> None:
    why = "pod apps/db-0 keeps its data on this node's disk (...)"
    view, after = _drifted_view({"n-1": why})
    decided = disruption.plan(view, after, desired=2, now=NOW)
    assert [c.node for c in decided.taint] == ["n-2"]
    assert [(c.node, c.reason, held) for c, held in decided.held] == [("n-1", "Drifted", why)]


def test_a_spot_notice_is_not_held_by_a_local_volume() -> None:
    view, after = _drifted_view({"n-1": "pod apps/db-0 keeps its data on this node's disk"})
    node = view.nodes["n-1"]
    annotations = node["metadata"]["annotations"]  # type: ignore[index]
    annotations[wellknown.INTERRUPTION_ANNOTATION] = wellknown.SPOT_INTERRUPTION
    annotations[wellknown.INTERRUPTION_NOTICED_AT_ANNOTATION] = conditions.rfc3339(NOW - 5)
    assert disruption.is_noticed(node)
    decided = disruption.plan(view, after, desired=2, now=NOW)
    assert "n-1" in {c.node for c in decided.taint if c.reason == "Interrupted"}
