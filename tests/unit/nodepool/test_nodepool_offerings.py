"""A pool with requirements: the NodePool controller launches the offerings a request
names, with their shape and labels, falls back to the next cheapest when the cloud has no
capacity for one, keeps within ``limits`` and reports what the nodes cost. A pool with
only a template launches as before (its tests are the others of this directory)."""

from __future__ import annotations

import datetime
import logging
from typing import Any

import pytest

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.api import wellknown
from nodepool_operator.api.requirements import Requirements
from nodepool_operator.cloud import catalog
from nodepool_operator.cloud.provider import (
    InsufficientCapacity,
    MachineSpec,
    VirtualMachine,
    VmName,
    VmState,
)
from nodepool_operator.controllers import offerings
from nodepool_operator.controllers.nodepool import backoff, plan, request_facts
from nodepool_operator.runtime.clock import FakeClock
from unit.nodepool.requests_world import NOW, LaggingCloud, World

GIB = 2**30


def _type(name: str, cores: int, gib: int) -> catalog.InstanceType:
    return catalog.InstanceType(
        name=name,
        cpu_millis=cores * 1000,
        memory_bytes=gib * GIB,
        pods=58,
        ephemeral_storage_bytes=0,
        architecture="amd64",
        operating_systems=("linux",),
    )


TYPES = {t.name: t for t in (_type("c2", 2, 4), _type("c4", 4, 8), _type("m8", 8, 64))}
PRICES = {"c2": 0.10, "c4": 0.19, "m8": 0.50}
CATALOG = catalog.Catalog.of(
    TYPES,
    [
        catalog.Offering(
            instance_type=name,
            zone=zone,
            capacity_type="on-demand",
            price_per_hour=price + (0.01 if zone == "b" else 0.0),
        )
        for name, price in PRICES.items()
        for zone in ("a", "b")
    ],
)


class Source:
    async def catalog(self) -> catalog.Catalog:
        return CATALOG


class CatalogCloud(LaggingCloud):
    """Makes VMs of the catalog's types, running at once; ``no_capacity`` offerings are
    refused as a cloud out of capacity refuses them."""

    boot_state = VmState.RUNNING

    def __init__(self) -> None:
        super().__init__()
        self.no_capacity: set[tuple[str, str]] = set()
        self.no_spot = False  # every spot offering out of capacity

    async def create_vm(self, *, name: VmName, pool: str, spec: MachineSpec) -> VirtualMachine:
        assert spec.instance_type is not None
        if (spec.instance_type, spec.zone) in self.no_capacity or (
            self.no_spot and spec.capacity_type == catalog.SPOT
        ):
            raise InsufficientCapacity(
                f"no capacity for {spec.instance_type} in {spec.zone}",
                zone=spec.zone,
                shape=spec.instance_type,
            )
        return await super().create_vm(name=name, pool=pool, spec=spec)


# Requests are made older than every write of the fake server (whose versions count from
# 1), so that the controller's memory of its own answer is newer than the cached copy, as
# with a real server.
OLD = "0"


def _world() -> World:
    reader = offerings.OfferingsCatalog(Source(), clock=FakeClock())
    return World(cloud=CatalogCloud(), offerings_catalog=reader)


def _pool_spec(**more: Any) -> nodepool_api.NodePoolSpec:
    return nodepool_api.NodePoolSpec(
        max_nodes=20,
        requirements=Requirements.from_list(
            [
                {"key": wellknown.INSTANCE_TYPE_LABEL, "operator": "In", "values": list(PRICES)},
                {"key": wellknown.ZONE_LABEL, "operator": "In", "values": ["a", "b"]},
            ]
        ),
        template=nodepool_api.NodeTemplate(
            labels={"team": "web"}, reserved={"cpu": "100m", "memory": "256Mi"}
        ),
        **more,
    )


def _asked(name: str, zone: str, count: int) -> scalerequest_api.OfferingCount:
    return scalerequest_api.OfferingCount(
        instance_type=name, zone=zone, capacity_type="on-demand", count=count
    )


def _launched(world: World) -> list[tuple[str | None, str | None, str | None]]:
    return sorted((s.instance_type, s.zone, s.capacity_type) for _, s in world.cloud.created)


def _status(world: World, plural: str, name: str) -> dict[str, Any]:
    """The object's status as the API server holds it after the pass."""
    status: dict[str, Any] = world.api.objects[(plural, name)]["status"]
    return status


def _nodes(world: World) -> dict[str, dict[str, Any]]:
    return {b["metadata"]["name"]: b for plural, b in world.api.created if plural == "nodes"}


async def test_a_request_naming_offerings_launches_exactly_those_with_their_shape() -> None:
    world = _world()
    world.pool("web", _pool_spec())
    world.request(
        "up",
        version=OLD,
        pool="web",
        target=3,
        offerings=(_asked("m8", "b", 1), _asked("c4", "a", 2)),
    )
    await world.reconcile("web")
    assert _launched(world) == [
        ("c4", "a", "on-demand"),
        ("c4", "a", "on-demand"),
        ("m8", "b", "on-demand"),
    ]
    shapes = {s.instance_type: (s.cpu, s.memory, s.pods) for _, s in world.cloud.created}
    assert shapes["m8"] == ("8000m", str(64 * GIB), 58)
    nodes = _nodes(world)
    assert len(nodes) == 3
    big = next(
        n for n in nodes.values() if n["metadata"]["labels"][wellknown.INSTANCE_TYPE_LABEL] == "m8"
    )
    labels = big["metadata"]["labels"]
    assert labels[wellknown.ZONE_LABEL] == "b"
    assert labels[wellknown.CAPACITY_TYPE_LABEL] == "on-demand"
    assert labels[wellknown.INSTANCE_CPU_LABEL] == "8"
    assert labels["team"] == "web"
    assert labels[wellknown.POOL_LABEL] == "web"
    assert big["status"]["capacity"]["cpu"] == "8000m"
    assert big["status"]["allocatable"]["cpu"] == "7900m"
    answer = _status(world, "scalerequests", "up")
    assert answer["phase"] == "Applied"
    assert (
        "launched 2 x c4 in a (on-demand, 0.19/h), 1 x m8 in b (on-demand, 0.51/h)"
        in (answer["message"])
    )
    assert answer["zonesServed"] is True


async def test_new_nodes_no_request_names_are_the_cheapest_allowed_offering() -> None:
    world = _world()
    world.pool("web", _pool_spec())
    world.request("up", version=OLD, pool="web", target=2)
    await world.reconcile("web")
    assert _launched(world) == [("c2", "a", "on-demand")] * 2


async def test_an_offering_without_capacity_falls_back_to_the_next_cheapest_in_one_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = _world()
    world.cloud.no_capacity.add(("c4", "a"))  # type: ignore[attr-defined]
    world.pool("web", _pool_spec())
    world.request("up", version=OLD, pool="web", target=2, offerings=(_asked("c4", "a", 2),))
    with caplog.at_level(logging.WARNING):
        await world.reconcile("web")
    # The log line names the offering, not only its zone.
    assert any(
        "event=offering-backoff zone=a instance_type=c4 capacity_type=on-demand" in r.message
        for r in caplog.records
    ), [r.message for r in caplog.records]
    # The refused offering's place goes to the cheapest one the pool allows now.
    assert _launched(world) == [("c2", "a", "on-demand")] * 2
    [fell_back, *_] = world.api.events("FellBackToNextOffering")
    assert "c4 in a (on-demand, 0.19/h) had no capacity" in fell_back["message"]
    assert "c2 in a (on-demand, 0.1/h)" in fell_back["message"]
    answer = _status(world, "scalerequests", "up")
    assert "fell back: c4 in a" in answer["message"]
    assert answer["zonesServed"] is True
    status = _status(world, "nodepools", "web")
    [backoff] = status["zoneBackoffs"]
    assert (backoff["zone"], backoff["instanceType"], backoff["capacityType"]) == (
        "a",
        "c4",
        "on-demand",
    )
    # One offering backed off is no zone backed off: the pool is not Degraded for it.
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "False"


async def test_the_cheapest_offering_refused_falls_back_to_the_next_one() -> None:
    world = _world()
    world.cloud.no_capacity.add(("c2", "a"))  # type: ignore[attr-defined]
    world.pool("web", _pool_spec())
    world.request("up", version=OLD, pool="web", target=1)
    await world.reconcile("web")
    assert _launched(world) == [("c2", "b", "on-demand")]
    assert len(world.api.events("FellBackToNextOffering")) == 1


async def test_limits_stop_the_launch_before_the_node_beyond_them_and_say_so() -> None:
    world = _world()
    world.pool("web", _pool_spec(limits=nodepool_api.Limits(cpu="10")))
    world.request("up", version=OLD, pool="web", target=2, offerings=(_asked("m8", "a", 2),))
    await world.reconcile("web")
    assert _launched(world) == [("m8", "a", "on-demand")]
    [held] = world.api.events("LimitReached")
    assert "limits.cpu=10" in held["message"]
    assert (
        "not launched yet: the next node would exceed limits.cpu=10"
        in (_status(world, "scalerequests", "up")["message"])
    )
    degraded = next(
        c for c in _status(world, "nodepools", "web")["conditions"] if c["type"] == "Degraded"
    )
    assert (degraded["status"], degraded["reason"]) == ("True", "LimitReached")


async def test_a_cloud_without_a_catalog_launches_nothing_for_such_a_pool_and_says_so() -> None:
    world = World(cloud=CatalogCloud(), offerings_catalog=None)
    world.pool("web", _pool_spec())
    world.request("up", version=OLD, pool="web", target=1)
    await world.reconcile("web")
    assert world.cloud.created == []
    degraded = next(
        c for c in _status(world, "nodepools", "web")["conditions"] if c["type"] == "Degraded"
    )
    assert (degraded["status"], degraded["reason"]) == ("True", "NoOffering")


async def test_the_pool_reports_what_its_nodes_cost() -> None:
    world = _world()
    world.pool("web", _pool_spec(target_nodes=3))
    await world.reconcile("web")
    # The VMs a pass launches count from the next pass on.
    assert _status(world, "nodepools", "web")["costPerHour"] == 0
    # The VMs show in the cloud's listing from now on.
    world.cloud.list_vms = _listing(world.cloud)  # type: ignore[method-assign]
    await world.reconcile("web")
    assert _status(world, "nodepools", "web")["costPerHour"] == pytest.approx(0.30)


def _listing(cloud: LaggingCloud) -> Any:
    async def list_vms(*, pool: str) -> list[VirtualMachine]:
        return [vm for vm in cloud.vms.values() if vm.pool == pool]

    return list_vms


def test_a_vm_that_never_registered_backs_off_its_offering_not_the_pool() -> None:
    world = _world()
    spec = _pool_spec()
    vm = VirtualMachine(
        name=VmName("web-0"),
        pool="web",
        cpu="4000m",
        memory=str(8 * GIB),
        state=VmState.RUNNING,
        provider_id="simcloud:///web-0",
        created_at=NOW - 3600,
        zone="b",
        instance_type="c4",
        capacity_type="on-demand",
    )
    view = plan.PoolView(vms=[vm], nodes={}, pods_per_node={})
    verdicts = plan.Verdicts(
        victims=(), unhealthy=frozenset(), overdue=frozenset({"web-0"}), stuck=frozenset(),
        changes_in=None,
    )  # fmt: skip
    ledger = backoff.ZoneLedger(template=spec.template, entries=(), now=NOW)
    world.reconciler.lifecycle._note_unregistered(  # type: ignore[attr-defined]
        view, spec, verdicts, ledger, may_register=True
    )
    [entry] = ledger.current()
    assert (entry.zone, entry.instance_type, entry.reason) == ("b", "c4", "RegistrationTimeout")
    assert ledger.cannot_grow() is None  # the pool still launches its other offerings
    assert [o.key for o in offerings.pool_offerings(spec, CATALOG, [entry], now=NOW)][:2] == [
        ("c2", "a", "on-demand"),
        ("c2", "b", "on-demand"),
    ]
    assert ("c4", "b", "on-demand") not in {
        o.key for o in offerings.pool_offerings(spec, CATALOG, [entry], now=NOW)
    }


def test_a_request_naming_offerings_outlives_the_retention_as_one_naming_zones() -> None:
    created = datetime.datetime(2027, 1, 15, 8, 0, tzinfo=datetime.UTC)
    spec = scalerequest_api.ScaleRequestSpec(
        node_pool_name="web", target_nodes=1, new_node_offerings=(_asked("c4", "a", 1),)
    )
    body = scalerequest_api.manifest("named", spec, pool_uid="uid-web")
    body["metadata"]["creationTimestamp"] = created.isoformat().replace("+00:00", "Z")
    body["status"] = {"phase": "Applied", "appliedTargetNodes": 1}
    later = created + datetime.timedelta(seconds=120)
    expired, next_expiry = request_facts.expired_requests(
        [body], now=later, retention=60, zoned_retention=660
    )
    assert (expired, next_expiry) == ([], 540)


async def test_without_a_backoff_ledger_a_refused_offering_is_not_asked_again_in_the_launch() -> (
    None
):
    world = _world()
    world.cloud.no_capacity.update({("c2", "a"), ("c2", "b")})  # type: ignore[attr-defined]
    pool = world.pool("web", _pool_spec())
    launcher = world.reconciler.lifecycle.launcher  # type: ignore[attr-defined]
    launched, told = await launcher.launch_offerings(
        pool, _pool_spec(), live=0, every_vm=[], missing=1, zones=None
    )
    assert [(vm.instance_type, vm.zone) for vm in launched] == [("c4", "a")]
    assert told.held is None


class SpotSource:
    """The catalog with each offering also sold as spot, at a third of the price."""

    async def catalog(self) -> catalog.Catalog:
        spot = [
            catalog.Offering(
                instance_type=o.instance_type,
                zone=o.zone,
                capacity_type=catalog.SPOT,
                price_per_hour=round(o.price_per_hour / 3, 3),
            )
            for o in CATALOG.offerings
        ]
        return catalog.Catalog.of(TYPES, [*CATALOG.offerings, *spot])


async def test_spot_out_of_capacity_falls_back_to_on_demand_and_says_so() -> None:
    reader = offerings.OfferingsCatalog(SpotSource(), clock=FakeClock())
    world = World(cloud=CatalogCloud(), offerings_catalog=reader)
    world.cloud.no_spot = True  # type: ignore[attr-defined]
    world.pool("web", _pool_spec())
    world.request("up", version=OLD, pool="web", target=1)
    await world.reconcile("web")

    # Spot first (cheapest), refused in every zone: on-demand in the same pass.
    assert _launched(world) == [("c2", "a", "on-demand")]
    [to_on_demand] = world.api.events("FellBackToOnDemand")
    assert "spot fell back to on-demand" in to_on_demand["message"]
    assert "c2 in a (on-demand" in to_on_demand["message"]
    # The spot offerings tried before it were refused for capacity too: those
    # fallbacks (spot to spot) keep the generic reason.
    assert all(
        "on-demand" not in e["message"].split("asked for as")[1]
        for e in world.api.events("FellBackToNextOffering")
    )
    status = _status(world, "nodepools", "web")
    assert {b["capacityType"] for b in status["zoneBackoffs"]} == {"spot"}
