"""Pods with PersistentVolumeClaims: the scheduler's VolumeBinding and VolumeZone filters,
as the Autoscaler's simulation applies them, from the claims, volumes and classes cached."""

from __future__ import annotations

from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers import cached
from nodepool_operator.controllers.autoscaler.decide.batch_plan import Observation
from nodepool_operator.controllers.autoscaler.plan_maker import PlanMaker
from nodepool_operator.controllers.autoscaler.snapshot import volumes
from nodepool_operator.controllers.autoscaler.snapshot.scale_requests import RequestLedger
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.testing import FakeWallClock, informer_of
from unit.autoscaler.planning_world import (
    autoscaler,
    names,
    node,
    observe,
    pod,
)

ZONE = wellknown.ZONE_LABEL


def zonal_pool(zone: str, *, target: int = 0) -> Object:
    spec = nodepool_api.NodePoolSpec(
        target_nodes=target,
        template=nodepool_api.NodeTemplate(cpu="4", memory="16Gi", zones=(zone,)),
    )
    body = nodepool_api.manifest("small", spec)
    body["metadata"].update(uid="small-uid", resourceVersion="7")
    return body


def with_claim(name: str, claim: str = "data") -> Object:
    found = pod(name)
    found["spec"]["volumes"] = [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]
    return found


def claim(
    name: str = "data", *, volume: str | None = None, storage_class: str | None = "standard"
) -> Object:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
    }
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    meta: dict[str, Any] = {"name": name, "namespace": "apps", "resourceVersion": "1"}
    if volume is not None:
        spec["volumeName"] = volume
        meta["annotations"] = {cached.BIND_COMPLETED_ANNOTATION: "yes"}
    return {"metadata": meta, "spec": spec}


def affinity(key: str, *values: str) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}
    return {"required": {"nodeSelectorTerms": [term]}}


def volume(
    name: str = "pv-1",
    *,
    node_affinity: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    bound_to: str | None = "data",
    storage_class: str = "standard",
) -> Object:
    spec: dict[str, Any] = {
        "capacity": {"storage": "10Gi"},
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": storage_class,
    }
    if node_affinity is not None:
        spec["nodeAffinity"] = node_affinity
    if bound_to is not None:
        spec["claimRef"] = {"namespace": "apps", "name": bound_to}
    return {
        "metadata": {"name": name, "labels": labels or {}, "resourceVersion": "1"},
        "spec": spec,
        "status": {"phase": "Bound" if bound_to else "Available"},
    }


def storage_class(
    name: str = "standard",
    *,
    mode: str = "WaitForFirstConsumer",
    provisioner: str = "csi.example.com",
    zones: tuple[str, ...] = (),
) -> Object:
    found: dict[str, Any] = {
        "metadata": {"name": name, "resourceVersion": "1"},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
    }
    if zones:
        found["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": ZONE, "values": list(zones)}]}
        ]
    return found


def planner(
    *,
    pods: list[Object],
    claims: list[Object],
    pvs: list[Object] = (),  # type: ignore[assignment]
    classes: list[Object] = (),  # type: ignore[assignment]
    nodes: list[Object] = (),  # type: ignore[assignment]
    zone: str = "a",
    target: int = 0,
) -> PlanMaker:
    def informer(objects: list[Object], transform: Any) -> Any:
        return informer_of(*(transform(o) for o in objects), version="10")

    return PlanMaker(
        autoscalers=informer_of(autoscaler("nas", namespaces=["apps"]), version="10"),  # type: ignore[arg-type]
        pools=informer_of(zonal_pool(zone, target=target), version="10"),  # type: ignore[arg-type]
        nodes=informer_of(*nodes, version="10"),  # type: ignore[arg-type]
        pods=informer(pods, cached.pod_fields),
        requests=informer_of(version="10"),  # type: ignore[arg-type]
        daemon_sets=informer_of(version="10"),  # type: ignore[arg-type]
        ledger=RequestLedger(),
        wall_clock=FakeWallClock(1_800_000_000.0),
        volume_reads=volumes.VolumeReads(
            claims=informer(claims, cached.claim_fields),
            volumes=informer(list(pvs), cached.volume_fields),
            classes=informer(list(classes), cached.storage_class_fields),
        ),
    )


def unfit_reasons(seen: Observation) -> dict[str, str]:
    return {p["metadata"]["name"]: why for p, why in seen.unfit}


async def test_a_bound_volumes_node_affinity_picks_the_pool_in_its_zone() -> None:
    pv = volume(node_affinity=affinity(ZONE, "b"))
    claims = [claim(volume="pv-1")]
    in_b = await observe(planner(pods=[with_claim("db")], claims=claims, pvs=[pv], zone="b"))
    assert (names(in_b.fitting), in_b.up.new_nodes) == (["db"], 1)
    in_a = await observe(planner(pods=[with_claim("db")], claims=claims, pvs=[pv], zone="a"))
    assert in_a.up.new_nodes == 0
    assert unfit_reasons(in_a)["db"] == (
        'small: persistentvolumeclaim "data" is bound to persistentvolume "pv-1", whose node '
        "affinity does not match"
    )


async def test_a_zonal_volume_label_keeps_the_pod_out_of_other_zones() -> None:
    pv = volume(labels={ZONE: "b__c"})
    claims = [claim(volume="pv-1")]
    in_c = await observe(planner(pods=[with_claim("db")], claims=claims, pvs=[pv], zone="c"))
    assert names(in_c.fitting) == ["db"]
    in_a = await observe(planner(pods=[with_claim("db")], claims=claims, pvs=[pv], zone="a"))
    assert unfit_reasons(in_a)["db"] == (
        'small: persistentvolumeclaim "data" is bound to persistentvolume "pv-1", which is in '
        "topology.kubernetes.io/zone b/c"
    )


async def test_a_missing_claim_or_volume_or_class_makes_the_pod_unfit_saying_which() -> None:
    missing = await observe(planner(pods=[with_claim("a", "nope")], claims=[claim()]))
    assert unfit_reasons(missing)["a"] == 'persistentvolumeclaim "nope" not found'
    no_volume = await observe(planner(pods=[with_claim("b")], claims=[claim(volume="gone")]))
    assert 'bound to persistentvolume "gone", which does not exist' in unfit_reasons(no_volume)["b"]
    no_class = await observe(planner(pods=[with_claim("c")], claims=[claim()]))
    assert 'its storageclass "standard" does not exist' in unfit_reasons(no_class)["c"]
    for seen in (missing, no_volume, no_class):
        assert (seen.fitting, seen.up.new_nodes) == ((), 0)


async def test_an_unbound_claim_that_binds_immediately_is_no_reason_for_a_node() -> None:
    seen = await observe(
        planner(
            pods=[with_claim("a")],
            claims=[claim()],
            classes=[storage_class(mode="Immediate")],
        )
    )
    assert "binds immediately" in unfit_reasons(seen)["a"]
    assert seen.up.new_nodes == 0


async def test_a_wait_for_first_consumer_claim_follows_the_allowed_topologies() -> None:
    classes = [storage_class(zones=("b",))]
    in_b = await observe(
        planner(pods=[with_claim("a")], claims=[claim()], classes=classes, zone="b")
    )
    assert (names(in_b.fitting), in_b.up.new_nodes) == (["a"], 1)
    in_a = await observe(planner(pods=[with_claim("a")], claims=[claim()], classes=classes))
    assert (
        "no node affinity of an available persistentvolume or the allowed topologies"
        in (unfit_reasons(in_a)["a"])
    )
    anywhere = [storage_class()]
    seen = await observe(planner(pods=[with_claim("a")], claims=[claim()], classes=anywhere))
    assert names(seen.fitting) == ["a"]


async def test_a_local_volume_pins_its_pod_to_the_one_node_it_is_on() -> None:
    local = storage_class("local", provisioner=volumes.NO_PROVISIONER)
    pv = volume(
        node_affinity=affinity(wellknown.HOSTNAME_LABEL, "small-1"),
        bound_to=None,
        storage_class="local",
    )
    nodes = [node("small-0"), node("small-1")]
    busy = pod("busy", node="small-1", cpu="3500m")  # small-1 is full: a new node cannot help
    o = planner(
        pods=[with_claim("a"), busy],
        claims=[claim(storage_class="local")],
        pvs=[pv],
        classes=[local],
        nodes=nodes,
        target=2,
    )
    seen = await observe(o)
    assert seen.up.new_nodes == 0
    assert unfit_reasons(seen)["a"] == (
        'small: persistentvolumeclaim "data" (storageclass local): no node affinity of an '
        "available persistentvolume matches"
    )
    room = planner(
        pods=[with_claim("a")],
        claims=[claim(storage_class="local")],
        pvs=[pv],
        classes=[local],
        nodes=nodes,
        target=2,
    )
    placed = await observe(room)
    assert (names(placed.fitting), placed.up.new_nodes) == (["a"], 0)
    assert placed.unfit == ()
    no_static = await observe(
        planner(pods=[with_claim("a")], claims=[claim(storage_class="local")], classes=[local])
    )
    assert "no persistentvolume of storageclass" in unfit_reasons(no_static)["a"]


def test_the_caches_keep_the_claim_facts_compact() -> None:
    kept = cached.pod_fields(with_claim("a"))
    assert kept["spec"]["volumes"] == [
        {"name": "v", "persistentVolumeClaim": {"claimName": "data"}}
    ]
    ephemeral = pod("b")
    ephemeral["spec"]["volumes"] = [
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"x": 1}}}}
    ]
    assert cached.pod_fields(ephemeral)["spec"]["volumes"] == [{"name": "scratch", "ephemeral": {}}]
    assert volumes.claim_names(cached.pod_fields(ephemeral)) == ["b-scratch"]
    bound = cached.claim_fields(claim(volume="pv-1"))
    assert bound["metadata"]["annotations"] == {cached.BIND_COMPLETED_ANNOTATION: "yes"}
    assert bound["spec"]["volumeName"] == "pv-1"
