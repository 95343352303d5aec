"""Which catalog offerings a pool may use, and the cached catalog read both controllers
share: a fake CatalogSource and a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.api.requirements import Requirements
from nodepool_operator.cloud import catalog, provider
from nodepool_operator.controllers import capacity, offerings
from nodepool_operator.runtime import conditions
from nodepool_operator.runtime.clock import FakeClock

NOW = 1_800_000_000.0
GIB = 2**30


def _type(name: str, cores: int, gib: int, *, arch: str = "amd64") -> catalog.InstanceType:
    return catalog.InstanceType(
        name=name,
        cpu_millis=cores * 1000,
        memory_bytes=gib * GIB,
        pods=110,
        ephemeral_storage_bytes=20 * GIB,
        architecture=arch,
        operating_systems=("linux",),
        overhead_cpu_millis=100,
        overhead_memory_bytes=GIB // 2,
    )


def _offer(name: str, zone: str, price: float, kind: str = "on-demand", **more: Any) -> Any:
    return catalog.Offering(
        instance_type=name, zone=zone, capacity_type=kind, price_per_hour=price, **more
    )


CATALOG = catalog.Catalog.of(
    {
        t.name: t
        for t in (_type("small", 2, 4), _type("large", 8, 32), _type("arm", 4, 8, arch="arm64"))
    },
    [
        _offer("small", "a", 0.10),
        _offer("small", "b", 0.11),
        _offer("small", "a", 0.03, "spot"),
        _offer("large", "a", 0.40),
        _offer("large", "b", 0.38, available=False),
        _offer("arm", "a", 0.08),
    ],
)


def _spec(*requirements: dict[str, Any], **template: Any) -> nodepool_api.NodePoolSpec:
    return nodepool_api.NodePoolSpec(
        requirements=Requirements.from_list(list(requirements)),
        template=nodepool_api.NodeTemplate(**template),
    )


ON_DEMAND_AMD64 = (
    {"key": wellknown.CAPACITY_TYPE_LABEL, "operator": "In", "values": ["on-demand"]},
    {"key": wellknown.ARCH_LABEL, "operator": "In", "values": ["amd64"]},
)


def test_a_pool_gets_the_offerings_its_requirements_allow_cheapest_first() -> None:
    found = offerings.pool_offerings(_spec(*ON_DEMAND_AMD64), CATALOG)
    # The unavailable large in b and the spot and arm64 ones are left out.
    assert [o.key for o in found] == [
        ("small", "a", "on-demand"),
        ("small", "b", "on-demand"),
        ("large", "a", "on-demand"),
    ]
    spot = _spec({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]})
    assert [o.key for o in offerings.pool_offerings(spot, CATALOG)] == [("small", "a", "spot")]
    big = _spec({"key": wellknown.INSTANCE_CPU_LABEL, "operator": "Gt", "values": ["4"]})
    assert [o.key for o in offerings.pool_offerings(big, CATALOG)] == [("large", "a", "on-demand")]


def test_a_pool_without_requirements_uses_no_offering() -> None:
    assert offerings.pool_offerings(nodepool_api.NodePoolSpec(), CATALOG) == []


def test_the_template_s_labels_take_part_in_the_requirements() -> None:
    team = {"key": "team", "operator": "In", "values": ["web"]}
    assert offerings.pool_offerings(_spec(team), CATALOG) == []
    assert len(offerings.pool_offerings(_spec(team, labels={"team": "web"}), CATALOG)) == 5


def test_an_offering_s_node_has_the_type_s_shape_less_reserve_and_overhead() -> None:
    spec = _spec(
        *ON_DEMAND_AMD64,
        cpu="4",
        memory="16Gi",
        reserved={"cpu": "100m", "memory": "1Gi"},
        labels={"team": "web"},
        taints=(nodepool_api.Taint(key="dedicated", effect="NoSchedule"),),
    )
    small = offerings.pool_offerings(spec, CATALOG)[0]
    assert nodepool_api.template_capacity(small.template) == {
        "cpu": 2000,
        "memory": 4 * GIB,
        "pods": 110,
        "ephemeral-storage": 20 * GIB,
    }
    # The template's reserve plus the type's overhead.
    assert small.allocatable == {
        "cpu": 1800,
        "memory": 4 * GIB - GIB - GIB // 2,
        "pods": 110,
        "ephemeral-storage": 20 * GIB,
    }
    labels = nodepool_api.node_labels("web", small.template, zone=small.zone)
    assert labels[wellknown.INSTANCE_TYPE_LABEL] == "small"
    assert labels[wellknown.ZONE_LABEL] == "a"
    assert labels[wellknown.CAPACITY_TYPE_LABEL] == "on-demand"
    assert labels["team"] == "web"
    assert small.template.taints == spec.template.taints
    assert small.price_per_hour == pytest.approx(0.10)


def test_a_type_the_reserve_leaves_no_room_on_is_not_offered() -> None:
    spec = _spec(*ON_DEMAND_AMD64, cpu="16", memory="64Gi", reserved={"memory": "8Gi"})
    assert [o.key[0] for o in offerings.pool_offerings(spec, CATALOG)] == ["large"]


def _backoff(until: float, *, zone: str = "a", offering: str | None = None) -> Any:
    return nodepool_api.ZoneBackoff(
        zone=zone,
        shape=offering or "",
        reason="InsufficientCapacity",
        failures=1,
        until=conditions.rfc3339(until),
        instance_type=offering,
        capacity_type="on-demand" if offering else None,
    )


def test_a_backed_off_offering_is_skipped_while_its_backoff_holds_and_only_it() -> None:
    spec = _spec(*ON_DEMAND_AMD64)
    held = [_backoff(NOW + 60, offering="small")]
    found = offerings.pool_offerings(spec, CATALOG, held, now=NOW)
    assert [o.key for o in found] == [("small", "b", "on-demand"), ("large", "a", "on-demand")]
    over = offerings.pool_offerings(spec, CATALOG, held, now=NOW + 61)
    assert over[0].key == ("small", "a", "on-demand")
    # An offering's backoff closes no zone for the zone rules the Autoscaler reads.
    assert capacity.blocked_zones(held, now=NOW) == frozenset()


def test_a_backed_off_zone_closes_every_offering_in_it() -> None:
    found = offerings.pool_offerings(
        _spec(*ON_DEMAND_AMD64), CATALOG, [_backoff(NOW + 60)], now=NOW
    )
    assert [o.key for o in found] == [("small", "b", "on-demand")]


def test_an_offering_backoff_is_recorded_beside_the_zone_s_and_ends_on_a_launch() -> None:
    def no_room_in_a(
        entries: Sequence[nodepool_api.ZoneBackoff], instance_type: str
    ) -> tuple[tuple[nodepool_api.ZoneBackoff, ...], nodepool_api.ZoneBackoff | None]:
        return capacity.record(
            entries,
            zone="a",
            shape=instance_type,
            reason="InsufficientCapacity",
            message="no room",
            now=NOW,
            offering=(instance_type, "on-demand"),
        )

    entries, started = no_room_in_a((), "small")
    assert started is not None
    assert started.is_offering
    entries, again = no_room_in_a(entries, "large")
    assert again is not None  # another offering in the same zone: a backoff of its own
    assert len(entries) == 2
    kept = capacity.forgotten(entries, now=NOW, offerings_succeeded=[("small", "a", "on-demand")])
    assert [b.instance_type for b in kept] == ["large"]
    # A launch in the zone of a template pool ends zone backoffs, not offerings'.
    assert len(capacity.forgotten(entries, now=NOW, succeeded=["a"])) == 2


def test_cost_per_hour_sums_the_catalog_prices_or_says_it_is_unknown() -> None:
    machines = [("small", "a", "on-demand"), ("small", "a", "spot"), ("large", "a", None)]
    assert offerings.cost_per_hour(CATALOG, machines) == pytest.approx(0.53)
    assert (
        offerings.cost_per_hour(CATALOG, [("small", "a", "on-demand"), (None, None, None)]) is None
    )
    assert offerings.cost_per_hour(CATALOG, []) == 0.0


class FakeSource:
    """A CatalogSource whose answers the test sets; counts the reads."""

    def __init__(self) -> None:
        self.answer: catalog.Catalog | Exception = CATALOG
        self.reads = 0

    async def catalog(self) -> catalog.Catalog:
        self.reads += 1
        await asyncio.sleep(0)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


async def test_the_catalog_is_read_once_per_ttl_and_shared_by_concurrent_readers() -> None:
    source, clock = FakeSource(), FakeClock()
    reader = offerings.OfferingsCatalog(source, clock=clock, ttl=300)
    assert reader.known() is None
    first = await asyncio.gather(*(reader.current() for _ in range(5)))
    assert all(c is CATALOG for c in first)
    assert source.reads == 1
    await clock.advance(299)
    await reader.current()
    assert source.reads == 1
    newer = catalog.Catalog.of(CATALOG.types, CATALOG.offerings[:1])
    source.answer = newer
    await clock.advance(1)
    assert await reader.current() is newer
    assert reader.known() is newer
    assert source.reads == 2


async def test_a_failed_read_keeps_the_last_catalog_and_asks_again_after_the_retry() -> None:
    source, clock = FakeSource(), FakeClock()
    reader = offerings.OfferingsCatalog(source, clock=clock, ttl=300, retry=30)
    await reader.current()
    source.answer = provider.TransientCloudError("simcloud is down")
    await clock.advance(300)
    assert await reader.current() is CATALOG
    await clock.advance(29)
    assert await reader.current() is CATALOG
    assert source.reads == 2  # no read again before the retry
    await clock.advance(1)
    await reader.current()
    assert source.reads == 3


async def test_with_no_catalog_read_yet_a_failure_is_the_caller_s() -> None:
    source = FakeSource()
    source.answer = provider.TransientCloudError("simcloud is down")
    reader = offerings.OfferingsCatalog(source, clock=FakeClock())
    with pytest.raises(provider.TransientCloudError):
        await reader.current()


async def test_a_cloud_that_sells_no_catalog_has_the_empty_one() -> None:
    reader = offerings.OfferingsCatalog.of_cloud(object(), clock=FakeClock())
    assert await reader.current() is catalog.NOTHING
    assert reader.known() is catalog.NOTHING
    assert offerings.OfferingsCatalog.of_cloud(FakeSource(), clock=FakeClock()).source is not None


def _node(
    kind: str, *, cpu: str, memory: str = "1Gi", ready: bool = True, leaving: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"{kind}-{cpu}",
        "labels": {wellknown.INSTANCE_TYPE_LABEL: kind},
    }
    if leaving:
        meta["deletionTimestamp"] = conditions.rfc3339(NOW)
    return {
        "metadata": meta,
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_an_offering_is_planned_with_what_the_ready_nodes_of_its_type_report() -> None:
    found = offerings.pool_offerings(_spec(*ON_DEMAND_AMD64), CATALOG)
    small_a, small_b, large = found
    assert small_a.allocatable["cpu"] == 1900  # 2 cores less the type's 100m overhead
    nodes = [
        _node("small", cpu="1"),
        _node("small", cpu="1"),
        _node("small", cpu="1800m"),  # one says more: the lower median is 1000m
        _node("large", cpu="2", ready=False),  # booting: its kubelet has not spoken
        _node("large", cpu="2", leaving=True),
    ]

    reported = offerings.as_reported(found, nodes)

    assert [o.allocatable["cpu"] for o in reported] == [1000, 1000, large.allocatable["cpu"]]
    # Memory: every small Node says 1Gi, less than the catalog's 4Gi less overhead.
    assert reported[0].allocatable["memory"] == GIB
    assert reported[2] is large  # no Ready Node of its type: the catalog's figures
    assert small_b.key == reported[1].key
    assert small_b.price_per_hour == reported[1].price_per_hour


def test_a_node_reporting_more_than_the_catalog_raises_nothing() -> None:
    found = offerings.pool_offerings(_spec(*ON_DEMAND_AMD64), CATALOG)
    assert offerings.as_reported(found, [_node("small", cpu="64", memory="64Gi")]) == found
