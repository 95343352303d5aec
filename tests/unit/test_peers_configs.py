"""bench/peers.py --cost: the operator's configurations for a catalog (``--ours-config``).

The ``requirements`` one is the operator as issue 49 intends it: one NodePool whose
requirements allow the catalog, as Karpenter's NodePool does. What it allows is judged by
the operator's own rule (``controllers.offerings.pool_offerings``), so these tests check
the pool against the offerings the controllers would plan and launch with.
"""

from __future__ import annotations

import pytest

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud import catalog
from nodepool_operator.controllers import offerings
from unit import bench_scripts
from unit.kwok_types import KWOK_RESERVE, kwok_type

peers = bench_scripts.load("peers")

MI = 2**20
ZONES = ("test-zone-a", "test-zone-b")


def sold(*kinds: str) -> catalog.Catalog:
    """A small catalog as ``peers.generic_catalog`` writes one: c-4x and s-16x sold in two
    zones as ``kinds`` (capacity types), the kwok reserve as their overhead."""
    return catalog.parse(
        [
            kwok_type("c-4x-amd64-linux", 4, 8, 110, 0.15, zones=ZONES, capacity_types=kinds),
            kwok_type("s-16x-amd64-linux", 16, 64, 110, 0.70, zones=ZONES, capacity_types=kinds),
        ]
    )


def the_pool(found: catalog.Catalog) -> nodepool_api.NodePoolSpec:
    pools = peers.OURS_CONFIGS["requirements"].pools(found, ["c-4x-amd64-linux"])
    assert [pool.name for pool in pools] == [peers.POOL]
    spec: nodepool_api.NodePoolSpec = pools[0].spec
    return spec


def test_on_demand_catalog_one_pool_allows_every_on_demand_offering() -> None:
    found = sold("on-demand")
    allowed = offerings.pool_offerings(the_pool(found), found)
    # Every type, both zones, not only the type it was handed: the pool is the catalog's.
    assert {o.key for o in allowed} == {
        (t, z, "on-demand")
        for t in ("c-4x-amd64-linux", "s-16x-amd64-linux")
        for z in ("test-zone-a", "test-zone-b")
    }


def test_spot_allowed_catalog_one_pool_allows_spot_too_and_spot_is_cheapest() -> None:
    found = sold("spot", "on-demand")
    spec = the_pool(found)
    assert spec.requirements.values_of(wellknown.CAPACITY_TYPE_LABEL) == {"on-demand", "spot"}
    allowed = offerings.pool_offerings(spec, found)
    assert len(allowed) == 8
    assert allowed[0].key == ("c-4x-amd64-linux", "test-zone-a", "spot")


def test_a_type_of_another_architecture_is_not_allowed() -> None:
    found = catalog.parse(
        [
            kwok_type("c-4x-amd64-linux", 4, 8, 110, 0.15, zones=ZONES),
            kwok_type("c-4x-arm64-linux", 4, 8, 110, 0.10, zones=ZONES, architecture="arm64"),
        ]
    )
    allowed = offerings.pool_offerings(the_pool(found), found)
    assert {o.instance_type.name for o in allowed} == {"c-4x-amd64-linux"}


def test_nodes_keep_the_kwok_reserve_once_as_karpenters_and_the_pool_per_type_ones() -> None:
    assert peers.RESERVED == KWOK_RESERVE  # what generic_catalog writes as each overhead
    found = sold("on-demand")
    for offering in offerings.pool_offerings(the_pool(found), found):
        capacity = offering.instance_type
        assert offering.allocatable["cpu"] == capacity.cpu_millis - 100
        assert offering.allocatable["memory"] == capacity.memory_bytes - 10 * MI
    per_type = peers.pool_per_type(found, ["c-4x-amd64-linux"])[0].spec.template
    assert nodepool_api.template_allocatable(per_type)["cpu"] == 4000 - 100
    assert nodepool_api.template_allocatable(per_type)["memory"] == 8 * 1024 * MI - 10 * MI


def test_the_pool_survives_the_api_form_it_is_created_in() -> None:
    spec = the_pool(sold("spot", "on-demand"))
    sent = nodepool_api.manifest(peers.POOL, spec)
    assert nodepool_api.spec_of(sent) == spec
    assert sent["spec"]["requirements"][0] == {
        "key": "nodepool.dev/capacity-type",
        "operator": "In",
        "values": ["on-demand", "spot"],
    }


def test_the_report_names_the_pools_requirements_not_a_count_of_types() -> None:
    config = peers.OURS_CONFIGS["requirements"]
    assert config.label == "ours: one pool, requirements"
    assert not config.per_type
    (pool,) = config.pools(sold("on-demand"), [])
    assert peers.pool_text(pool) == (
        "peers (nodepool.dev/capacity-type In on-demand; kubernetes.io/arch In amd64; "
        "kubernetes.io/os In linux)"
    )
    assert peers.OURS_CONFIGS["pool-per-type"].per_type


@pytest.mark.parametrize("name", ["pool-per-type", "requirements"])
def test_both_configurations_are_selectable(name: str) -> None:
    arguments = peers._parser().parse_args(["--cost", "--ours-config", name])
    assert arguments.ours_config == name


def test_the_default_is_the_one_pool_of_requirements() -> None:
    assert peers._parser().parse_args(["--cost"]).ours_config == "requirements"
