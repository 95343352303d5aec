"""What consolidation by price reads (``replacements.Replacer``): the victims' prices from
the catalog last read, nothing replaced on an unknown price or catalog, a pool at
maxNodes or a disruption budget for one node, and a replacement under way called off
when its request was refused."""

from __future__ import annotations

import dataclasses
from typing import Any

import catalogs
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.api import wellknown
from nodepool_operator.api.disruption import Budget
from nodepool_operator.controllers.autoscaler import replacements, simulation
from nodepool_operator.controllers.autoscaler.consolidator import PoolTurn
from nodepool_operator.controllers.autoscaler.constraints import PodProfile, profile_of
from nodepool_operator.controllers.autoscaler.decide import consolidation_replace as replace
from nodepool_operator.controllers.autoscaler.decide.consolidation_choice import (
    Choice,
    PoolBudgets,
)
from nodepool_operator.controllers.autoscaler.decide.consolidation_proof import Proof
from nodepool_operator.controllers.autoscaler.decide.consolidation_rules import Kept
from nodepool_operator.controllers.autoscaler.simulation.offering_plan import (
    OfferingPool,
    PlannedOffering,
)
from nodepool_operator.controllers.autoscaler.snapshot.consolidation_views import NodeView
from nodepool_operator.controllers.autoscaler.snapshot.pod_profiles import ProfileCache
from nodepool_operator.controllers.resources import REQUESTS_BY_POOL
from nodepool_operator.runtime.testing import FakeInformer, FakeWallClock, informer_of

ZONE = "zone-a"
TYPES = (("small", 2, 8, 0.10), ("large", 4, 16, 0.40))
CATALOG = catalogs.catalog_of(TYPES, (ZONE,))
GIB = 1 << 30
OWNED = [{"kind": "ReplicaSet", "name": "web-1", "uid": "rs", "controller": True}]


def labels(kind: str) -> dict[str, str]:
    return {
        wellknown.INSTANCE_TYPE_LABEL: kind,
        wellknown.ZONE_LABEL: ZONE,
        wellknown.CAPACITY_TYPE_LABEL: "on-demand",
    }


def pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "apps", "uid": name, "ownerReferences": OWNED},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "250m"}}}]},
    }


def profile(obj: Any) -> PodProfile:
    found = profile_of(obj)
    assert isinstance(found, PodProfile)
    return found


def node(name: str, kind: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels(kind)}}


def view(name: str, kind: str) -> NodeView:
    pods = (pod(f"{name}-a"), pod(f"{name}-b"))
    return NodeView(
        name=name,
        obj=node(name, kind),
        to_move=pods,
        usage=0.25,
        since=None,
        tainted=False,
        eligible=True,
    )


def existing(v: NodeView, kind: str) -> simulation.ExistingNode:
    cores = {"small": 2}.get(kind, 4)
    return simulation.ExistingNode(
        name=v.name,
        pool="p",
        labels={wellknown.HOSTNAME_LABEL: v.name, **labels(kind)},
        taints=(),
        unschedulable=False,
        allocatable={"cpu": cores * 1000, "memory": 16 * GIB, "pods": 110},
        pods=tuple(profile(p) for p in v.to_move),
    )


def offering(kind: str, price: float) -> PlannedOffering:
    cores = {"small": 2}.get(kind, 4)
    return PlannedOffering(
        key=(kind, ZONE, "on-demand"),
        price=price,
        allocatable={"cpu": cores * 1000 - 100, "memory": 8 * GIB, "pods": 58},
        labels=labels(kind),
    )


POOL = OfferingPool(
    pool="p",
    offerings=(offering("small", 0.10), offering("large", 0.40)),
    taints=(),
    weight=0,
    headroom=5,
    templates=(),
)


def turn(**changes: Any) -> PoolTurn:
    base = PoolTurn(
        pool="p",
        pool_uid=None,
        room=2,
        policy=autoscaler_api.ScaleDownPolicy(),
        blocked=None,
        budgets=PoolBudgets((Budget(nodes="2"),)),
        headroom=3,
    )
    return dataclasses.replace(base, **changes)


def replacer(*, catalog: Any = lambda: CATALOG, requests: FakeInformer | None = None) -> Any:
    found = requests or informer_of()
    found.add_index(REQUESTS_BY_POOL, lambda r: [r["spec"]["nodePoolName"]])
    return replacements.Replacer(
        nodes=informer_of(),
        requests=found,
        catalog=catalog,
        profile=ProfileCache().get,
        wall_clock=FakeWallClock(1_796_000_000.0),
    )


def two_large(first: str = "large") -> tuple[Choice, list[simulation.ExistingNode]]:
    views = (view("large-1", first), view("large-2", "large"))
    kept = tuple(Kept(v.name, "no-room", None, "fits on no other node") for v in views)
    cluster = [existing(views[0], first), existing(views[1], "large")]
    return Choice(views, (), kept), cluster


async def propose(the_turn: PoolTurn, choice: Choice, cluster: Any, **made: Any) -> Any:
    return await replacer(**made).propose(the_turn, choice, POOL, cluster, ())


async def test_two_large_nodes_are_priced_by_the_catalog_and_replaced_by_one_small() -> None:
    choice, cluster = two_large()
    found = await propose(turn(), choice, cluster)
    assert found == replace.Replacement(
        ("large-1", "large-2"), ("small", ZONE, "on-demand"), 0.1, 0.8
    )


async def test_a_node_the_catalog_does_not_price_is_never_replaced() -> None:
    choice, cluster = two_large(first="unsold")
    found = await propose(turn(), choice, cluster)
    # large-2 alone can be (its price is known); large-1's is not, and it never is.
    assert isinstance(found, replace.Replacement)
    assert found.victims == ("large-2",)
    alone = dataclasses.replace(choice, kept=choice.kept[:1])
    unknown = await propose(turn(), alone, cluster)
    assert unknown == replace.Unreplaceable(
        ("large-1",), "node large-1's price is unknown (its offering is not in the catalog)"
    )


async def test_nothing_is_replaced_before_the_catalog_is_read() -> None:
    choice, cluster = two_large()
    found = await propose(turn(), choice, cluster, catalog=lambda: None)
    assert found == replace.Unreplaceable(
        ("large-1", "large-2"), "the catalog of offerings is unknown"
    )


async def test_a_pool_at_max_nodes_cannot_launch_the_replacement_first() -> None:
    choice, cluster = two_large()
    found = await propose(turn(headroom=0), choice, cluster)
    assert isinstance(found, replace.Unreplaceable)
    assert found.why == "the pool is at maxNodes: no room to launch one first"


async def test_a_disruption_budget_of_one_node_replaces_one_at_a_time() -> None:
    choice, cluster = two_large()
    found = await propose(turn(budgets=PoolBudgets((Budget(nodes="1"),))), choice, cluster)
    assert isinstance(found, replace.Replacement)
    assert found.victims == ("large-1",)
    assert found.replaced_per_hour == 0.4


async def test_a_refused_request_calls_the_replacement_off() -> None:
    choice, cluster = two_large()
    chosen = replace.Replacement(("large-1", "large-2"), ("small", ZONE, "on-demand"), 0.1, 0.8)
    mark = replace.mark(chosen, now=1_796_000_000.0)
    views = tuple(
        dataclasses.replace(
            v,
            tainted=True,
            obj={
                **v.obj,
                "metadata": {
                    **v.obj["metadata"],
                    "annotations": {replace.REPLACEMENT_ANNOTATION: mark},
                },
            },
        )
        for v in choice.views
    )
    under_way = replacements.under_way(views)
    assert under_way == dataclasses.replace(chosen, since=1_796_000_000.0)
    spec = scalerequest_api.ScaleRequestSpec(
        node_pool_name="p",
        target_nodes=3,
        new_node_offerings=(
            scalerequest_api.OfferingCount(
                instance_type="small", zone=ZONE, capacity_type="on-demand", count=1
            ),
        ),
    )
    request = scalerequest_api.manifest("up-1", spec, pool_uid="uid")
    request["metadata"]["creationTimestamp"] = "2026-12-06T12:00:00Z"
    request["status"] = {"phase": "Rejected", "message": "the pool is being deleted"}
    found = replacer(requests=informer_of(request))
    fits = Proof(views=list(views), cluster=cluster, daemon_sets=(), profile=ProfileCache().get)
    step = await found.step(turn(), under_way, views, fits)
    assert step == replace.Unreplaceable(
        ("large-1", "large-2"),
        "ScaleRequest up-1 for the replacement was Rejected: the pool is being deleted",
    )
    # Not asked for yet: the next step is to launch it.
    assert await replacer().step(turn(), under_way, views, fits) == "launch"
