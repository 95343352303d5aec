"""Plans over many pools: the pools and node groups a pod's static filters refuse are
skipped, and the plan is the one ranking every pool and searching every group makes.

A new node ranks only the pools whose next node the pod's node rules (namespace, taints,
nodeSelector, node affinity) do not refuse in every zone, found once per node rules and
kept until a pool opens a node; a class searches only the node groups carrying every
label its nodeSelector names. Here the same worlds are planned twice, once as shipped
and once ranking every pool and searching every group, and the outcomes must be equal;
the pools' next nodes change labels as they open, so a refusal judged early must not
outlive the node it was judged on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler import constraints
from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.autoscaler.simulation import (
    ExistingNode,
    PoolTemplate,
    PoolZones,
    SimulationOutcome,
    filters,
    pools,
    simulate,
)
from nodepool_operator.controllers.autoscaler.simulation.pools import PoolState, Simulation
from nodepool_operator.controllers.autoscaler.simulation.rooms import Group

ZONES = ("zone-a", "zone-b")
TIER = "example.com/tier"
TEMPLATE = nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=20)
ZONED = nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=20, zones=ZONES)


def _pod(
    cpu: int, *, selector: Mapping[str, str] | None = None, namespace: str = "apps", **spec: Any
) -> PodProfile:
    return constraints.profile_of(
        {
            "metadata": {"name": "p", "namespace": namespace, "labels": {"app": "a"}},
            "spec": {
                "containers": [{"name": "c", "resources": {"requests": {"cpu": f"{cpu}m"}}}],
                "nodeSelector": dict(selector or {}),
                **spec,
            },
        }
    )


def _tier(pool: int, k: int) -> str:
    """The tier label of a pool's k-th node: it changes as the pool grows."""
    return "gold" if (pool + k) % 3 == 0 else "iron"


def _pool(
    index: int, *, zoned: bool, tainted: bool, namespaces: frozenset[str] | None, taken: int
) -> PoolTemplate:
    name = f"pool-{index}"
    template = ZONED if zoned else TEMPLATE
    taints = (constraints.NodeTaint("dedicated", "", "NoSchedule"),) if tainted else ()

    def upcoming(k: int, zone: str | None) -> tuple[str, Mapping[str, str]]:
        node = f"{name}-{taken + k}"
        labels = nodepool_api.node_labels(name, template, zone=zone)
        return node, {**labels, TIER: _tier(index, taken + k), wellknown.HOSTNAME_LABEL: node}

    return PoolTemplate(
        name=name,
        weight=index % 2,
        taints=taints,
        allocatable=nodepool_api.template_allocatable(template),
        upcoming=upcoming,
        in_flight=0,
        headroom=3,
        zones=len(ZONES) if zoned else 1,
        namespaces=namespaces,
        zoning=PoolZones(names=ZONES if zoned else ()),
    )


def _existing(index: int, k: int, *, tainted: bool, busy: PodProfile) -> ExistingNode:
    name = f"pool-{index}-{k}"
    labels = nodepool_api.node_labels(f"pool-{index}", TEMPLATE, zone=None)
    taints = (constraints.NodeTaint("dedicated", "", "NoSchedule"),) if tainted else ()
    return ExistingNode(
        name=name,
        pool=f"pool-{index}",
        labels={**labels, TIER: _tier(index, k), wellknown.HOSTNAME_LABEL: name},
        taints=taints,
        unschedulable=False,
        allocatable=nodepool_api.template_allocatable(TEMPLATE),
        pods=(busy,) * 3,
    )


@st.composite
def worlds(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(2, 8))
    templates, existing = [], []
    busy = _pod(900)
    for index in range(count):
        tainted = draw(st.booleans()) and index % 2 == 1
        taken = draw(st.integers(0, 2))
        namespaces = draw(st.sampled_from((None, frozenset({"apps"}), frozenset({"other"}))))
        zoned = draw(st.booleans())
        templates.append(
            _pool(index, zoned=zoned, tainted=tainted, namespaces=namespaces, taken=taken)
        )
        existing.extend(_existing(index, k, tainted=tainted, busy=busy) for k in range(taken))
    return {"nodes": existing, "pools": templates, "count": count}


@st.composite
def pending_pods(draw: st.DrawFn, count: int) -> list[PodProfile]:
    tolerate = [{"key": "dedicated", "operator": "Exists"}]
    found: list[PodProfile] = []
    for _ in range(draw(st.integers(1, 6))):
        selector: dict[str, str] = {}
        kind = draw(st.sampled_from(("pool", "tier", "pool-and-tier", "zone", "none")))
        if kind in ("pool", "pool-and-tier"):
            selector[wellknown.POOL_LABEL] = f"pool-{draw(st.integers(0, count))}"
        if kind in ("tier", "pool-and-tier"):
            selector[TIER] = draw(st.sampled_from(("gold", "iron")))
        if kind == "zone":
            selector[wellknown.ZONE_LABEL] = draw(st.sampled_from(ZONES))
        spec: dict[str, Any] = {"tolerations": tolerate} if draw(st.booleans()) else {}
        namespace = draw(st.sampled_from(("apps", "other")))
        cpu = draw(st.sampled_from((300, 1000, 1800, 3000)))
        pod = _pod(cpu, selector=selector, namespace=namespace, **spec)
        found.extend([pod] * draw(st.integers(1, 8)))
    return draw(st.permutations(found))


def _every_pool(self: Simulation, profile: PodProfile) -> list[PoolState]:
    return [
        s
        for s in self.pools.values()
        if s.template.namespaces is None or profile.namespace in s.template.namespaces
    ]


def _every_group(self: filters.SimulatedCluster, profile: PodProfile) -> Iterable[Group]:
    return self.groups.values()


def _ranking_every_pool(
    pending: Sequence[PodProfile], world: Mapping[str, Any], monkeypatch: pytest.MonkeyPatch
) -> SimulationOutcome:
    with monkeypatch.context() as patch:
        patch.setattr(pools.Simulation, "_may_host", _every_pool)
        patch.setattr(filters.SimulatedCluster, "groups_for", _every_group)
        return simulate(pending, nodes=world["nodes"], pools=world["pools"])


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_skipping_refused_pools_and_groups_keeps_the_plan(
    data: st.DataObject, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = data.draw(worlds())
    pending = data.draw(pending_pods(world["count"]))
    assert simulate(pending, nodes=world["nodes"], pools=world["pools"]) == _ranking_every_pool(
        pending, world, monkeypatch
    )


def test_a_refusal_ends_when_the_pool_opens_a_node() -> None:
    """pool-2's next node is iron, then gold: a gold pod refused before the pool opened
    a node for an iron pod goes to the gold node after it (same node rules, so the
    refusal was judged once, before)."""
    world = {"nodes": [], "pools": [_pool(2, zoned=False, tainted=False, namespaces=None, taken=0)]}
    big_gold, iron, small_gold = (
        _pod(3000, selector={TIER: "gold"}),
        _pod(2000, selector={TIER: "iron"}),
        _pod(500, selector={TIER: "gold"}),
    )
    outcome = simulate([big_gold, iron, small_gold], nodes=[], pools=world["pools"])
    assert outcome.placements == (None, "pool-2-0", "pool-2-1")
    assert outcome.unfit == {0: f"pool-2: nodeSelector {TIER}=gold does not match"}


def test_a_pod_no_pool_hosts_names_every_pools_refusal() -> None:
    templates = [
        _pool(0, zoned=False, tainted=True, namespaces=None, taken=0),
        _pool(1, zoned=True, tainted=False, namespaces=None, taken=0),
        _pool(2, zoned=False, tainted=False, namespaces=frozenset({"other"}), taken=0),
    ]
    outcome = simulate(
        [_pod(500, selector={wellknown.POOL_LABEL: "pool-9"})], nodes=[], pools=templates
    )
    assert outcome.unfit == {
        0: "pool-0: taint dedicated:NoSchedule is not tolerated; "
        f"pool-1: nodeSelector {wellknown.POOL_LABEL}=pool-9 does not match"
    }


def test_a_pod_selecting_its_pool_goes_to_that_pools_room_among_many() -> None:
    busy = _pod(900)
    existing = [_existing(i, k, tainted=False, busy=busy) for i in range(50) for k in range(2)]
    templates = [_pool(i, zoned=False, tainted=False, namespaces=None, taken=2) for i in range(50)]
    pending = [_pod(1000, selector={wellknown.POOL_LABEL: "pool-37"})] * 3
    outcome = simulate(pending, nodes=existing, pools=templates)
    # Each pool-37 node has 4 - 2.7 cpu free: room for one; the third pod opens pool-37-2.
    assert outcome.placements == ("pool-37-0", "pool-37-1", "pool-37-2")
    assert {name for name, p in outcome.pools.items() if p.new_nodes} == {"pool-37"}
