"""A pod's scheduling constraints as the simulation reads them, and the API's matching rules."""

from __future__ import annotations

from typing import Any

import pytest

from nodepool_operator.controllers.autoscaler import constraints
from nodepool_operator.controllers.autoscaler.constraints import (
    HostPort,
    NodeTaint,
    Selector,
    Toleration,
)


def pod(*, labels: dict[str, str] | None = None, namespace: str = "apps", **spec: Any) -> Any:
    spec.setdefault("containers", [{"name": "c", "resources": {"requests": {"cpu": "1"}}}])
    return {
        "metadata": {"name": "p", "namespace": namespace, "labels": labels or {}},
        "spec": spec,
    }


def term(key: str = "kubernetes.io/hostname", **extra: Any) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": key, **extra}


def anti(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


# -- label selectors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operator", "values", "labels", "matches"),
    [
        ("In", {"a", "b"}, {"k": "a"}, True),
        ("In", {"a"}, {}, False),
        ("NotIn", {"a"}, {"k": "b"}, True),
        ("NotIn", {"a"}, {}, True),
        ("NotIn", {"a"}, {"k": "a"}, False),
        ("Exists", set(), {"k": ""}, True),
        ("Exists", set(), {}, False),
        ("DoesNotExist", set(), {}, True),
        ("DoesNotExist", set(), {"k": "x"}, False),
        ("Bogus", set(), {"k": "x"}, False),
    ],
)
def test_label_selector_operators(
    operator: str, values: set[str], labels: dict[str, str], matches: bool
) -> None:
    assert Selector((("k", operator, frozenset(values)),)).matches(labels) is matches


def test_an_empty_selector_matches_every_pod_and_a_missing_one_none() -> None:
    everyone = constraints.profile_of(pod(affinity=anti(term(labelSelector={}))))
    assert everyone.anti_affinity[0].matches("apps", {"any": "thing"})
    nobody = constraints.profile_of(pod(affinity=anti({"topologyKey": "zone"})))
    assert not nobody.anti_affinity[0].matches("apps", {"app": "web"})


# -- node selector and node affinity ------------------------------------------------------


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]}


def field(operator: str, *values: str) -> dict[str, Any]:
    return {"matchFields": [{"key": "metadata.name", "operator": operator, "values": list(values)}]}


@pytest.mark.parametrize(
    ("terms", "fits"),
    [
        ([expr("zone", "In", "a", "b")], True),
        ([expr("zone", "In", "c")], False),
        ([expr("zone", "NotIn", "c")], True),
        ([expr("gpu", "Exists")], False),
        ([expr("gpu", "DoesNotExist")], True),
        ([expr("cores", "Gt", "8")], True),
        ([expr("cores", "Lt", "8")], False),
        ([expr("zone", "Gt", "8")], False),  # not a number
        ([expr("zone", "In", "c"), expr("zone", "In", "a")], True),  # terms are ORed
        ([{**expr("zone", "In", "a"), **field("In", "other")}], False),  # within: ANDed
        ([{}], False),  # an empty term matches nothing
        ([], False),  # no term at all: nothing
        ([field("In", "n")], False),
        ([field("In", "node-1")], True),
        ([field("NotIn", "n")], True),
    ],
)
def test_required_node_affinity(terms: list[dict[str, Any]], fits: bool) -> None:
    problem = constraints.node_affinity_problem(
        {}, tuple(terms), labels={"zone": "a", "cores": "16"}, name="node-1"
    )
    assert (problem is None) is fits


def test_no_node_affinity_rule_fits_every_node() -> None:
    assert constraints.node_affinity_problem({}, None, labels={}, name="n") is None


def test_the_node_selector_names_the_label_it_misses() -> None:
    problem = constraints.node_affinity_problem(
        {"disk": "ssd", "zone": "a"}, None, labels={"zone": "a", "disk": "hdd"}, name="n"
    )
    assert problem == "nodeSelector disk=ssd"


def test_profiles_read_node_selector_and_required_terms_only() -> None:
    preferred = {"preference": expr("disk", "In", "ssd"), "weight": 1}
    spec = {
        "nodeSelector": {"disk": "ssd"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [expr("zone", "In", "a")]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [preferred],
            }
        },
    }
    profile = constraints.profile_of(pod(**spec))
    assert profile.node_selector == {"disk": "ssd"}
    assert profile.node_affinity == (expr("zone", "In", "a"),)
    assert constraints.profile_of(pod()).node_affinity is None


# -- taints and tolerations ------------------------------------------------------------------

TEAM = NodeTaint("team", "ml", "NoSchedule")


@pytest.mark.parametrize(
    "toleration",
    [
        Toleration("team", "Equal", "ml", ""),
        Toleration("team", "Equal", "ml", "NoSchedule"),
        Toleration("team", "", "ml", "NoSchedule"),
        Toleration("team", "Exists", "", ""),
        Toleration("", "Exists", "", ""),
    ],
)
def test_tolerations_that_tolerate_a_taint(toleration: Toleration) -> None:
    assert toleration.tolerates(TEAM)


@pytest.mark.parametrize(
    "toleration",
    [
        Toleration("team", "Equal", "web", ""),
        Toleration("team", "Exists", "", "NoExecute"),
        Toleration("other", "Exists", "", ""),
    ],
)
def test_tolerations_that_do_not(toleration: Toleration) -> None:
    assert not toleration.tolerates(TEAM)


def test_only_no_schedule_and_no_execute_taints_keep_a_pod_off() -> None:
    soft = NodeTaint("soft", "", "PreferNoSchedule")
    assert constraints.untolerated((), (soft,)) is None
    assert constraints.untolerated((), (soft, TEAM)) == TEAM


def test_daemonset_pods_tolerate_cordon_and_not_ready_nodes() -> None:
    cordon = NodeTaint("node.kubernetes.io/unschedulable", "", "NoSchedule")
    not_ready = NodeTaint("node.kubernetes.io/not-ready", "", "NoExecute")
    assert constraints.untolerated(constraints.DAEMON_TOLERATIONS, (cordon, not_ready)) is None
    assert constraints.untolerated(constraints.DAEMON_TOLERATIONS, (TEAM,)) == TEAM


def test_tolerations_are_read_with_their_defaults() -> None:
    profile = constraints.profile_of(pod(tolerations=[{"key": "team", "value": "ml"}]))
    assert profile.tolerations == (Toleration("team", "Equal", "ml", ""),)


# -- inter-pod terms ----------------------------------------------------------------------


def test_affinity_terms_apply_to_the_pods_own_namespace_by_default() -> None:
    [found] = constraints.profile_of(pod(affinity=anti(term()))).anti_affinity
    assert found.matches("apps", {"app": "web"})
    assert not found.matches("other", {"app": "web"})
    assert not found.matches("apps", {"app": "db"})


def test_affinity_terms_may_list_namespaces() -> None:
    [found] = constraints.profile_of(pod(affinity=anti(term(namespaces=["other"])))).anti_affinity
    assert found.matches("other", {"app": "web"})
    assert not found.matches("apps", {"app": "web"})


def test_an_empty_namespace_selector_means_every_namespace() -> None:
    profile = constraints.profile_of(pod(affinity=anti(term(namespaceSelector={}))))
    assert profile.unsupported is None
    assert profile.anti_affinity[0].matches("anywhere", {"app": "web"})


def test_a_namespace_selector_with_labels_is_unsupported() -> None:
    chooser = {"matchLabels": {"team": "a"}}
    affinity = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [term(namespaceSelector=chooser)]
        }
    }
    profile = constraints.profile_of(pod(affinity=affinity))
    assert profile.unsupported is not None
    assert "namespaceSelector" in profile.unsupported


def test_match_label_keys_add_the_pods_own_label_values() -> None:
    labels = {"app": "web", "pod-template-hash": "abc"}
    spec = {"affinity": anti(term(matchLabelKeys=["pod-template-hash"]))}
    [found] = constraints.profile_of(pod(labels=labels, **spec)).anti_affinity
    assert found.matches("apps", labels)
    assert not found.matches("apps", {**labels, "pod-template-hash": "old"})


def test_preferred_pod_terms_are_not_constraints() -> None:
    weighted = {"weight": 1, "podAffinityTerm": term()}
    affinity = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [weighted]}}
    profile = constraints.profile_of(pod(affinity=affinity))
    assert (profile.anti_affinity, profile.has_pod_constraints) == ((), False)


# -- spread ---------------------------------------------------------------------------------


def spread(**entry: Any) -> dict[str, Any]:
    return {
        "maxSkew": 2,
        "topologyKey": "topology.kubernetes.io/zone",
        "labelSelector": {"matchLabels": {"app": "web"}},
        **entry,
    }


def test_do_not_schedule_spread_is_read_with_its_defaults() -> None:
    [found] = constraints.profile_of(
        pod(topologySpreadConstraints=[spread(whenUnsatisfiable="DoNotSchedule")])
    ).spread
    assert (found.max_skew, found.min_domains) == (2, 1)
    assert (found.honor_node_affinity, found.honor_taints) == (True, False)


def test_spread_policies_and_min_domains_are_read() -> None:
    entry = spread(minDomains=3, nodeAffinityPolicy="Ignore", nodeTaintsPolicy="Honor")
    [found] = constraints.profile_of(pod(topologySpreadConstraints=[entry])).spread
    assert (found.min_domains, found.honor_node_affinity, found.honor_taints) == (3, False, True)


def test_schedule_anyway_spread_is_a_preference_and_left_out() -> None:
    entry = spread(whenUnsatisfiable="ScheduleAnyway")
    assert constraints.profile_of(pod(topologySpreadConstraints=[entry])).spread == ()


# -- host ports ------------------------------------------------------------------------------


def test_host_ports_are_read_from_app_and_init_containers() -> None:
    app = {"name": "a", "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81}]}
    init = {"name": "i", "ports": [{"containerPort": 53, "hostPort": 53, "protocol": "UDP"}]}
    profile = constraints.profile_of(pod(containers=[app], initContainers=[init]))
    assert profile.ports == (HostPort("TCP", "", 8080), HostPort("UDP", "", 53))


@pytest.mark.parametrize(
    ("a", "b", "clash"),
    [
        (HostPort("TCP", "", 80), HostPort("TCP", "", 80), True),
        (HostPort("TCP", "", 80), HostPort("UDP", "", 80), False),
        (HostPort("TCP", "", 80), HostPort("TCP", "", 81), False),
        (HostPort("TCP", "0.0.0.0", 80), HostPort("TCP", "10.0.0.1", 80), True),
        (HostPort("TCP", "10.0.0.1", 80), HostPort("TCP", "10.0.0.2", 80), False),
        (HostPort("TCP", "10.0.0.1", 80), HostPort("TCP", "10.0.0.1", 80), True),
    ],
)
def test_host_port_conflicts(a: HostPort, b: HostPort, clash: bool) -> None:
    assert a.conflicts(b) is clash
    assert b.conflicts(a) is clash


# -- profiles ---------------------------------------------------------------------------------


def test_replicas_have_equal_profiles_and_a_different_pod_does_not() -> None:
    one = constraints.profile_of(pod(labels={"app": "web"}))
    two = constraints.profile_of(pod(labels={"app": "web"}))
    other = constraints.profile_of(pod(labels={"app": "db"}))
    assert one == two
    assert hash(one) == hash(two)
    assert one != other


def test_priority_is_read_and_defaults_to_zero() -> None:
    assert constraints.profile_of(pod(priority=-20)).priority == -20
    assert constraints.profile_of(pod()).priority == 0


def test_a_malformed_request_raises_value_error() -> None:
    bad = [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]
    with pytest.raises(ValueError, match="invalid quantity"):
        constraints.profile_of(pod(containers=bad))


def test_the_label_keys_a_profile_reads_are_those_its_selectors_name() -> None:
    anti = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}
    spread = {
        "maxSkew": 1,
        "topologyKey": "zone",
        "labelSelector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
    }
    profile = constraints.profile_of(
        {
            "metadata": {
                "namespace": "apps",
                "labels": {"app": "web", "statefulset.kubernetes.io/pod-name": "web-0"},
            },
            "spec": {
                "affinity": {
                    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [anti]}
                },
                "topologySpreadConstraints": [spread],
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            },
        }
    )
    assert profile.label_keys_read == {"app", "tier"}
