"""Which cloud provider the operator runs with (``run --cloud NAME``).

Two are built in: ``simcloud`` (the default, and the demo's) and ``aws``. Another
provider (GCP, Azure, OpenStack, ...) ships as its own package and registers a factory
under the entry-point group ``nodepool_operator.cloud_providers``; in its
``pyproject.toml``::

    [project.entry-points."nodepool_operator.cloud_providers"]
    openstack = "nodepool_openstack.provider:create"

where ``create(options: ProviderOptions) -> CloudProvider``. Its launch settings reach it
in ``MachineSpec.launch.parameters`` (the template's ``provider.parameters``). A built-in
name cannot be taken over by a package.

Every provider serves one cluster (``--cluster-name``, in ``ProviderOptions.cluster_name``)
and must scope its VMs to it. EC2 needs the name given: it goes into IAM policies. The
simcloud defaults to the kubeconfig's current cluster (``default_cluster_name``).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import logging
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from nodepool_operator.cloud import credentials, provider

__all__ = [
    "BUILTIN",
    "DEFAULT_CLUSTER_NAME",
    "DEFAULT_SIMCLOUD_ENDPOINT",
    "ENTRY_POINT_GROUP",
    "InvalidProviderOptions",
    "ProviderFactory",
    "ProviderOptions",
    "UnknownProvider",
    "available",
    "check_cluster_name",
    "create",
    "default_cluster_name",
]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP: Final = "nodepool_operator.cloud_providers"
DEFAULT_SIMCLOUD_ENDPOINT: Final = "http://127.0.0.1:8787"
# The simcloud's cluster when no kubeconfig names one (in-cluster config).
DEFAULT_CLUSTER_NAME: Final = "default"
# EKS's own rule for cluster names (and short enough for the tag key
# kubernetes.io/cluster/<name>, which EC2 caps at 128 characters); dots are allowed too,
# as kubeconfig cluster names often have them.
_CLUSTER_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProviderOptions:
    """What the command line gives a provider.

    ``endpoint``: ``--cloud-endpoint``, None when not given (the simcloud's default
    address; for EC2 the regional endpoint). ``token``: ``--cloud-token-file``, for
    providers that authenticate with a bearer token; EC2 uses the SDK's own chain.
    """

    endpoint: str | None = None
    token: credentials.TokenSource | None = None
    cluster_name: str | None = None
    """``--cluster-name``: the cluster whose VMs the provider creates and sees."""
    interruption_queue: str | None = None
    """``--interruption-queue``: the URL of the queue the cloud sends its interruption
    notices to (EC2: SQS, fed by the EventBridge rules in ``deploy/aws/``)."""


ProviderFactory = Callable[[ProviderOptions], provider.CloudProvider]


class UnknownProvider(LookupError):  # noqa: N818 (a verdict on the user's input)
    """No provider of that name is built in or installed."""


class InvalidProviderOptions(ValueError):  # noqa: N818 (a verdict on the user's input)
    """The command line gives the provider something it cannot run with."""


def check_cluster_name(name: str) -> str:
    """``name`` if it can name a cluster in tags and IAM conditions, else a clear error."""
    if not _CLUSTER_NAME.fullmatch(name):
        raise InvalidProviderOptions(
            f"--cluster-name {name!r}: 1-100 characters, letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    return name


def default_cluster_name(kubeconfig: Path | None) -> str:
    """The name of the kubeconfig's current cluster, made fit for a cluster name (an
    EKS kubeconfig names it by ARN); ``DEFAULT_CLUSTER_NAME`` without a kubeconfig."""
    if kubeconfig is None:
        return DEFAULT_CLUSTER_NAME
    try:
        config: Any = yaml.safe_load(kubeconfig.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise InvalidProviderOptions(
            f"cannot read the cluster name from {kubeconfig}: {error}; give --cluster-name"
        ) from error
    current = config.get("current-context") if isinstance(config, dict) else None
    contexts = config.get("contexts") if isinstance(config, dict) else None
    cluster = next(
        (
            (c.get("context") or {}).get("cluster")
            for c in contexts or []
            if isinstance(c, dict) and c.get("name") == current
        ),
        None,
    )
    if not isinstance(cluster, str) or not cluster:
        raise InvalidProviderOptions(
            f"{kubeconfig} has no current context naming a cluster; give --cluster-name"
        )
    fitted = re.sub(r"[^A-Za-z0-9._-]+", "-", cluster.rsplit("/", 1)[-1]).strip("-._")[:100]
    return check_cluster_name(fitted or DEFAULT_CLUSTER_NAME)


def _simcloud(options: ProviderOptions) -> provider.CloudProvider:
    from nodepool_operator.cloud.simcloud.client import SimCloudClient

    return SimCloudClient(
        options.endpoint or DEFAULT_SIMCLOUD_ENDPOINT,
        token=options.token,
        cluster=options.cluster_name or DEFAULT_CLUSTER_NAME,
    )


def _aws(options: ProviderOptions) -> provider.CloudProvider:
    # Imported here: botocore takes a while to import, and the simcloud needs none of it.
    from nodepool_operator.cloud.aws import Ec2Provider

    if options.cluster_name is None:
        raise InvalidProviderOptions(
            "--cloud aws needs --cluster-name: every instance is tagged with it, every "
            "lookup filters on it, and the IAM policy in deploy/aws/ conditions on it"
        )
    if options.token is not None:
        log.warning("event=cloud-token-ignored cloud=aws reason=the SDK credential chain is used")
    return Ec2Provider(
        cluster_name=options.cluster_name,
        endpoint_url=options.endpoint,
        interruption_queue=options.interruption_queue,
    )


BUILTIN: Final[Mapping[str, ProviderFactory]] = {"simcloud": _simcloud, "aws": _aws}


def available() -> dict[str, ProviderFactory | importlib.metadata.EntryPoint]:
    """Every provider name: the built-in factories, then installed entry points (not
    loaded until chosen, so a broken package only fails when it is asked for)."""
    found: dict[str, ProviderFactory | importlib.metadata.EntryPoint] = dict(BUILTIN)
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.name in BUILTIN:
            log.warning("event=cloud-provider-shadowed name=%s value=%s", entry.name, entry.value)
            continue
        found.setdefault(entry.name, entry)
    return found


def create(name: str, options: ProviderOptions) -> provider.CloudProvider:
    """The provider called ``name``, made with ``options``."""
    choices = available()
    chosen = choices.get(name)
    if chosen is None:
        raise UnknownProvider(
            f"no cloud provider {name!r}; available: {', '.join(sorted(choices))} "
            f"(others install under the entry-point group {ENTRY_POINT_GROUP})"
        )
    factory: ProviderFactory = (
        chosen.load() if isinstance(chosen, importlib.metadata.EntryPoint) else chosen
    )
    return factory(options)
