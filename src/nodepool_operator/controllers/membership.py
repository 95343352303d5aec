"""Which Nodes are a pool's: the one rule both controllers use.

A Node is a member of a pool when it carries the pool label and an owner reference that
names the pool by uid. The label alone is not enough: anyone can label a Node, and a Node
labelled with the pool but not owned by it is never counted, stamped, tainted, drained
or removed for the pool.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodepool_operator.api import wellknown
from nodepool_operator.controllers.resources import NODES_BY_POOL
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.informer import Informer

__all__ = ["is_member", "is_owned", "members"]


def is_member(node: Mapping[str, Any], *, pool_name: str, pool_uid: str | None) -> bool:
    """The Node carries the pool label and an owner reference to the pool's uid."""
    return wellknown.pool_of(node) == pool_name and is_owned(node, pool_uid)


def is_owned(node: Mapping[str, Any], pool_uid: str | None) -> bool:
    """An owner reference of the Node names the pool's uid (``is_member``'s second half,
    for a Node found by name: one a create found taken, one holding a VM's name)."""
    if not pool_uid:
        return False
    refs = (node.get("metadata") or {}).get("ownerReferences") or ()
    return any(ref.get("uid") == pool_uid for ref in refs)


def members(nodes: Informer, *, pool_name: str, pool_uid: str | None) -> list[Object]:
    """The pool's member Nodes in the Node cache."""
    return [
        node
        for node in nodes.by_index(NODES_BY_POOL, pool_name)
        if is_member(node, pool_name=pool_name, pool_uid=pool_uid)
    ]
