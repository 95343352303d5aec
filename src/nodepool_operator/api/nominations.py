"""Nominations: the rule both controllers read to hand a new Node's first pods on.

kube-scheduler binds each pending pod to any Node with room, in its queue's order, and
knows nothing of the plan that bought the Nodes: the first Node to turn schedulable takes
pods the plan meant for the others, and a large pod can be left with no Node that holds
it (docs/autoscaling.md, "Where the planned pods go"). Since Kubernetes 1.35 another
component may set a pending pod's ``status.nominatedNodeName``: kube-scheduler tries that
Node first and keeps its room from pods of no higher priority. But a pod tried and failed
(the Node still tainted) has its nomination cleared, so nominations hold only if they are
written once every new Node is there and Ready, and before any of them takes pods.

The contract: a scale-up ScaleRequest may say ``spec.awaitNominationsSeconds``. A Node
of its pool created at or after that request (its ``creationTimestamp`` no earlier, to
the second) keeps the unregistered taint, even once its kubelet has reported, until the
Autoscaler has written its nominations and marked the Node ``NOMINATED_ANNOTATION``, or
until ``awaitNominationsSeconds`` after the Node turned Ready (its Ready condition's
``lastTransitionTime``), whichever comes first; the NodePool controller never holds it
past half its pool's ``registrationTimeoutSeconds`` from its creation, so a held Node is
never taken for one that did not register. The request is kept as long as its VMs may
still register (as one naming zones), or only the plain retention once every VM of the
pool has its Node registered and untainted (``request_facts.nominations_settled``). The
Nodes one batch nominated are released together: a nominated Node also waits (never past
its own wait) while a Ready Node of its pool that existed when it was marked still waits
for its own mark (the Autoscaler marks the Ready ones of a batch one patch each, and
kube-scheduler must not find some schedulable while the others' pods still count on
theirs). Every fact is in the world (the request's spec, the Node's creationTimestamp,
conditions and annotations), so a restarted operator holds and releases the same Nodes
at the same times, and a stopped Autoscaler delays a Ready Node by
``awaitNominationsSeconds`` at most."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nodepool_operator import timestamps
from nodepool_operator.api import scalerequest, wellknown

__all__ = ["held_until", "holds", "is_nominated", "ready_since"]


def is_nominated(node: Mapping[str, Any]) -> bool:
    """The Autoscaler has written the nominations for this Node."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return wellknown.NOMINATED_ANNOTATION in annotations


def ready_since(node: Mapping[str, Any]) -> float | None:
    """When the Node turned Ready (its Ready condition's lastTransitionTime); None when it
    is not Ready or the time cannot be read."""
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready" and condition.get("status") == "True":
            return wellknown.ready_changed_at(node)
    return None


def _deadline(node: Mapping[str, Any], pool_requests: Iterable[Mapping[str, Any]]) -> float | None:
    """Until when the Node may wait for nominations, whether marked or not: infinity while
    it is not Ready, then its Ready time plus the longest wait a request of the pool made
    at or before it asks for; None when none asks or it carries no unregistered taint."""
    meta = node.get("metadata") or {}
    if meta.get("deletionTimestamp") or not wellknown.is_unregistered(node):
        return None
    created = str(meta.get("creationTimestamp") or "")
    if not created:
        return None
    longest = 0
    for request in pool_requests:
        request_meta = request.get("metadata") or {}
        # RFC 3339 in UTC with whole seconds sorts as text: a request made in the same
        # second as the Node counts (the Node cannot be older than the request it is for).
        if str(request_meta.get("creationTimestamp") or "") > created:
            continue
        seconds = scalerequest.spec_of(request).await_nominations_seconds or 0
        longest = max(longest, min(seconds, scalerequest.MAX_AWAIT_NOMINATIONS_SECONDS))
    if longest <= 0:
        return None
    since = ready_since(node)
    return math.inf if since is None else since + longest


def held_until(node: Mapping[str, Any], pool_requests: Iterable[Mapping[str, Any]]) -> float | None:
    """Until when (epoch seconds) ``node``, a Node of the pool whose ScaleRequests are
    ``pool_requests``, waits for nominations before its unregistered taint is lifted:
    infinity while it is not Ready (nothing lifts the taint before that), then its Ready
    time plus the wait. None when it does not wait: it carries no unregistered taint, it is
    nominated already, is being deleted, or no request of the pool made at or before it
    asks for a wait. The time may be past: the wait is then over."""
    return None if is_nominated(node) else _deadline(node, pool_requests)


def holds(
    nodes: Mapping[str, Mapping[str, Any]],
    pool_requests: Iterable[Mapping[str, Any]],
    *,
    now: float,
    is_ready: Callable[[Mapping[str, Any]], bool],
    registration_seconds: float,
) -> dict[str, float]:
    """The Nodes of one pool (``nodes``, by name) that keep the unregistered taint at
    ``now`` for nominations, each with until when (infinity: until it turns Ready): its
    own wait's end, or, for one nominated already, the soonest end among the Ready Nodes
    it is released with, never past its own. No Node is held past half
    ``registration_seconds`` (the pool's ``registrationTimeoutSeconds``) from its
    creation. ``is_ready``: the kubelet reports the Node Ready."""
    requests = list(pool_requests)

    def capped(node: Mapping[str, Any], until: float) -> float:
        created = timestamps.parse_rfc3339((node.get("metadata") or {}).get("creationTimestamp"))
        return until if created is None else min(until, created + registration_seconds / 2)

    waiting: dict[str, tuple[str, float]] = {}  # name -> (its creationTimestamp, until)
    marked: dict[str, tuple[str, float]] = {}  # name -> (its mark, its own deadline)
    for name, node in nodes.items():
        deadline = _deadline(node, requests)
        if deadline is None or (deadline := capped(node, deadline)) <= now:
            continue
        meta = node.get("metadata") or {}
        if is_nominated(node):
            marked[name] = (str(meta["annotations"][wellknown.NOMINATED_ANNOTATION]), deadline)
        else:
            waiting[name] = (str(meta.get("creationTimestamp") or ""), deadline)
    found = {name: until for name, (_, until) in waiting.items()}
    for name, (mark, own) in marked.items():
        # RFC 3339 with whole seconds sorts as text: a Node made in the second of the mark
        # counts as there when it was made (it may wait a moment longer, never less).
        with_it = [
            until
            for other, (created, until) in waiting.items()
            if created <= mark and is_ready(nodes[other])
        ]
        if with_it:
            found[name] = min(*with_it, own)
    return found
