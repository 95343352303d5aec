"""Builders of the scheduling simulation's inputs (nodes, pools, pod profiles with their
terms and spreads): what the simulation and verdicts tests share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler import constraints
from nodepool_operator.controllers.autoscaler.constraints import NodeTaint, PodProfile
from nodepool_operator.controllers.autoscaler.simulation import (
    ExistingNode,
    PoolTemplate,
    PoolZones,
    SimulationOutcome,
)

GI = 1024**3

HOST = wellknown.HOSTNAME_LABEL

ZONE = wellknown.ZONE_LABEL

UNSUPPORTED_NAMESPACE_SELECTOR = {"matchLabels": {"team": "a"}}


def pod(
    *,
    cpu: str = "1",
    memory: str = "1Gi",
    labels: Mapping[str, str] | None = None,
    namespace: str = "apps",
    other: Mapping[str, str] | None = None,
    ports: Sequence[int] = (),
    **spec: Any,
) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": memory, **(other or {})}
    container: dict[str, Any] = {"name": "c", "resources": {"requests": requests}}
    if ports:
        container["ports"] = [{"containerPort": p, "hostPort": p} for p in ports]
    return {
        "metadata": {"name": "p", "namespace": namespace, "labels": dict(labels or {})},
        "spec": {"containers": [container], **spec},
    }


def profile(**kw: Any) -> PodProfile:
    return constraints.profile_of(pod(**kw))


def pool(
    name: str = "small",
    *,
    template: nodepool_api.NodeTemplate | None = None,
    weight: int = 0,
    headroom: int = 10,
    in_flight: int = 0,
    first: int = 0,
    namespaces: frozenset[str] | None = None,
    counts: Mapping[str, int] | None = None,
    booting: tuple[str | None, ...] = (),
) -> PoolTemplate:
    """A pool whose next nodes are ``<name>-<first>``, ``<name>-<first+1>``, ..."""
    shape = template or nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=110)

    def upcoming(k: int, zone: str | None) -> tuple[str, Mapping[str, str]]:
        node = f"{name}-{first + k}"
        labels = nodepool_api.node_labels(name, shape, zone=zone)
        return node, {**labels, HOST: node}

    return PoolTemplate(
        name=name,
        weight=weight,
        taints=tuple(NodeTaint(t.key, t.value or "", t.effect) for t in shape.taints),
        allocatable=nodepool_api.template_allocatable(shape),
        upcoming=upcoming,
        in_flight=in_flight,
        headroom=headroom,
        zones=max(1, len(shape.zones)),
        namespaces=namespaces,
        zoning=PoolZones(names=shape.zones, counts=counts or {}, in_flight=booting),
    )


def node(
    name: str,
    *,
    pool_name: str | None = "small",
    cpu: int = 4000,
    memory: int = 16 * GI,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[NodeTaint] = (),
    unschedulable: bool = False,
    running: Sequence[PodProfile] = (),
    daemon_sets: frozenset[str] = frozenset(),
    allocatable: Mapping[str, int] | None = None,
) -> ExistingNode:
    base = {wellknown.POOL_LABEL: pool_name} if pool_name else {}
    return ExistingNode(
        name=name,
        pool=pool_name,
        labels={**base, HOST: name, **(labels or {})},
        taints=tuple(taints),
        unschedulable=unschedulable,
        allocatable=allocatable or {"cpu": cpu, "memory": memory, "pods": 110},
        pods=tuple(running),
        daemon_sets=daemon_sets,
    )


def spread_of(key: str, *, app: str = "web", max_skew: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "maxSkew": max_skew,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": app}},
        **extra,
    }


def pod_terms(kind: str, key: str, *, app: str = "web", **extra: Any) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key, **extra}
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def zoned(*zones: str, **kw: Any) -> nodepool_api.NodeTemplate:
    return nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=110, zones=zones, **kw)


def counts(outcome: SimulationOutcome) -> dict[str, int]:
    found: dict[str, int] = {}
    for name in outcome.placements:
        if name is not None:
            found[name] = found.get(name, 0) + 1
    return found
