"""A pod's manifest read into its ``PodProfile``, once: required terms only, since
preferred ones do not decide feasibility.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodepool_operator.controllers.autoscaler.constraints import pending_pods
from nodepool_operator.controllers.autoscaler.constraints.matching import Toleration, parse_selector
from nodepool_operator.controllers.autoscaler.constraints.profile import (
    AffinityTerm,
    HostPort,
    PodProfile,
    SpreadConstraint,
    freeze,
)

__all__ = ["profile_of"]


def _namespaces(term: Mapping[str, Any], own: str) -> tuple[frozenset[str] | None, str | None]:
    listed = frozenset(str(n) for n in term.get("namespaces") or ())
    chooser = term.get("namespaceSelector")
    if chooser is None:
        return (listed or frozenset({own})), None
    if not chooser.get("matchLabels") and not chooser.get("matchExpressions"):
        return None, None  # an empty namespaceSelector selects every namespace
    return listed, "a namespaceSelector with labels (namespace labels are not simulated)"


def _affinity_terms(
    raw: Sequence[Mapping[str, Any]], *, namespace: str, labels: Mapping[str, str]
) -> tuple[tuple[AffinityTerm, ...], str | None]:
    terms: list[AffinityTerm] = []
    unsupported = None
    for term in raw:
        namespaces, problem = _namespaces(term, namespace)
        unsupported = unsupported or problem
        selector = parse_selector(
            term.get("labelSelector"),
            pod_labels=labels,
            match_keys=term.get("matchLabelKeys") or (),
            mismatch_keys=term.get("mismatchLabelKeys") or (),
        )
        terms.append(AffinityTerm(selector, namespaces, str(term.get("topologyKey", ""))))
    return tuple(terms), unsupported


def _spread(
    raw: Sequence[Mapping[str, Any]], *, labels: Mapping[str, str]
) -> tuple[SpreadConstraint, ...]:
    found = []
    for entry in raw:
        if entry.get("whenUnsatisfiable", "DoNotSchedule") != "DoNotSchedule":
            continue  # ScheduleAnyway is a preference
        selector = parse_selector(
            entry.get("labelSelector"),
            pod_labels=labels,
            match_keys=entry.get("matchLabelKeys") or (),
        )
        found.append(
            SpreadConstraint(
                max_skew=max(1, int(entry.get("maxSkew", 1))),
                topology_key=str(entry.get("topologyKey", "")),
                selector=selector,
                min_domains=max(1, int(entry.get("minDomains") or 1)),
                honor_node_affinity=entry.get("nodeAffinityPolicy", "Honor") == "Honor",
                honor_taints=entry.get("nodeTaintsPolicy", "Ignore") == "Honor",
            )
        )
    return tuple(found)


def _ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    found = []
    containers = [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]
    for container in containers:
        for port in container.get("ports") or ():
            host_port = int(port.get("hostPort") or 0)
            if host_port > 0:
                found.append(
                    HostPort(
                        str(port.get("protocol") or "TCP"), str(port.get("hostIP") or ""), host_port
                    )
                )
    return tuple(found)


def _tolerations(raw: Sequence[Mapping[str, Any]]) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(
            key=str(t.get("key") or ""),
            operator=str(t.get("operator") or "Equal"),
            value=str(t.get("value") or ""),
            effect=str(t.get("effect") or ""),
        )
        for t in raw
    )


def _pod_terms(
    affinity: Mapping[str, Any], *, namespace: str, labels: Mapping[str, str]
) -> tuple[tuple[AffinityTerm, ...], tuple[AffinityTerm, ...], str | None]:
    """The required pod affinity and anti-affinity terms, and what of them is unsupported."""
    found = []
    unsupported = None
    for kind in ("podAffinity", "podAntiAffinity"):
        raw = (affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        terms, problem = _affinity_terms(raw or (), namespace=namespace, labels=labels)
        found.append(terms)
        unsupported = unsupported or problem
    return found[0], found[1], unsupported


def profile_of(
    pod: Mapping[str, Any], *, extra_tolerations: Sequence[Toleration] = ()
) -> PodProfile:
    """The pod's profile; raises ``ValueError`` on a request that cannot be read."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    namespace = str(meta.get("namespace", ""))
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    requests = pending_pods.pod_requests(pod)
    affinity = spec.get("affinity") or {}
    required_nodes = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    node_terms = (
        None if required_nodes is None else tuple(required_nodes.get("nodeSelectorTerms") or ())
    )
    pod_affinity, pod_anti, unsupported = _pod_terms(affinity, namespace=namespace, labels=labels)
    tolerations = (*_tolerations(spec.get("tolerations") or ()), *extra_tolerations)
    spread = _spread(spec.get("topologySpreadConstraints") or (), labels=labels)
    ports = _ports(spec)
    node_selector = {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}
    node_rules = (freeze(node_selector), freeze(required_nodes), tolerations)
    priority = int(spec.get("priority") or 0)
    key = (
        namespace,
        freeze(labels),
        freeze(requests),
        *node_rules,
        pod_affinity,
        pod_anti,
        spread,
        ports,
        priority,
    )
    return PodProfile(
        key=key,
        namespace=namespace,
        labels=labels,
        requests=requests,
        node_selector=node_selector,
        node_affinity=node_terms,
        tolerations=tolerations,
        affinity=pod_affinity,
        anti_affinity=pod_anti,
        spread=spread,
        ports=ports,
        priority=priority,
        unsupported=unsupported,
        node_rules=node_rules,
    )
