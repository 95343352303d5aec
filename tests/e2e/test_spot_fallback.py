"""Spot out of capacity in every zone, on the real control plane: a pool allowing spot and
on-demand, an Autoscaler that plans the cheaper spot offerings for pending pods, and a
simcloud that refuses every spot launch. The pods run on on-demand Nodes after one
ScaleRequest, the pool says ``FellBackToOnDemand``, and the spot offerings are backed off
in ``status.zoneBackoffs``.

The catalog sells spot only as ``c4`` (4 CPU, 8 GiB) and on-demand only as ``m4`` (4 CPU,
16 GiB); one capacity fault on the spot capacity type, in no particular zone and of no
particular type, refuses every spot offering there is and no on-demand one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import catalogs
from e2e.autoscaling import deployment, events, make_autoscaler, running
from e2e.scenes import World
from harness import POOLS, REQUESTS
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.api.requirements import Requirements
from nodepool_operator.cloud import catalog

ZONES = ("sim-1a", "sim-1b")
#: (type, cores, GiB, price per hour in sim-1a; sim-1b costs 0.01 more) and its one
#: capacity type: spot is the cheaper by far, so the Autoscaler plans it.
SOLD = (
    (("c4", 4, 8, 0.06), catalog.SPOT),
    (("m4", 4, 16, 0.19), catalog.ON_DEMAND),
)
#: No spot capacity in any zone, for any instance type.
NO_SPOT = {"capacity": [{"capacityType": catalog.SPOT, "maxVms": 0}]}


def _catalog_file(directory: Path) -> Path:
    offerings = [
        catalog.Offering(
            instance_type=name,
            zone=zone,
            capacity_type=capacity,
            price_per_hour=round(price + 0.01 * position, 6),
        )
        for (name, _, _, price), capacity in SOLD
        for position, zone in enumerate(ZONES)
    ]
    sold = catalog.Catalog.of(catalogs.instance_types([row for row, _ in SOLD]), offerings)
    path = directory / "instance_types.json"
    path.write_text(json.dumps(sold.to_json()))
    return path


def _spot_or_on_demand_pool(name: str) -> dict[str, Any]:
    spec = nodepool_api.NodePoolSpec(
        max_nodes=6,
        requirements=Requirements.from_list(
            [
                {"key": wellknown.INSTANCE_TYPE_LABEL, "operator": "In", "values": ["c4", "m4"]},
                {"key": wellknown.ZONE_LABEL, "operator": "In", "values": list(ZONES)},
                {
                    "key": wellknown.CAPACITY_TYPE_LABEL,
                    "operator": "In",
                    "values": [catalog.ON_DEMAND, catalog.SPOT],
                },
            ]
        ),
        template=nodepool_api.NodeTemplate(reserved={"cpu": "100m"}),
    )
    return nodepool_api.manifest(name, spec)


async def test_spot_out_of_capacity_everywhere_falls_back_to_on_demand_in_one_batch(
    world: World, tmp_path: Path
) -> None:
    cloud = await world.cloud(
        "--catalog", str(_catalog_file(tmp_path)), "--faults", json.dumps(NO_SPOT), latency=0.2
    )
    operator = world.start_operator(cloud)
    await world.custom.create_cluster_custom_object(*POOLS, _spot_or_on_demand_pool(world.pool))
    await make_autoscaler(
        world.custom, world.autoscaler, pool=world.pool, namespace=world.namespace
    )

    # Six 1-cpu pods: three fit a 4-cpu node less its 100m reserve, so two nodes.
    history = await world.scale_up(
        deployments=[deployment("web", pool=world.pool, replicas=6, cpu="1")], running_pods=6
    )

    # One batch: the Autoscaler asked once, for two nodes, and named spot (the cheapest).
    found = await world.custom.list_cluster_custom_object(
        *REQUESTS, label_selector=wellknown.pool_selector(world.pool)
    )
    [request] = found["items"]
    assert history.values == [0, 2]
    assert request["spec"]["targetNodes"] == 2
    asked = {o["capacityType"] for o in request["spec"]["newNodeOfferings"]}
    assert asked == {catalog.SPOT}, request["spec"]
    assert sum(o["count"] for o in request["spec"]["newNodeOfferings"]) == 2

    # Every pod runs on an on-demand Node, and the cloud made no more VMs than that: the
    # cheapest on-demand offering, m4 in sim-1a, for both.
    nodes = (await world.core.list_node(label_selector=wellknown.pool_selector(world.pool))).items
    assert len(nodes) == 2
    assert {n.metadata.labels[wellknown.CAPACITY_TYPE_LABEL] for n in nodes} == {catalog.ON_DEMAND}
    assert {n.metadata.labels[wellknown.INSTANCE_TYPE_LABEL] for n in nodes} == {"m4"}
    pods = (await world.core.list_namespaced_pod(world.namespace)).items
    assert {p.spec.node_name for p in pods} <= {n.metadata.name for n in nodes}
    assert await running(world.core, world.namespace, 6)
    assert cloud.client is not None
    made = await cloud.client.list_vms(pool=world.pool)
    assert sorted(vm.capacity_type or "" for vm in made) == [catalog.ON_DEMAND] * 2

    fell_back = await events(world.core, "default", name=world.pool, reason="FellBackToOnDemand")
    assert fell_back, "no FellBackToOnDemand event on the pool"
    # One pass: the event pairs a spot refusal with the on-demand VM asked for in its
    # place in the same launch (a later pass would launch on-demand with no refusal to
    # pair, the spot offerings being backed off by then).
    message = fell_back[0].message
    assert "c4 in sim-1b (spot, 0.07/h) had no capacity" in message, message
    assert "m4 in sim-1a (on-demand, 0.19/h): spot fell back to on-demand" in message, message
    answer = (await world.custom.get_cluster_custom_object(*REQUESTS, request["metadata"]["name"]))[
        "status"
    ]
    assert "fell back:" in answer["message"], answer

    # Both spot offerings are backed off, and nothing on-demand is.
    status = (await world.custom.get_cluster_custom_object(*POOLS, world.pool))["status"]
    backed_off = sorted(
        (b["zone"], b.get("instanceType"), b.get("capacityType"), b["reason"])
        for b in status["zoneBackoffs"]
    )
    assert backed_off == [(zone, "c4", catalog.SPOT, "InsufficientCapacity") for zone in ZONES], (
        status["zoneBackoffs"]
    )
    assert operator.errors_logged() == []
