"""Scale-down keeps a pool balanced over its zones; launches follow the requests' zones."""

from __future__ import annotations

from collections import Counter

from nodepool_operator.api import zones as zones_api
from nodepool_operator.cloud.provider import VirtualMachine, VmName
from nodepool_operator.cloud.testing import virtual_machine
from nodepool_operator.controllers.nodepool import plan, zoning
from unit.nodepool.drain_world import draining_since, node


def vm(name: str, zone: str) -> VirtualMachine:
    return virtual_machine(name, pool="gpu", cpu="8", memory="32Gi", zone=zone)


def view(*vms: VirtualMachine, pods: dict[str, int] | None = None) -> plan.PoolView:
    return plan.PoolView(
        vms=vms, nodes={v.name: node(v.name) for v in vms}, pods_per_node=pods or {}
    )


def test_scale_down_takes_from_the_zone_with_the_most_nodes() -> None:
    pool = view(vm("p-0", "a"), vm("p-1", "b"), vm("p-2", "c"), vm("p-3", "a"))
    assert zoning.balanced_victims(pool, 1, zoned=True) == ["p-3"]


def test_scale_down_keeps_the_zones_level_as_it_goes() -> None:
    pool = view(*(vm(f"p-{i}", "abc"[i % 3]) for i in range(6)), vm("p-6", "a"))
    victims = zoning.balanced_victims(pool, 4, zoned=True)
    # a has three: its newest goes; then every zone has two, and the newest goes each time.
    assert victims == ["p-6", "p-5", "p-4", "p-3"]


def test_within_the_fullest_zone_the_emptiest_node_goes_first() -> None:
    pool = view(vm("p-0", "a"), vm("p-1", "a"), vm("p-2", "b"), pods={"p-1": 3})
    assert zoning.balanced_victims(pool, 1, zoned=True) == ["p-0"]


def test_a_draining_node_goes_first_whatever_its_zone() -> None:
    pool = view(vm("p-0", "a"), vm("p-1", "b"), vm("p-2", "b"))
    pool = plan.PoolView(
        vms=pool.vms,
        nodes={**pool.nodes, "p-0": draining_since("p-0", 0.0)},
        pods_per_node={},
    )
    assert zoning.balanced_victims(pool, 2, zoned=True) == ["p-0", "p-2"]


def test_a_protected_node_goes_last_even_when_it_is_not_ready() -> None:
    """As ``plan.pick_victims`` orders a pool without zones: a Node holding a
    do-not-disrupt pod is taken only when nothing else is left."""
    pool = view(vm("p-0", "a"), vm("p-1", "a"), vm("p-2", "b"))
    not_ready = node("p-0")
    not_ready["status"]["conditions"][0]["status"] = "False"
    pool = plan.PoolView(
        vms=pool.vms,
        nodes={**pool.nodes, "p-0": not_ready},
        pods_per_node={},
        protected=frozenset({"p-0"}),
    )
    assert zoning.balanced_victims(pool, 1, zoned=True) == ["p-1"]
    assert zoning.balanced_victims(pool, 3, zoned=True)[-1] == "p-0"


def test_a_pool_without_zones_keeps_the_plain_order() -> None:
    pool = view(vm("p-0", "x"), vm("p-1", "x"), pods={"p-0": 1})
    assert zoning.balanced_victims(pool, 1, zoned=False) == plan.pick_victims(pool, 1)


def test_a_requests_zones_are_served_by_vms_made_after_it() -> None:
    claims = [zones_api.Claim(created=10.0, zones={"c": 2, "a": 1})]
    vms = [
        zones_api.Member(zone="c", created=5.0),  # older than the request
        zones_api.Member(zone="c", created=12.0),
        zones_api.Member(zone="b", created=12.0),
    ]
    assert zones_api.unserved(claims, vms) == {"c": 1, "a": 1}


def test_the_next_zones_follow_the_claims_then_balance_and_skip_blocked_zones() -> None:
    where = zones_api.next_zones(
        ("a", "b", "c"),
        count=4,
        counts={"a": 1},
        wanted={"b": 1, "z": 3},
        blocked=frozenset({"c"}),
    )
    assert where == ["b", "a", "b", "a"]
    assert zones_api.next_zones((), count=2, counts={}) == [None, None]
    assert zones_api.next_zones(("a",), count=1, counts={}, blocked=frozenset({"a"})) == []


def test_a_vm_not_made_gives_its_zone_and_its_requests_claim_back() -> None:
    placer = zoning.ZonePlacer(("a", "b", "c"), Counter({"a": 1}), Counter({"c": 1}))
    first = placer.place([VmName("p-1"), VmName("p-2")], blocked=frozenset())
    assert first == [("p-1", "c"), ("p-2", "b")]
    placer.unplace("p-1", "c")  # a name held by another pool's VM: asked again elsewhere
    assert placer.place([VmName("p-3")], blocked=frozenset()) == [("p-3", "c")]
    assert placer.place([VmName("p-4")], blocked=frozenset({"a", "b"})) == [("p-4", "c")]
    assert placer.place([VmName("p-5")], blocked=frozenset({"a", "b", "c"})) == []
