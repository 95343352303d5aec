"""The scheduling simulation: where kube-scheduler would put pending pods, and which pool's
new nodes they need. One filter (or one pool rule) per test."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler import constraints
from nodepool_operator.controllers.autoscaler.constraints import NodeTaint, PodProfile
from nodepool_operator.controllers.autoscaler.simulation import (
    DaemonSetView,
    ExistingNode,
    PoolTemplate,
    SimulationOutcome,
    simulate,
)
from unit.autoscaler.simulation_world import (
    HOST,
    UNSUPPORTED_NAMESPACE_SELECTOR,
    ZONE,
    counts,
    node,
    pod,
    pod_terms,
    pool,
    profile,
    spread_of,
    zoned,
)

POD_NAME = "statefulset.kubernetes.io/pod-name"


# -- builders --------------------------------------------------------------------------


def daemon(uid: str = "ds", **kw: Any) -> DaemonSetView:
    as_pod = pod(namespace="kube-system", **kw)
    return DaemonSetView(
        uid,
        constraints.profile_of(as_pod, extra_tolerations=constraints.DAEMON_TOLERATIONS),
    )


def run(
    pending: Sequence[PodProfile],
    *,
    nodes: Sequence[ExistingNode] = (),
    pools: Sequence[PoolTemplate] | None = None,
    daemon_sets: Sequence[DaemonSetView] = (),
) -> SimulationOutcome:
    return simulate(
        pending, nodes=nodes, pools=[pool()] if pools is None else pools, daemon_sets=daemon_sets
    )


# -- resources ---------------------------------------------------------------------------


def test_pods_fill_new_nodes_one_after_the_other() -> None:
    outcome = run([profile()] * 10)
    assert counts(outcome) == {"small-0": 4, "small-1": 4, "small-2": 2}
    up = outcome.pools["small"]
    assert (up.new_nodes, up.wanted_nodes) == (3, 3)
    assert up.triggering == up.hosted == tuple(range(10))
    assert outcome.unfit == {}


def test_free_room_on_an_existing_node_is_used_before_a_new_node() -> None:
    busy = node("n1", running=[profile(cpu="2")])
    outcome = run([profile()] * 3, nodes=[busy])
    assert outcome.placements == ("n1", "n1", "small-0")
    up = outcome.pools["small"]
    assert (up.new_nodes, up.triggering, up.hosted) == (1, (2,), (0, 1, 2))


def test_memory_counts_as_well_as_cpu() -> None:
    outcome = run([profile(cpu="100m", memory="6Gi")] * 3)
    assert counts(outcome) == {"small-0": 2, "small-1": 1}


def test_pod_slots_limit_a_node() -> None:
    three_pods = pool(template=nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=3))
    outcome = run([profile(cpu="10m", memory="10Mi")] * 7, pools=[three_pods])
    assert outcome.pools["small"].new_nodes == 3


def test_a_pod_larger_than_the_template_is_unfit_and_says_which_resource() -> None:
    outcome = run([profile(cpu="8")])
    assert outcome.pools["small"].wanted_nodes == 0
    assert outcome.unfit[0] == "small: requests 8000 of cpu, a node offers 4000"


def test_ephemeral_storage_is_checked_against_the_template_allocatable() -> None:
    disk = pool(
        template=nodepool_api.NodeTemplate(cpu="4", memory="16Gi", ephemeral_storage="10Gi")
    )
    outcome = run([profile(cpu="100m", other={"ephemeral-storage": "4Gi"})] * 3, pools=[disk])
    assert counts(outcome) == {"small-0": 2, "small-1": 1}


def test_ephemeral_storage_the_template_does_not_offer_is_unfit() -> None:
    outcome = run([profile(other={"ephemeral-storage": "1Gi"})])
    assert "ephemeral-storage" in outcome.unfit[0]
    assert outcome.pools["small"].wanted_nodes == 0


def test_extended_resources_are_counted_per_node() -> None:
    gpus = pool(
        template=nodepool_api.NodeTemplate(
            cpu="4", memory="16Gi", extended_resources={"nvidia.com/gpu": "2"}
        )
    )
    outcome = run([profile(cpu="100m", other={"nvidia.com/gpu": "1"})] * 3, pools=[gpus])
    assert counts(outcome) == {"small-0": 2, "small-1": 1}


def test_an_extended_resource_no_pool_has_is_unfit_and_named() -> None:
    outcome = run([profile(other={"nvidia.com/gpu": "1"})])
    assert outcome.unfit[0] == "small: requests 1 of nvidia.com/gpu, a node offers 0"


def test_an_existing_node_without_the_extended_resource_is_skipped() -> None:
    gpus = pool(
        template=nodepool_api.NodeTemplate(
            cpu="4", memory="16Gi", extended_resources={"nvidia.com/gpu": "1"}
        )
    )
    outcome = run([profile(other={"nvidia.com/gpu": "1"})], nodes=[node("n1")], pools=[gpus])
    assert outcome.placements == ("small-0",)


def test_the_template_reserve_is_not_offered_to_pods() -> None:
    reserved = pool(
        template=nodepool_api.NodeTemplate(cpu="4", memory="16Gi", reserved={"cpu": "1"})
    )
    assert counts(run([profile()] * 6, pools=[reserved])) == {"small-0": 3, "small-1": 3}
    assert run([profile(cpu="3500m")], pools=[reserved]).pools["small"].wanted_nodes == 0


# -- DaemonSet overhead ------------------------------------------------------------------


def test_daemonset_pods_take_room_on_every_new_node() -> None:
    outcome = run([profile()] * 6, daemon_sets=[daemon(cpu="500m", memory="100Mi")])
    assert counts(outcome) == {"small-0": 3, "small-1": 3}


def test_a_pod_of_the_full_template_size_is_unfit_once_a_daemonset_runs_there() -> None:
    outcome = run([profile(cpu="4", memory="1Gi")], daemon_sets=[daemon(cpu="100m")])
    up = outcome.pools["small"]
    assert (up.new_nodes, up.wanted_nodes) == (0, 0)
    assert outcome.unfit[0] == "small: not enough free cpu"


def test_daemonset_pods_take_room_on_requested_nodes_not_registered_yet() -> None:
    booting = pool(in_flight=1)
    outcome = run([profile()] * 4, pools=[booting], daemon_sets=[daemon(cpu="500m")])
    assert outcome.placements == ("small-0", "small-0", "small-0", "small-1")
    up = outcome.pools["small"]
    assert (up.new_nodes, up.triggering, up.hosted) == (1, (3,), (0, 1, 2, 3))


def test_a_registered_node_is_charged_for_the_daemonset_pods_not_bound_to_it_yet() -> None:
    ds = daemon(cpu="1")
    fresh = node("small-0")
    outcome = run([profile()] * 4, nodes=[fresh], pools=[pool(first=1)], daemon_sets=[ds])
    assert counts(outcome) == {"small-0": 3, "small-1": 1}


def test_a_daemonset_pod_already_on_a_node_is_not_charged_twice() -> None:
    ds = daemon(cpu="1")
    running = node("small-0", running=[ds.profile], daemon_sets=frozenset({"ds"}))
    outcome = run([profile()] * 3, nodes=[running], pools=[pool(first=1)], daemon_sets=[ds])
    assert counts(outcome) == {"small-0": 3}


def test_a_daemonset_that_does_not_tolerate_the_pool_taint_costs_nothing() -> None:
    tainted = nodepool_api.NodeTemplate(
        cpu="4",
        memory="16Gi",
        taints=(nodepool_api.Taint(key="team", value="ml", effect="NoSchedule"),),
    )
    toleration = [{"key": "team", "operator": "Exists"}]
    outcome = run(
        [profile(tolerations=toleration)] * 4,
        pools=[pool(template=tainted)],
        daemon_sets=[daemon(cpu="1")],
    )
    assert counts(outcome) == {"small-0": 4}


def test_a_daemonset_selecting_other_nodes_costs_nothing() -> None:
    elsewhere = daemon(cpu="1", nodeSelector={"disk": "ssd"})
    assert counts(run([profile()] * 4, daemon_sets=[elsewhere])) == {"small-0": 4}


def test_nodes_outside_every_pool_are_charged_for_the_daemonsets_not_there_yet() -> None:
    # The DaemonSet controller puts its pod on every node it admits, a pool's or not: the
    # room it will take is not room for pending pods.
    outside = node("other", pool_name=None)
    outcome = run([profile()] * 4, nodes=[outside], pools=[], daemon_sets=[daemon(cpu="1")])
    assert counts(outcome) == {"other": 3}
    running = dataclasses.replace(outside, daemon_sets=frozenset({"ds"}))
    outcome = run([profile()] * 4, nodes=[running], pools=[], daemon_sets=[daemon(cpu="1")])
    assert counts(outcome) == {"other": 4}


# -- existing nodes are judged on their own labels, taints and cordon ----------------------


def test_an_existing_node_with_a_label_the_template_lacks_hosts_the_selecting_pod() -> None:
    ssd = node("n1", labels={"disk": "ssd"}, running=[profile(cpu="3")])
    outcome = run([profile(nodeSelector={"disk": "ssd"})] * 2, nodes=[ssd])
    assert outcome.placements[0] == "n1"
    assert outcome.placements[1] is None  # the template has no disk=ssd
    assert outcome.unfit[1] == "small: nodeSelector disk=ssd does not match"
    assert outcome.pools["small"].wanted_nodes == 0


def test_an_existing_node_with_a_taint_the_template_lacks_is_not_room() -> None:
    tainted = node("n1", taints=[NodeTaint("dedicated", "db", "NoSchedule")])
    outcome = run([profile()], nodes=[tainted])
    assert outcome.placements == ("small-0",)
    assert outcome.pools["small"].new_nodes == 1


def test_an_existing_node_without_the_template_taint_takes_pods_that_do_not_tolerate_it() -> None:
    tainted = pool(
        template=nodepool_api.NodeTemplate(
            taints=(nodepool_api.Taint(key="team", value="ml", effect="NoSchedule"),)
        )
    )
    outcome = run([profile()], nodes=[node("small-0")], pools=[tainted])
    assert outcome.placements == ("small-0",)


def test_a_cordoned_node_is_not_room() -> None:
    cordoned = node("n1", unschedulable=True)
    outcome = run([profile()], nodes=[cordoned])
    assert outcome.placements == ("small-0",)


def test_prefer_no_schedule_taints_do_not_keep_pods_off() -> None:
    soft = node("n1", taints=[NodeTaint("soft", "", "PreferNoSchedule")])
    assert run([profile()], nodes=[soft]).placements == ("n1",)


# -- node selector and required node affinity ---------------------------------------------


def test_a_node_selector_matching_the_template_labels_opens_a_node() -> None:
    ssd = pool(template=nodepool_api.NodeTemplate(labels={"disk": "ssd"}))
    selector = {"disk": "ssd", wellknown.POOL_LABEL: "small", "kubernetes.io/os": "linux"}
    outcome = run([profile(nodeSelector=selector)], nodes=[node("n1")], pools=[ssd])
    assert outcome.placements == ("small-0",)


def test_a_node_selector_no_pool_matches_is_unfit_and_named() -> None:
    outcome = run([profile(nodeSelector={"disk": "hdd"})])
    assert outcome.unfit == {0: "small: nodeSelector disk=hdd does not match"}


def node_affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


def name_is(*names: str) -> dict[str, Any]:
    return {"matchFields": [{"key": "metadata.name", "operator": "In", "values": list(names)}]}


def test_required_node_affinity_picks_the_node_whose_labels_match() -> None:
    term = {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}
    nodes = [node("n1"), node("n2", labels={"disk": "ssd"})]
    outcome = run([profile(affinity=node_affinity(term))], nodes=nodes)
    assert outcome.placements == ("n2",)


def test_required_node_affinity_no_pool_matches_is_unfit() -> None:
    term = {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}
    outcome = run([profile(affinity=node_affinity(term))])
    assert outcome.unfit == {0: "small: required node affinity does not match"}


def test_match_fields_on_the_node_name_pins_a_pod_to_that_node() -> None:
    outcome = run([profile(affinity=node_affinity(name_is("n2")))], nodes=[node("n1"), node("n2")])
    assert outcome.placements == ("n2",)


def test_match_fields_naming_a_full_node_never_opens_a_new_one() -> None:
    full = node("n1", running=[profile(cpu="4")])
    outcome = run([profile(affinity=node_affinity(name_is("n1")))], nodes=[full])
    assert outcome.pools["small"].wanted_nodes == 0
    assert 0 in outcome.unfit


def test_match_fields_naming_the_next_node_of_the_pool_opens_it() -> None:
    outcome = run([profile(affinity=node_affinity(name_is("small-0")))])
    assert outcome.placements == ("small-0",)


def test_a_hostname_node_selector_pins_the_pod() -> None:
    outcome = run([profile(nodeSelector={HOST: "n2"})], nodes=[node("n1"), node("n2")])
    assert outcome.placements == ("n2",)


# -- taints and tolerations ------------------------------------------------------------------


def tainted_pool() -> PoolTemplate:
    taint = nodepool_api.Taint(key="team", value="ml", effect="NoSchedule")
    return pool(template=nodepool_api.NodeTemplate(cpu="4", memory="16Gi", taints=(taint,)))


def test_a_pool_taint_the_pod_does_not_tolerate_makes_it_unfit_and_named() -> None:
    outcome = run([profile()], pools=[tainted_pool()])
    assert outcome.unfit == {0: "small: taint team=ml:NoSchedule is not tolerated"}


def test_a_tolerating_pod_opens_a_node_of_the_tainted_pool() -> None:
    toleration = [{"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]
    outcome = run([profile(tolerations=toleration)], pools=[tainted_pool()])
    assert outcome.placements == ("small-0",)


# -- inter-pod affinity and anti-affinity ------------------------------------------------------


def web(**kw: Any) -> PodProfile:
    return profile(labels={"app": "web"}, **kw)


def test_anti_affinity_over_hostname_puts_each_replica_on_its_own_node() -> None:
    replica = web(cpu="100m", affinity=pod_terms("podAntiAffinity", HOST))
    outcome = run([replica] * 3)
    assert counts(outcome) == {"small-0": 1, "small-1": 1, "small-2": 1}


def test_anti_affinity_keeps_a_pod_off_a_node_where_a_matching_pod_runs() -> None:
    running = node("n1", running=[web(cpu="100m")])
    outcome = run([profile(affinity=pod_terms("podAntiAffinity", HOST))], nodes=[running])
    assert outcome.placements == ("small-0",)


def test_a_running_pods_anti_affinity_keeps_matching_pods_off_its_node() -> None:
    guard = profile(labels={"app": "guard"}, affinity=pod_terms("podAntiAffinity", HOST))
    outcome = run([web()], nodes=[node("n1", running=[guard])])
    assert outcome.placements == ("small-0",)


def test_anti_affinity_of_another_namespace_does_not_apply_by_default() -> None:
    running = node("n1", running=[profile(labels={"app": "web"}, namespace="other")])
    outcome = run([profile(affinity=pod_terms("podAntiAffinity", HOST))], nodes=[running])
    assert outcome.placements == ("n1",)


def test_anti_affinity_over_zone_allows_one_replica_per_zone_and_the_rest_are_unfit() -> None:
    replica = web(cpu="100m", affinity=pod_terms("podAntiAffinity", ZONE))
    outcome = run([replica] * 3, pools=[pool(template=zoned("a", "b"))])
    assert sorted(n for n in outcome.placements if n) == ["small-0", "small-1"]
    assert list(outcome.unfit) == [2]
    assert "anti-affinity" in outcome.unfit[2]
    assert outcome.pools["small"].new_nodes == 2


def test_pod_affinity_over_hostname_goes_to_the_node_running_the_matching_pod() -> None:
    db = profile(labels={"app": "db"}, cpu="100m")
    nodes = [node("n1"), node("n2", running=[db])]
    outcome = run([profile(affinity=pod_terms("podAffinity", HOST, app="db"))], nodes=nodes)
    assert outcome.placements == ("n2",)


def test_pod_affinity_over_hostname_never_opens_a_node_when_the_match_is_full() -> None:
    db = profile(labels={"app": "db"}, cpu="4")
    outcome = run(
        [profile(affinity=pod_terms("podAffinity", HOST, app="db"))],
        nodes=[node("n1", running=[db])],
    )
    assert outcome.pools["small"].wanted_nodes == 0
    assert "pod affinity" in outcome.unfit[0]


def test_pod_affinity_to_pods_that_do_not_exist_is_unfit() -> None:
    outcome = run([profile(affinity=pod_terms("podAffinity", HOST, app="db"))])
    assert "pod affinity" in outcome.unfit[0]


def test_the_first_pods_of_a_self_affine_group_may_go_anywhere_and_stay_together() -> None:
    outcome = run([web(cpu="1", affinity=pod_terms("podAffinity", HOST))] * 3)
    assert counts(outcome) == {"small-0": 3}


def test_pod_affinity_over_zone_opens_a_node_in_the_zone_of_the_match() -> None:
    db = profile(labels={"app": "db"}, cpu="4")
    in_b = node("n-b", labels={ZONE: "b"}, running=[db])
    outcome = run(
        [profile(affinity=pod_terms("podAffinity", ZONE, app="db"))],
        nodes=[in_b],
        pools=[pool(template=zoned("a", "b"))],
    )
    # One node, opened in zone b, where the match is.
    assert outcome.placements == ("small-0",)
    assert outcome.pools["small"].new_nodes == 1
    assert outcome.pools["small"].new_node_zones == {"b": 1}


# -- topology spread (DoNotSchedule) -----------------------------------------------------------


def test_hostname_spread_spreads_over_existing_nodes_with_room() -> None:
    replica = web(cpu="100m", topologySpreadConstraints=[spread_of(HOST)])
    outcome = run([replica] * 4, nodes=[node("n1"), node("n2")])
    assert counts(outcome) == {"n1": 2, "n2": 2}


def test_hostname_spread_comes_back_to_the_first_node_once_every_node_has_a_replica() -> None:
    # The first node refused the second replica; once each node holds one, it may take the
    # third again (the smallest count rose), as kube-scheduler would place them.
    replica = web(cpu="100m", topologySpreadConstraints=[spread_of(HOST)])
    outcome = run([replica] * 4, nodes=[node("n1"), node("n2")])
    assert outcome.placements == ("n1", "n2", "n1", "n2")


def test_hostname_spread_max_skew_caps_the_pods_per_node_against_an_emptier_node() -> None:
    full = node("n2", running=[profile(cpu="4")])  # a domain with no replica, and no room
    replica = web(cpu="100m", topologySpreadConstraints=[spread_of(HOST, max_skew=2)])
    outcome = run([replica] * 3, nodes=[node("n1"), full])
    assert outcome.placements[:2] == ("n1", "n1")
    assert outcome.placements[2] not in ("n1", "n2")


def test_min_domains_spreads_replicas_over_that_many_new_nodes() -> None:
    replica = web(cpu="100m", topologySpreadConstraints=[spread_of(HOST, minDomains=3)])
    outcome = run([replica] * 3)
    assert counts(outcome) == {"small-0": 1, "small-1": 1, "small-2": 1}


def test_zone_spread_opens_nodes_in_the_zones_that_are_behind() -> None:
    in_a = node("n-a", labels={ZONE: "a"}, running=[web(cpu="4")])
    in_b = node("n-b", labels={ZONE: "b"}, running=[profile(cpu="4")])
    replica = web(cpu="1", topologySpreadConstraints=[spread_of(ZONE)])
    outcome = run([replica], nodes=[in_a, in_b], pools=[pool(template=zoned("a", "b"))])
    # zone a has one replica, zone b none: the next one goes to a new node in zone b.
    assert outcome.placements == ("small-0",)
    assert outcome.pools["small"].new_node_zones == {"b": 1}


def test_zone_spread_goes_round_the_zones_pod_after_pod() -> None:
    # Round after round the same three nodes take one replica each (the simulation places
    # the repeated rounds at once); once n-b is full, zones a and c take one more each as
    # far as maxSkew allows, and the next replica opens a node in zone b.
    nodes = [node(f"n-{z}", labels={ZONE: z}, cpu=1000 if z == "b" else 4000) for z in "abc"]
    replica = web(cpu="100m", topologySpreadConstraints=[spread_of(ZONE)])
    outcome = run([replica] * 33, nodes=nodes, pools=[pool(template=zoned("a", "b", "c"))])
    assert outcome.placements[:30] == ("n-a", "n-b", "n-c") * 10
    assert counts(outcome)["n-b"] == 10
    assert outcome.placements[30:] == ("n-a", "n-c", "small-0")
    assert outcome.pools["small"].new_node_zones == {"b": 1}


def test_zone_spread_within_one_zone_is_no_constraint() -> None:
    in_a = node("n-a", labels={ZONE: "a"}, running=[web(cpu="4")])
    replica = web(cpu="1", topologySpreadConstraints=[spread_of(ZONE)])
    outcome = run([replica], nodes=[in_a], pools=[pool(template=zoned("a", "b"))])
    # As kube-scheduler counts it: zone a is the only domain any node offers yet.
    assert outcome.placements == ("small-0",)


def test_zone_spread_with_min_domains_uses_every_zone() -> None:
    replica = web(cpu="100m", topologySpreadConstraints=[spread_of(ZONE, minDomains=3)])
    outcome = run([replica] * 3, pools=[pool(template=zoned("a", "b", "c"))])
    assert counts(outcome) == {"small-0": 1, "small-1": 1, "small-2": 1}


def test_a_spread_over_a_key_no_node_has_is_unfit() -> None:
    replica = web(topologySpreadConstraints=[spread_of("example.com/rack")])
    outcome = run([replica])
    assert "topology spread" in outcome.unfit[0]


def test_schedule_anyway_spread_does_not_decide_feasibility() -> None:
    soft = spread_of(HOST, whenUnsatisfiable="ScheduleAnyway", minDomains=None)
    outcome = run([web(cpu="100m", topologySpreadConstraints=[soft])] * 3)
    assert counts(outcome) == {"small-0": 3}


def stateful_set(replicas: int, **spec: Any) -> list[PodProfile]:
    """Replicas of a StatefulSet ``web``: each with its own pod-name label."""
    return [
        profile(cpu="500m", labels={"app": "web", POD_NAME: f"web-{i}"}, **spec)
        for i in range(replicas)
    ]


def test_labels_no_selector_reads_do_not_change_where_pods_go() -> None:
    spread = {"topologySpreadConstraints": [spread_of(ZONE)]}
    shared = web(cpu="500m", **spread)
    zones = [pool(template=zoned("a", "b", "c"))]
    unique = run(stateful_set(30, **spread), pools=zones)
    equal = run([shared] * 30, pools=zones)
    assert unique.placements == equal.placements
    assert unique.pools["small"].new_nodes == equal.pools["small"].new_nodes == 6


def test_a_label_an_anti_affinity_reads_still_tells_pods_apart() -> None:
    guard = {"labelSelector": {"matchLabels": {POD_NAME: "web-0"}}, "topologyKey": HOST}
    keeper = profile(
        cpu="100m",
        affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [guard]}},
    )
    outcome = run(stateful_set(2), nodes=[node("n1", running=[keeper])])
    assert outcome.placements == ("small-0", "n1")


# -- host ports ------------------------------------------------------------------------------


def test_two_pods_with_one_host_port_never_share_a_node() -> None:
    outcome = run([profile(cpu="100m", ports=[8080])] * 2)
    assert counts(outcome) == {"small-0": 1, "small-1": 1}


def test_a_host_port_taken_on_an_existing_node_sends_the_pod_elsewhere() -> None:
    taken = node("n1", running=[profile(cpu="100m", ports=[8080])])
    assert run([profile(ports=[8080])], nodes=[taken]).placements == ("small-0",)
    assert run([profile(ports=[9090])], nodes=[taken]).placements == ("n1",)


def test_a_daemonset_host_port_is_taken_on_every_new_node() -> None:
    outcome = run([profile(ports=[9100])], daemon_sets=[daemon(cpu="10m", ports=[9100])])
    assert "host port 9100/TCP" in outcome.unfit[0]


# -- several pools ------------------------------------------------------------------------------


def test_the_pool_with_the_highest_weight_wins() -> None:
    pools = [pool("a-heavy"), pool("b-preferred", weight=10)]
    outcome = run([profile()], pools=pools)
    assert outcome.placements == ("b-preferred-0",)
    assert outcome.pools["a-heavy"].wanted_nodes == 0
    assert outcome.pools["b-preferred"].new_nodes == 1


def test_at_equal_weight_the_pool_with_least_waste_wins() -> None:
    big = pool("big", template=nodepool_api.NodeTemplate(cpu="16", memory="64Gi"))
    small = pool("small")
    outcome = run([profile(cpu="3", memory="12Gi")], pools=[big, small])
    assert outcome.placements == ("small-0",)


def test_at_equal_weight_and_waste_the_name_decides() -> None:
    outcome = run([profile()], pools=[pool("zeta"), pool("alpha")])
    assert outcome.placements == ("alpha-0",)


def test_each_pod_goes_to_one_pool_only() -> None:
    outcome = run([profile()] * 12, pools=[pool("one"), pool("two")])
    one, two = outcome.pools["one"], outcome.pools["two"]
    assert (one.new_nodes, two.new_nodes) == (3, 0)
    assert not set(one.hosted) & set(two.hosted)


def test_a_pool_whose_autoscaler_watches_other_namespaces_does_not_grow_for_the_pod() -> None:
    pools = [pool("theirs", weight=10, namespaces=frozenset({"other"})), pool("ours")]
    assert run([profile()], pools=pools).placements == ("ours-0",)
    outcome = run([profile()], pools=pools[:1])
    assert outcome.unfit == {0: "no Autoscaler plans for its namespace"}


def test_without_pools_a_pod_that_fits_nowhere_is_told_each_nodes_refusal_most_given_first() -> (
    None
):
    """Consolidation's proof: no pool, only the nodes that stay."""
    full = [profile(cpu="4")]
    nodes = [
        node("a", running=full),
        node("b", running=full),
        node("c", taints=[NodeTaint("dedicated", "db", "NoSchedule")]),
    ]
    outcome = run([profile()], nodes=nodes, pools=[])
    assert outcome.unfit == {
        0: "2 nodes: not enough free cpu; 1 node: taint dedicated=db:NoSchedule is not tolerated"
    }
    assert run([profile()], nodes=[], pools=[]).unfit == {0: "no node is left"}


def test_without_pools_at_most_three_refusals_are_told() -> None:
    nodes = [node(f"n{i}", labels={"tier": str(i)}) for i in range(5)]
    pinned = profile(nodeSelector={"tier": "none"})
    [told] = run([pinned], nodes=nodes, pools=[]).unfit.values()
    assert told == "5 nodes: nodeSelector tier=none does not match"
    big = [node(f"n{i}", cpu=1000 * i) for i in range(1, 6)]
    [told] = run([profile(cpu="9")], nodes=big, pools=[]).unfit.values()
    assert told == (
        "1 node: requests 9000 of cpu, a node offers 1000; "
        "1 node: requests 9000 of cpu, a node offers 2000; "
        "1 node: requests 9000 of cpu, a node offers 3000; 2 more refusals"
    )


def test_a_pool_that_cannot_host_the_pod_leaves_it_to_one_that_can() -> None:
    pools = [tainted_pool(), pool("plain")]
    assert run([profile()], pools=pools).placements == ("plain-0",)


# -- maxNodes -----------------------------------------------------------------------------


def test_max_nodes_limits_new_nodes_and_the_rest_is_wanted() -> None:
    outcome = run([profile()] * 10, pools=[pool(headroom=2)])
    up = outcome.pools["small"]
    assert (up.new_nodes, up.wanted_nodes) == (2, 3)
    assert up.triggering == tuple(range(8))
    assert up.hosted == tuple(range(10))


def test_a_pool_at_max_nodes_gives_way_to_a_pool_with_headroom() -> None:
    pools = [pool("full", weight=10, headroom=0), pool("roomy")]
    outcome = run([profile()], pools=pools)
    assert outcome.placements == ("roomy-0",)
    assert outcome.pools["full"].wanted_nodes == 0


# -- zones of new nodes -------------------------------------------------------------------


def test_new_nodes_without_a_zone_need_keep_the_pool_balanced() -> None:
    replica = web(cpu="100m", affinity=pod_terms("podAntiAffinity", HOST))
    template = pool(template=zoned("a", "b", "c"), first=5, counts={"a": 2, "b": 1})
    outcome = run([replica] * 4, pools=[template])
    assert outcome.placements == ("small-5", "small-6", "small-7", "small-8")
    # c (none), b (one), c, then every zone holds two: a, the first in the template.
    assert outcome.pools["small"].new_node_zones == {"a": 1, "b": 1, "c": 2}


def test_one_zone_pinned_pod_on_an_empty_three_zone_pool_opens_one_node_in_its_zone() -> None:
    outcome = run([profile(nodeSelector={ZONE: "c"})], pools=[pool(template=zoned("a", "b", "c"))])
    assert outcome.placements == ("small-0",)
    assert outcome.pools["small"].new_nodes == 1
    assert outcome.pools["small"].new_node_zones == {"c": 1}


def test_a_zone_pinned_pod_fits_a_booting_node_of_its_zone_and_opens_none() -> None:
    template = pool(template=zoned("a", "b", "c"), in_flight=1, booting=("c",))
    outcome = run([profile(cpu="1", nodeSelector={ZONE: "c"})], pools=[template])
    assert outcome.placements == ("small-0",)
    assert outcome.pools["small"].new_nodes == 0


def test_a_booting_node_in_another_zone_does_not_host_a_zone_pinned_pod() -> None:
    template = pool(template=zoned("a", "b", "c"), in_flight=1, booting=("a",))
    outcome = run([profile(cpu="1", nodeSelector={ZONE: "c"})], pools=[template])
    assert outcome.placements == ("small-1",)
    assert outcome.pools["small"].new_node_zones == {"c": 1}


def test_zone_pinned_pods_open_only_nodes_in_their_zones() -> None:
    pinned = [profile(cpu="3", nodeSelector={ZONE: z}) for z in ("b", "b", "c")]
    outcome = run([profile(cpu="3"), *pinned], pools=[pool(template=zoned("a", "b", "c"))])
    assert outcome.pools["small"].new_nodes == 4
    assert outcome.pools["small"].new_node_zones == {"a": 1, "b": 2, "c": 1}


def test_a_zone_pinned_pod_uses_room_on_a_node_its_zone_gained_after_a_larger_one() -> None:
    # The pool's nodes are one room tree; it held no zone-c node when the larger pinned
    # pod was judged, and the smaller one, with equal rules, must see the one opened since.
    anywhere = profile(cpu="3")
    large, small = (profile(cpu=cpu, nodeSelector={ZONE: "c"}) for cpu in ("3", "500m"))
    outcome = run([anywhere, large, small], pools=[pool(template=zoned("a", "b", "c"))])
    assert outcome.placements == ("small-0", "small-1", "small-1")
    assert outcome.pools["small"].new_node_zones == {"a": 1, "c": 1}


# -- what the simulation cannot judge ----------------------------------------------------------


def test_a_namespace_selector_with_labels_is_unfit_with_a_reason() -> None:
    terms = pod_terms("podAntiAffinity", HOST, namespaceSelector=UNSUPPORTED_NAMESPACE_SELECTOR)
    outcome = run([profile(affinity=terms)])
    assert outcome.unfit == {
        0: "a namespaceSelector with labels (namespace labels are not simulated)"
    }
    assert outcome.pools["small"].wanted_nodes == 0
