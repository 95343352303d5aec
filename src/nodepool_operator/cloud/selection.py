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
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import logging
from collections.abc import Callable, Mapping
from typing import Final

from nodepool_operator.cloud import credentials, provider

__all__ = [
    "BUILTIN",
    "DEFAULT_SIMCLOUD_ENDPOINT",
    "ENTRY_POINT_GROUP",
    "ProviderFactory",
    "ProviderOptions",
    "UnknownProvider",
    "available",
    "create",
]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP: Final = "nodepool_operator.cloud_providers"
DEFAULT_SIMCLOUD_ENDPOINT: Final = "http://127.0.0.1:8787"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProviderOptions:
    """What the command line gives a provider.

    ``endpoint``: ``--cloud-endpoint``, None when not given (the simcloud's default
    address; for EC2 the regional endpoint). ``token``: ``--cloud-token-file``, for
    providers that authenticate with a bearer token; EC2 uses the SDK's own chain.
    """

    endpoint: str | None = None
    token: credentials.TokenSource | None = None


ProviderFactory = Callable[[ProviderOptions], provider.CloudProvider]


class UnknownProvider(LookupError):  # noqa: N818 (a verdict on the user's input)
    """No provider of that name is built in or installed."""


def _simcloud(options: ProviderOptions) -> provider.CloudProvider:
    from nodepool_operator.cloud.simcloud.client import SimCloudClient

    return SimCloudClient(options.endpoint or DEFAULT_SIMCLOUD_ENDPOINT, token=options.token)


def _aws(options: ProviderOptions) -> provider.CloudProvider:
    # Imported here: botocore takes a while to import, and the simcloud needs none of it.
    from nodepool_operator.cloud.aws import Ec2Provider

    if options.token is not None:
        log.warning("event=cloud-token-ignored cloud=aws reason=the SDK credential chain is used")
    return Ec2Provider(endpoint_url=options.endpoint)


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
