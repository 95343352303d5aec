"""The ``CloudProvider`` over the EC2 API (aiobotocore): a VM is an EC2 instance.

Identity. An instance belongs to the operator's cluster by two tags,
``kubernetes.io/cluster/<cluster>: owned`` (what the Kubernetes AWS integrations read)
and ``nodepool.dev/cluster: <cluster>``; every describe filters on both, so another
cluster's instances are never seen, adopted or terminated, and the IAM policy in
``deploy/aws/`` lets the operator launch and terminate only instances that carry them.
Within the cluster, ``nodepool.dev/pool`` names the pool (what ``list_vms`` selects),
``nodepool.dev/vm-name`` the VM (what create, get and delete select) and
``nodepool.dev/pool-uid`` the pool's incarnation. The VM name is also the Node's name; the
Node's ``spec.providerID`` is ``aws:///<zone>/<instance-id>``, the AWS cloud provider's
form. Tags and launch settings: ``aws_launch``; errors: ``aws_errors``.

One describe per pass. The provider keeps the cluster's instances from one
``DescribeInstances`` (filtered by the cluster tags, every state, so the terminated
instances that anchor client tokens show too) for ``listing_max_age`` seconds: the
listings of every pool, the existence check of every create and the lookup of every
delete in that window share it, and concurrent callers share one call in flight. Its own
launches and terminations are written into it at once; ``get_vm`` alone always asks
EC2, since the controller asks it to confirm a VM is gone when a listing left it out.

Idempotent create. An instance of the VM's name in the cluster is returned, never
launched again (or ``VmConflict`` if another pool holds the name). Otherwise
``RunInstances`` carries a ``ClientToken`` (``aws_launch.client_token``) that every
replica derives the same way, so two launches that race past a describe that has not
caught up yet make one instance on real EC2. moto ignores tokens: there the describe
alone prevents a duplicate.

Retries. The SDK retries on its own budget (botocore's ``standard`` mode: throttling and
5xx, at most ``max_attempts`` calls); what still fails is classed by ``aws_errors``.
A capacity error for a VM whose zone the template does not fix moves on to the next
zone's subnet first; when every subnet tried refuses, the error is
``InsufficientCapacity`` with the zone (None: several were tried) and the instance type.

States: pending -> Provisioning, running/stopping/stopped -> Running, shutting-down ->
Deleting, terminated -> gone (never listed). A stopped (or stopping) instance is not going
away by itself: as Deleting it would never be terminated (nothing deletes a VM already
being deleted), its volumes would leak and its pool's deletion would never finish. As
Running it is what it is to the cluster, a machine whose kubelet is down: its Node turns
NotReady (or never turns Ready) and repair replaces it after ``notReadyTimeoutSeconds``
(``registrationTimeoutSeconds``), under the repair brake, terminating the instance; an
instance started again before then is left alone; a pool being deleted terminates it
like any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

import aiobotocore.config
import aiobotocore.session

from nodepool_operator.api import launch, quantity
from nodepool_operator.cloud import (
    aws_catalog,
    aws_errors,
    aws_interruptions,
    aws_launch,
    provider,
)
from nodepool_operator.cloud import catalog as catalog_api

if TYPE_CHECKING:
    from types_aiobotocore_ec2 import EC2Client
    from types_aiobotocore_ec2.type_defs import (
        FilterTypeDef,
        InstanceTypeDef,
        InstanceTypeInfoTypeDef,
        RunInstancesRequestTypeDef,
    )
    from types_aiobotocore_sqs import SQSClient

__all__ = ["DEFAULT_LISTING_MAX_AGE", "Ec2Provider"]

log = logging.getLogger(__name__)

# About one reconcile pass: the pools reconciled in one pass share a describe, and an
# instance changed by someone else shows within this long.
DEFAULT_LISTING_MAX_AGE: Final = 2.0

_STATES: Final[Mapping[str, provider.VmState]] = {
    "pending": provider.VmState.PROVISIONING,
    "running": provider.VmState.RUNNING,
    "shutting-down": provider.VmState.DELETING,
    # Stopped by hand (or by EC2): its Node goes NotReady and repair terminates it; see
    # the module docstring for why it is not Deleting.
    "stopping": provider.VmState.RUNNING,
    "stopped": provider.VmState.RUNNING,
}
_LIVE_STATES: Final = sorted(_STATES)
_GONE: Final = frozenset({"shutting-down", "terminated"})
# Preference when one name has several instances (only an endpoint that ignores client
# tokens, racing a lagging describe, can make that): the most useful first.
_RANK: Final = {"running": 0, "pending": 1, "stopping": 2, "stopped": 3, "shutting-down": 4}


@dataclasses.dataclass
class _Snapshot:
    """The cluster's instances by id, as of ``taken_at`` (monotonic seconds)."""

    taken_at: float
    instances: dict[str, InstanceTypeDef]


class Ec2Provider:
    """VMs as EC2 instances of one cluster (``cluster_name``) in one region.

    Credentials and region come from the SDK's standard chain (environment, shared
    config, web identity / IRSA, instance metadata); never from a flag. ``endpoint_url``
    replaces the regional endpoint (a VPC endpoint, or an EC2-compatible test server);
    ``AWS_ENDPOINT_URL_EC2`` does the same through the environment. ``session``: the
    SDK session to make the client from (default: a new one). ``listing_max_age``: how
    long one describe of the cluster serves listings, creates and deletes;
    ``catalog_max_age``: how long one reading of the catalog serves;
    ``interruption_queue``: the URL of the SQS queue EventBridge sends EC2's interruption
    messages to (``aws_interruptions``; ``events``), None: no queue is read.
    """

    def __init__(
        self,
        *,
        cluster_name: str,
        region: str | None = None,
        endpoint_url: str | None = None,
        max_attempts: int = 3,
        timeout: float = 10.0,
        listing_max_age: float = DEFAULT_LISTING_MAX_AGE,
        session: aiobotocore.session.AioSession | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        catalog_max_age: float = aws_catalog.DEFAULT_MAX_AGE,
        interruption_queue: str | None = None,
    ) -> None:
        self._cluster = cluster_name
        self._session = session or aiobotocore.session.get_session()
        self._region = region
        self._endpoint_url = endpoint_url
        self._config = aiobotocore.config.AioConfig(
            retries={"mode": "standard", "max_attempts": max_attempts},
            connect_timeout=timeout,
            read_timeout=timeout,
        )
        self._listing_max_age = listing_max_age
        self._monotonic = monotonic
        self._stack = contextlib.AsyncExitStack()
        self._client: EC2Client | None = None
        self._instance_types: dict[str, InstanceTypeInfoTypeDef] = {}
        # One DescribeInstanceTypes per type, not one per create of a burst.
        self._instance_types_lock = asyncio.Lock()
        self._snapshot: _Snapshot | None = None
        self._refreshing: asyncio.Future[_Snapshot] | None = None
        self._closed = False
        self._catalog: aws_catalog.Ec2Catalog | None = None
        self._catalog_max_age = catalog_max_age
        self._sqs_client: SQSClient | None = None
        self._interruptions = (
            None
            if interruption_queue is None
            else aws_interruptions.SqsEvents(
                queue_url=interruption_queue, client=self._sqs, vm_of=self._vm_of_instance
            )
        )

    @property
    def cluster_name(self) -> str:
        return self._cluster

    async def create_vm(
        self, *, name: provider.VmName, pool: str, spec: provider.MachineSpec
    ) -> provider.VirtualMachine:
        same_name = _named(await self._cluster_instances(), name)
        live = [i for i in same_name if i["State"]["Name"] in _STATES]
        if live:
            return _existing(live, name=name, pool=pool)
        settings = _aws_settings(spec)
        await self._check_instance_type(settings, spec)
        anchor = _anchor(same_name)
        failure: provider.InsufficientCapacity | None = None
        subnets = _subnets_to_try(settings, spec.zone)
        for subnet in subnets:
            try:
                return await self._launch(
                    name=name, pool=pool, spec=spec, settings=settings, subnet=subnet, anchor=anchor
                )
            except provider.InsufficientCapacity as error:
                log.warning("cloud=aws event=no-capacity vm=%s subnet=%s", name, subnet)
                failure = error
        assert failure is not None  # the settings name at least one subnet (CRD minProperties)
        raise provider.InsufficientCapacity(
            failure.message, zone=spec.zone, shape=settings.instance_type, code=failure.code
        )

    async def delete_vm(self, name: provider.VmName) -> None:
        found = _named(await self._cluster_instances(), name)
        if not any(i["State"]["Name"] in _STATES for i in found):
            # Not in the shared describe: ask for this name alone before calling it absent.
            found = await self._describe([_tag_filter(aws_launch.VM_NAME_TAG, name)])
        # Every instance of the name, duplicates included, and those already stopping.
        ids = [i["InstanceId"] for i in found if i["State"]["Name"] in _STATES.keys() - _GONE]
        if not ids:
            return
        client = await self._ec2()
        try:
            await client.terminate_instances(InstanceIds=ids)
        except Exception as error:
            raise aws_errors.classify(error, what="TerminateInstances") from error
        self._remember(found, state="shutting-down", only=ids)
        log.info("cloud=aws event=terminate vm=%s instances=%s", name, ",".join(ids))

    async def list_vms(self, *, pool: str) -> list[provider.VirtualMachine]:
        by_name: dict[str, list[InstanceTypeDef]] = {}
        for instance in await self._cluster_instances():
            tags = _tags(instance)
            if tags.get(aws_launch.POOL_TAG) != pool or instance["State"]["Name"] not in _STATES:
                continue
            by_name.setdefault(tags.get(aws_launch.VM_NAME_TAG, ""), []).append(instance)
        by_name.pop("", None)
        return [_to_vm(_preferred(group)) for _, group in sorted(by_name.items())]

    async def get_vm(self, name: provider.VmName) -> provider.VirtualMachine | None:
        found = await self._describe(
            [
                _tag_filter(aws_launch.VM_NAME_TAG, name),
                {"Name": "instance-state-name", "Values": _LIVE_STATES},
            ]
        )
        return _to_vm(_preferred(found)) if found else None

    async def catalog(self) -> catalog_api.Catalog:
        """The region's instance types EC2 sells, priced (``aws_catalog``), kept for
        ``catalog_max_age`` seconds."""
        if self._catalog is None:
            region = (await self._ec2()).meta.region_name
            self._catalog = aws_catalog.Ec2Catalog(
                client=self._ec2,
                prices=aws_catalog.load_prices(region),
                max_age=self._catalog_max_age,
                monotonic=self._monotonic,
            )
        return await self._catalog.catalog()

    async def events(self, *, wait: float) -> list[provider.CloudEvent]:
        """EC2's interruption messages from ``interruption_queue`` (``aws_interruptions``);
        without a queue there is nothing to tell: the wait passes and the answer is empty."""
        if self._interruptions is None:
            await asyncio.sleep(wait)
            return []
        return await self._interruptions.events(wait=wait)

    async def handled(self, event: provider.CloudEvent) -> None:
        if self._interruptions is not None:
            await self._interruptions.handled(event)

    async def _vm_of_instance(self, instance_id: str) -> tuple[provider.VmName, str] | None:
        """The VM and pool of one of this cluster's instances; None for any other."""
        for instance in await self._cluster_instances():
            if instance["InstanceId"] == instance_id:
                vm = _to_vm(instance)
                return vm.name, vm.pool
        return None

    async def _sqs(self) -> SQSClient:
        if self._closed:
            raise RuntimeError("Ec2Provider is closed")
        if self._sqs_client is None:
            self._sqs_client = await self._stack.enter_async_context(
                self._session.create_client("sqs", region_name=self._region, config=self._config)
            )
        return self._sqs_client

    async def close(self) -> None:
        self._closed = True
        self._client = None
        await self._stack.aclose()

    async def _ec2(self) -> EC2Client:
        if self._closed:
            raise RuntimeError("Ec2Provider is closed")
        # Created on first use, since the client binds the running event loop.
        if self._client is None:
            self._client = await self._stack.enter_async_context(
                self._session.create_client(
                    "ec2",
                    region_name=self._region,
                    endpoint_url=self._endpoint_url,
                    config=self._config,
                )
            )
        return self._client

    async def _cluster_instances(self) -> list[InstanceTypeDef]:
        """The cluster's instances, every state, from a describe at most
        ``listing_max_age`` old; callers arriving while one is in flight share it."""
        snapshot = self._snapshot
        if snapshot is not None and self._monotonic() - snapshot.taken_at <= self._listing_max_age:
            return list(snapshot.instances.values())
        if self._refreshing is None:
            self._refreshing = asyncio.ensure_future(self._take_snapshot())
            self._refreshing.add_done_callback(self._refreshed)
        # shield: one caller cancelled must not cancel the describe the others wait for.
        snapshot = await asyncio.shield(self._refreshing)
        return list(snapshot.instances.values())

    def _refreshed(self, done: asyncio.Future[_Snapshot]) -> None:
        self._refreshing = None
        if not done.cancelled() and done.exception() is None:
            self._snapshot = done.result()

    async def _take_snapshot(self) -> _Snapshot:
        started = self._monotonic()
        instances = await self._describe([])
        return _Snapshot(taken_at=started, instances={i["InstanceId"]: i for i in instances})

    async def _describe(self, filters: Sequence[FilterTypeDef]) -> list[InstanceTypeDef]:
        """One paginated ``DescribeInstances``, always within the cluster."""
        every: list[FilterTypeDef] = [
            {
                "Name": f"tag:{aws_launch.kubernetes_cluster_tag(self._cluster)}",
                "Values": ["owned"],
            },
            _tag_filter(aws_launch.CLUSTER_TAG, self._cluster),
            *filters,
        ]
        client = await self._ec2()
        instances: list[InstanceTypeDef] = []
        try:
            async for page in client.get_paginator("describe_instances").paginate(Filters=every):
                for reservation in page.get("Reservations", []):
                    instances.extend(reservation.get("Instances", []))
        except Exception as error:
            raise aws_errors.classify(error, what="DescribeInstances") from error
        return instances

    def _remember(
        self, instances: Iterable[InstanceTypeDef], *, state: str | None, only: Iterable[str] = ()
    ) -> None:
        """Write what this provider just did into the snapshot, so the describe it shares
        does not contradict it until it is taken again."""
        if self._snapshot is None:
            return
        chosen = set(only)
        for instance in instances:
            if chosen and instance["InstanceId"] not in chosen:
                continue
            if state is not None:
                instance = {**instance, "State": {**instance["State"], "Name": state}}  # type: ignore[typeddict-item]
            self._snapshot.instances[instance["InstanceId"]] = instance

    async def _check_instance_type(
        self, settings: launch.AwsLaunch, spec: provider.MachineSpec
    ) -> None:
        """The template's cpu must be the type's vCPUs, and its memory at most the type's:
        a template promising more than the machine has makes the scheduler overcommit."""
        info = await self._instance_type(settings.instance_type)
        vcpus = int(info.get("VCpuInfo", {}).get("DefaultVCpus", 0))
        mebibytes = int(info.get("MemoryInfo", {}).get("SizeInMiB", 0))
        cpu_ok = quantity.parse_cpu_millicores(spec.cpu) == vcpus * 1000
        memory_ok = quantity.parse_memory_bytes(spec.memory) <= mebibytes * 2**20
        if not (cpu_ok and memory_ok):
            raise provider.InvalidMachineSpec(
                f"instance type {settings.instance_type} has {vcpus} vCPUs and {mebibytes}Mi "
                f"of memory; the template asks cpu {spec.cpu} (must equal the vCPUs) and "
                f"memory {spec.memory} (must not exceed the type's)",
                code="InstanceTypeMismatch",
            )

    async def _instance_type(self, instance_type: str) -> InstanceTypeInfoTypeDef:
        async with self._instance_types_lock:
            return await self._describe_instance_type(instance_type)

    async def _describe_instance_type(self, instance_type: str) -> InstanceTypeInfoTypeDef:
        cached = self._instance_types.get(instance_type)
        if cached is not None:
            return cached
        client = await self._ec2()
        try:
            answer = await client.describe_instance_types(InstanceTypes=[instance_type])  # type: ignore[list-item]
        except Exception as error:
            raise aws_errors.classify(error, what="DescribeInstanceTypes") from error
        types = answer.get("InstanceTypes", [])
        if not types:
            raise provider.InvalidMachineSpec(
                f"DescribeInstanceTypes: no instance type {instance_type}",
                code="InvalidInstanceType",
            )
        self._instance_types[instance_type] = types[0]
        return types[0]

    async def _launch(
        self,
        *,
        name: provider.VmName,
        pool: str,
        spec: provider.MachineSpec,
        settings: launch.AwsLaunch,
        subnet: str,
        anchor: str | None,
    ) -> provider.VirtualMachine:
        parameters = aws_launch.run_parameters(
            cluster=self._cluster, name=name, pool=pool, spec=spec, settings=settings, subnet=subnet
        )
        client = await self._ec2()
        previous: str | None = None
        met: set[str] = set()
        while True:
            token = aws_launch.client_token(
                cluster=self._cluster,
                pool_uid=spec.pool_uid,
                name=name,
                parameters=parameters,
                anchor=anchor,
                previous=previous,
            )
            try:
                request: RunInstancesRequestTypeDef = {**parameters, "ClientToken": token}
                answer = await client.run_instances(**request)
            except Exception as error:
                raise aws_errors.classify(error, what="RunInstances") from error
            instance = answer["Instances"][0]
            if instance["State"]["Name"] not in _GONE:
                self._remember([instance], state=None)
                log.info(
                    "cloud=aws event=launch vm=%s instance=%s subnet=%s",
                    name,
                    instance["InstanceId"],
                    subnet,
                )
                return _to_vm(instance)
            # The token of an earlier incarnation of this name, gone since: step on. Each
            # step meets a different instance, so the walk ends; one met twice would be
            # an endpoint answering tokens inconsistently.
            if instance["InstanceId"] in met:
                raise provider.PermanentCloudError(
                    f"RunInstances: client tokens of {name} lead back to {instance['InstanceId']}",
                    code="ClientTokenCycle",
                )
            met.add(instance["InstanceId"])
            previous = instance["InstanceId"]


def _tag_filter(key: str, value: str) -> FilterTypeDef:
    return {"Name": f"tag:{key}", "Values": [value]}


def _tags(instance: InstanceTypeDef) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags", []) if "Key" in t and "Value" in t}


def _named(instances: Iterable[InstanceTypeDef], name: str) -> list[InstanceTypeDef]:
    return [i for i in instances if _tags(i).get(aws_launch.VM_NAME_TAG) == name]


def _anchor(same_name: Sequence[InstanceTypeDef]) -> str | None:
    """The newest terminated instance of the name (by launch time, then id), or None."""
    gone = [i for i in same_name if i["State"]["Name"] == "terminated"]
    if not gone:
        return None
    return max(gone, key=lambda i: (i["LaunchTime"], i["InstanceId"]))["InstanceId"]


def _preferred(instances: Sequence[InstanceTypeDef]) -> InstanceTypeDef:
    if len(instances) > 1:
        log.warning(
            "cloud=aws event=duplicate-instances vm=%s instances=%s",
            _tags(instances[0]).get(aws_launch.VM_NAME_TAG),
            ",".join(i["InstanceId"] for i in instances),
        )
    return min(instances, key=lambda i: (_RANK.get(i["State"]["Name"], 9), i["LaunchTime"]))


def _existing(
    found: Sequence[InstanceTypeDef], *, name: provider.VmName, pool: str
) -> provider.VirtualMachine:
    vm = _to_vm(_preferred(found))
    if vm.pool != pool:
        raise provider.VmConflict(f"VM {name} exists in pool {vm.pool!r}, not {pool!r}")
    return vm


def _to_vm(instance: InstanceTypeDef) -> provider.VirtualMachine:
    tags = _tags(instance)
    zone = instance.get("Placement", {}).get("AvailabilityZone")
    return provider.VirtualMachine(
        name=provider.VmName(tags.get(aws_launch.VM_NAME_TAG, instance["InstanceId"])),
        pool=tags.get(aws_launch.POOL_TAG, ""),
        cpu=tags.get(aws_launch.CPU_TAG, ""),
        memory=tags.get(aws_launch.MEMORY_TAG, ""),
        state=_STATES[instance["State"]["Name"]],
        provider_id=f"aws:///{zone or ''}/{instance['InstanceId']}",
        created_at=instance["LaunchTime"].timestamp(),
        zone=zone,
    )


def _aws_settings(spec: provider.MachineSpec) -> launch.AwsLaunch:
    settings = spec.launch.aws if spec.launch is not None else None
    if settings is None:
        raise provider.InvalidMachineSpec(
            "the NodePool template has no provider.aws section (instance type, image, "
            "subnets) to launch its instances with",
            code="NoLaunchSettings",
        )
    return settings


def _subnets_to_try(settings: launch.AwsLaunch, zone: str | None) -> list[str]:
    """The zone's subnet when the template fixes the VM's zone (its Node is labelled with
    that zone, so no other will do); otherwise every subnet, in zone order."""
    if zone is None:
        return [settings.subnets[z] for z in sorted(settings.subnets)]
    if zone not in settings.subnets:
        raise provider.InvalidMachineSpec(
            f"provider.aws.subnets names no subnet for zone {zone}", code="NoSubnetForZone"
        )
    return [settings.subnets[zone]]


if TYPE_CHECKING:
    # Checked by mypy, so the provider cannot drift from the protocol the controller uses.
    _provider: type[provider.CloudProvider] = Ec2Provider
    _catalog_source: type[provider.CatalogSource] = Ec2Provider
    _event_source: type[provider.EventSource] = Ec2Provider
