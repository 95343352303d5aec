"""What one ``RunInstances`` of the EC2 provider asks for: the tags that make an instance
a cluster's and a pool's, the launch settings of the pool's template, and the
``ClientToken`` that makes two racing launches of one VM a single instance.

The client token. EC2 answers a repeated token with the instance it first made, whatever
that instance's state now (terminated included, for at least a day), so a token must be
the same for every launch of one *incarnation* of a VM, and differ between incarnations,
since VM names are reused (the lowest free index). The token is a digest of the cluster,
the pool's uid, the VM name, the launch parameters and the VM's *anchor*: the newest
instance of that name that is no longer live (terminated), as the cluster's describe
shows it. That fact changes each time the name is reused (the previous incarnation is
the new anchor), is read the same way by every replica of the operator, and does not
change between a launch and its retry. No counter is kept anywhere, so there is no cap.

EC2 shows terminated instances for about an hour. A name reused later has no visible
anchor; its launch starts from the anchor-less token, and if EC2 answers that token with
a terminated instance (an incarnation from earlier in the token's lifetime), the next
token is derived from that instance, and so on: every replica walks the same steps. Such
a walk is as long as the anchor-less launches of that name while EC2 still keeps their
tokens, and anchor-less launches are at least an hour apart, so it stays short.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from nodepool_operator.api import launch
from nodepool_operator.cloud import provider

if TYPE_CHECKING:
    from types_aiobotocore_ec2.type_defs import RunInstancesRequestTypeDef

__all__ = [
    "CLUSTER_TAG",
    "CPU_TAG",
    "MEMORY_TAG",
    "POOL_TAG",
    "POOL_UID_TAG",
    "VM_NAME_TAG",
    "client_token",
    "kubernetes_cluster_tag",
    "run_parameters",
]

CLUSTER_TAG: Final = "nodepool.dev/cluster"
POOL_TAG: Final = "nodepool.dev/pool"
VM_NAME_TAG: Final = "nodepool.dev/vm-name"
POOL_UID_TAG: Final = "nodepool.dev/pool-uid"
# What the template promised, so a listing reports the VM's shape without another call.
CPU_TAG: Final = "nodepool.dev/cpu"
MEMORY_TAG: Final = "nodepool.dev/memory"


def kubernetes_cluster_tag(cluster: str) -> str:
    """The tag key the Kubernetes AWS integrations (cloud provider, load balancer
    controller, Karpenter, cluster-autoscaler) read a cluster's resources by; its value
    ``owned`` says the cluster's lifecycle ends the instance's."""
    return f"kubernetes.io/cluster/{cluster}"


def client_token(
    *,
    cluster: str,
    pool_uid: str | None,
    name: str,
    parameters: Mapping[str, Any],
    anchor: str | None,
    previous: str | None,
) -> str:
    """The ``ClientToken`` of a launch (at most 64 ASCII characters, EC2's limit): the same
    inputs always give the same token. ``anchor``: the id of the newest terminated
    instance of the name that the describe shows (None: none shows). ``previous``: the
    id of the terminated instance the last token of this walk was answered with (None
    on the first step)."""
    material = json.dumps(
        {
            "cluster": cluster,
            "uid": pool_uid,
            "name": name,
            "parameters": parameters,
            "anchor": anchor,
            "previous": previous,
        },
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(material.encode()).hexdigest()[:64]


def run_parameters(
    *,
    cluster: str,
    name: provider.VmName,
    pool: str,
    spec: provider.MachineSpec,
    settings: launch.AwsLaunch,
    subnet: str,
) -> RunInstancesRequestTypeDef:
    """The ``RunInstances`` request of one VM, but for its ``ClientToken``."""
    own = {
        "Name": name,
        kubernetes_cluster_tag(cluster): "owned",
        CLUSTER_TAG: cluster,
        POOL_TAG: pool,
        VM_NAME_TAG: name,
        POOL_UID_TAG: spec.pool_uid or "",
        CPU_TAG: spec.cpu,
        MEMORY_TAG: spec.memory,
    }
    tags = [{"Key": k, "Value": v} for k, v in {**settings.tags, **own}.items()]
    imds = settings.metadata_options
    parameters: dict[str, Any] = {
        "ImageId": settings.image_id,
        "InstanceType": settings.instance_type,
        "MinCount": 1,
        "MaxCount": 1,
        "SubnetId": subnet,
        "MetadataOptions": {
            "HttpEndpoint": "enabled",
            "HttpTokens": imds.http_tokens,
            "HttpPutResponseHopLimit": imds.http_put_response_hop_limit,
        },
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
    if settings.root_volume is not None:
        parameters["BlockDeviceMappings"] = [_root_device(settings.root_volume)]
    if settings.launch_template is not None:
        parameters["LaunchTemplate"] = _template(settings.launch_template)
    return parameters  # type: ignore[return-value]


def _root_device(volume: launch.RootVolume) -> dict[str, Any]:
    ebs: dict[str, Any] = {
        "VolumeSize": volume.volume_size,
        "VolumeType": volume.volume_type,
        "DeleteOnTermination": True,
    }
    if volume.encrypted is not None:
        ebs["Encrypted"] = volume.encrypted
    return {"DeviceName": volume.device_name, "Ebs": ebs}


def _template(ref: launch.LaunchTemplateRef) -> dict[str, str]:
    if ref.id is not None and ref.name is None:
        return {"LaunchTemplateId": ref.id, "Version": ref.version}
    if ref.name is not None and ref.id is None:
        return {"LaunchTemplateName": ref.name, "Version": ref.version}
    raise provider.InvalidMachineSpec(
        "provider.aws.launchTemplate must name the template by id or by name, one of the two",
        code="InvalidLaunchTemplate",
    )
