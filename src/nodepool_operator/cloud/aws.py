"""The ``CloudProvider`` over the EC2 API (aiobotocore): a VM is an EC2 instance.

Identity. An instance belongs to the operator by its tags: ``nodepool.dev/pool`` (the
pool's name, what ``list_vms`` filters on), ``nodepool.dev/vm-name`` (the VM's name,
what ``get_vm``/``delete_vm`` filter on) and ``nodepool.dev/pool-uid``. The VM name is
also the Node's name, because the controller registers each Node itself under its VM's
name and every later step (drain, repair, scale-down) finds the VM by it; the Node's
``spec.providerID`` is ``aws:///<zone>/<instance-id>``, the form the AWS cloud provider
gives, so a real kubelet that registers under the VM name (``--hostname-override``)
shows the same instance.

Idempotent create, twice over. First a describe by the name tag: an instance that is
there (after a crash between launch and Node, or a lost response) is returned, never
launched again. Then ``RunInstances`` with a ``ClientToken`` derived from the pool's
uid, the VM name and the launch parameters, so two launches racing past the describe
(EC2's describes lag behind launches) yield one instance on real EC2. EC2 keeps a token
after the instance is terminated, and answers a repeated token with that terminated
instance; since VM names are reused (the lowest free index), such an answer leads to a
new token derived from the terminated instance's id, a chain every operator walks the
same way. An endpoint that ignores tokens (moto) is still covered by the describe.

Retries. Unlike the simcloud client, the SDK retries on its own budget (botocore's
``standard`` mode: throttling and 5xx, at most ``max_attempts`` calls, with its backoff);
what still fails is classed onto ``provider.CloudError``:

    InsufficientInstanceCapacity            PermanentCloudError (another zone's subnet is
                                            tried first when the VM's zone is not fixed)
    InstanceLimitExceeded, VcpuLimitExceeded QuotaExceeded
    RequestLimitExceeded                    RateLimited
    5xx, connection errors, timeouts        TransientCloudError
    AuthFailure, UnauthorizedOperation, ... PermanentCloudError, code AuthFailure
    no credentials in the chain             PermanentCloudError, code NoCredentials
    Invalid* (AMI, subnet, group, type)     InvalidMachineSpec
    instance type vs template cpu/memory    InvalidMachineSpec, code InstanceTypeMismatch

States: pending -> Provisioning, running -> Running, shutting-down/stopping/stopped ->
Deleting, terminated -> gone (never listed).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import aiobotocore.config
import aiobotocore.session
import botocore.exceptions

from nodepool_operator.api import launch, quantity
from nodepool_operator.cloud import provider

if TYPE_CHECKING:
    from types_aiobotocore_ec2 import EC2Client
    from types_aiobotocore_ec2.type_defs import (
        FilterTypeDef,
        InstanceTypeDef,
        InstanceTypeInfoTypeDef,
        RunInstancesRequestTypeDef,
    )

__all__ = [
    "CPU_TAG",
    "MEMORY_TAG",
    "POOL_TAG",
    "POOL_UID_TAG",
    "VM_NAME_TAG",
    "Ec2Provider",
    "classify",
    "client_token",
]

log = logging.getLogger(__name__)

POOL_TAG: Final = "nodepool.dev/pool"
VM_NAME_TAG: Final = "nodepool.dev/vm-name"
POOL_UID_TAG: Final = "nodepool.dev/pool-uid"
# What the template promised, so a listing reports the VM's shape without another call.
CPU_TAG: Final = "nodepool.dev/cpu"
MEMORY_TAG: Final = "nodepool.dev/memory"

_STATES: Final[Mapping[str, provider.VmState]] = {
    "pending": provider.VmState.PROVISIONING,
    "running": provider.VmState.RUNNING,
    "shutting-down": provider.VmState.DELETING,
    "stopping": provider.VmState.DELETING,
    # Stopped by hand: not coming back on its own; deleting it finishes the job.
    "stopped": provider.VmState.DELETING,
}
_LIVE_STATES: Final = sorted(_STATES)
# Preference when one name has several instances (only an endpoint that ignores client
# tokens, racing a lagging describe, can make that): the most useful first.
_RANK: Final = {"running": 0, "pending": 1, "stopping": 2, "stopped": 3, "shutting-down": 4}

_CAPACITY_CODES: Final = frozenset(
    {"InsufficientInstanceCapacity", "InsufficientHostCapacity", "InsufficientCapacity"}
)
_QUOTA_CODES: Final = frozenset(
    {"InstanceLimitExceeded", "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded"}
)
_AUTH_CODES: Final = frozenset(
    {
        "AuthFailure",
        "UnauthorizedOperation",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "RequestExpired",
        "OptInRequired",
        "Blocked",
    }
)
_THROTTLE_CODES: Final = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException"})
_MAX_TOKEN_CHAIN: Final = 8


def client_token(
    *, pool_uid: str | None, name: str, parameters: Mapping[str, Any], previous: str | None
) -> str:
    """The ``ClientToken`` of a launch: the same inputs always give the same token (at
    most 64 ASCII characters, EC2's limit). ``previous`` is the id of a terminated
    instance an older token already answered with."""
    material = json.dumps(
        {"uid": pool_uid, "name": name, "parameters": parameters, "previous": previous},
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(material.encode()).hexdigest()[:64]


def classify(error: Exception, *, what: str) -> provider.CloudError:
    """The ``CloudError`` for an SDK failure of the call ``what`` (e.g. "RunInstances")."""
    if isinstance(error, botocore.exceptions.ClientError):
        return _classify_answer(error, what=what)
    if isinstance(
        error, botocore.exceptions.NoCredentialsError | botocore.exceptions.PartialCredentialsError
    ):
        return provider.PermanentCloudError(
            f"{what}: no AWS credentials in the standard chain (environment, shared config "
            "and credentials files, web identity / IRSA, container or instance metadata)",
            code="NoCredentials",
        )
    if isinstance(error, botocore.exceptions.NoRegionError):
        return provider.PermanentCloudError(
            f"{what}: no AWS region configured (AWS_REGION or the shared config)",
            code="NoRegion",
        )
    if isinstance(
        error,
        botocore.exceptions.ConnectionError
        | botocore.exceptions.HTTPClientError
        | botocore.exceptions.CredentialRetrievalError
        | botocore.exceptions.TokenRetrievalError,
    ):
        return provider.TransientCloudError(f"{what}: {error}", code="ConnectionError")
    if isinstance(error, botocore.exceptions.ParamValidationError):
        return provider.InvalidMachineSpec(f"{what}: {error}", code="InvalidParameter")
    return provider.PermanentCloudError(f"{what}: {error}", code="SdkError")


def _classify_answer(error: botocore.exceptions.ClientError, *, what: str) -> provider.CloudError:
    code = str(error.response.get("Error", {}).get("Code", "Unknown"))
    text = str(error.response.get("Error", {}).get("Message", ""))
    status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    message = f"{what}: {code}: {text}"
    if code in _THROTTLE_CODES or status == 429:
        return provider.RateLimited(message, retry_after=None, code=code)
    # Before the 5xx rule: EC2 answers a lack of capacity with a 500, and asking the same
    # zone again at once does not help.
    if code in _CAPACITY_CODES:
        return provider.PermanentCloudError(message, code=code)
    if code in _QUOTA_CODES:
        return provider.QuotaExceeded(message, code=code)
    if status >= 500 or code in {"InternalError", "ServiceUnavailable", "Unavailable"}:
        return provider.TransientCloudError(message, code=code)
    if code in _AUTH_CODES:
        return provider.PermanentCloudError(
            f"{message} (check the operator's IAM role and the policy in deploy/aws/)",
            code="AuthFailure",
        )
    if code.startswith("Invalid") or code in {"MissingParameter", "UnsupportedOperation"}:
        return provider.InvalidMachineSpec(message, code=code)
    return provider.PermanentCloudError(message, code=code)


class Ec2Provider:
    """VMs as EC2 instances in one region.

    Credentials and region come from the SDK's standard chain (environment, shared
    config, web identity / IRSA, instance metadata); never from a flag. ``endpoint_url``
    replaces the regional endpoint (a VPC endpoint, or an EC2-compatible test server);
    ``AWS_ENDPOINT_URL_EC2`` does the same through the environment. ``session``: the
    SDK session to make the client from (default: a new one).
    """

    def __init__(
        self,
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        max_attempts: int = 3,
        timeout: float = 10.0,
        session: aiobotocore.session.AioSession | None = None,
    ) -> None:
        self._session = session or aiobotocore.session.get_session()
        self._region = region
        self._endpoint_url = endpoint_url
        self._config = aiobotocore.config.AioConfig(
            retries={"mode": "standard", "max_attempts": max_attempts},
            connect_timeout=timeout,
            read_timeout=timeout,
        )
        self._stack = contextlib.AsyncExitStack()
        self._client: EC2Client | None = None
        self._instance_types: dict[str, InstanceTypeInfoTypeDef] = {}
        self._closed = False

    async def create_vm(
        self, *, name: provider.VmName, pool: str, spec: provider.MachineSpec
    ) -> provider.VirtualMachine:
        found = await self._live_instances(
            [_tag_filter(VM_NAME_TAG, name)], what="DescribeInstances"
        )
        if found:
            return _existing(found, name=name, pool=pool)
        settings = _aws_settings(spec)
        await self._check_instance_type(settings, spec)
        failure: provider.CloudError | None = None
        for subnet in _subnets_to_try(settings, spec.zone):
            try:
                return await self._launch(
                    name=name, pool=pool, spec=spec, settings=settings, subnet=subnet
                )
            except provider.PermanentCloudError as error:
                if error.code not in _CAPACITY_CODES:
                    raise
                log.warning("cloud=aws event=no-capacity vm=%s subnet=%s", name, subnet)
                failure = error
        assert failure is not None  # the settings name at least one subnet (CRD minProperties)
        raise failure

    async def delete_vm(self, name: provider.VmName) -> None:
        found = await self._live_instances(
            [_tag_filter(VM_NAME_TAG, name)], what="DescribeInstances"
        )
        # Every instance of the name, duplicates included, and those already stopping.
        ids = [i["InstanceId"] for i in found if i["State"]["Name"] != "shutting-down"]
        if not ids:
            return
        client = await self._ec2()
        try:
            await client.terminate_instances(InstanceIds=ids)
        except Exception as error:
            raise classify(error, what="TerminateInstances") from error
        log.info("cloud=aws event=terminate vm=%s instances=%s", name, ",".join(ids))

    async def list_vms(self, *, pool: str) -> list[provider.VirtualMachine]:
        found = await self._live_instances([_tag_filter(POOL_TAG, pool)], what="DescribeInstances")
        by_name: dict[str, list[InstanceTypeDef]] = {}
        for instance in found:
            by_name.setdefault(_tags(instance).get(VM_NAME_TAG, ""), []).append(instance)
        by_name.pop("", None)
        return [_to_vm(_preferred(group)) for _, group in sorted(by_name.items())]

    async def get_vm(self, name: provider.VmName) -> provider.VirtualMachine | None:
        found = await self._live_instances(
            [_tag_filter(VM_NAME_TAG, name)], what="DescribeInstances"
        )
        return _to_vm(_preferred(found)) if found else None

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

    async def _live_instances(
        self, filters: Sequence[FilterTypeDef], *, what: str
    ) -> list[InstanceTypeDef]:
        every: list[FilterTypeDef] = [
            *filters,
            {"Name": "instance-state-name", "Values": _LIVE_STATES},
        ]
        client = await self._ec2()
        instances: list[InstanceTypeDef] = []
        try:
            async for page in client.get_paginator("describe_instances").paginate(Filters=every):
                for reservation in page.get("Reservations", []):
                    instances.extend(reservation.get("Instances", []))
        except Exception as error:
            raise classify(error, what=what) from error
        return instances

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
        cached = self._instance_types.get(instance_type)
        if cached is not None:
            return cached
        client = await self._ec2()
        try:
            answer = await client.describe_instance_types(InstanceTypes=[instance_type])  # type: ignore[list-item]
        except Exception as error:
            raise classify(error, what="DescribeInstanceTypes") from error
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
    ) -> provider.VirtualMachine:
        parameters = _run_parameters(
            name=name, pool=pool, spec=spec, settings=settings, subnet=subnet
        )
        client = await self._ec2()
        previous: str | None = None
        for _ in range(_MAX_TOKEN_CHAIN):
            token = client_token(
                pool_uid=spec.pool_uid, name=name, parameters=parameters, previous=previous
            )
            try:
                request: RunInstancesRequestTypeDef = {**parameters, "ClientToken": token}
                answer = await client.run_instances(**request)
            except Exception as error:
                raise classify(error, what="RunInstances") from error
            instance = answer["Instances"][0]
            if instance["State"]["Name"] not in ("shutting-down", "terminated"):
                log.info(
                    "cloud=aws event=launch vm=%s instance=%s subnet=%s",
                    name,
                    instance["InstanceId"],
                    subnet,
                )
                return _to_vm(instance)
            # The token of an earlier instance of this name, already gone: derive the next.
            previous = instance["InstanceId"]
        raise provider.PermanentCloudError(
            f"RunInstances: {_MAX_TOKEN_CHAIN} client tokens in a row named terminated instances",
            code="ClientTokenExhausted",
        )


def _tag_filter(key: str, value: str) -> FilterTypeDef:
    return {"Name": f"tag:{key}", "Values": [value]}


def _tags(instance: InstanceTypeDef) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags", []) if "Key" in t and "Value" in t}


def _preferred(instances: Sequence[InstanceTypeDef]) -> InstanceTypeDef:
    if len(instances) > 1:
        log.warning(
            "cloud=aws event=duplicate-instances vm=%s instances=%s",
            _tags(instances[0]).get(VM_NAME_TAG),
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
        name=provider.VmName(tags.get(VM_NAME_TAG, instance["InstanceId"])),
        pool=tags.get(POOL_TAG, ""),
        cpu=tags.get(CPU_TAG, ""),
        memory=tags.get(MEMORY_TAG, ""),
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


def _run_parameters(
    *,
    name: provider.VmName,
    pool: str,
    spec: provider.MachineSpec,
    settings: launch.AwsLaunch,
    subnet: str,
) -> RunInstancesRequestTypeDef:
    own = {
        "Name": name,
        POOL_TAG: pool,
        VM_NAME_TAG: name,
        POOL_UID_TAG: spec.pool_uid or "",
        CPU_TAG: spec.cpu,
        MEMORY_TAG: spec.memory,
    }
    tags = [{"Key": k, "Value": v} for k, v in {**settings.tags, **own}.items()]
    parameters: dict[str, Any] = {
        "ImageId": settings.image_id,
        "InstanceType": settings.instance_type,
        "MinCount": 1,
        "MaxCount": 1,
        "SubnetId": subnet,
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": tags},
        ],
    }
    if settings.security_group_ids:
        parameters["SecurityGroupIds"] = list(settings.security_group_ids)
    if settings.instance_profile is not None:
        key = "Arn" if settings.instance_profile.startswith("arn:") else "Name"
        parameters["IamInstanceProfile"] = {key: settings.instance_profile}
    if settings.user_data is not None:
        parameters["UserData"] = settings.user_data
    return parameters  # type: ignore[return-value]


if TYPE_CHECKING:
    # Checked by mypy, so the provider cannot drift from the protocol the controller uses.
    _provider: type[provider.CloudProvider] = Ec2Provider
