"""The EC2 catalog: types and zones from EC2 (a moto server, through the SDK), on-demand
prices from the shipped table, spot prices from EC2's price history, kept for a while."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

import ec2_server
from nodepool_operator.cloud import aws, aws_catalog, catalog

CLUSTER = "prod"


@pytest.fixture
async def ec2(moto: ec2_server.MotoEc2, aws_env: None) -> AsyncIterator[aws.Ec2Provider]:
    cloud = aws.Ec2Provider(cluster_name=CLUSTER, endpoint_url=moto.endpoint)
    yield cloud
    await cloud.close()


def test_the_shipped_table_prices_the_region_and_nothing_elsewhere() -> None:
    prices = aws_catalog.load_prices("us-east-1")
    assert prices["m5.large"] == 0.096
    assert all(price > 0 for price in prices.values())
    assert aws_catalog.load_prices("mars-north-1") == {}


async def test_the_catalog_holds_the_priced_types_ec2_sells_with_their_resources(
    ec2: aws.Ec2Provider,
) -> None:
    sold = await ec2.catalog()
    prices = aws_catalog.load_prices(ec2_server.ENV["AWS_DEFAULT_REGION"])
    assert set(sold.types) == set(prices)  # moto sells every type the table prices
    m5 = sold.types["m5.large"]
    assert (m5.cpu_millis, m5.memory_bytes, m5.architecture) == (2000, 8 * 2**30, "amd64")
    assert m5.pods == 3 * (10 - 1) + 2  # the VPC CNI's ENI limit, as EKS computes it
    assert sold.types["m7g.large"].architecture == "arm64"
    on_demand = [o for o in sold.offerings_of("m5.large") if o.capacity_type == catalog.ON_DEMAND]
    assert {o.price_per_hour for o in on_demand} == {0.096}
    assert len(on_demand) >= 3  # one per zone that sells it
    spot = [o for o in sold.offerings_of("m5.large") if o.capacity_type == catalog.SPOT]
    assert {o.zone for o in spot} <= {o.zone for o in on_demand}
    assert spot  # moto answers a spot price history


def describe(name: str, **info: Any) -> dict[str, Any]:
    return {
        "InstanceType": name,
        "VCpuInfo": {"DefaultVCpus": 8},
        "MemoryInfo": {"SizeInMiB": 61440},
        "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
        "NetworkInfo": {"MaximumNetworkInterfaces": 4, "Ipv4AddressesPerInterface": 15},
        **info,
    }


def test_gpus_instance_store_and_unusable_architectures() -> None:
    gpu = aws_catalog.instance_type_of(
        describe(
            "g5.2xlarge",
            GpuInfo={"Gpus": [{"Manufacturer": "NVIDIA", "Count": 1}]},
            InstanceStorageInfo={"TotalSizeInGB": 450},
        )
    )
    assert gpu is not None
    assert (gpu.extended, gpu.ephemeral_storage_bytes, gpu.pods) == (
        {"nvidia.com/gpu": 1},
        450 * 10**9,
        58,
    )
    plain = aws_catalog.instance_type_of(describe("m5.2xlarge"))
    assert plain is not None
    assert plain.ephemeral_storage_bytes == aws_catalog.ROOT_VOLUME_BYTES
    mac = describe("mac1.metal", ProcessorInfo={"SupportedArchitectures": ["x86_64_mac"]})
    assert aws_catalog.instance_type_of(mac) is None


async def test_the_catalog_is_read_once_per_max_age() -> None:
    calls: list[str] = []
    now = [0.0]

    class Paginator:
        def __init__(self, name: str) -> None:
            self.name = name

        async def paginate(self, **_: Any) -> AsyncIterator[dict[str, Any]]:
            calls.append(self.name)
            if self.name == "describe_instance_type_offerings":
                yield {"InstanceTypeOfferings": [{"InstanceType": "m5.2xlarge", "Location": "a"}]}
            else:
                yield {"SpotPriceHistory": []}

    class Client:
        async def describe_instance_types(self, **_: Any) -> dict[str, Any]:
            calls.append("describe_instance_types")
            return {"InstanceTypes": [describe("m5.2xlarge")]}

        def get_paginator(self, name: str) -> Paginator:
            return Paginator(name)

    async def client() -> Any:
        return Client()

    kept = aws_catalog.Ec2Catalog(
        client=client, prices={"m5.2xlarge": 0.384}, max_age=300, monotonic=lambda: now[0]
    )
    first = await kept.catalog()
    now[0] = 299.0
    assert await kept.catalog() is first
    assert len(calls) == 3
    now[0] = 301.0
    await kept.catalog()
    assert len(calls) == 6
    assert json.loads(json.dumps(first.to_json()))[0]["name"] == "m5.2xlarge"


def test_prices_are_read_from_aws_price_list_file_for_linux_shared_on_demand_only() -> None:
    def product(sku: str, name: str, **attributes: str) -> tuple[str, dict[str, Any]]:
        base = {
            "instanceType": name,
            "operatingSystem": "Linux",
            "tenancy": "Shared",
            "preInstalledSw": "NA",
            "capacitystatus": "Used",
        }
        return sku, {"productFamily": "Compute Instance", "attributes": {**base, **attributes}}

    def hourly(usd: str) -> dict[str, Any]:
        dimension = {"unit": "Hrs", "pricePerUnit": {"USD": usd}}
        return {"term": {"priceDimensions": {"rate": dimension}}}

    products = dict(
        [
            product("A", "m5.large"),
            product("B", "m5.large", operatingSystem="Windows"),
            product("C", "m5.large", tenancy="Dedicated"),
            product("D", "m5.large", capacitystatus="AllocatedCapacityReservation"),
            product("E", "c5.large"),
        ]
    )
    terms = {
        sku: hourly(usd)
        for sku, usd in zip("ABCDE", ["0.096", "0.188", "0.106", "0.096", "0"], strict=True)
    }
    found = aws_catalog.prices_from_price_list({"products": products, "terms": {"OnDemand": terms}})
    assert found == {"m5.large": 0.096}  # Windows, dedicated, reserved and free are not it
