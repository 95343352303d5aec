"""The cloud's catalog for ``explain pod`` and ``plan --dry-run``, read as the operator
reads it: from simcloud's ``GET /v1/catalog`` with the operator's own client and token
handling (``--cloud-endpoint``, ``--cloud-token-file``), or from a file in the form
simcloud's ``--catalog`` takes (``cloud.catalog``). Without one, a pool with requirements
is planned as the operator plans it before its first read of the catalog: not grown.

One read, no retry: a person is waiting, and a catalog that cannot be had is said in one
line (``CatalogUnreadable``), never guessed at or replaced by an empty one.
"""

from __future__ import annotations

from pathlib import Path

from nodepool_operator.cloud import catalog, credentials, provider
from nodepool_operator.cloud.simcloud.client import SimCloudClient

__all__ = ["CatalogUnreadable", "read"]


class CatalogUnreadable(Exception):  # noqa: N818 (a verdict on the user's input)
    """The catalog asked for cannot be read; the message says which and why."""


async def read(
    *,
    catalog_file: Path | None,
    cloud_endpoint: str | None,
    token_file: Path | None,
) -> catalog.Catalog | None:
    """The catalog from ``catalog_file`` or the simcloud at ``cloud_endpoint`` (the bearer
    token in ``token_file``, if given); None when neither is given."""
    if catalog_file is not None and cloud_endpoint is not None:
        raise CatalogUnreadable("give --catalog or --cloud-endpoint, not both")
    if token_file is not None and cloud_endpoint is None:
        raise CatalogUnreadable("--cloud-token-file is the token of --cloud-endpoint; give both")
    if catalog_file is not None:
        try:
            return catalog.load(catalog_file)
        except catalog.CatalogError as error:
            raise CatalogUnreadable(str(error)) from error
    if cloud_endpoint is None:
        return None
    token = None
    if token_file is not None:
        token = credentials.TokenFile(token_file)
        try:
            token.read()  # once now: a wrong path is said as such, not as a cloud error
        except credentials.CredentialError as error:
            raise CatalogUnreadable(str(error)) from error
    cloud = SimCloudClient(cloud_endpoint, token=token)  # its 10 s per call, as run's
    try:
        return await cloud.catalog()
    except provider.CloudError as error:
        raise CatalogUnreadable(
            f"cannot read the catalog from {cloud.endpoint}: {error.code}: {error}"
        ) from error
    finally:
        await cloud.close()
