"""Nominations: the rule both controllers read to hand a new Node's first pods on.

kube-scheduler binds each pending pod to any Node with room, in its queue's order, and
knows nothing of the plan that bought the Nodes: the first Node to turn schedulable takes
pods the plan meant for the others, and a large pod can be left with no Node that holds
it (docs/autoscaling.md, "Where the planned pods go"). Since Kubernetes 1.35 another
component may set a pending pod's ``status.nominatedNodeName``: kube-scheduler tries that
Node first and keeps its room from pods of no higher priority. But a pod tried and failed
(the Node still tainted) has its nomination cleared, so nominations hold only if they are
written once every new Node is there and Ready, and before any of them takes pods.

The contract: a scale-up ScaleRequest may say ``spec.awaitNominationsSeconds``. A Node of
its pool created at or after that request keeps the unregistered taint, even once its
kubelet has reported, until the Autoscaler has written its nominations and marked the
Node ``NOMINATED_ANNOTATION``, or until ``awaitNominationsSeconds`` after the Node's
creation, whichever comes first. The Nodes one batch nominated are released together: a
nominated Node also waits while a Node of its pool that existed when it was marked still
waits for its own mark (the Autoscaler marks them one patch each, and kube-scheduler must
not find some schedulable while the others' pods still count on theirs). Both facts are
in the world (the request's spec, the
Node's creationTimestamp and annotations), so a restarted operator holds and releases the
same Nodes at the same times, and a stopped Autoscaler delays a Node by that bound only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nodepool_operator import timestamps
from nodepool_operator.api import scalerequest, wellknown

__all__ = ["held_until", "holds", "is_nominated"]


def is_nominated(node: Mapping[str, Any]) -> bool:
    """The Autoscaler has written the nominations for this Node."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return wellknown.NOMINATED_ANNOTATION in annotations


def held_until(node: Mapping[str, Any], pool_requests: Iterable[Mapping[str, Any]]) -> float | None:
    """Until when (epoch seconds) ``node``, a Node of the pool whose ScaleRequests are
    ``pool_requests``, waits for nominations before its unregistered taint is lifted; None
    when it does not wait: it carries no unregistered taint, it is nominated already, is
    being deleted, or no request of the pool made at or before it asks for a wait. The
    time may be past: the wait is then over."""
    meta = node.get("metadata") or {}
    if meta.get("deletionTimestamp") or not wellknown.is_unregistered(node) or is_nominated(node):
        return None
    created_text = str(meta.get("creationTimestamp") or "")
    created = timestamps.parse_rfc3339(created_text)
    if created is None:
        return None
    longest = 0
    for request in pool_requests:
        request_meta = request.get("metadata") or {}
        # RFC 3339 in UTC with whole seconds sorts as text: a request made in the same
        # second as the Node counts (the Node cannot be older than the request it is for).
        if str(request_meta.get("creationTimestamp") or "") > created_text:
            continue
        seconds = scalerequest.spec_of(request).await_nominations_seconds or 0
        longest = max(longest, min(seconds, scalerequest.MAX_AWAIT_NOMINATIONS_SECONDS))
    return created + longest if longest > 0 else None


def holds(
    nodes: Mapping[str, Mapping[str, Any]],
    pool_requests: Iterable[Mapping[str, Any]],
    *,
    now: float,
    is_ready: Callable[[Mapping[str, Any]], bool],
) -> dict[str, float]:
    """The Nodes of one pool (``nodes``, by name) that keep the unregistered taint at
    ``now`` for nominations, each with when to look at it again: its own wait's end, or,
    for one nominated already, the soonest end among the Ready Nodes it is released with
    (``is_ready``: the kubelet reports the Node Ready)."""
    requests = list(pool_requests)
    waiting: dict[str, tuple[str, float]] = {}  # name -> (its creationTimestamp, until)
    for name, node in nodes.items():
        until = held_until(node, requests)
        if until is not None and until > now:
            created = str((node.get("metadata") or {}).get("creationTimestamp") or "")
            waiting[name] = (created, until)
    found = {name: until for name, (_, until) in waiting.items()}
    if not waiting:
        return found
    for name, node in nodes.items():
        if name in waiting or not wellknown.is_unregistered(node) or not is_nominated(node):
            continue
        marked = str(node["metadata"]["annotations"][wellknown.NOMINATED_ANNOTATION])
        # RFC 3339 with whole seconds sorts as text: a Node made in the second of the mark
        # counts as there when it was made (it may wait a moment longer, never less).
        with_it = [
            until
            for other, (created, until) in waiting.items()
            if created <= marked and is_ready(nodes[other])
        ]
        if with_it:
            found[name] = min(with_it)
    return found
