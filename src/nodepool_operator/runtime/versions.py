"""Ordering resourceVersions: the one place that knows when it can be done.

A resourceVersion is opaque to clients in general; on etcd-backed API servers it is an
increasing integer, which is the only case where one version can be called newer than
another. Each caller decides what to assume when it cannot be told (``None`` here),
because the safe side differs: a status writer treats its cache as stale, a planner
treats its cache as behind.
"""

from __future__ import annotations

__all__ = ["compare", "number"]


def number(version: str) -> int | None:
    """The version as an integer, or None when it is not one."""
    return int(version) if version.isdigit() else None


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
