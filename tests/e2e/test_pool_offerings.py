"""A pool of many instance types on the real control plane, with simcloud selling a
catalog (``--catalog``, Karpenter kwok's file form): a ScaleRequest naming offerings
launches exactly those, their Nodes carry the offering's labels and shape and the pool
its cost; an offering the cloud has no capacity for falls back to the next cheapest the
pool allows within the same pass, and the request's answer and an event say so."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

import catalogs
from e2e.autoscaling import events
from harness import POOLS, REQUESTS, SimCloud, kubectl, settled, wait_for
from nodepool_devtools.cluster import binaries
from nodepool_devtools.cluster.pytest_plugin import Cluster
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.api import wellknown
from nodepool_operator.api.requirements import Requirements

ZONES = ("sim-1a", "sim-1b")
GIB = 2**30
#: (name, cores, GiB, price per hour in sim-1a; sim-1b costs 0.01 more)
TYPES = (("c2", 2, 4, 0.10), ("c4", 4, 8, 0.19), ("m8", 8, 64, 0.50))


def _catalog_file(tmp_path: Path) -> Path:
    return catalogs.catalog_file(tmp_path / "instance_types.json", TYPES, ZONES)


def _pool(name: str) -> dict[str, Any]:
    spec = nodepool_api.NodePoolSpec(
        max_nodes=10,
        requirements=Requirements.from_list(
            [
                {
                    "key": wellknown.INSTANCE_TYPE_LABEL,
                    "operator": "In",
                    "values": [t[0] for t in TYPES],
                },
                {"key": wellknown.ZONE_LABEL, "operator": "In", "values": list(ZONES)},
                {"key": wellknown.CAPACITY_TYPE_LABEL, "operator": "In", "values": ["on-demand"]},
            ]
        ),
        template=nodepool_api.NodeTemplate(labels={"team": "web"}, reserved={"cpu": "100m"}),
    )
    return nodepool_api.manifest(name, spec)


async def _request(
    custom: client.CustomObjectsApi,
    pool: dict[str, Any],
    target: int,
    offerings: tuple[tuple[str, str, int], ...],
) -> str:
    name = f"req-{uuid.uuid4().hex[:6]}"
    spec = scalerequest_api.ScaleRequestSpec(
        node_pool_name=pool["metadata"]["name"],
        target_nodes=target,
        requester="e2e",
        new_node_offerings=tuple(
            scalerequest_api.OfferingCount(
                instance_type=kind, zone=zone, capacity_type="on-demand", count=count
            )
            for kind, zone, count in offerings
        ),
    )
    body = scalerequest_api.manifest(name, spec, pool_uid=pool["metadata"]["uid"])
    await custom.create_cluster_custom_object(*REQUESTS, body)
    return name


async def _nodes(core: client.CoreV1Api, pool: str) -> list[Any]:
    found = await core.list_node(label_selector=f"{wellknown.POOL_LABEL}={pool}")
    return list(found.items)


def _offerings_of(nodes: list[Any]) -> list[tuple[str, str, str]]:
    return sorted(
        (
            n.metadata.labels[wellknown.INSTANCE_TYPE_LABEL],
            n.metadata.labels[wellknown.ZONE_LABEL],
            n.metadata.labels[wellknown.CAPACITY_TYPE_LABEL],
        )
        for n in nodes
    )


async def _answered(custom: client.CustomObjectsApi, name: str) -> dict[str, Any] | None:
    obj = await custom.get_cluster_custom_object(*REQUESTS, name)
    status: dict[str, Any] = obj.get("status") or {}
    return status if status.get("zonesServed") else None


async def test_a_request_naming_offerings_launches_exactly_those_and_nodes_carry_them(
    api_client: client.ApiClient,
    start_simcloud: Any,
    start_operator: Any,
    pool_name: str,
    tmp_path: Path,
    cluster: Cluster,
) -> None:
    cloud: SimCloud = await start_simcloud(
        "--catalog", str(_catalog_file(tmp_path)), "--create-latency", "0.2"
    )
    operator = start_operator(cloud)
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    pool = await custom.create_cluster_custom_object(*POOLS, _pool(pool_name))

    request = await _request(custom, pool, 3, (("m8", "sim-1b", 1), ("c4", "sim-1a", 2)))
    await wait_for(lambda: settled(custom, pool_name, 3), within=60)
    nodes = await _nodes(core, pool_name)
    assert _offerings_of(nodes) == [
        ("c4", "sim-1a", "on-demand"),
        ("c4", "sim-1a", "on-demand"),
        ("m8", "sim-1b", "on-demand"),
    ]
    big = next(n for n in nodes if n.metadata.labels[wellknown.INSTANCE_TYPE_LABEL] == "m8")
    assert big.metadata.labels["team"] == "web"
    assert big.metadata.labels[wellknown.INSTANCE_CPU_LABEL] == "8"
    assert big.metadata.labels["karpenter.sh/capacity-type"] == "on-demand"
    assert big.status.capacity["cpu"] in ("8", "8000m")
    answer = await wait_for(lambda: _answered(custom, request), within=30)
    assert answer["phase"] == "Applied"
    assert "launched 2 x c4 in sim-1a" in answer["message"]
    assert "1 x m8 in sim-1b" in answer["message"]

    async def costed() -> dict[str, Any] | None:
        found: dict[str, Any] = await custom.get_cluster_custom_object(*POOLS, pool_name)
        cost = (found.get("status") or {}).get("costPerHour")
        return found if cost is not None and abs(cost - (2 * 0.19 + 0.51)) < 1e-6 else None

    await wait_for(costed, within=30)
    kubectl_path = binaries.ensure_binaries()["kubectl"]
    table = await kubectl(kubectl_path, cluster.kubeconfig, "get", "np", pool_name, "-o", "wide")
    header, row = table.splitlines()[:2]
    # kubectl aligns its columns and leaves an unset one blank (Drifted, before the pool's
    # first drift check): read the cell under the header, not the n-th word of the row.
    assert row[header.index("COST/H") :].split()[0] == "0.89"
    assert operator.errors_logged() == []


async def test_an_offering_without_capacity_falls_back_to_the_next_cheapest_in_one_pass(
    api_client: client.ApiClient,
    start_simcloud: Any,
    start_operator: Any,
    pool_name: str,
    tmp_path: Path,
) -> None:
    # No room for c4 (4 CPU, 8Gi) in sim-1a: the cloud refuses it for capacity.
    faults = {"capacity": [{"zone": "sim-1a", "cpu": "4", "memory": "8Gi", "maxVms": 0}]}
    cloud: SimCloud = await start_simcloud(
        "--catalog",
        str(_catalog_file(tmp_path)),
        "--create-latency",
        "0.2",
        "--faults",
        json.dumps(faults),
    )
    operator = start_operator(cloud)
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    pool = await custom.create_cluster_custom_object(*POOLS, _pool(pool_name))

    request = await _request(custom, pool, 2, (("c4", "sim-1a", 2),))
    await wait_for(lambda: settled(custom, pool_name, 2), within=60)
    # The cheapest offering the pool allows took the refused one's place.
    assert _offerings_of(await _nodes(core, pool_name)) == [("c2", "sim-1a", "on-demand")] * 2
    fell_back = await events(core, "default", name=pool_name, reason="FellBackToNextOffering")
    assert len(fell_back) >= 1
    assert "c4 in sim-1a (on-demand, 0.19/h) had no capacity" in fell_back[0].message
    assert "c2 in sim-1a" in fell_back[0].message
    answer = await wait_for(lambda: _answered(custom, request), within=30)
    assert "fell back: c4 in sim-1a" in answer["message"]
    status = (await custom.get_cluster_custom_object(*POOLS, pool_name))["status"]
    [backoff] = status["zoneBackoffs"]
    assert (backoff["zone"], backoff["instanceType"], backoff["reason"]) == (
        "sim-1a",
        "c4",
        "InsufficientCapacity",
    )
    # One pass: the event pairs a refusal with the VM asked for in its place in the same
    # launch (a later pass would have launched c2 with no refusal to pair), and the cloud
    # made exactly the two VMs.
    assert cloud.client is not None
    made = await cloud.client.list_vms(pool=pool_name)
    assert sorted(vm.instance_type or "" for vm in made) == ["c2", "c2"]
    assert operator.errors_logged() == []


@pytest.mark.parametrize(
    ("requirement", "says"),
    [
        ({"key": "k", "operator": "Near", "values": ["x"]}, "Unsupported value"),
        ({"key": "bad key", "operator": "Exists"}, "a requirement key must be a qualified name"),
        ({"key": "k", "operator": "In"}, "In and NotIn need at least one value"),
        ({"key": "k", "operator": "Exists", "values": ["x"]}, "take no values"),
        ({"key": "k", "operator": "Gt", "values": ["1", "2"]}, "exactly one whole number"),
        ({"key": "k", "operator": "Lt", "values": ["ten"]}, "exactly one whole number"),
    ],
)
async def test_the_server_refuses_a_wrong_requirement_with_422(
    api_client: client.ApiClient, crds_installed: None, requirement: dict[str, Any], says: str
) -> None:
    custom = client.CustomObjectsApi(api_client)
    body = _pool(f"bad-{uuid.uuid4().hex[:6]}")
    body["spec"]["requirements"] = [requirement]
    with pytest.raises(ApiException) as raised:
        await custom.create_cluster_custom_object(*POOLS, body)
    assert raised.value.status == 422, raised.value.body
    assert says in json.loads(raised.value.body or "{}")["message"]


async def test_the_server_refuses_a_request_naming_a_wrong_offering_with_422(
    api_client: client.ApiClient, crds_installed: None
) -> None:
    custom = client.CustomObjectsApi(api_client)
    offering = {"instanceType": "c2", "zone": "sim-1a", "capacityType": "reserved", "count": 0}
    body = {
        "apiVersion": scalerequest_api.API_VERSION,
        "kind": scalerequest_api.KIND,
        "metadata": {"name": f"req-{uuid.uuid4().hex[:6]}"},
        "spec": {"nodePoolName": "p", "targetNodes": 1, "newNodeOfferings": [offering]},
    }
    with pytest.raises(ApiException) as raised:
        await custom.create_cluster_custom_object(*REQUESTS, body)
    assert raised.value.status == 422, raised.value.body
    message = json.loads(raised.value.body or "{}")["message"]
    assert "spec.newNodeOfferings[0].capacityType" in message
    assert "spec.newNodeOfferings[0].count" in message
