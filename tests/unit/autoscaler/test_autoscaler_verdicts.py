"""``simulation.verdicts``: for one pod, each node's and each pool's answer, naming the
first filter that refuses (what ``nodepool-operator explain`` shows). One constraint class
per test, each judged by the same filters ``simulate`` places pods with."""

from __future__ import annotations

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler.constraints import NodeTaint
from nodepool_operator.controllers.autoscaler.simulation import verdicts
from unit.autoscaler.simulation_world import (
    UNSUPPORTED_NAMESPACE_SELECTOR,
    ZONE,
    node,
    pod_terms,
    pool,
    profile,
    spread_of,
    zoned,
)


def test_a_pod_too_large_for_the_template_is_refused_by_the_pool_and_fits_a_roomy_node() -> None:
    judged = verdicts(
        profile(cpu="6"),
        nodes=[node("big-0", pool_name="big", cpu=8000)],
        pools=[pool("small")],
    )

    assert "cpu" in (judged.pools["small"] or "")
    assert judged.nodes["big-0"].problem is None
    assert judged.nodes["big-0"].pool == "big"


def test_a_node_selector_the_template_lacks_is_named() -> None:
    judged = verdicts(
        profile(nodeSelector={"disk": "ssd"}),
        nodes=[node("ssd-0", labels={"disk": "ssd"}), node("hdd-0")],
        pools=[pool("small")],
    )

    assert judged.pools["small"] == "nodeSelector disk=ssd does not match"
    assert judged.nodes["ssd-0"].problem is None
    assert judged.nodes["hdd-0"].problem == "nodeSelector disk=ssd does not match"


def test_a_template_taint_the_pod_does_not_tolerate_is_named_and_a_toleration_lifts_it() -> None:
    gpu = pool("gpu", template=nodepool_api.NodeTemplate(
        cpu="4", memory="16Gi", pods=110,
        taints=(nodepool_api.Taint(key="gpu", value="yes", effect="NoSchedule"),),
    ))  # fmt: skip
    tolerating = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]

    refused = verdicts(profile(), nodes=[], pools=[gpu])
    tolerated = verdicts(profile(tolerations=tolerating), nodes=[], pools=[gpu])

    assert "gpu=yes:NoSchedule" in (refused.pools["gpu"] or "")
    assert tolerated.pools["gpu"] is None


def test_a_taint_on_one_existing_node_refuses_that_node_only() -> None:
    judged = verdicts(
        profile(),
        nodes=[node("a", taints=[NodeTaint("maintenance", "", "NoSchedule")]), node("b")],
        pools=[],
    )

    assert "maintenance" in (judged.nodes["a"].problem or "")
    assert judged.nodes["b"].problem is None


def test_a_host_port_in_use_refuses_the_node_and_not_a_new_one() -> None:
    judged = verdicts(
        profile(ports=[8080]),
        nodes=[node("small-0", running=[profile(ports=[8080])])],
        pools=[pool("small", first=1)],
    )

    assert "8080" in (judged.nodes["small-0"].problem or "")
    assert judged.pools["small"] is None


def test_hostname_anti_affinity_refuses_the_node_that_runs_the_other_replica() -> None:
    web = {"app": "web"}
    judged = verdicts(
        profile(labels=web, affinity=pod_terms("podAntiAffinity", wellknown.HOSTNAME_LABEL)),
        nodes=[node("small-0", running=[profile(labels=web)])],
        pools=[pool("small", first=1)],
    )

    assert "anti-affinity" in (judged.nodes["small-0"].problem or "")
    assert judged.pools["small"] is None


def test_a_zone_spread_refuses_the_fuller_zone() -> None:
    web = {"app": "web"}
    judged = verdicts(
        profile(labels=web, topologySpreadConstraints=[spread_of(ZONE)]),
        nodes=[
            node("z-a", labels={ZONE: "a"}, running=[profile(labels=web)]),
            node("z-b", labels={ZONE: "b"}),
        ],
        pools=[pool("small", template=zoned("a", "b"))],
    )

    assert "spread" in (judged.nodes["z-a"].problem or "")
    assert judged.nodes["z-b"].problem is None
    assert judged.pools["small"] is None  # its next node in zone b would do


def test_a_pool_whose_autoscaler_does_not_watch_the_namespace_says_so() -> None:
    judged = verdicts(
        profile(namespace="web"), nodes=[], pools=[pool("small", namespaces=frozenset({"batch"}))]
    )

    assert judged.pools["small"] == "its Autoscaler does not watch namespace web"


def test_a_constraint_the_simulation_cannot_judge_is_the_answer_everywhere() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": ZONE,
            "namespaceSelector": UNSUPPORTED_NAMESPACE_SELECTOR}  # fmt: skip
    affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}

    judged = verdicts(profile(affinity=affinity), nodes=[node("small-0")], pools=[pool()])

    assert judged.pools["small"] is not None
    assert "namespaceSelector" in (judged.pools["small"] or "")
    assert judged.nodes["small-0"].problem == judged.pools["small"]
