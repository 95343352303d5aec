"""Finalizers: the one way the operator adds or removes its own from an object.

The change is a merge patch of ``metadata.finalizers`` that carries the object's
``resourceVersion``: a merge patch with a resourceVersion is conditional, so a concurrent
edit of the list (another controller's finalizer) gives 409 and a requeue instead of being
overwritten by our copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["adding", "has", "removing"]


def has(obj: Mapping[str, Any], finalizer: str) -> bool:
    return finalizer in (obj.get("metadata", {}).get("finalizers") or ())


def adding(obj: Mapping[str, Any], finalizer: str) -> dict[str, Any] | None:
    """The patch that adds ``finalizer`` to ``obj``; None when it is there already."""
    if has(obj, finalizer):
        return None
    current = list(obj["metadata"].get("finalizers") or ())
    return _patch(obj, [*current, finalizer])


def removing(obj: Mapping[str, Any], finalizer: str) -> dict[str, Any] | None:
    """The patch that removes ``finalizer`` from ``obj``; None when it is not there."""
    if not has(obj, finalizer):
        return None
    current = obj["metadata"]["finalizers"]
    return _patch(obj, [f for f in current if f != finalizer])


def _patch(obj: Mapping[str, Any], finalizers: list[str]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
