"""Ordering resourceVersions: the one place that knows when it can be done.

A resourceVersion is opaque to clients in general; on etcd-backed API servers it is an
increasing integer, which is the only case where one version can be called newer than
another. Each caller decides what to assume when it cannot be told (``None`` here),
because the safe side differs: a status writer treats its cache as stale, a planner
treats its cache as behind.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["compare", "creation_order", "creation_order_of", "number", "sort_number"]


def number(version: str) -> int | None:
    """The version as an integer, or None when it is not one."""
    return int(version) if version.isdigit() else None


def sort_number(version: str) -> int:
    """The version as a sort key: its number, and -1 (before every real version) when it
    is not one. Every ordering of versions in the project falls back the same way."""
    found = number(version)
    return -1 if found is None else found


def compare(version: str, other: str) -> int | None:
    """-1, 0 or 1 as ``version`` is older than, equal to or newer than ``other``.

    Equal text is equal whatever it holds; otherwise None when they cannot be ordered.
    """
    if version == other:
        return 0
    first, second = number(version), number(other)
    if first is None or second is None:
        return None
    return (first > second) - (first < second)


def creation_order(*, created: str, version: str, name: str) -> tuple[str, int, str]:
    """The sort key of objects by when they were made, oldest first.

    ``creationTimestamp`` first (RFC 3339 in whole seconds, so text order is time order),
    then the resourceVersion where it is a number (it orders objects made within the same
    second; a version that is not one sorts first), then the name, which only makes the
    order total and never decides which of two objects is newer. Every component that
    must agree on "the newest" (the NodePool controller answering ScaleRequests, the
    Autoscaler predicting that answer) orders with this one key.
    """
    return (created, sort_number(version), name)


def creation_order_of(obj: Mapping[str, Any]) -> tuple[str, int, str]:
    """``creation_order`` of an object as the API returns it."""
    meta = obj.get("metadata") or {}
    return creation_order(
        created=str(meta.get("creationTimestamp", "")),
        version=str(meta.get("resourceVersion", "")),
        name=str(meta.get("name", "")),
    )
