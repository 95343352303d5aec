"""The simulation sees the cluster as it is: nodes of no pool, names others hold, taints as
nodes carry them (booting, dead, startup) and the platform a template sets."""

from __future__ import annotations

from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.runtime.client import Object
from unit.autoscaler.planning_world import (
    SPEC,
    autoscaler,
    names,
    node,
    observe,
    observer,
    pod,
    pool,
)
from unit.autoscaler.zonal_pools import zonal_pool


def system_node(name: str, *, zone: str | None = None, **labels: str) -> Object:
    """A Node of no pool: a system node, hand-made or another tool's."""
    found = node(name)
    found["metadata"]["labels"] = {**labels, **({wellknown.ZONE_LABEL: zone} if zone else {})}
    return found


def affinity(kind: str, app: str, topology: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": topology}
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


async def test_a_node_of_no_pool_hosts_pods_and_is_never_grown_nor_unneeded() -> None:
    seen = await observe(
        observer(
            nodes=[system_node("system-0")],
            pods=[pod("waiting", cpu="2")],
            pools=[pool(target=0)],
        )
    )
    assert names(seen.fitting) == []  # placed on the system node: no pool's pod
    assert seen.up.new_nodes == 0
    assert seen.unfit == ()
    assert seen.unneeded == ()
    assert (seen.pool.ready, seen.pool.target) == (0, 0)


async def test_pod_affinity_to_a_pod_on_a_system_node_picks_the_pool_zone_it_is_in() -> None:
    database = pod("db", node="system-0", labels={"app": "db"})
    database["metadata"]["labels"] = {"app": "db"}
    full = pod("filler", node="system-0", cpu="3")  # the system node has no room left
    web = pod("web", spec={"affinity": affinity("podAffinity", "db", wellknown.ZONE_LABEL)})
    seen = await observe(
        observer(
            nodes=[system_node("system-0", zone="b")],
            pods=[database, full, web],
            pools=[zonal_pool(zones=("a", "b", "c"))],
        )
    )
    assert names(seen.fitting) == ["web"]
    # One node, in zone b where the database is: no filler in another zone.
    assert seen.up.new_nodes == 1
    assert seen.up.new_node_zones == {"b": 1}


async def test_pod_anti_affinity_to_a_pod_on_a_system_node_avoids_its_zone() -> None:
    database = pod("db", node="system-0")
    database["metadata"]["labels"] = {"app": "db"}
    web = pod("web", spec={"affinity": affinity("podAntiAffinity", "db", wellknown.ZONE_LABEL)})
    o = observer(
        nodes=[system_node("system-0", zone="a")],
        pods=[database, web],
        pools=[zonal_pool(zones=("a",))],
    )
    seen = await observe(o)
    assert names(seen.fitting) == []
    [(unfit, why)] = seen.unfit
    assert unfit["metadata"]["name"] == "web"
    assert "anti-affinity" in why


async def test_a_name_held_by_a_node_of_no_pool_is_skipped_by_the_predicted_names() -> None:
    o = observer(
        nodes=[system_node("small-0")],  # a hand-made Node holds the pool's first name
        pods=[pod("big", cpu="3500m"), pod("big2", cpu="3500m")],
        pools=[zonal_pool(zones=("a", "b"))],
    )
    world = o.inputs()
    [template] = world.templates
    assert [template.upcoming(k, "a")[0] for k in range(2)] == ["small-1", "small-2"]
    # The zone is the one chosen for the node, whatever its name.
    assert template.upcoming(0, "b")[1][wellknown.ZONE_LABEL] == "b"
    assert template.zoning.names == ("a", "b")


def tainted(found: Object, *taints: tuple[str, str]) -> Object:
    found["spec"]["taints"] = [{"key": k, "effect": e} for k, e in taints]
    return found


async def test_not_ready_taints_count_on_an_initialised_node_and_not_on_a_booting_one() -> None:
    dead = tainted(node("small-0", ready=False), ("node.kubernetes.io/unreachable", "NoSchedule"))
    booting = tainted(
        node("small-1", ready=False),
        ("node.kubernetes.io/not-ready", "NoSchedule"),
        (wellknown.UNREGISTERED_TAINT_KEY, "NoSchedule"),
    )
    world = observer(nodes=[dead, booting], pools=[pool(target=2)]).inputs()
    taints = {n.name: [t.key for t in n.taints] for n in world.nodes}
    assert taints == {"small-0": ["node.kubernetes.io/unreachable"], "small-1": []}


async def test_a_not_ready_taint_left_on_a_node_that_reports_ready_is_ignored() -> None:
    # The kubelet says Ready and the unregistered taint is gone, but the node-lifecycle
    # controller has not removed its not-ready taint yet: the node is room within seconds,
    # and counting the taint would ask for a node per pod meanwhile.
    lingering = tainted(node("small-0"), ("node.kubernetes.io/not-ready", "NoSchedule"))
    world = observer(nodes=[lingering], pools=[pool(target=1)]).inputs()
    assert [list(n.taints) for n in world.nodes] == [[]]


async def test_a_node_no_kubelet_has_reported_for_is_booting() -> None:
    fresh = tainted(node("small-0"), ("node.kubernetes.io/not-ready", "NoSchedule"))
    fresh["status"]["conditions"] = []
    world = observer(nodes=[fresh], pools=[pool(target=1)]).inputs()
    assert [list(n.taints) for n in world.nodes] == [[]]


async def test_startup_taints_are_ignored_on_the_pools_nodes_and_its_new_ones() -> None:
    agent = nodepool_api.Taint(key="example.com/agent-not-ready", effect="NoExecute")
    starting = tainted(node("small-0"), ("example.com/agent-not-ready", "NoExecute"))
    o = observer(
        nodes=[starting],
        pods=[pod(f"p{i}", cpu="2") for i in range(3)],
        pools=[zonal_pool(target=1, startup_taints=(agent,))],
    )
    seen = await observe(o)
    # Two pods on small-0 (its startup taint goes), one on a single new node.
    assert (len(seen.fitting), seen.up.new_nodes) == (3, 1)
    # The same taint on a node of no pool is the scheduler's to judge.
    other = tainted(system_node("system-0"), ("example.com/agent-not-ready", "NoExecute"))
    world = observer(nodes=[other], pools=[zonal_pool(startup_taints=(agent,))]).inputs()
    assert [t.key for n in world.nodes for t in n.taints] == ["example.com/agent-not-ready"]


async def test_an_arm64_pool_hosts_arm64_pods_and_an_amd64_pool_does_not() -> None:
    arm = zonal_pool("arm", labels={"kubernetes.io/arch": "arm64"})
    amd = zonal_pool("small")
    wants_arm = pod("arm-app", spec={"nodeSelector": {"kubernetes.io/arch": "arm64"}})
    o = observer(
        pods=[wants_arm],
        pools=[amd, arm],
        autoscalers=[
            autoscaler("nas", namespaces=["apps"]),
            autoscaler("nas-arm", pool_name="arm"),
        ],
    )
    seen = await observe(o)
    assert names(seen.fitting) == []
    arm_spec = SPEC.__class__(node_pool_name="arm")
    seen_arm = await observe(o, "nas-arm", arm_spec)
    assert names(seen_arm.fitting) == ["arm-app"]
