"""The provider section of a NodePool template (``spec.template.provider``): how the
cloud provider the operator runs with launches the pool's machines.

Each provider reads only its own sub-section: ``aws`` for the EC2 provider, and
``parameters`` (a flat string map) for providers installed as separate packages, whose
keys the CRD cannot know. The simulated cloud reads none. The CRD validates the ``aws``
section as EC2 would, so a typo in an id is refused at ``kubectl apply`` instead of
failing every launch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final, Literal, get_args

from nodepool_operator.api import fields

__all__ = [
    "AWS_SCHEMA",
    "HTTP_TOKENS",
    "MAX_USER_DATA_LENGTH",
    "PROVIDER_SCHEMA",
    "RESERVED_TAG_PREFIXES",
    "SUBNETS_COVER_ZONES_RULE",
    "VOLUME_TYPES",
    "AwsLaunch",
    "HttpTokens",
    "LaunchTemplateRef",
    "MetadataOptions",
    "ProviderSection",
    "RootVolume",
    "VolumeType",
]

# Tag keys the provider writes itself (and AWS reserves "aws:"): a user tag of the same
# key would change which pool an instance belongs to.
RESERVED_TAG_PREFIXES: Final = ("aws:", "nodepool.dev/")
# EC2 refuses user data above 16 KB (before base64).
MAX_USER_DATA_LENGTH: Final = 16384
# EC2 allows 50 tags per instance; the provider writes 8 of its own.
_MAX_EXTRA_TAGS: Final = 40
# The default per network interface.
_MAX_SECURITY_GROUPS: Final = 5
_EC2_ID: Final = "[0-9a-f]{8}([0-9a-f]{9})?"
HttpTokens = Literal["required", "optional"]
HTTP_TOKENS: Final[tuple[HttpTokens, ...]] = get_args(HttpTokens)
# io1 and io2 need provisioned IOPS, which this section does not offer.
VolumeType = Literal["gp3", "gp2", "st1", "sc1", "standard"]
VOLUME_TYPES: Final[tuple[VolumeType, ...]] = get_args(VolumeType)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MetadataOptions:
    """The instance metadata service (IMDS) of every instance: IMDSv2 tokens required and
    a hop limit of 1 by default, so a container behind one more network hop cannot read
    the node's role credentials."""

    http_tokens: HttpTokens = "required"
    http_put_response_hop_limit: int = 1

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MetadataOptions:
        return cls(
            http_tokens=fields.choice(d, "httpTokens", choices=HTTP_TOKENS, default="required"),
            http_put_response_hop_limit=fields.integer(d, "httpPutResponseHopLimit", default=1),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "httpTokens": self.http_tokens,
            "httpPutResponseHopLimit": self.http_put_response_hop_limit,
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class RootVolume:
    """The root EBS volume: ``volume_size`` in GiB (as EC2's ``VolumeSize``);
    ``device_name`` must be the image's root device (``/dev/xvda`` on Amazon Linux and
    Bottlerocket, ``/dev/sda1`` on Ubuntu)."""

    volume_size: int
    volume_type: VolumeType = "gp3"
    device_name: str = "/dev/xvda"
    encrypted: bool | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RootVolume:
        return cls(
            volume_size=fields.required_integer(d, "volumeSize"),
            volume_type=fields.choice(d, "volumeType", choices=VOLUME_TYPES, default="gp3"),
            device_name=fields.string(d, "deviceName", default="/dev/xvda"),
            encrypted=(
                fields.required_boolean(d, "encrypted") if d.get("encrypted") is not None else None
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        return fields.compact(
            {
                "volumeSize": self.volume_size,
                "volumeType": self.volume_type,
                "deviceName": self.device_name,
                "encrypted": self.encrypted,
            }
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class LaunchTemplateRef:
    """An EC2 launch template, by id or by name (exactly one), and its version
    (``$Default``, ``$Latest`` or a number). The section's own settings override it."""

    id: str | None = None
    name: str | None = None
    version: str = "$Default"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LaunchTemplateRef:
        return cls(
            id=fields.optional_string(d, "id"),
            name=fields.optional_string(d, "name"),
            version=fields.string(d, "version", default="$Default"),
        )

    def to_dict(self) -> dict[str, Any]:
        return fields.compact({"id": self.id, "name": self.name, "version": self.version})


@dataclasses.dataclass(frozen=True, kw_only=True)
class AwsLaunch:
    """What ``RunInstances`` needs for one machine of the pool.

    ``subnets`` maps a zone to the subnet the pool's machines in that zone go to; a VM
    whose zone the template fixes uses that zone's subnet, one with no zone takes the
    first subnet that has room. ``instance_profile`` is a name or an ARN.
    """

    instance_type: str
    image_id: str
    subnets: Mapping[str, str]
    security_group_ids: tuple[str, ...] = ()
    instance_profile: str | None = None
    user_data: str | None = None
    tags: Mapping[str, str] = dataclasses.field(default_factory=dict)
    metadata_options: MetadataOptions = dataclasses.field(default_factory=MetadataOptions)
    root_volume: RootVolume | None = None
    launch_template: LaunchTemplateRef | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AwsLaunch:
        return cls(
            instance_type=fields.required_string(d, "instanceType"),
            image_id=fields.required_string(d, "imageId"),
            subnets=fields.string_map(d, "subnets"),
            security_group_ids=fields.string_list(d, "securityGroupIds"),
            instance_profile=fields.optional_string(d, "instanceProfile"),
            user_data=fields.optional_string(d, "userData"),
            tags=fields.string_map(d, "tags"),
            metadata_options=(
                fields.optional_nested(d, "metadataOptions", parse=MetadataOptions.from_dict)
                or MetadataOptions()
            ),
            root_volume=fields.optional_nested(d, "rootVolume", parse=RootVolume.from_dict),
            launch_template=fields.optional_nested(
                d, "launchTemplate", parse=LaunchTemplateRef.from_dict
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        return fields.compact(
            {
                "instanceType": self.instance_type,
                "imageId": self.image_id,
                "subnets": dict(self.subnets),
                "securityGroupIds": list(self.security_group_ids),
                "instanceProfile": self.instance_profile,
                "userData": self.user_data,
                "tags": dict(self.tags),
                "metadataOptions": self.metadata_options.to_dict(),
                "rootVolume": None if self.root_volume is None else self.root_volume.to_dict(),
                "launchTemplate": (
                    None if self.launch_template is None else self.launch_template.to_dict()
                ),
            }
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProviderSection:
    """Per-provider launch settings; a provider reads its own part and ignores the rest."""

    aws: AwsLaunch | None = None
    parameters: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProviderSection:
        return cls(
            aws=fields.optional_nested(d, "aws", parse=AwsLaunch.from_dict),
            parameters=fields.string_map(d, "parameters"),
        )

    def to_dict(self) -> dict[str, Any]:
        return fields.compact(
            {
                "aws": None if self.aws is None else self.aws.to_dict(),
                "parameters": dict(self.parameters),
            }
        )


def _id_schema(prefix: str, what: str) -> dict[str, Any]:
    return {"type": "string", "description": what, "pattern": f"^{prefix}-{_EC2_ID}$"}


_RESERVED_TAGS_RULE: Final[dict[str, str]] = {
    "rule": "self.all(k, "
    + " && ".join(f"!k.startsWith('{p}')" for p in RESERVED_TAG_PREFIXES)
    + ")",
    "message": (
        "tag keys starting with "
        + " or ".join(f'"{p}"' for p in RESERVED_TAG_PREFIXES)
        + " are reserved (the operator tags instances with its own)"
    ),
}

AWS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": "How the EC2 provider launches the pool's instances.",
    "required": ["instanceType", "imageId", "subnets"],
    "properties": {
        "instanceType": {
            "type": "string",
            "description": (
                "The EC2 instance type (m6i.xlarge); its vCPUs and memory must match the "
                "template's cpu and memory, else the pool is Degraded."
            ),
            "maxLength": 64,
            "pattern": r"^[a-z0-9][a-z0-9-]*[.][a-z0-9-]+$",
        },
        "imageId": _id_schema("ami", "The AMI every instance boots."),
        "subnets": {
            "type": "object",
            "description": (
                "The subnet of each zone ({us-east-1a: subnet-0abc...}); every zone of the "
                "template must have one."
            ),
            "minProperties": 1,
            "maxProperties": 32,
            "additionalProperties": _id_schema("subnet", "A subnet id."),
        },
        "securityGroupIds": {
            "type": "array",
            "description": "Security groups of the instance's network interface.",
            "x-kubernetes-list-type": "set",
            "maxItems": _MAX_SECURITY_GROUPS,
            "items": _id_schema("sg", "A security group id."),
        },
        "instanceProfile": {
            "type": "string",
            "description": "The IAM instance profile, by name or ARN.",
            "minLength": 1,
            "maxLength": 2048,
            "pattern": r"^(arn:aws[a-z-]*:iam::[0-9]{12}:instance-profile/)?[A-Za-z0-9+=,.@_/-]+$",
        },
        "userData": {
            "type": "string",
            "description": (
                "User data as plain text (the SDK base64-encodes it), e.g. the script that "
                "joins the instance to the cluster under its VM name."
            ),
            "maxLength": MAX_USER_DATA_LENGTH,
        },
        "metadataOptions": {
            "type": "object",
            "description": (
                "The instance metadata service of every instance; by default IMDSv2 tokens "
                "required and a hop limit of 1, so pods cannot reach the node's credentials."
            ),
            "default": {},
            "properties": {
                "httpTokens": {
                    "type": "string",
                    "enum": list(HTTP_TOKENS),
                    "default": "required",
                    "description": "required: IMDSv2 only; optional: IMDSv1 too.",
                },
                "httpPutResponseHopLimit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 64,
                    "default": 1,
                    "description": "Network hops a metadata response may travel.",
                },
            },
        },
        "rootVolume": {
            "type": "object",
            "description": "The root EBS volume of every instance (else the image's default).",
            "required": ["volumeSize"],
            "properties": {
                "volumeSize": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 16384,
                    "description": "Size in GiB.",
                },
                "volumeType": {
                    "type": "string",
                    "enum": list(VOLUME_TYPES),
                    "default": "gp3",
                    "description": "The EBS volume type.",
                },
                "deviceName": {
                    "type": "string",
                    "default": "/dev/xvda",
                    "description": (
                        "The image's root device: /dev/xvda (Amazon Linux, Bottlerocket), "
                        "/dev/sda1 (Ubuntu)."
                    ),
                    "pattern": "^/dev/[a-z0-9]+$",
                    "maxLength": 32,
                },
                "encrypted": {"type": "boolean", "description": "Encrypt with EBS's key."},
            },
        },
        "launchTemplate": {
            "type": "object",
            "description": (
                "An EC2 launch template to start from, by id or by name (one of the two); "
                "the settings of this section override the template's."
            ),
            "properties": {
                "id": _id_schema("lt", "The launch template's id."),
                "name": {
                    "type": "string",
                    "description": "The launch template's name.",
                    "minLength": 3,
                    "maxLength": 128,
                    "pattern": r"^[a-zA-Z0-9().\-/_]+$",
                },
                "version": {
                    "type": "string",
                    "default": "$Default",
                    "description": "$Default, $Latest, or a version number.",
                    # \x24 is "$", written so that only the anchor is a bare one.
                    "pattern": r"^(\x24Default|\x24Latest|[1-9][0-9]*)$",
                },
            },
        },
        "tags": {
            "type": "object",
            "description": "Extra tags put on every instance of the pool.",
            "maxProperties": _MAX_EXTRA_TAGS,
            "additionalProperties": {"type": "string", "maxLength": 256},
            "x-kubernetes-validations": [
                _RESERVED_TAGS_RULE,
                {
                    "rule": "self.all(k, size(k) >= 1 && size(k) <= 128)",
                    "message": "tag keys are 1-128 characters",
                },
            ],
        },
    },
}

PROVIDER_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": (
        "Launch settings of the cloud provider the operator runs with (run --cloud); "
        "each provider reads only its own part."
    ),
    "properties": {
        "aws": AWS_SCHEMA,
        "parameters": {
            "type": "object",
            "description": "Settings for a provider installed as a separate package.",
            "maxProperties": 64,
            "additionalProperties": {"type": "string", "maxLength": 4096},
        },
    },
}

# On the template, which holds both the zones and the provider section.
SUBNETS_COVER_ZONES_RULE: Final[dict[str, str]] = {
    "rule": (
        "!has(self.provider) || !has(self.provider.aws) || !has(self.zones)"
        " || self.zones.all(z, z in self.provider.aws.subnets)"
    ),
    "message": "provider.aws.subnets must name a subnet for every zone of the template",
}
