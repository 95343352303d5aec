"""Which Nodes are a pool's: the one rule both controllers read.

A Node is a member of NodePool P when it carries the pool label ``nodepool.dev/pool=P``
AND an owner reference naming P by uid. The label alone is not enough: anyone can set a
label, and a Node left by an older pool of the same name has another uid. A Node labelled
with the pool but not owned by it is not the pool's: the NodePool controller never
drains, changes or deletes it, never counts it, and a ScaleRequest may not name it; the
Autoscaler never stamps, taints or counts it. Both controllers ask ``is_member`` (or
``members``, which reads the shared ``NODES_BY_POOL`` index), as both answer
ScaleRequests by ``scalerequest_api.answer_requests``, so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.controllers.resources import NODES_BY_POOL
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.informer import Informer

__all__ = ["is_member", "is_owned", "members"]


def is_owned(node: Mapping[str, Any], pool_uid: str | None) -> bool:
    """The Node's owner references name the pool with uid ``pool_uid`` (half of
    ``is_member``: for a Node found by name, whose label says nothing yet)."""
    if not pool_uid:
        return False
    refs = (node.get("metadata") or {}).get("ownerReferences") or ()
    return any(ref.get("uid") == pool_uid for ref in refs)


def is_member(node: Mapping[str, Any], *, pool_name: str, pool_uid: str | None) -> bool:
    """``node`` is one of pool ``pool_name``'s: it carries the pool label and is owned by
    the pool whose uid is ``pool_uid`` (None, a pool not created yet, owns nothing)."""
    return nodepool_api.pool_of(node) == pool_name and is_owned(node, pool_uid)


def members(nodes: Informer, *, pool_name: str, pool_uid: str | None) -> list[Object]:
    """The pool's Nodes in the cache ``nodes`` (which declares ``NODES_BY_POOL``)."""
    return [
        node
        for node in nodes.by_index(NODES_BY_POOL, pool_name)
        if is_member(node, pool_name=pool_name, pool_uid=pool_uid)
    ]
