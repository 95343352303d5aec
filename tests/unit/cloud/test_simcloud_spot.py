"""Spot VMs taken back: a notice first (the VM shows ``terminateAt``, the event stream
tells it), then the VM is gone after the notice period; on demand (``/admin/interrupt``)
or at a rate per zone and type (the ``spotInterruptions`` fault)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from nodepool_operator.cloud import credentials, provider
from nodepool_operator.cloud.simcloud import client, server, store, wire

TYPE = "c-2x-amd64-linux"
NOTICE = 120.0


def offering(zone: str, capacity: str) -> dict[str, Any]:
    requirements = [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity]},
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]},
    ]
    return {"Price": 0.05 if capacity == "spot" else 0.1, "Requirements": requirements}


CATALOG = [
    {
        "name": TYPE,
        "resources": {"cpu": "2", "memory": "4Gi", "pods": "32"},
        "offerings": [offering(z, c) for z in ("sim-1a", "sim-1b") for c in ("spot", "on-demand")],
    }
]


@pytest.fixture
async def sim(
    config: server.SimCloudConfig, clock: store.WallClock, tmp_path: pathlib.Path
) -> AsyncIterator[server.SimCloudServer]:
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(CATALOG))
    selling = dataclasses.replace(config, catalog_path=str(path), spot_notice_seconds=NOTICE)
    async with server.SimCloudServer(selling, clock=clock) as running:
        yield running


def spot(zone: str) -> provider.MachineSpec:
    return provider.MachineSpec(
        cpu="2", memory="4Gi", pods=32, zone=zone, instance_type=TYPE, capacity_type="spot"
    )


async def running_spot(
    cloud: client.SimCloudClient,
    advance: Callable[[float], None],
    *names: str,
    zone: str = "sim-1a",
) -> None:
    for name in names:
        await cloud.create_vm(name=provider.VmName(name), pool="a", spec=spot(zone))
    advance(10.0)  # past the create latency: running


async def test_a_notice_shows_on_the_vm_and_in_the_stream_then_the_vm_is_taken_back(
    cloud: client.SimCloudClient,
    sim: server.SimCloudServer,
    token: credentials.TokenFile,
    clock: Any,
    advance: Any,
) -> None:
    await running_spot(cloud, advance, "a-0")
    [noticed] = await cloud.interrupt(["a-0"])
    assert noticed.terminate_at == clock() + NOTICE
    assert noticed.state is provider.VmState.RUNNING  # it keeps running until then
    [warning] = await cloud.events(wait=0)
    assert (warning.kind, warning.name, warning.pool) == ("SpotInterruptionWarning", "a-0", "a")
    assert warning.terminate_at == noticed.terminate_at

    advance(NOTICE - 1)
    sim.tick()
    still = await cloud.get_vm(provider.VmName("a-0"))
    assert still is not None
    assert still.state is provider.VmState.RUNNING
    advance(1)
    sim.tick()
    taken = await cloud.get_vm(provider.VmName("a-0"))
    assert taken is not None
    assert taken.state is provider.VmState.DELETING
    [change] = await cloud.events(wait=0)
    assert (change.kind, change.name, change.state) == ("InstanceStateChange", "a-0", "Deleting")
    # A reader that starts again (a restarted operator) is told both again: acting on
    # them is the reader's to make harmless twice.
    async with client.SimCloudClient(sim.endpoint, token=token) as again:
        assert [e.kind for e in await again.events(wait=0)] == [warning.kind, change.kind]
    advance(5.0)  # the delete latency
    assert await cloud.get_vm(provider.VmName("a-0")) is None


async def test_only_a_running_spot_vm_can_be_interrupted_and_a_second_notice_changes_nothing(
    cloud: client.SimCloudClient, clock: Any, advance: Any
) -> None:
    await running_spot(cloud, advance, "a-0")
    on_demand = dataclasses.replace(spot("sim-1a"), capacity_type="on-demand")
    await cloud.create_vm(name=provider.VmName("a-1"), pool="a", spec=on_demand)
    with pytest.raises(provider.PermanentCloudError, match="a-1: not a spot VM"):
        await cloud.interrupt(["a-0", "a-1"])
    assert await cloud.events(wait=0) == []  # all or nothing
    with pytest.raises(provider.PermanentCloudError, match="nope: no such VM"):
        await cloud.interrupt(["nope"])
    [first] = await cloud.interrupt(["a-0"])
    advance(30)
    [again] = await cloud.interrupt(["a-0"])
    assert again.terminate_at == first.terminate_at
    assert len(await cloud.events(wait=0)) == 1


async def test_a_rate_interrupts_the_spot_vms_of_its_zone_only(
    cloud: client.SimCloudClient, sim: server.SimCloudServer, advance: Any
) -> None:
    await running_spot(cloud, advance, "a-0", "a-1", zone="sim-1a")
    await running_spot(cloud, advance, "b-0", zone="sim-1b")
    rate = store.InterruptionRate(zone="sim-1a", instance_type=TYPE, per_hour=3600.0 * 10)
    await cloud.set_faults(wire.Faults(spot_interruptions=(rate,)))
    sim.tick()  # starts the count
    advance(1.0)
    sim.tick()  # 10 per second per VM: a certainty within the second
    names = {e.name for e in await cloud.events(wait=0)}
    assert names == {"a-0", "a-1"}
    assert (await cloud.faults()).spot_interruptions == (rate,)


async def test_the_stream_waits_for_an_event_and_answers_empty_when_none_comes(
    cloud: client.SimCloudClient, advance: Any
) -> None:
    await running_spot(cloud, advance, "a-0")
    assert await cloud.events(wait=0.3) == []
    waiting = asyncio.create_task(cloud.events(wait=5))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await cloud.interrupt(["a-0"])
    [told] = await asyncio.wait_for(waiting, 2)
    assert told.name == "a-0"


def test_a_rate_fault_with_an_unknown_key_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown spotInterruptions keys"):
        wire.Faults().merged({"spotInterruptions": [{"zone": "a", "perHour": 1, "type": "x"}]})
    with pytest.raises(ValueError, match="perHour must be >= 0"):
        wire.Faults().merged({"spotInterruptions": [{"perHour": -1}]})


async def test_a_rebalance_recommendation_is_told_in_the_stream_and_the_vm_runs_on(
    cloud: client.SimCloudClient, sim: server.SimCloudServer, advance: Any
) -> None:
    await running_spot(cloud, advance, "a-0")
    [told] = await cloud.recommend_rebalance(["a-0"])
    [event] = await cloud.events(wait=0)
    assert (event.kind, event.name, event.pool, event.terminate_at) == (
        "RebalanceRecommendation",
        "a-0",
        "a",
        None,
    )
    assert told.terminate_at is None
    advance(NOTICE * 10)
    sim.tick()
    still = await cloud.get_vm(provider.VmName("a-0"))
    assert still is not None
    assert (still.state, still.terminate_at) == (provider.VmState.RUNNING, None)
    on_demand = dataclasses.replace(spot("sim-1a"), capacity_type="on-demand")
    await cloud.create_vm(name=provider.VmName("a-1"), pool="a", spec=on_demand)
    with pytest.raises(provider.PermanentCloudError, match="a-1: not a spot VM"):
        await cloud.recommend_rebalance(["a-1"])


def _spot_full(zone: str | None = None, **more: str) -> store.CapacityLimit:
    return store.CapacityLimit(
        offering=store.MachineSelector(zone=zone, capacity_type="spot", **more), max_vms=0
    )


async def test_a_capacity_fault_on_spot_in_a_zone_leaves_on_demand_and_other_zones_sold(
    cloud: client.SimCloudClient,
) -> None:
    await cloud.set_faults(wire.Faults(capacity=(_spot_full("sim-1a", instance_type=TYPE),)))
    with pytest.raises(provider.InsufficientCapacity) as refused:
        await cloud.create_vm(name=provider.VmName("a-0"), pool="a", spec=spot("sim-1a"))
    on_demand = dataclasses.replace(spot("sim-1a"), capacity_type="on-demand")
    made = await cloud.create_vm(name=provider.VmName("a-1"), pool="a", spec=on_demand)
    elsewhere = await cloud.create_vm(name=provider.VmName("a-2"), pool="a", spec=spot("sim-1b"))

    assert (refused.value.code, refused.value.zone) == ("InsufficientCapacity", "sim-1a")
    assert await cloud.get_vm(provider.VmName("a-0")) is None
    assert (made.zone, made.capacity_type) == ("sim-1a", "on-demand")
    assert (elsewhere.zone, elsewhere.capacity_type) == ("sim-1b", "spot")


async def test_a_capacity_fault_on_another_instance_type_refuses_nothing_of_this_one(
    cloud: client.SimCloudClient,
) -> None:
    await cloud.set_faults(wire.Faults(capacity=(_spot_full(instance_type="m-8x"),)))
    made = await cloud.create_vm(name=provider.VmName("a-0"), pool="a", spec=spot("sim-1a"))
    assert made.capacity_type == "spot"


async def test_a_spot_limit_counts_spot_vms_only(cloud: client.SimCloudClient) -> None:
    one_spot = store.CapacityLimit(offering=store.MachineSelector(capacity_type="spot"), max_vms=1)
    await cloud.set_faults(wire.Faults(capacity=(one_spot,)))
    on_demand = dataclasses.replace(spot("sim-1a"), capacity_type="on-demand")
    await cloud.create_vm(name=provider.VmName("a-0"), pool="a", spec=on_demand)
    await cloud.create_vm(name=provider.VmName("a-1"), pool="a", spec=spot("sim-1a"))
    with pytest.raises(provider.InsufficientCapacity):
        await cloud.create_vm(name=provider.VmName("a-2"), pool="a", spec=spot("sim-1b"))


def test_capacity_faults_by_instance_and_capacity_type_round_trip_as_json() -> None:
    body = {
        "capacity": [
            {"zone": "sim-1b", "instanceType": TYPE, "capacityType": "spot", "maxVms": 0},
            {"capacityType": "on-demand", "maxVms": 3},
        ]
    }
    faults = wire.Faults().merged(body)
    assert faults.capacity == (
        _spot_full("sim-1b", instance_type=TYPE),
        store.CapacityLimit(offering=store.MachineSelector(capacity_type="on-demand"), max_vms=3),
    )
    assert faults.to_json()["capacity"] == body["capacity"]
    with pytest.raises(ValueError, match="capacityType must be one of"):
        wire.Faults().merged({"capacity": [{"capacityType": "preemptible", "maxVms": 0}]})
