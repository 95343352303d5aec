"""Pod specs with the scheduling constraints the Autoscaler simulates, built one way.

The e2e tests, the differential test and the planning benchmark all describe workloads
by a constraint *kind*; this module turns a kind into the pod spec fields kube-scheduler
reads, so the three always mean the same thing by it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from nodepool_operator.api import wellknown

#: Every kind ``constrain`` knows.
KINDS: Final = (
    "plain",
    "anti-host",
    "spread-zone",
    "spread-host",
    "host-port",
    "zone-pin",
    "tolerate",
)
PAUSE_IMAGE: Final = "registry.k8s.io/pause:3.10"


def container(cpu: str, *, memory: str = "256Mi", host_port: int | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {
        "name": "app",
        "image": PAUSE_IMAGE,
        "resources": {"requests": {"cpu": cpu, "memory": memory}},
    }
    if host_port is not None:
        found["ports"] = [{"containerPort": host_port, "hostPort": host_port}]
    return found


def pod_terms(kind: str, labels: Mapping[str, str], topology_key: str) -> dict[str, Any]:
    """A required ``podAffinity`` or ``podAntiAffinity`` on pods with ``labels``."""
    term = {"labelSelector": {"matchLabels": dict(labels)}, "topologyKey": topology_key}
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def spread(labels: Mapping[str, str], topology_key: str, **extra: Any) -> list[dict[str, Any]]:
    """A ``DoNotSchedule`` topology spread (maxSkew 1) of the pods with ``labels``."""
    return [
        {
            "maxSkew": 1,
            "topologyKey": topology_key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": dict(labels)},
            **extra,
        }
    ]


def constrain(
    kind: str,
    labels: Mapping[str, str],
    *,
    zone: str,
    toleration: Mapping[str, str],
) -> dict[str, Any]:
    """The pod spec fields of ``kind`` for pods with ``labels`` (host ports aside: they are
    a container's, see ``container``). ``zone`` is the one a zone-pinned pod asks for."""
    if kind == "anti-host":
        return {"affinity": pod_terms("podAntiAffinity", labels, wellknown.HOSTNAME_LABEL)}
    if kind == "spread-zone":
        return {"topologySpreadConstraints": spread(labels, wellknown.ZONE_LABEL)}
    if kind == "spread-host":
        return {"topologySpreadConstraints": spread(labels, wellknown.HOSTNAME_LABEL)}
    if kind == "zone-pin":
        return {"nodeSelector": {wellknown.ZONE_LABEL: zone}}
    if kind == "tolerate":
        return {"tolerations": [dict(toleration)]}
    return {}


def deployment(
    name: str,
    *,
    selector: Mapping[str, str],
    replicas: int,
    cpu: str,
    memory: str = "256Mi",
    host_port: int | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Deployment of pause pods labelled ``app=<name>``, on nodes with ``selector``."""
    labels = {"app": name}
    node_selector = {**selector, **spec.pop("nodeSelector", {})}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": node_selector,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [container(cpu, memory=memory, host_port=host_port)],
                    **spec,
                },
            },
        },
    }
