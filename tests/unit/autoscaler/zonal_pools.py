"""A pool over zones, for the whole-cluster and zone tests."""

from __future__ import annotations

from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.runtime.client import Object


def zonal_pool(name: str = "small", *, target: int = 0, **template: Any) -> Object:
    spec = nodepool_api.NodePoolSpec(
        target_nodes=target,
        template=nodepool_api.NodeTemplate(cpu="4", memory="16Gi", **template),
    )
    body = nodepool_api.manifest(name, spec)
    body["metadata"].update(uid=f"{name}-uid", resourceVersion="7")
    return body
