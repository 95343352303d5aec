"""What the NodePool controller reads of its ScaleRequests, as pure functions: a request's
facts for the rule (``scalerequest_api.answer_requests``), which are pending and in what
order, which finished ones have outlived the retention period, and why a request may not
name a Node for removal."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nodepool_operator import timestamps
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.api import wellknown
from nodepool_operator.api import zones as zones_api
from nodepool_operator.cloud.provider import VirtualMachine
from nodepool_operator.controllers import membership
from nodepool_operator.controllers.nodepool import plan
from nodepool_operator.runtime import versions
from nodepool_operator.runtime.client import Object

__all__ = [
    "expired_requests",
    "facts_of",
    "is_pending",
    "node_refusal",
    "nominations_settled",
    "pending_requests",
    "zones_served",
]


def facts_of(request: Object) -> scalerequest_api.RequestFacts:
    """What ``answer_requests`` needs of a ScaleRequest as the API returns it."""
    spec = scalerequest_api.spec_of(request)
    return scalerequest_api.RequestFacts(
        name=str(request["metadata"]["name"]),
        order=versions.creation_order_of(request),
        phase=scalerequest_api.status_of(request).phase,
        target_nodes=spec.target_nodes,
        based_on_target_nodes=spec.based_on_target_nodes,
    )


def node_refusal(
    pool: str,
    name: str,
    node: Mapping[str, Any] | None,
    *,
    pool_uid: str | None,
    requested_at: float | None = None,
) -> str | None:
    """Why a request of ``pool`` (whose uid is ``pool_uid``), made at ``requested_at``,
    may not name the Node ``name`` (as read now), or None. A Node the pool does not own
    (``membership``) is refused even when it carries the pool's label: it is never
    drained for the pool. A Node whose drain started before the request was made is
    being removed for another reason already: lowering the target for it again would
    take another Node in its place."""
    if node is None:
        return f"node {name} named in removeNodes is gone; not applied"
    if node.get("metadata", {}).get("deletionTimestamp"):
        return f"node {name} named in removeNodes is being deleted already; not applied"
    if wellknown.pool_of(node) != pool:
        return f"node {name} named in removeNodes is not in NodePool {pool}; not applied"
    if not membership.is_member(node, pool_name=pool, pool_uid=pool_uid):
        return f"node {name} named in removeNodes is not owned by NodePool {pool}; not applied"
    started = plan.drain_started(node)
    if started is not None and requested_at is not None and started < requested_at:
        return f"node {name} named in removeNodes is being drained already; not applied"
    if not plan.is_consolidating(node):
        # Its requester called the removal off (a pod it cannot move arrived meanwhile).
        return (
            f"node {name} named in removeNodes no longer carries "
            f"{wellknown.CONSOLIDATING_TAINT_KEY}; not applied"
        )
    return None


def pending_requests(requests: Sequence[Object]) -> list[Object]:
    """Pending requests not being deleted, oldest first (``versions.creation_order``)."""
    pending = [r for r in requests if is_pending(r) and not r["metadata"].get("deletionTimestamp")]
    return sorted(pending, key=versions.creation_order_of)


def expired_requests(
    requests: Sequence[Object],
    *,
    now: datetime.datetime,
    retention: float,
    zoned_retention: float = 0.0,
    nominations_settled: bool = False,
) -> tuple[list[Object], float | None]:
    """Finished requests older than their retention, and when the next one expires.

    A request that names zones or offerings for its new nodes (``spec.newNodeZones``,
    ``spec.newNodeOfferings``) is the only record of where (and as what) its VMs go until
    their Nodes register: both controllers read the zones of VMs still booting from it.
    So it is kept for ``zoned_retention`` seconds when that is longer (the caller gives
    the pool's registration timeout plus ``retention``: by then each of its VMs has a Node
    or was given up); so is one whose new Nodes wait for nominations
    (``spec.awaitNominationsSeconds``), the record that they wait (``api.nominations``),
    unless ``nominations_settled`` (no Node of the pool waits or can come to wait any
    more: ``nominations_settled()``); any other for ``retention``."""
    expired: list[Object] = []
    next_expiry: float | None = None
    for request in requests:
        if is_pending(request) or request["metadata"].get("deletionTimestamp"):
            continue
        kept = retention
        asked = scalerequest_api.spec_of(request)
        waits = bool(asked.await_nominations_seconds) and not nominations_settled
        if asked.new_node_zones or asked.new_node_offerings or waits:
            kept = max(retention, zoned_retention)
        created = timestamps.parse_rfc3339(request["metadata"].get("creationTimestamp"))
        if created is None:
            continue  # the API server sets it on every object: nothing to age it by
        age = now.timestamp() - created
        if age >= kept:
            expired.append(request)
        else:
            remaining = kept - age
            next_expiry = remaining if next_expiry is None else min(next_expiry, remaining)
    return expired, next_expiry


def nominations_settled(
    vms: Sequence[VirtualMachine], nodes: Mapping[str, Mapping[str, Any]], *, desired: int
) -> bool:
    """No Node of the pool waits for nominations, nor can come to: the pool has the VMs
    its target asks for (``vms``, the live ones), each with its Node (``nodes``, by name)
    registered and no longer tainted unregistered. A finished request kept only as the
    record that its Nodes wait (``spec.awaitNominationsSeconds``) then goes after the
    plain retention, not a registration timeout later: left until then, its deletion
    would come long after the pool went quiet, a write in a quiet cluster for nothing
    it still does."""
    if len(vms) < desired:
        return False
    return all(vm.name in nodes and not wellknown.is_unregistered(nodes[vm.name]) for vm in vms)


def is_pending(obj: Object) -> bool:
    return scalerequest_api.status_of(obj).phase == "Pending"


def zones_served(requests: Sequence[Object], nodes: Iterable[Mapping[str, Any]]) -> list[Object]:
    """The Applied requests not marked ``zonesServed`` yet whose zone claims the pool's
    ``nodes`` serve whole (``zones_api.served``: Nodes made since the request, in its
    zones, the older requests' claims served first). Nodes, not VMs: the Autoscaler, which
    reads the same claims to place the VMs still booting, sees those Nodes once the mark
    hides the claim, so both sides keep agreeing on where the pool's nodes are."""
    members = []
    for node in nodes:
        meta = node.get("metadata") or {}
        created = timestamps.parse_rfc3339(meta.get("creationTimestamp"))
        if meta.get("deletionTimestamp") or created is None:
            continue
        zone = (meta.get("labels") or {}).get(wellknown.ZONE_LABEL)
        members.append(zones_api.Member(zone=zone, created=created))
    claimed = [(r, zones_api.claims_of([r])) for r in requests]
    claims = [claim for _, found in claimed for claim in found]
    done = zones_api.served(claims, members)
    return [
        request
        for request, found in claimed
        if found
        and scalerequest_api.status_of(request).phase == "Applied"
        and all(any(claim is d for d in done) for claim in found)
    ]
