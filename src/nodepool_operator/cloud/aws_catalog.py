"""The EC2 catalog: the instance types a region sells, where, and at what price.

Types and zones are EC2's answers (``DescribeInstanceTypes``,
``DescribeInstanceTypeOfferings`` by availability zone). On-demand prices come from the
table the project ships (``aws_prices.json``: AWS's public price list for Linux in shared
tenancy; ``scripts/refresh-aws-prices.py`` rewrites it from AWS's price list file), as no
EC2 call answers a price; spot prices are EC2's latest ``DescribeSpotPriceHistory`` per
type and zone. Only the types the table prices are sold: a type without a price cannot
be weighed against the others. The answer is kept for ``max_age`` seconds (prices and
availability move slowly); concurrent callers share one refresh.

A type's resources: cpu its default vCPUs, memory its size in MiB, pods the ENI limit of
the AWS VPC CNI (``interfaces x (IPv4 addresses per interface - 1) + 2``, as EKS and
Karpenter compute it), ephemeral storage its instance store, else the 20 GiB root volume
(``ROOT_VOLUME_BYTES``), architecture ``amd64`` or ``arm64``, NVIDIA GPUs as
``nvidia.com/gpu``.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any, Final

from nodepool_operator.cloud import aws_errors
from nodepool_operator.cloud import catalog as catalog_api

if TYPE_CHECKING:
    from types_aiobotocore_ec2 import EC2Client

__all__ = [
    "DEFAULT_MAX_AGE",
    "ROOT_VOLUME_BYTES",
    "Ec2Catalog",
    "instance_type_of",
    "load_prices",
    "prices_from_price_list",
]

DEFAULT_MAX_AGE: Final = 300.0
ROOT_VOLUME_BYTES: Final = 20 * 2**30
GPU_RESOURCE: Final = "nvidia.com/gpu"
_ARCHITECTURES: Final = {"x86_64": "amd64", "arm64": "arm64"}
_BATCH: Final = 100  # DescribeInstanceTypes takes at most 100 names


def load_prices(region: str, text: str | None = None) -> dict[str, float]:
    """The shipped on-demand prices of ``region`` by instance type; empty for a region
    the table does not cover. ``text``: the table's JSON (default: the shipped file)."""
    if text is None:
        shipped = resources.files("nodepool_operator.cloud").joinpath("aws_prices.json")
        text = shipped.read_text()
    regions = json.loads(text).get("regions") or {}
    return {str(name): float(price) for name, price in (regions.get(region) or {}).items()}


def prices_from_price_list(price_list: Mapping[str, Any]) -> dict[str, float]:
    """On-demand prices per hour by instance type from AWS's EC2 price list file for one
    region (``https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/current/
    <region>/index.json``): Linux, shared tenancy, no pre-installed software, capacity in
    use (not a reservation), hourly in USD. What ``aws_prices.json`` holds."""
    wanted = {
        sku
        for sku, product in (price_list.get("products") or {}).items()
        if product.get("productFamily") == "Compute Instance"
        and (a := product.get("attributes") or {}).get("operatingSystem") == "Linux"
        and a.get("tenancy") == "Shared"
        and a.get("preInstalledSw") == "NA"
        and a.get("capacitystatus") == "Used"
        and a.get("licenseModel") in (None, "No License required")
    }
    products = price_list.get("products") or {}
    found: dict[str, float] = {}
    for sku, terms in ((price_list.get("terms") or {}).get("OnDemand") or {}).items():
        if sku not in wanted:
            continue
        for term in terms.values():
            for dimension in (term.get("priceDimensions") or {}).values():
                usd = (dimension.get("pricePerUnit") or {}).get("USD")
                if dimension.get("unit") == "Hrs" and usd is not None and float(usd) > 0:
                    found[str(products[sku]["attributes"]["instanceType"])] = float(usd)
    return dict(sorted(found.items()))


def instance_type_of(info: Mapping[str, Any]) -> catalog_api.InstanceType | None:
    """The catalog's view of one ``DescribeInstanceTypes`` entry; None for an
    architecture the nodes here cannot run (``i386``, ``x86_64_mac``...)."""
    supported = (info.get("ProcessorInfo") or {}).get("SupportedArchitectures") or ()
    architectures = [_ARCHITECTURES[a] for a in supported if a in _ARCHITECTURES]
    if not architectures:
        return None
    network = info.get("NetworkInfo") or {}
    interfaces = int(network.get("MaximumNetworkInterfaces") or 1)
    addresses = int(network.get("Ipv4AddressesPerInterface") or 2)
    store = int((info.get("InstanceStorageInfo") or {}).get("TotalSizeInGB") or 0)
    gpus = sum(
        int(gpu.get("Count") or 0)
        for gpu in (info.get("GpuInfo") or {}).get("Gpus") or ()
        if gpu.get("Manufacturer") == "NVIDIA"
    )
    return catalog_api.InstanceType(
        name=str(info["InstanceType"]),
        cpu_millis=int((info.get("VCpuInfo") or {}).get("DefaultVCpus") or 0) * 1000,
        memory_bytes=int((info.get("MemoryInfo") or {}).get("SizeInMiB") or 0) * 2**20,
        pods=interfaces * (addresses - 1) + 2,
        ephemeral_storage_bytes=store * 10**9 if store else ROOT_VOLUME_BYTES,
        architecture=architectures[0],
        operating_systems=("linux",),
        extended={GPU_RESOURCE: gpus} if gpus else {},
    )


class Ec2Catalog:
    """The region's catalog from EC2 and the price table, kept for ``max_age`` seconds."""

    def __init__(
        self,
        *,
        client: Callable[[], Awaitable[EC2Client]],
        prices: Mapping[str, float],
        max_age: float = DEFAULT_MAX_AGE,
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._prices = dict(prices)
        self._max_age = max_age
        self._monotonic = monotonic
        self._wall_clock = wall_clock
        self._kept: tuple[float, catalog_api.Catalog] | None = None
        self._lock = asyncio.Lock()

    async def catalog(self) -> catalog_api.Catalog:
        async with self._lock:  # one refresh in flight; the others wait for its answer
            if self._kept is not None and self._monotonic() - self._kept[0] < self._max_age:
                return self._kept[1]
            found = await self._read()
            self._kept = (self._monotonic(), found)
            return found

    async def _read(self) -> catalog_api.Catalog:
        if not self._prices:
            return catalog_api.NOTHING
        ec2 = await self._client()
        described = await _describe_types(ec2, sorted(self._prices))
        types = {t.name: t for info in described if (t := instance_type_of(info)) is not None}
        zones = await _zones(ec2, sorted(types))
        spot = await _spot_prices(ec2, sorted(types), now=self._wall_clock())
        offerings = [
            catalog_api.Offering(
                instance_type=name,
                zone=zone,
                capacity_type=catalog_api.ON_DEMAND,
                price_per_hour=self._prices[name],
            )
            for name in sorted(types)
            for zone in zones.get(name, ())
        ]
        offerings += [
            catalog_api.Offering(
                instance_type=name, zone=zone, capacity_type=catalog_api.SPOT, price_per_hour=price
            )
            for (name, zone), price in sorted(spot.items())
            if zone in zones.get(name, ())
        ]
        sold = {name: found for name, found in types.items() if zones.get(name)}
        return catalog_api.Catalog.of(sold, offerings)


async def _describe_types(ec2: EC2Client, names: Sequence[str]) -> list[Any]:
    found: list[Any] = []
    for start in range(0, len(names), _BATCH):
        batch = list(names[start : start + _BATCH])
        try:
            answer = await ec2.describe_instance_types(InstanceTypes=batch)  # type: ignore[arg-type]
        except Exception as error:
            raise aws_errors.classify(error, what="DescribeInstanceTypes") from error
        found.extend(answer.get("InstanceTypes", []))
    return found


async def _zones(ec2: EC2Client, names: Sequence[str]) -> dict[str, list[str]]:
    """The availability zones that sell each type."""
    zones: dict[str, list[str]] = {}
    paginator = ec2.get_paginator("describe_instance_type_offerings")
    try:
        async for page in paginator.paginate(
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": list(names)}],
        ):
            for offer in page.get("InstanceTypeOfferings", []):
                zones.setdefault(str(offer["InstanceType"]), []).append(str(offer["Location"]))
    except Exception as error:
        raise aws_errors.classify(error, what="DescribeInstanceTypeOfferings") from error
    return {name: sorted(found) for name, found in zones.items()}


async def _spot_prices(
    ec2: EC2Client, names: Sequence[str], *, now: float
) -> dict[tuple[str, str], float]:
    """The latest spot price per (type, zone): with ``StartTime`` now EC2 answers the
    price in force now for each."""
    latest: dict[tuple[str, str], tuple[datetime.datetime, float]] = {}
    paginator = ec2.get_paginator("describe_spot_price_history")
    try:
        async for page in paginator.paginate(
            InstanceTypes=list(names),  # type: ignore[arg-type]
            ProductDescriptions=["Linux/UNIX"],
            StartTime=datetime.datetime.fromtimestamp(now, tz=datetime.UTC),
        ):
            for entry in page.get("SpotPriceHistory", []):
                key = (str(entry["InstanceType"]), str(entry["AvailabilityZone"]))
                stamp, price = entry["Timestamp"], float(entry["SpotPrice"])
                if key not in latest or stamp > latest[key][0]:
                    latest[key] = (stamp, price)
    except Exception as error:
        raise aws_errors.classify(error, what="DescribeSpotPriceHistory") from error
    return {key: price for key, (_, price) in latest.items()}
