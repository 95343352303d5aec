"""Pool membership: the pool label AND an owner reference naming the pool by uid."""

from __future__ import annotations

from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers import membership
from nodepool_operator.controllers.resources import NODES_BY_POOL
from nodepool_operator.runtime import testing


def node(name: str, *, label: str | None = "p", owner_uid: str | None = "uid-p") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {}}
    if label is not None:
        meta["labels"][wellknown.POOL_LABEL] = label
    if owner_uid is not None:
        meta["ownerReferences"] = [
            {"kind": nodepool_api.KIND, "name": "p", "uid": owner_uid},
        ]
    return {"metadata": meta}


def test_a_labelled_node_the_pool_does_not_own_is_not_a_member() -> None:
    assert not membership.is_member(node("x", owner_uid=None), pool_name="p", pool_uid="uid-p")


def test_a_node_owned_by_another_pool_of_the_same_name_is_not_a_member() -> None:
    # A Node left by an older pool called "p": the label matches, the uid does not.
    older = node("x", owner_uid="uid-old-p")
    assert not membership.is_member(older, pool_name="p", pool_uid="uid-p")


def test_a_labelled_node_owned_by_the_pool_is_a_member() -> None:
    assert membership.is_member(node("p-0"), pool_name="p", pool_uid="uid-p")


def test_an_owned_node_without_the_label_is_not_a_member() -> None:
    assert not membership.is_member(node("p-0", label=None), pool_name="p", pool_uid="uid-p")
    assert not membership.is_member(node("p-0", label="q"), pool_name="p", pool_uid="uid-p")


def test_a_pool_without_a_uid_has_no_members() -> None:
    assert not membership.is_member(node("p-0"), pool_name="p", pool_uid=None)


def test_members_reads_the_pool_index_and_keeps_only_members() -> None:
    nodes = testing.FakeInformer({NODES_BY_POOL: lambda n: [wellknown.pool_of(n) or ""]})
    nodes.put(node("p-0"))
    nodes.put(node("stranger", owner_uid=None))
    nodes.put(node("older", owner_uid="uid-old-p"))
    nodes.put(node("q-0", label="q", owner_uid="uid-q"))
    found = membership.members(nodes, pool_name="p", pool_uid="uid-p")  # type: ignore[arg-type]
    assert [n["metadata"]["name"] for n in found] == ["p-0"]
