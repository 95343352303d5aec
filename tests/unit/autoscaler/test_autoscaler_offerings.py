"""A pool with requirements planned as catalog offerings (``simulation.offering_plan``):
the pending pods go on the cheapest nodes that hold them, each pod allowed only offerings
its rules accept, and the ScaleRequest names those offerings (``spec.newNodeOfferings``)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest

import catalogs
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.offerings import OfferingsCatalog
from nodepool_operator.runtime.clock import FakeClock
from unit.autoscaler.catalogs import Sells, requirements, small_catalog
from unit.autoscaler.reconcile_world import POOL, World


def with_requirements(world: World, *, catalog_known: bool = True) -> None:
    pool = world.pools.get(POOL)
    assert pool is not None
    body = copy.deepcopy(pool)
    body["spec"]["requirements"] = requirements()
    world.pools.put(world._stamp(body))
    if catalog_known:
        world.planner.plan_maker.offerings_catalog = OfferingsCatalog(
            Sells(small_catalog()), clock=FakeClock()
        )


def offerings_of(request: dict[str, Any]) -> dict[tuple[str, str], int]:
    return {(o["instanceType"], o["zone"]): o["count"] for o in request["spec"]["newNodeOfferings"]}


async def test_pods_go_on_the_cheapest_offerings_that_hold_them(world: World) -> None:
    with_requirements(world)
    world.pod("big", cpu="30")
    for i in range(20):
        world.pod(f"small-{i}", cpu="250m")

    await world.reconcile()

    [request] = world.api.made("scalerequests")
    # 30 cpu needs a c32 (the only type that holds it); its 2 cpu left take 8 of the
    # small pods (250m, 1Gi each), and the other 12 fill three c2 (4 each by memory):
    # 1.30 + 3 x 0.10 = 1.60/h, against 1.66 with a c8, all in the cheaper zone.
    assert offerings_of(request) == {("c32", "z-a"): 1, ("c2", "z-a"): 3}
    assert request["spec"]["targetNodes"] == 4
    assert request["spec"].get("newNodeZones") in (None, {})


async def test_small_pods_alone_get_the_cheapest_type_not_the_template_shape(
    world: World,
) -> None:
    with_requirements(world)
    for i in range(6):
        world.pod(f"p{i}", cpu="1500m")

    await world.reconcile()

    [request] = world.api.made("scalerequests")
    # 6 x 1.5 cpu (1Gi each): a c2 holds one (0.10 each, 0.60 for six), a c8 five (7.5
    # of 8 cpu), a c32 all six (1.30). Cheapest: a c8 and a c2, 0.46/h in z-a; the
    # template's 4-cpu shape (two per node) plays no part.
    assert offerings_of(request) == {("c8", "z-a"): 1, ("c2", "z-a"): 1}
    assert request["spec"]["targetNodes"] == 2


async def test_a_pod_no_offering_holds_is_unfit_and_gets_no_node(world: World) -> None:
    with_requirements(world)
    world.pod("huge", cpu="40")

    await world.reconcile()

    assert world.api.made("scalerequests") == []
    told = world.api.events("NotTriggerScaleUp")
    assert [e["involvedObject"]["name"] for e in told] == ["huge"]
    # Each type is judged at its own shape, the largest too.
    assert (
        f"{POOL}/c32/on-demand: requests 40000 of cpu, a node offers 32000" in (told[0]["message"])
    ), told[0]["message"]


async def test_a_pod_pinned_to_a_type_gets_that_type(world: World) -> None:
    with_requirements(world)
    pod = world.pod("pinned", cpu="500m")
    body = copy.deepcopy(pod)
    body["spec"]["nodeSelector"] = {wellknown.INSTANCE_TYPE_LABEL: "c8"}
    world.pods.put(body)

    await world.reconcile()

    [request] = world.api.made("scalerequests")
    assert offerings_of(request) == {("c8", "z-a"): 1}


async def test_without_a_catalog_the_pool_is_not_grown(world: World) -> None:
    with_requirements(world, catalog_known=False)
    world.pod("p0")

    await world.reconcile()

    assert world.api.made("scalerequests") == []
    [told] = world.api.events("NotTriggerScaleUp")
    assert "has requirements" in told["message"]


async def test_without_a_catalog_a_pod_larger_than_the_template_waits_for_the_pool(
    world: World,
) -> None:
    # The template's shape (4 cpu) is not what the pool launches: a pod of 8 cpu is the
    # pool's, waiting, not one that no pool can host.
    with_requirements(world, catalog_known=False)
    world.pod("eight", cpu="8")

    await world.reconcile()

    assert world.api.made("scalerequests") == []
    [told] = world.api.events("NotTriggerScaleUp")
    assert f"NodePool {POOL} cannot grow: it has requirements" in told["message"]


def _in_flight(
    world: World, *, offerings: list[dict[str, Any]] | None, launched: bool = False
) -> None:
    """The pool at target 1 with no Node yet; with ``offerings``, the Applied request that
    named them (``launched``: marked zonesServed, every VM it named made)."""
    pool = world.pools.get(POOL)
    assert pool is not None
    body = copy.deepcopy(pool)
    body["spec"]["targetNodes"] = 1
    world.pools.put(world._stamp(body))
    if offerings is None:
        return
    world.requests.put(
        world._stamp(
            {
                "apiVersion": "autoscaling.nodepool.dev/v1alpha1",
                "kind": "ScaleRequest",
                "metadata": {
                    "name": "earlier",
                    "creationTimestamp": "2020-01-01T00:00:00Z",
                    "labels": {wellknown.POOL_LABEL: POOL},
                },
                "spec": {
                    "nodePoolName": POOL,
                    "targetNodes": 1,
                    "basedOnTargetNodes": 0,
                    "newNodeOfferings": offerings,
                },
                "status": {
                    "phase": "Applied",
                    "appliedTargetNodes": 1,
                    **({"zonesServed": True} if launched else {}),
                },
            }
        )
    )


@pytest.mark.parametrize("launched", [False, True])
async def test_a_vm_in_flight_is_the_offering_its_request_named(
    world: World, launched: bool
) -> None:
    # Launched (zonesServed) is not registered: the request still says what the VM is.
    with_requirements(world)
    _in_flight(
        world,
        offerings=[{"instanceType": "c32", "zone": "z-a", "capacityType": "on-demand", "count": 1}],
        launched=launched,
    )
    world.pod("big", cpu="30")

    await world.reconcile()

    # The c32 on its way holds it: nothing more is asked, and the pod is not told it waits.
    assert world.api.made("scalerequests") == []
    assert world.api.events("NotTriggerScaleUp") == []


async def test_a_vm_in_flight_with_no_offering_named_is_the_cheapest(world: World) -> None:
    with_requirements(world)
    _in_flight(world, offerings=None)
    world.pod("big", cpu="30")

    await world.reconcile()

    # What is on its way is the cheapest offering (a c2): the pod needs a c32 of its own.
    [request] = world.api.made("scalerequests")
    assert offerings_of(request) == {("c32", "z-a"): 1}
    assert request["spec"]["targetNodes"] == 2


async def test_the_room_a_daemon_set_takes_on_every_node_is_kept(world: World) -> None:
    with_requirements(world)
    container = {"name": "d", "resources": {"requests": {"cpu": "1"}}}
    world.daemon_sets.put(
        {
            "metadata": {"name": "ds", "namespace": "kube-system", "uid": "ds-uid"},
            "spec": {"template": {"spec": {"containers": [container]}}},
        }
    )
    for i in range(6):
        world.pod(f"p{i}", cpu="1500m")

    await world.reconcile()

    # With 1 cpu of every node the DaemonSet's, a c2 holds none of them and a c8 four:
    # two c8 (0.72/h), not the c8 and c2 they would need without it.
    [request] = world.api.made("scalerequests")
    assert offerings_of(request) == {("c8", "z-a"): 2}


async def test_pods_that_must_not_share_a_node_keep_a_node_each(world: World) -> None:
    with_requirements(world)
    for i in range(3):
        pod = world.pod(f"apart-{i}", cpu="500m", app="apart")
        body = copy.deepcopy(pod)
        body["metadata"]["labels"] = {"app": "apart"}
        body["spec"]["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": "apart"}},
                        "topologyKey": wellknown.HOSTNAME_LABEL,
                    }
                ]
            }
        }
        world.pods.put(body)

    await world.reconcile()

    # Packed by price alone they would share one c2; anti-affinity keeps them apart.
    [request] = world.api.made("scalerequests")
    assert request["spec"]["targetNodes"] == 3
    assert sum(offerings_of(request).values()) == 3


#: Two shape families, cpu-heavy (2 GiB per cpu) and memory-heavy (8 GiB per cpu).
MIXED_TYPES = (
    ("c2", 2, 4, 0.10),
    ("c8", 8, 16, 0.36),
    ("c32", 32, 64, 1.30),
    ("r2", 2, 16, 0.15),
    ("r8", 8, 64, 0.55),
)
#: Pods (cpu, memory) the priced plan packs on two c8 (5 + 3 cpu; 7 + 0.5 + 0.5 cpu) and
#: an r2 (the 12Gi pod), $0.87/h. The simulation fills the VMs on their way first-fit in
#: its own order, and then one pod is left over.
MIXED_PODS = (
    ("5", "512Mi"),
    ("3", "1Gi"),
    ("7", "6Gi"),
    ("1500m", "12Gi"),
    ("500m", "3Gi"),
    ("500m", "1Gi"),
)


def _mixed_pods(world: World, pods: Sequence[tuple[str, str]] = MIXED_PODS) -> None:
    pool = world.pools.get(POOL)
    assert pool is not None
    body = copy.deepcopy(pool)
    body["spec"]["requirements"] = catalogs.requirements(MIXED_TYPES, ("z-a",))
    world.pools.put(world._stamp(body))
    world.planner.plan_maker.offerings_catalog = OfferingsCatalog(
        Sells(catalogs.catalog_of(MIXED_TYPES, ("z-a",))), clock=FakeClock()
    )
    for n, (cpu, memory) in enumerate(pods):
        pod = copy.deepcopy(world.pod(f"mixed-{n}", cpu=cpu))
        pod["spec"]["containers"][0]["resources"]["requests"]["memory"] = memory
        world.pods.put(world._stamp(pod))


def _asked_for(world: World, request: dict[str, Any]) -> None:
    """The request Applied and the pool at its target, no VM registered yet."""
    world.show_requests(phase="Applied", applied=request["spec"]["targetNodes"])
    pool = world.pools.get(POOL)
    assert pool is not None
    body = copy.deepcopy(pool)
    body["spec"]["targetNodes"] = request["spec"]["targetNodes"]
    world.pools.put(world._stamp(body))


def _registered(
    world: World,
    name: str,
    *,
    kind: str = "c8",
    size: tuple[str, str] = ("8", "16Gi"),
    pods: Sequence[str] = (),
) -> None:
    """A node of ``kind`` asked for, Ready, created after the request, ``pods`` bound."""
    world.node(name)
    node = copy.deepcopy(world.nodes.get(name))
    assert node is not None
    node["metadata"]["creationTimestamp"] = "2026-11-29T10:00:05Z"
    node["metadata"]["labels"].update(
        {
            wellknown.INSTANCE_TYPE_LABEL: kind,
            wellknown.ZONE_LABEL: "z-a",
            wellknown.CAPACITY_TYPE_LABEL: "on-demand",
        }
    )
    node["status"]["allocatable"] = {"cpu": size[0], "memory": size[1], "pods": "58"}
    world.nodes.put(world._stamp(node))
    for pod_name in pods:
        pod = copy.deepcopy(world.pods.get(pod_name, namespace="apps"))
        assert pod is not None
        pod["spec"]["nodeName"] = name
        pod["status"] = {"phase": "Running"}
        world.pods.put(world._stamp(pod))


async def test_pods_pending_for_the_vms_in_flight_buy_no_more_nodes(world: World) -> None:
    _mixed_pods(world)
    await world.reconcile()
    [first] = world.api.made("scalerequests")
    assert offerings_of(first) == {("c8", "z-a"): 2, ("r2", "z-a"): 1}

    _asked_for(world, first)
    await world.reconcile()

    # The same pods pending, the same VMs on their way: they hold them as they did.
    assert world.api.made("scalerequests") == [first]
    assert world.api.events("NotTriggerScaleUp") == []


async def test_nodes_ready_before_the_pods_are_bound_buy_no_more_nodes(world: World) -> None:
    # Every node asked for registered and Ready, empty: kube-scheduler has not bound the
    # pods yet (the bench's second plan). They are the room the pods were planned on.
    _mixed_pods(world)
    await world.reconcile()
    [first] = world.api.made("scalerequests")
    _asked_for(world, first)
    _registered(world, "small-0")
    _registered(world, "small-1")
    _registered(world, "small-2", kind="r2", size=("2", "16Gi"))

    await world.reconcile()

    assert world.api.made("scalerequests") == [first]
    assert world.api.events("NotTriggerScaleUp") == []


async def test_with_one_vm_ready_the_others_still_hold_the_pods_left(world: World) -> None:
    # Planned on two c8 (5 + 3 cpu of 6Gi each; 5 + 1.5 + 0.5 cpu) and two r2 (the 12Gi
    # pods).
    pods = [("5", "6Gi"), ("1500m", "3Gi"), ("3", "6Gi"), ("500m", "1Gi"), ("5", "6Gi")]
    pods += [("1500m", "12Gi"), ("250m", "12Gi")]
    _mixed_pods(world, pods)
    await world.reconcile()
    [first] = world.api.made("scalerequests")
    assert offerings_of(first) == {("c8", "z-a"): 2, ("r2", "z-a"): 2}
    _asked_for(world, first)
    # One c8 registered and Ready, with the two pods the plan put together bound to it; a
    # c8 and the two r2 on their way for the five others.
    _registered(world, "small-0", pods=["mixed-0", "mixed-2"])

    await world.reconcile()

    assert world.api.made("scalerequests") == [first]
    assert world.api.events("NotTriggerScaleUp") == []


def _limited(world: World, limits: dict[str, str]) -> None:
    pool = world.pools.get(POOL)
    assert pool is not None
    body = copy.deepcopy(pool)
    body["spec"]["limits"] = limits
    world.pools.put(world._stamp(body))


async def test_the_plan_never_asks_past_the_pools_limits(world: World) -> None:
    with_requirements(world)
    _limited(world, {"cpu": "9"})
    for i in range(6):
        world.pod(f"p{i}", cpu="1500m")

    await world.reconcile()

    # Without limits: a c8 (five of them) and a c2 (the sixth), 10 cpu. Under 9 cpu only
    # the c8 is asked for; the pod left is told the limits keep it waiting.
    [request] = world.api.made("scalerequests")
    assert offerings_of(request) == {("c8", "z-a"): 1}
    [told] = world.api.events("NotTriggerScaleUp")
    assert told["involvedObject"]["name"] == "p5"
    assert f"{POOL}: its limits (limits.cpu=9) leave no room" in told["message"], told


async def test_the_limits_count_the_pools_nodes_and_vms_in_flight(world: World) -> None:
    with_requirements(world)
    # A c32 on its way (32 cpu) under limits of 33 cpu: no node of 2 cpu more fits.
    _limited(world, {"cpu": "33"})
    _in_flight(
        world,
        offerings=[{"instanceType": "c32", "zone": "z-a", "capacityType": "on-demand", "count": 1}],
    )
    world.pod("big", cpu="31")
    world.pod("small", cpu="1500m")

    await world.reconcile()

    # The c32 holds the big pod; the small one would need a c2, past the limits.
    assert world.api.made("scalerequests") == []
    [told] = world.api.events("NotTriggerScaleUp")
    assert told["involvedObject"]["name"] == "small"
    assert "limits.cpu=33" in told["message"]


#: "x8" is a c8 at a dearer price.
PRICED_TYPES = (("c8", 8, 16, 0.36), ("x8", 8, 16, 0.50))


def _priced_pool(world: World, name: str, kinds: list[str], *, weight: int) -> None:
    world.pool(name=name)
    pool = world.pools.get(name)
    assert pool is not None
    body = copy.deepcopy(pool)
    body["spec"]["weight"] = weight
    body["spec"]["requirements"] = [
        {"key": wellknown.INSTANCE_TYPE_LABEL, "operator": "In", "values": kinds},
        *catalogs.requirements(PRICED_TYPES, ("z-a",))[1:],
    ]
    world.pools.put(world._stamp(body))


@pytest.mark.parametrize(
    ("first_kind", "other_kind", "winner"),
    [
        # The dearer pool has the higher weight: by weight alone it would take the pods.
        ("x8", "c8", "other"),
        # At one price, the weight decides as before.
        ("c8", "c8", POOL),
    ],
)
async def test_of_two_pools_that_may_host_the_pods_the_cheaper_wins(
    world: World, first_kind: str, other_kind: str, winner: str
) -> None:
    _priced_pool(world, POOL, [first_kind], weight=10)
    _priced_pool(world, "other", [other_kind], weight=0)
    world.autoscaler("nas-other", pool="other")
    world.planner.plan_maker.offerings_catalog = OfferingsCatalog(
        Sells(catalogs.catalog_of(PRICED_TYPES, ("z-a",))), clock=FakeClock()
    )
    for i in range(3):
        world.pod(f"p{i}", cpu="2")

    await world.reconcile()

    [request] = world.api.made("scalerequests")
    assert request["spec"]["nodePoolName"] == winner
    assert offerings_of(request) == {("c8" if winner == "other" else first_kind, "z-a"): 1}
