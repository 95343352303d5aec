"""One pod of a Node being drained: how it is named, how long it may take to stop, which
PodDisruptionBudget refused its eviction, and its deletion when the drain's deadline
leaves no room for an eviction (``drain.Drainer`` decides when)."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Mapping
from typing import Any, Final

from nodepool_operator.runtime import errors, kinds
from nodepool_operator.runtime.client import Client

__all__ = ["DEFAULT_GRACE_SECONDS", "budget_named_in", "delete_pod", "grace_seconds", "pod_key"]

log = logging.getLogger(__name__)

#: Kubernetes' default when a pod does not say (``terminationGracePeriodSeconds``).
DEFAULT_GRACE_SECONDS: Final = 30

# "The disruption budget web needs 2 healthy pods and has 2 currently", or "... web is
# still being processed by the server": the eviction subresource's 429 cause. The API
# server names the budget in every 429 it gives for one; a 429 naming none is its own
# throttling (API Priority and Fairness), and no budget is to blame.
_BUDGET_IN_MESSAGE = re.compile(r"disruption budget ([a-z0-9]([-a-z0-9.]*[a-z0-9])?)")


def budget_named_in(error: errors.ApiError) -> str | None:
    """The PodDisruptionBudget a 429 from the eviction subresource names, if it does."""
    texts = [error.message, *(str(c.get("message", "")) for c in error.details.get("causes", ()))]
    for text in texts:
        found = _BUDGET_IN_MESSAGE.search(text)
        if found:
            return found.group(1)
    return None


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


def grace_seconds(pod: Mapping[str, Any]) -> int:
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return DEFAULT_GRACE_SECONDS if grace is None else int(grace)


async def delete_pod(client: Client, pod: Mapping[str, Any], *, grace: int) -> None:
    """Delete ``pod`` (this incarnation: by uid) with ``grace`` seconds to stop; one
    already gone is fine."""
    meta = pod["metadata"]
    log.warning("event=pod-deleted-for-drain-timeout pod=%s grace=%ds", pod_key(pod), grace)
    with contextlib.suppress(errors.NotFound):
        await client.delete(
            kinds.PODS,
            str(meta["name"]),
            namespace=str(meta.get("namespace", "")),
            uid=meta.get("uid"),
            grace_period_seconds=grace,
        )
