"""simcloud selling a catalog (``--catalog``): it serves it, and a create that names an
instance type is made as that type, in a zone that sells it, or refused as a cloud would."""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from typer.testing import CliRunner

from nodepool_operator import cli
from nodepool_operator.cloud import catalog, credentials, provider
from nodepool_operator.cloud.simcloud import client, server, store

SMALL = "c-2x-amd64-linux"
LARGE = "m-8x-amd64-linux"


def offering(
    price: float, zone: str, capacity: str = "on-demand", *, available: bool = True
) -> Any:
    return {
        "Price": price,
        "Available": available,
        "Requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]},
        ],
    }


def kwok_type(name: str, cpu: str, memory: str, offerings: list[Any]) -> dict[str, Any]:
    return {
        "name": name,
        "offerings": offerings,
        "architecture": "amd64",
        "operatingSystems": ["linux"],
        "resources": {"cpu": cpu, "memory": memory, "pods": "32", "ephemeral-storage": "20Gi"},
    }


CATALOG = [
    # Cheaper in sim-1b than in sim-1a; spot sold out in sim-1c.
    kwok_type(
        SMALL,
        "2",
        "4Gi",
        [
            offering(0.06, "sim-1a"),
            offering(0.05, "sim-1b"),
            offering(0.02, "sim-1c", "spot", available=False),
            offering(0.03, "sim-1a", "spot"),
        ],
    ),
    kwok_type(LARGE, "8", "64Gi", [offering(0.40, "sim-1a")]),
]


@pytest.fixture
def catalog_file(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "instance_types.json"
    path.write_text(json.dumps(CATALOG))
    return path


@pytest.fixture
async def selling(
    config: server.SimCloudConfig,
    catalog_file: pathlib.Path,
    clock: store.WallClock,
    token: credentials.TokenFile,
) -> AsyncIterator[client.SimCloudClient]:
    selling_config = dataclasses.replace(config, catalog_path=str(catalog_file))
    async with (
        server.SimCloudServer(selling_config, clock=clock) as sim,
        client.SimCloudClient(sim.endpoint, token=token, timeout=5.0) as cloud,
    ):
        yield cloud


def typed(instance_type: str, **more: Any) -> provider.MachineSpec:
    # cpu and memory as a caller that knows only the type might pass anything: the type wins.
    return provider.MachineSpec(cpu="1", memory="1Gi", pods=32, instance_type=instance_type, **more)


async def test_it_serves_the_catalog_it_was_given(selling: client.SimCloudClient) -> None:
    sold = await selling.catalog()
    assert sold == catalog.parse(CATALOG)
    assert [o.zone for o in sold.offerings_of(LARGE)] == ["sim-1a"]


async def test_a_typed_create_gets_the_type_in_its_cheapest_zone(
    selling: client.SimCloudClient,
) -> None:
    vm = await selling.create_vm(name=provider.VmName("a-0"), pool="a", spec=typed(SMALL))
    assert (vm.cpu, vm.memory, vm.zone) == ("2", "4Gi", "sim-1b")
    assert (vm.instance_type, vm.capacity_type) == (SMALL, "on-demand")
    [listed] = await selling.list_vms(pool="a")
    assert (listed.instance_type, listed.capacity_type) == (SMALL, "on-demand")


async def test_a_typed_create_keeps_its_zone_and_capacity_type(
    selling: client.SimCloudClient,
) -> None:
    spec = typed(SMALL, zone="sim-1a", capacity_type="spot")
    vm = await selling.create_vm(name=provider.VmName("a-0"), pool="a", spec=spec)
    assert (vm.zone, vm.capacity_type) == ("sim-1a", "spot")


async def test_what_the_catalog_does_not_sell_is_refused_as_a_cloud_would(
    selling: client.SimCloudClient,
) -> None:
    with pytest.raises(provider.InvalidMachineSpec, match="no instance type of that name"):
        await selling.create_vm(name=provider.VmName("a-0"), pool="a", spec=typed("x-9x"))
    elsewhere = typed(SMALL, zone="sim-1b", capacity_type="spot")
    with pytest.raises(provider.InvalidMachineSpec, match="is not sold as spot in zone sim-1b"):
        await selling.create_vm(name=provider.VmName("a-1"), pool="a", spec=elsewhere)
    sold_out_spec = typed(SMALL, zone="sim-1c", capacity_type="spot")
    with pytest.raises(provider.InsufficientCapacity) as sold_out:
        await selling.create_vm(name=provider.VmName("a-2"), pool="a", spec=sold_out_spec)
    assert (sold_out.value.zone, sold_out.value.shape) == ("sim-1c", SMALL)
    assert await selling.list_vms(pool="a") == []


async def test_an_untyped_create_is_made_as_asked_whether_or_not_there_is_a_catalog(
    selling: client.SimCloudClient, cloud: client.SimCloudClient
) -> None:
    plain = provider.MachineSpec(cpu="4", memory="16Gi", pods=110, zone="sim-1a")
    for each in (selling, cloud):
        vm = await each.create_vm(name=provider.VmName("b-0"), pool="b", spec=plain)
        assert (vm.cpu, vm.memory, vm.instance_type, vm.capacity_type) == ("4", "16Gi", None, None)


async def test_without_a_catalog_it_sells_any_shape_and_no_type(
    cloud: client.SimCloudClient,
) -> None:
    assert (await cloud.catalog()).sells_any_shape
    with pytest.raises(provider.InvalidMachineSpec, match="simcloud sells no catalog"):
        await cloud.create_vm(name=provider.VmName("a-0"), pool="a", spec=typed(SMALL))


def test_a_catalog_file_it_cannot_read_stops_it_at_start_with_the_entry_named(
    tmp_path: pathlib.Path,
) -> None:
    broken = [kwok_type(SMALL, "two", "4Gi", [offering(0.05, "sim-1a")])]
    path = tmp_path / "types.json"
    path.write_text(json.dumps(broken))
    token = tmp_path / "token"
    token.write_text("t\n")
    result = CliRunner().invoke(
        cli.app,
        [
            "simcloud",
            "--state",
            str(tmp_path / "s.db"),
            "--token-file",
            str(token),
            "--catalog",
            str(path),
        ],
    )
    assert result.exit_code == 2, result.output
    assert f"{path}: instance type '{SMALL}': cpu 'two'" in result.output
