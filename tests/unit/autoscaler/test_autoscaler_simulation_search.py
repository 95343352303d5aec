"""The simulation's fast paths place every pod where plain first fit would.

The room trees, the per-class cursor, placing a node's worth of replicas at once, opening
the next node without a search once a class filled the last one, stepping to the node
after the one a class filled when it takes the pod, repeating a spreading class's rounds,
and not counting where pods are when no pod reads it are all shortcuts for one rule: each
pod, in turn, goes to the first node (in cluster order) every filter accepts. Here the
same workloads are planned twice, once as shipped and once with every shortcut replaced
by that rule (a scan of all nodes for each pod), and the two outcomes must be equal.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import workloads
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler import constraints
from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.autoscaler.simulation import (
    DaemonSetView,
    ExistingNode,
    PoolTemplate,
    PoolZones,
    SimulationOutcome,
    filters,
    placing,
    rounds,
    simulate,
)
from nodepool_operator.controllers.autoscaler.simulation import cluster as cluster_state
from nodepool_operator.controllers.autoscaler.simulation.pools import Simulation
from nodepool_operator.controllers.autoscaler.simulation.rooms import (
    BEYOND_MAX,
    NEW,
    RoomTree,
    SimNode,
)

ZONES = ("zone-a", "zone-b", "zone-c")
MIB = 1024**2
DEDICATED = {"key": "dedicated", "operator": "Exists"}


def _profile(kind: str, app: str, cpu: int, memory_mib: int, *, zone: str) -> PodProfile:
    labels = {"app": app}
    spec = workloads.constrain(kind, labels, zone=zone, toleration=DEDICATED)
    port = 9000 if kind == "host-port" else None
    made = workloads.container(f"{cpu}m", memory=f"{memory_mib}Mi", host_port=port)
    return constraints.profile_of(
        {
            "metadata": {"name": "p", "namespace": "apps", "labels": labels},
            "spec": {"containers": [made], **spec},
        }
    )


def _replicas(draw: st.DrawFn, kind: str, index: int) -> list[PodProfile]:
    """The pods of a Deployment ``d<index>`` of ``kind``."""
    replica = _profile(
        kind,
        f"d{index}",
        draw(st.sampled_from((100, 500, 1000, 2500))),
        draw(st.sampled_from((256, 1024, 4096))),
        zone=draw(st.sampled_from(ZONES)),
    )
    return [replica] * draw(st.integers(1, 30))


@st.composite
def pending_pods(draw: st.DrawFn) -> list[PodProfile]:
    """Replicas of a few Deployments, and pods each with its own requests."""
    found: list[PodProfile] = []
    for index in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(workloads.KINDS))
        if draw(st.booleans()):
            found.extend(_replicas(draw, kind, index))
        else:
            requests = st.tuples(st.integers(50, 3000), st.integers(64, 12_000))
            found.extend(
                _profile(kind, f"d{index}", cpu, memory, zone=ZONES[0])
                for cpu, memory in draw(st.lists(requests, min_size=1, max_size=30))
            )
    return draw(st.permutations(found))


def _template(cpu: int, zones: Sequence[str], tainted: bool) -> nodepool_api.NodeTemplate:
    taints = (nodepool_api.Taint(key="dedicated", effect="NoSchedule"),) if tainted else ()
    return nodepool_api.NodeTemplate(
        cpu=str(cpu), memory="16Gi", pods=20, zones=tuple(zones), taints=taints
    )


def _existing_zone(index: int, template: nodepool_api.NodeTemplate) -> str | None:
    """Existing nodes go round the template's zones, as a balanced pool's would."""
    return template.zones[index % len(template.zones)] if template.zones else None


def _pool(
    name: str,
    template: nodepool_api.NodeTemplate,
    *,
    weight: int,
    headroom: int,
    taken: int,
    in_flight: int = 0,
) -> PoolTemplate:
    def upcoming(k: int, zone: str | None) -> tuple[str, Mapping[str, str]]:
        node = f"{name}-{taken + k}"
        labels = nodepool_api.node_labels(name, template, zone=zone)
        return node, {**labels, wellknown.HOSTNAME_LABEL: node}

    counts = Counter(_existing_zone(index, template) for index in range(taken))

    return PoolTemplate(
        name=name,
        weight=weight,
        taints=tuple(
            constraints.NodeTaint(t.key, t.value or "", t.effect) for t in template.taints
        ),
        allocatable=nodepool_api.template_allocatable(template),
        upcoming=upcoming,
        in_flight=in_flight,
        headroom=headroom,
        zones=max(1, len(template.zones)),
        namespaces=None,
        zoning=PoolZones(
            names=tuple(template.zones), counts={z: n for z, n in counts.items() if z}
        ),
    )


def _general_node(
    template: nodepool_api.NodeTemplate, index: int, pods: tuple[PodProfile, ...]
) -> ExistingNode:
    name = f"general-{index}"
    labels = nodepool_api.node_labels("general", template, zone=_existing_zone(index, template))
    return ExistingNode(
        name=name,
        pool="general",
        labels={**labels, wellknown.HOSTNAME_LABEL: name},
        taints=(),
        unschedulable=False,
        allocatable=nodepool_api.template_allocatable(template),
        pods=pods,
    )


def _busy_nodes(
    draw: st.DrawFn, template: nodepool_api.NodeTemplate, count: int
) -> list[ExistingNode]:
    """The general pool's nodes, each with up to three pods of one size."""
    found = []
    for index in range(count):
        busy = _profile("plain", "busy", draw(st.integers(0, 1500)), 512, zone=ZONES[0])
        found.append(_general_node(template, index, (busy,) * draw(st.integers(0, 3))))
    return found


def _general_and_dedicated(
    draw: st.DrawFn, general: nodepool_api.NodeTemplate, *, taken: int
) -> list[PoolTemplate]:
    return [
        _pool("general", general, weight=0, headroom=draw(st.integers(0, 40)), taken=taken),
        _pool(
            "dedicated",
            _template(8, ZONES[:2], True),
            weight=draw(st.integers(0, 10)),
            headroom=draw(st.integers(0, 10)),
            taken=0,
        ),
    ]


@st.composite
def clusters(draw: st.DrawFn) -> dict[str, Any]:
    general = _template(draw(st.sampled_from((2, 4, 8))), draw(st.sampled_from((ZONES, ()))), False)
    existing = _busy_nodes(draw, general, draw(st.integers(0, 6)))
    pools = _general_and_dedicated(draw, general, taken=len(existing))
    daemon = constraints.profile_of(
        {
            "metadata": {"name": "agent", "namespace": "kube-system"},
            "spec": {"containers": [workloads.container("100m", memory="64Mi")]},
        },
        extra_tolerations=constraints.DAEMON_TOLERATIONS,
    )
    daemons = [DaemonSetView("agent", daemon)] if draw(st.booleans()) else []
    return {"nodes": existing, "pools": pools, "daemon_sets": daemons}


def _first_node_in_order(
    self: Simulation, profile: PodProfile, start: int, *, beyond_max: bool = False
) -> SimNode | None:
    """``Simulation.existing_fit`` as a scan: every node from ``start`` on, every filter."""
    for node in self.cluster.nodes[start:]:
        if node.unschedulable:
            continue  # as the room trees treat a cordoned node: never offered
        if (node.kind == BEYOND_MAX) == beyond_max and self.cluster.problem(profile, node) is None:
            return node
    return None


def _plain_first_fit(
    pending: Sequence[PodProfile], cluster: Mapping[str, Any], monkeypatch: pytest.MonkeyPatch
) -> SimulationOutcome:
    with monkeypatch.context() as patch:
        patch.setattr(Simulation, "existing_fit", _first_node_in_order)
        patch.setattr(placing, "copies_that_fit", lambda profile, node, wanted: 1)
        # Never "the class filled the last node": every pod searches every node.
        patch.setattr(placing, "has_room", lambda profile, node: True)
        patch.setattr(rounds.Rounds, "applies", staticmethod(lambda profile: False))
        # Every spreading plan confirmed by a second run, never taken from the first.
        patch.setattr(placing, "first_run_stands", lambda *args: False)
        patch.setattr(cluster_state.ClusterState, "__init__", _always_counting)
        return simulate(pending, **cluster)


_counting_as_asked = cluster_state.ClusterState.__init__


def _always_counting(
    self: cluster_state.ClusterState,
    daemon_sets: Sequence[DaemonSetView],
    scale: tuple[int, int],
    *,
    counting: bool,
) -> None:
    _counting_as_asked(self, daemon_sets, scale, counting=True)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(pending=pending_pods(), cluster=clusters())
def test_the_fast_paths_place_every_pod_where_plain_first_fit_does(
    pending: list[PodProfile], cluster: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = simulate(pending, **cluster)
    plain = _plain_first_fit(pending, cluster, monkeypatch)
    assert fast.placements == plain.placements
    assert fast.unfit == plain.unfit
    assert fast.pools == plain.pools


def test_a_class_that_filled_a_node_passes_over_the_next_when_it_is_cordoned_or_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    template = _template(4, (), False)
    busy = _profile("plain", "busy", 3500, 512, zone=ZONES[0])
    # After the first node fills: a cordoned node, a full one, then one with room.
    shapes = [((), False), ((), True), ((busy,), False), ((), False)]
    existing = [
        ExistingNode(
            name=f"general-{index}",
            pool="general",
            labels={
                **nodepool_api.node_labels("general", template, zone=None),
                wellknown.HOSTNAME_LABEL: f"general-{index}",
            },
            taints=(),
            unschedulable=cordoned,
            allocatable=nodepool_api.template_allocatable(template),
            pods=pods,
        )
        for index, (pods, cordoned) in enumerate(shapes)
    ]
    cluster = {
        "nodes": existing,
        "pools": [_pool("general", template, weight=0, headroom=5, taken=len(existing))],
        "daemon_sets": [],
    }
    # Tolerating every taint, the cordon's too: the room search still never offers a
    # cordoned node, and neither may the step to the next node.
    replica = constraints.profile_of(
        {
            "metadata": {"name": "web", "namespace": "apps", "labels": {"app": "web"}},
            "spec": {
                "containers": [workloads.container("1500m", memory="256Mi")],
                "tolerations": [{"operator": "Exists"}],
            },
        }
    )
    fast = simulate([replica] * 6, **cluster)
    plain = _plain_first_fit([replica] * 6, cluster, monkeypatch)
    assert fast.placements == plain.placements
    assert fast.placements[:4] == ("general-0",) * 2 + ("general-3",) * 2
    assert fast.pools == plain.pools


_rooms = st.tuples(
    st.integers(-1, 9000),
    st.integers(-1, 40 * 1024).map(lambda mib: mib * MIB),
    st.integers(-1, 30),
)


@settings(max_examples=300, deadline=None)
@given(
    rooms=st.lists(_rooms, min_size=1, max_size=40),
    changes=st.lists(st.tuples(st.integers(0, 39), _rooms), max_size=20),
    needs=st.lists(
        st.tuples(st.integers(0, 12_000), st.integers(0, 48 * 1024), st.integers(0, 3)),
        min_size=1,
        max_size=10,
    ),
    start=st.integers(0, 40),
)
def test_the_room_tree_offers_every_leaf_with_room_leftmost_first(
    rooms: list[tuple[int, int, int]],
    changes: list[tuple[int, tuple[int, int, int]]],
    needs: list[tuple[int, int, int]],
    start: int,
) -> None:
    # Rooms beyond the largest node the tree was made for (8 cpu, 32Gi): it widens.
    tree = RoomTree((32 * 1024, 8000))
    for index, room in enumerate(rooms):
        tree.append()
        tree.set(index, room)
    for index, room in changes:
        if index < len(rooms):
            rooms[index] = room
            tree.set(index, room)
    names = [10 * index for index in range(len(rooms))]
    for cpu, memory_mib, pods in needs:
        need = (cpu, memory_mib * MIB + cpu % 7, pods)  # memory not a whole MiB, too
        fits = [
            names[index]
            for index, room in enumerate(rooms)
            if index >= start and all(have >= want for have, want in zip(room, need, strict=True))
        ]
        assert list(_every_fit(tree, need, start, names)) == fits
    _assert_maxima_as_packed_from_scratch(tree)


def _every_fit(
    tree: RoomTree, need: tuple[int, int, int], start: int, names: Sequence[int]
) -> Iterator[int]:
    """``names`` of the leaves from ``start`` on with room for ``need``, leftmost first."""
    at = tree.first(need, start)
    while at >= 0:
        yield names[at]
        at = tree.first(need, at + 1)


def _assert_maxima_as_packed_from_scratch(tree: RoomTree) -> None:
    """Every subtree's maxima, kept up as leaves were added and changed, are those a tree
    packed from scratch has."""
    kept = list(tree.tree)
    tree._rebuild()
    assert kept == tree.tree


@settings(max_examples=100, deadline=None)
@given(rooms=st.lists(_rooms, min_size=1, max_size=70))
def test_the_room_tree_keeps_its_maxima_as_it_doubles(rooms: list[tuple[int, int, int]]) -> None:
    tree = RoomTree((32 * 1024, 8000))
    for index, room in enumerate(rooms):
        tree.append()  # a doubling copies the tree before the leaf has room
        _assert_maxima_as_packed_from_scratch(tree)
        tree.set(index, room)
        _assert_maxima_as_packed_from_scratch(tree)


def _confirmed(pending: Sequence[PodProfile], cluster: Mapping[str, Any]) -> SimulationOutcome:
    """The plan as the rounds find it when every first run is confirmed by a second."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(placing, "first_run_stands", lambda *args: False)
        return simulate(pending, **cluster)


@st.composite
def zone_spreading_clusters(draw: st.DrawFn) -> dict[str, Any]:
    """Clusters with a node in every zone already, where a zone spread's first run may
    stand: the general pool over three zones, its nodes' DaemonSet pods, maybe with the
    spreading pods' own labels."""
    general = _template(draw(st.sampled_from((2, 4))), ZONES, False)
    existing = _busy_nodes(draw, general, draw(st.integers(3, 6)))
    pools = _general_and_dedicated(draw, general, taken=len(existing))
    # The DaemonSet's pods in the spreading pods' namespace with their label, or apart.
    namespace, app = draw(st.sampled_from((("kube-system", "agent"), ("apps", "d0"))))
    daemon = constraints.profile_of(
        {
            "metadata": {"name": "agent", "namespace": namespace, "labels": {"app": app}},
            "spec": {"containers": [workloads.container("100m", memory="64Mi")]},
        },
        extra_tolerations=constraints.DAEMON_TOLERATIONS,
    )
    return {"nodes": existing, "pools": pools, "daemon_sets": [DaemonSetView("agent", daemon)]}


@st.composite
def zone_spreading_pods(draw: st.DrawFn) -> list[PodProfile]:
    found: list[PodProfile] = []
    for index in range(draw(st.integers(1, 4))):
        kind = "spread-zone" if index == 0 else draw(st.sampled_from(workloads.KINDS))
        found.extend(_replicas(draw, kind, index))
    return draw(st.permutations(found))


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(pending=zone_spreading_pods(), cluster=zone_spreading_clusters())
def test_a_first_run_kept_is_the_plan_a_second_run_confirms(
    pending: list[PodProfile], cluster: dict[str, Any]
) -> None:
    assert simulate(pending, **cluster) == _confirmed(pending, cluster)


def _stateful_set_cluster(daemon_labels: Mapping[str, str], namespace: str) -> dict[str, Any]:
    template = _template(4, ZONES, False)
    existing = [_general_node(template, index, ()) for index in range(3)]
    daemon = constraints.profile_of(
        {
            "metadata": {"name": "agent", "namespace": namespace, "labels": dict(daemon_labels)},
            "spec": {"containers": [workloads.container("100m", memory="64Mi")]},
        },
        extra_tolerations=constraints.DAEMON_TOLERATIONS,
    )
    return {
        "nodes": existing,
        "pools": [_pool("general", template, weight=0, headroom=20, taken=3)],
        "daemon_sets": [DaemonSetView("agent", daemon)],
    }


@pytest.mark.parametrize(
    ("kind", "stands"),
    [
        ("spread-zone", True),
        # Every node opened is a new hostname: there early, it is a domain with no pod.
        ("spread-host", False),
    ],
)
def test_a_zone_spread_that_opens_nodes_in_zones_there_already_is_planned_in_one_run(
    kind: str, stands: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = _stateful_set_cluster({"app": "agent"}, "kube-system")
    # 30 replicas of 1500m: two a node, so twelve nodes more than the three there.
    replica = _profile(kind, "web", 1500, 1024, zone=ZONES[0])
    answers = _recording_first_run_stands(monkeypatch)
    outcome = simulate([replica] * 30, **cluster)
    assert answers[0] is stands
    assert outcome.pools["general"].new_nodes == 12
    assert outcome == _confirmed([replica] * 30, cluster)


def test_a_hostname_spread_whose_smallest_count_stays_zero_is_planned_in_one_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = _stateful_set_cluster({"app": "agent"}, "kube-system")
    # The nodes there are full: empty domains of the spread, so its smallest count is 0
    # whatever the new nodes hold, and one more empty node would change no verdict.
    template = _template(4, ZONES, False)
    full = _profile("plain", "busy", 3900, 512, zone=ZONES[0])
    cluster["nodes"] = [_general_node(template, index, (full,)) for index in range(3)]
    replica = _profile("spread-host", "web", 1500, 1024, zone=ZONES[0])
    answers = _recording_first_run_stands(monkeypatch)
    outcome = simulate([replica] * 4, **cluster)
    assert answers == [True]
    assert outcome.pools["general"].new_nodes == 4  # one pod a node: maxSkew 1 over 0
    assert outcome == _confirmed([replica] * 4, cluster)


def test_pools_whose_nodes_come_in_another_order_next_time_keep_the_first_run_when_no_pod_uses_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    general = _template(4, ZONES, False)
    dedicated = _template(8, ZONES[:2], True)
    cluster = {
        "nodes": [_general_node(general, index, ()) for index in range(3)],
        # The next run adds dedicated's nodes (first by name) before general's in flight.
        "pools": [
            _pool("general", general, weight=0, headroom=20, taken=3, in_flight=2),
            _pool("dedicated", dedicated, weight=0, headroom=20, taken=0),
        ],
        "daemon_sets": [],
    }
    web = _profile("spread-zone", "web", 1500, 1024, zone=ZONES[0])
    labels = {"app": "batch"}
    spec = workloads.constrain("tolerate", labels, zone=ZONES[0], toleration=DEDICATED)
    batch = constraints.profile_of(
        {
            "metadata": {"name": "batch", "namespace": "apps", "labels": labels},
            "spec": {
                "containers": [workloads.container("1500m", memory="1Gi")],
                "nodeSelector": {wellknown.POOL_LABEL: "dedicated"},
                **spec,
            },
        }
    )
    pending = [web] * 20 + [batch] * 12
    answers = _recording_first_run_stands(monkeypatch)
    outcome = simulate(pending, **cluster)
    assert outcome.pools["general"].new_nodes
    assert outcome.pools["dedicated"].new_nodes
    assert answers == [True]
    assert outcome == _confirmed(pending, cluster)
    # A pod that may use both pools' nodes: the order matters, the run is confirmed.
    free = constraints.profile_of(
        {
            "metadata": {"name": "free", "namespace": "apps", "labels": {"app": "free"}},
            "spec": {"containers": [workloads.container("3000m", memory="1Gi")], **spec},
        }
    )
    answers.clear()
    assert simulate([*pending, free], **cluster) == _confirmed([*pending, free], cluster)
    assert answers[0] is False


def _recording_first_run_stands(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    answers: list[bool] = []
    first_run_stands = placing.first_run_stands

    def recorded(*args: Any) -> bool:
        answers.append(first_run_stands(*args))
        return answers[-1]

    monkeypatch.setattr(placing, "first_run_stands", recorded)
    return answers


def test_nodes_of_one_pool_and_zone_share_their_keys_only_while_their_labels_match() -> None:
    # ``make_node`` works a pool's zone's keys out once and hands them on to its next
    # nodes: only while those have the same labels but the hostname, taints and cordon.
    cluster = filters.SimulatedCluster((), (32 * 1024, 8000), counting=False)

    def added(
        name: str, *, taints: tuple[constraints.NodeTaint, ...] = (), **extra: str
    ) -> SimNode:
        labels = {
            wellknown.POOL_LABEL: "general",
            wellknown.ZONE_LABEL: "zone-a",
            wellknown.HOSTNAME_LABEL: name,
            **extra,
        }
        node = cluster.make_node(
            name=name,
            pool="general",
            labels=labels,
            taints=taints,
            unschedulable=False,
            allocatable={"cpu": 4000, "memory": 16 * 1024 * MIB, "pods": 110},
            kind=NEW,
        )
        return cluster.add_node(node)

    first, second = added("general-1"), added("general-2")
    relabelled = added("general-3", disk="ssd")
    tainted = added("general-4", taints=(constraints.NodeTaint("dedicated", "", "NoSchedule"),))
    again = added("general-5")
    assert second.static_id == first.static_id == again.static_id
    assert second.tree is first.tree  # one group, one room tree
    ids = {first.static_id, relabelled.static_id, tainted.static_id}
    assert len(ids) == 3
    assert ("disk", "ssd") in relabelled.shared_labels
    assert relabelled.tree is not first.tree
    assert tainted.tree is not first.tree


def test_the_room_tree_finds_the_last_leaf_kept_apart_and_writes_it_when_one_comes_after() -> None:
    tree = RoomTree((32 * 1024, 8000))
    tree.append()
    tree.set(0, (1000, 4096 * MIB, 10))
    tree.append()
    for cpu in (3000, 2000, 500):  # the last leaf filling up, as a node opened last does
        tree.set(1, (cpu, 8192 * MIB, 10))
        assert tree.first((1500, 1024 * MIB, 1), 0) == (1 if cpu >= 1500 else -1)
        assert tree.first((800, 1024 * MIB, 1), 0) == 0
        assert tree.first((400, 6000 * MIB, 1), 0) == 1
        assert tree.first((400, 6000 * MIB, 1), 1) == 1
    tree.append()  # leaf 1 joins the tree with the room it has now
    _assert_maxima_as_packed_from_scratch(tree)
    assert tree.first((400, 6000 * MIB, 1), 0) == 1
    assert tree.first((600, 6000 * MIB, 1), 0) == -1
    tree.set(2, (4000, 16 * 1024 * MIB, 110))
    assert tree.first((600, 6000 * MIB, 1), 0) == 2
    assert tree.first((600, 6000 * MIB, 1), 3) == -1
