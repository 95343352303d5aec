"""What consolidation by price reads (``replacements.Replacer``): the victims' prices from
the catalog last read, nothing replaced on an unknown price or catalog, a pool at
maxNodes or a disruption budget for one node, and a replacement under way called off
when its request was refused."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any, cast

import catalogs
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.api import wellknown
from nodepool_operator.api.disruption import Budget
from nodepool_operator.controllers.autoscaler import replacements, simulation
from nodepool_operator.controllers.autoscaler.act.node_marks import NodeMarks
from nodepool_operator.controllers.autoscaler.consolidator import PoolTurn
from nodepool_operator.controllers.autoscaler.constraints import PodProfile, profile_of
from nodepool_operator.controllers.autoscaler.decide import consolidation_replace as replace
from nodepool_operator.controllers.autoscaler.decide import replacement_steps
from nodepool_operator.controllers.autoscaler.decide.consolidation_choice import (
    Choice,
    Marks,
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
from nodepool_operator.controllers.resources import NODES_BY_POOL, REQUESTS_BY_POOL
from nodepool_operator.runtime import conditions, testing
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


async def test_a_pool_at_min_nodes_has_no_node_replaced() -> None:
    """The victims would be named only within minNodes: chosen now, they would stay
    stamped and never go."""
    choice, cluster = two_large()
    found = await propose(turn(room=0), choice, cluster)
    assert found == replace.Unreplaceable(
        ("large-1", "large-2"), "the pool is at minNodes: no node of it may go"
    )


async def test_a_disruption_budget_of_one_node_replaces_one_at_a_time() -> None:
    choice, cluster = two_large()
    found = await propose(turn(budgets=PoolBudgets((Budget(nodes="1"),))), choice, cluster)
    assert isinstance(found, replace.Replacement)
    assert found.victims == ("large-1",)
    assert found.replaced_per_hour == 0.4


def small_request(name: str, *, created: str) -> dict[str, Any]:
    """A pool's ScaleRequest for one new small Node (a replacement's)."""
    spec = scalerequest_api.ScaleRequestSpec(
        node_pool_name="p",
        target_nodes=3,
        new_node_offerings=(
            scalerequest_api.OfferingCount(
                instance_type="small", zone=ZONE, capacity_type="on-demand", count=1
            ),
        ),
    )
    request = scalerequest_api.manifest(name, spec, pool_uid="uid-p")
    request["metadata"]["creationTimestamp"] = created
    return request


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
    request = small_request("up-1", created="2026-12-06T12:00:00Z")
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


class _NodeWrites:
    """The API server for Node patches: each merged into the Node the informer holds."""

    def __init__(self, nodes: FakeInformer) -> None:
        self.nodes = nodes

    async def patch(self, resource: Any, name: str, patch: Any, **_: Any) -> Any:
        found = copy.deepcopy(self.nodes.get(name))
        assert found is not None
        body = copy.deepcopy(patch)
        body["metadata"].pop("resourceVersion", None)
        testing.merge(found, body)
        self.nodes.put(found)
        return found


class _Events:
    """The events the marks tell, kept."""

    def __init__(self) -> None:
        self.told: list[str] = []

    async def event(self, obj: Any, *, type: str, reason: str, message: str) -> None:
        self.told.append(reason)


MARKED_AT = 1_796_000_000.0


class _Loop:
    """Two large Nodes a small one replaces, through the steps a pass takes, with the
    victims' marks and call-off records written on their Nodes as ``NodeMarks`` writes
    them; the new small Node registers, and the re-check finds no room on it (as a Node
    wrongly counted as leaving gave none)."""

    def __init__(self) -> None:
        self.clock = FakeWallClock(MARKED_AT)
        self.nodes = informer_of()
        self.nodes.add_index(
            NODES_BY_POOL, lambda n: [n["metadata"]["labels"][wellknown.POOL_LABEL]]
        )
        self.requests = informer_of()
        self.requests.add_index(REQUESTS_BY_POOL, lambda r: [r["spec"]["nodePoolName"]])
        for name in ("large-1", "large-2"):
            self.nodes.put(self._node(name, "large", created="2026-12-06T12:00:00Z"))
        self.replacer = replacements.Replacer(
            nodes=self.nodes,
            requests=self.requests,
            catalog=lambda: CATALOG,
            profile=ProfileCache().get,
            wall_clock=self.clock,
        )
        self.marks = NodeMarks(
            client=cast(Any, _NodeWrites(self.nodes)),
            nodes=self.nodes,
            recorder=cast(Any, _Events()),
        )
        self.launches = 0

    def _node(self, name: str, kind: str, *, created: str) -> dict[str, Any]:
        return {
            "metadata": {
                "name": name,
                "labels": {**labels(kind), wellknown.POOL_LABEL: "p"},
                "ownerReferences": [{"kind": "NodePool", "name": "p", "uid": "uid-p"}],
                "creationTimestamp": created,
                "resourceVersion": "1",
            },
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }

    def views(self, *, pods: dict[str, tuple[Any, ...]] | None = None) -> tuple[NodeView, ...]:
        found = []
        for name in ("large-1", "large-2"):
            obj = self.nodes.get(name)
            assert obj is not None
            taints = (obj.get("spec") or {}).get("taints") or ()
            moving = (pods or {}).get(name) or (pod(f"{name}-a"), pod(f"{name}-b"))
            tainted = any(t["key"] == wellknown.CONSOLIDATING_TAINT_KEY for t in taints)
            found.append(
                dataclasses.replace(view(name, "large"), obj=obj, to_move=moving, tainted=tainted)
            )
        return tuple(found)

    async def pass_once(self, **changes: Any) -> Any:
        """One pass: a replacement proposed is marked, launched, its new Node registers,
        the re-check fails and calls it off. What was proposed."""
        views = self.views(**changes)
        kept = tuple(Kept(v.name, "no-room", None, "fits on no other node") for v in views)
        cluster = [existing(v, "large") for v in views]
        the_turn = turn(pool_uid="uid-p")
        found = await self.replacer.propose(the_turn, Choice(views, (), kept), POOL, cluster, ())
        if not isinstance(found, replace.Replacement):
            return found
        now = self.clock.time()
        await self.marks.apply(
            Marks(replace=tuple((v, found) for v in views)), autoscaler=None, now=now
        )
        self.launches += 1
        self.clock.advance(2)
        self.requests.put(self._request(f"up-{self.launches}"))
        self.nodes.put(
            self._node(
                f"small-{self.launches}", "small", created=conditions.rfc3339(self.clock.time())
            )
        )
        marked = self.views(**changes)
        under_way = replacements.under_way(marked)
        assert under_way is not None
        fits = Proof(views=list(marked), cluster=[], daemon_sets=(), profile=ProfileCache().get)
        step = await self.replacer.step(the_turn, under_way, marked, fits)
        assert isinstance(step, replace.Unreplaceable)
        assert step.backs_off
        off = Choice(marked, replacing=under_way, step=step)
        proposal = replacement_steps.under_way(off, blocked=None)
        assert proposal is not None
        await self.marks.apply(proposal.marks, autoscaler=None, now=self.clock.time())
        return found

    def _request(self, name: str) -> dict[str, Any]:
        request = small_request(name, created=conditions.rfc3339(self.clock.time()))
        request["status"] = {"phase": "Applied"}
        return request


async def test_a_replacement_its_recheck_called_off_is_not_launched_again_at_once() -> None:
    loop = _Loop()
    first = await loop.pass_once()
    assert isinstance(first, replace.Replacement)
    for name in ("large-1", "large-2"):
        node = loop.nodes.get(name)
        assert node is not None
        annotations = node["metadata"]["annotations"]
        assert replace.REPLACEMENT_ANNOTATION not in annotations  # kept: marks removed
        assert replace.CALLED_OFF_ANNOTATION in annotations
    loop.clock.advance(10)
    second = await loop.pass_once()
    assert loop.launches == 1  # two passes, one launch
    assert isinstance(second, replace.Unreplaceable)
    assert "was called off at" in second.why
    assert "not tried again before" in second.why
    # A restarted operator reads the record back from the Nodes: still held back.
    restarted = _Loop()
    restarted.nodes, restarted.replacer.nodes = loop.nodes, loop.nodes
    restarted.clock.now = loop.clock.now
    assert isinstance(await restarted.pass_once(), replace.Unreplaceable)
    assert restarted.launches == 0


async def test_a_held_back_replacement_is_tried_again_after_its_backoff_which_doubles() -> None:
    loop = _Loop()
    await loop.pass_once()
    loop.clock.advance(replace.CALLED_OFF_SECONDS)  # 2 s after the call-off: over by then
    assert isinstance(await loop.pass_once(), replace.Replacement)
    assert loop.launches == 2
    node = loop.nodes.get("large-1")
    assert node is not None
    record = json.loads(node["metadata"]["annotations"][replace.CALLED_OFF_ANNOTATION])
    assert record["times"] == 2
    loop.clock.advance(replace.CALLED_OFF_SECONDS + 1)  # the second holds twice as long
    assert isinstance(await loop.pass_once(), replace.Unreplaceable)
    loop.clock.advance(replace.CALLED_OFF_SECONDS)
    assert isinstance(await loop.pass_once(), replace.Replacement)
    assert loop.launches == 3


async def test_a_held_back_replacement_is_tried_again_once_the_pods_on_a_victim_change() -> None:
    loop = _Loop()
    await loop.pass_once()
    loop.clock.advance(5)
    changed = {"large-2": (pod("large-2-a"), pod("large-2-c"))}
    assert isinstance(await loop.pass_once(pods=changed), replace.Replacement)
    assert loop.launches == 2


async def test_a_large_node_above_the_threshold_is_replaced_by_a_small_one_holding_its_pods() -> (
    None
):
    # No Node is underused (so none is kept for lack of room): before, nothing was offered
    # for a replace, and a large node whose two pods a small one holds stayed at 4x the price.
    busy = dataclasses.replace(view("large-1", "large"), usage=0.6)
    choice = Choice((busy,), (), ())
    found = await propose(turn(), choice, [existing(busy, "large")])
    assert found == replace.Replacement(("large-1",), ("small", ZONE, "on-demand"), 0.1, 0.4)
    # With a threshold above its use it is an underused Node: the removal path's, not this.
    underused = turn(policy=autoscaler_api.ScaleDownPolicy(utilization_threshold=0.7))
    assert await propose(underused, choice, [existing(busy, "large")]) is None
