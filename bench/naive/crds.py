"""The product's CRDs as the two baselines of ``bench/contention.py`` need them.

Same group, kinds, names and spec schema as ``nodepool-operator crds``; only two things
differ, each what the baseline's own idiom requires:

* the naive operator writes status in the main object (no status subresource, so its
  PUT carries spec and status together, as the article's anti-pattern does);
* kopf keeps its handler progress and results under ``status`` (its documented default),
  which the API server would prune without ``x-kubernetes-preserve-unknown-fields``.

Both keep fields the product's status schema does not list (``lastUpdated``, kopf's).
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from kubernetes_asyncio import client

from nodepool_operator.api import crds as product_crds

__all__ = ["install", "variant"]


def variant(*, status_subresource: bool) -> list[dict[str, Any]]:
    """Every CRD, status open to unknown fields, with or without the status subresource."""
    found = []
    for original in product_crds.all_crds():
        crd = copy.deepcopy(original)
        for version in crd["spec"]["versions"]:
            version["schema"]["openAPIV3Schema"]["properties"]["status"][
                "x-kubernetes-preserve-unknown-fields"
            ] = True
            if not status_subresource:
                # /scale reads .status.currentNodes through the status subresource's rules.
                version.pop("subresources", None)
        found.append(crd)
    return found


async def install(api: client.ApiClient, manifests: list[dict[str, Any]]) -> None:
    """Create the CRDs on a fresh control plane and wait until each one is served."""
    extensions = client.ApiextensionsV1Api(api)
    custom = client.CustomObjectsApi(api)
    for crd in manifests:
        body: Any = crd  # the generated API takes plain dicts; its annotations say models
        await extensions.create_custom_resource_definition(body)
    async with asyncio.timeout(60):
        for crd in manifests:
            spec = crd["spec"]
            while True:
                try:
                    await custom.list_cluster_custom_object(
                        spec["group"], spec["versions"][0]["name"], spec["names"]["plural"]
                    )
                    break
                except client.exceptions.ApiException:
                    await asyncio.sleep(0.2)
