"""The planner learns where a pool's nodes are from the world: Nodes by their zone label,
VMs still booting in the zones the pool's ScaleRequests named, and it names the zones of
the nodes it asks for."""

from __future__ import annotations

from typing import Any

from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.api import wellknown
from nodepool_operator.runtime import conditions
from nodepool_operator.runtime.client import Object
from unit.autoscaler.planning_world import NOW, node, observe, observer, pod
from unit.autoscaler.zonal_pools import zonal_pool

ZONE = wellknown.ZONE_LABEL
ZONES = ("a", "b", "c")


def request(name: str, *, created: float, zones: dict[str, int], target: int) -> Object:
    spec = scalerequest_api.ScaleRequestSpec(
        node_pool_name="small", target_nodes=target, new_node_zones=zones
    )
    body = scalerequest_api.manifest(name, spec, pool_uid="small-uid")
    body["metadata"].update(creationTimestamp=conditions.rfc3339(created), resourceVersion="3")
    body["status"] = {"phase": "Applied", "appliedTargetNodes": target}
    return body


def zonal_node(name: str, zone: str, *, created: float) -> Object:
    found = node(name)
    found["metadata"]["labels"][ZONE] = zone
    found["metadata"]["creationTimestamp"] = conditions.rfc3339(created)
    return found


def pinned(name: str, zone: str, **extra: Any) -> Object:
    return pod(name, spec={"nodeSelector": {ZONE: zone}}, **extra)


async def test_a_zone_pinned_pod_on_an_empty_three_zone_pool_asks_for_one_node_there() -> None:
    seen = await observe(observer(pods=[pinned("web", "c")], pools=[zonal_pool(zones=ZONES)]))
    assert seen.up.new_nodes == 1
    assert seen.up.new_node_zones == {"c": 1}


async def test_a_booting_vm_the_request_put_in_the_pods_zone_hosts_it() -> None:
    o = observer(pods=[pinned("web", "c")], pools=[zonal_pool(target=1, zones=ZONES)])
    o.pool_reads.requests.put(request("sr-1", created=NOW - 10, zones={"c": 1}, target=1))
    seen = await observe(o)
    [template] = o.inputs().templates
    assert template.zoning.in_flight == ("c",)
    assert seen.up.new_nodes == 0


async def test_a_booting_vm_in_another_zone_does_not_host_a_zone_pinned_pod() -> None:
    o = observer(pods=[pinned("web", "c")], pools=[zonal_pool(target=1, zones=ZONES)])
    o.pool_reads.requests.put(request("sr-1", created=NOW - 10, zones={"a": 1}, target=1))
    seen = await observe(o)
    assert seen.up.new_nodes == 1
    assert seen.up.new_node_zones == {"c": 1}


async def test_a_node_made_since_the_request_serves_its_zone() -> None:
    # The request asked for one node in a and one in c; the one in c has registered, so
    # the VM still booting is the one in a.
    o = observer(
        nodes=[zonal_node("small-0", "c", created=NOW - 5)],
        pods=[pod("filler", node="small-0", cpu="3"), pinned("web", "c", cpu="3")],
        pools=[zonal_pool(target=2, zones=ZONES)],
    )
    o.pool_reads.requests.put(request("sr-1", created=NOW - 10, zones={"a": 1, "c": 1}, target=2))
    seen = await observe(o)
    [template] = o.inputs().templates
    assert template.zoning.counts == {"c": 1}
    assert template.zoning.in_flight == ("a",)
    assert seen.up.new_node_zones == {"c": 1}


async def test_a_node_older_than_the_request_does_not_serve_it() -> None:
    o = observer(
        nodes=[zonal_node("small-0", "c", created=NOW - 50)],
        pools=[zonal_pool(target=2, zones=ZONES)],
    )
    o.pool_reads.requests.put(request("sr-1", created=NOW - 10, zones={"c": 1}, target=2))
    [template] = o.inputs().templates
    assert template.zoning.in_flight == ("c",)


async def test_booting_vms_no_request_named_are_predicted_balanced() -> None:
    o = observer(
        nodes=[zonal_node("small-0", "a", created=NOW - 50)],
        pools=[zonal_pool(target=3, zones=ZONES)],
    )
    [template] = o.inputs().templates
    assert template.zoning.in_flight == ("b", "c")


async def test_a_backed_off_zone_gets_no_new_node() -> None:
    pool = zonal_pool(zones=ZONES)
    until = conditions.rfc3339(NOW + 600)
    pool["status"] = {
        "zoneBackoffs": [
            {
                "zone": "a",
                "reason": "InsufficientCapacity",
                "until": until,
                "failures": 1,
                "shape": "",
            }
        ]
    }
    seen = await observe(observer(pods=[pod("web")], pools=[pool]))
    assert seen.up.new_node_zones == {"b": 1}
