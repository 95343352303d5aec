"""Properties of the scheduling simulation over random small workloads, checked by rules
written here independently of the simulation's ``Cluster``: no node over its allocatable, no
anti-affinity pair in one domain, no host port clash, spread within maxSkew, and no node
opened for nothing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

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
    simulate,
)

HOST = wellknown.HOSTNAME_LABEL
ZONE = wellknown.ZONE_LABEL
NAMESPACE = "apps"
KINDS = ("plain", "anti-host", "anti-zone", "port", "spread-host", "spread-zone")


# -- the workload, as plain data the checks read -------------------------------------------


@dataclass(frozen=True)
class Kind:
    """One pod class: its app label, cpu (millicores) and its one constraint."""

    app: str
    cpu: int
    constraint: str
    max_skew: int = 1

    def manifest(self) -> dict[str, Any]:
        container: dict[str, Any] = {
            "name": "c",
            "resources": {"requests": {"cpu": f"{self.cpu}m", "memory": "256Mi"}},
        }
        spec: dict[str, Any] = {"containers": [container]}
        selector = {"matchLabels": {"app": self.app}}
        if self.constraint.startswith("anti-"):
            key = HOST if self.constraint == "anti-host" else ZONE
            term = {"labelSelector": selector, "topologyKey": key}
            spec["affinity"] = {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
            }
        elif self.constraint == "port":
            container["ports"] = [{"containerPort": 80, "hostPort": 80}]
        elif self.constraint.startswith("spread-"):
            key = HOST if self.constraint == "spread-host" else ZONE
            spec["topologySpreadConstraints"] = [
                {
                    "maxSkew": self.max_skew,
                    "topologyKey": key,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": selector,
                }
            ]
        meta = {"name": "p", "namespace": NAMESPACE, "labels": {"app": self.app}}
        return {"metadata": meta, "spec": spec}

    @property
    def anti_key(self) -> str | None:
        return {"anti-host": HOST, "anti-zone": ZONE}.get(self.constraint)

    @property
    def spread_key(self) -> str | None:
        return {"spread-host": HOST, "spread-zone": ZONE}.get(self.constraint)


@dataclass(frozen=True)
class Pool:
    name: str
    cpu: int  # whole cores
    weight: int
    headroom: int
    in_flight: int
    zones: tuple[str, ...]

    @property
    def template(self) -> nodepool_api.NodeTemplate:
        return nodepool_api.NodeTemplate(
            cpu=str(self.cpu), memory="16Gi", pods=110, zones=self.zones
        )

    def node(self, index: int, zone: str | None = None) -> tuple[str, dict[str, str]]:
        """The pool's node ``index``; in ``zone``, or (an existing node) a zone by index."""
        name = f"{self.name}-{index}"
        if zone is None and self.zones:
            zone = self.zones[index % len(self.zones)]
        labels = nodepool_api.node_labels(self.name, self.template, zone=zone)
        return name, {**labels, HOST: name}


@dataclass(frozen=True)
class Workload:
    pools: tuple[Pool, ...]
    existing: tuple[tuple[int, tuple[Kind, ...]], ...]  # per node of the first pool: its pods
    daemon_cpu: int  # 0: no DaemonSet
    daemon_port: bool
    pending: tuple[Kind, ...]


kinds = st.builds(
    Kind,
    app=st.sampled_from(("a", "b", "c")),
    cpu=st.sampled_from((100, 500, 1000, 2000)),
    constraint=st.sampled_from(KINDS),
    max_skew=st.integers(1, 2),
)
zone_sets = st.sampled_from(((), ("a",), ("a", "b"), ("a", "b", "c")))


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    count = draw(st.integers(1, 2))
    pools = tuple(
        Pool(
            name=name,
            cpu=draw(st.sampled_from((2, 4, 8))),
            weight=draw(st.integers(0, 2)),
            headroom=draw(st.integers(0, 6)),
            in_flight=draw(st.integers(0, 1)),
            zones=draw(zone_sets),
        )
        for name in ("p", "q")[:count]
    )
    palette = draw(st.lists(kinds, min_size=1, max_size=3))
    existing = tuple(
        (i, tuple(draw(st.lists(kinds.filter(lambda k: k.cpu <= 500), max_size=3))))
        for i in range(draw(st.integers(0, 2)))
    )
    return Workload(
        pools=pools,
        existing=existing,
        daemon_cpu=draw(st.sampled_from((0, 0, 100, 500))),
        daemon_port=draw(st.booleans()),
        # Replicas: a few classes, many pods of each, as Deployments make them.
        pending=tuple(draw(st.lists(st.sampled_from(palette), min_size=1, max_size=12))),
    )


# -- running it ------------------------------------------------------------------------------


@dataclass
class Placed:
    kind: Kind | None  # None: a DaemonSet pod
    cpu: int
    ports: tuple[int, ...]
    pending: bool


@dataclass
class Node:
    name: str
    labels: Mapping[str, str]
    cpu: int  # allocatable millicores
    opened: bool  # opened by this simulation (not an existing Node)
    pods: list[Placed]


def run(workload: Workload) -> tuple[SimulationOutcome, dict[str, Node]]:
    first = workload.pools[0]
    cache: dict[Kind, PodProfile] = {}

    def profile(kind: Kind) -> PodProfile:
        if kind not in cache:
            cache[kind] = constraints.profile_of(kind.manifest())
        return cache[kind]

    daemons: list[DaemonSetView] = []
    if workload.daemon_cpu:
        container: dict[str, Any] = {
            "name": "d",
            "resources": {"requests": {"cpu": f"{workload.daemon_cpu}m"}},
        }
        if workload.daemon_port:
            container["ports"] = [{"containerPort": 9100, "hostPort": 9100}]
        manifest = {
            "metadata": {"name": "d", "namespace": "kube-system", "labels": {"app": "ds"}},
            "spec": {"containers": [container]},
        }
        daemons.append(
            DaemonSetView(
                "ds",
                constraints.profile_of(manifest, extra_tolerations=constraints.DAEMON_TOLERATIONS),
            )
        )
    nodes: dict[str, Node] = {}
    existing: list[ExistingNode] = []
    for index, running in workload.existing:
        name, labels = first.node(index)
        existing.append(
            ExistingNode(
                name=name,
                pool=first.name,
                labels=labels,
                taints=(),
                unschedulable=False,
                allocatable={"cpu": first.cpu * 1000, "memory": 16 * 1024**3, "pods": 110},
                pods=tuple(profile(k) for k in running),
            )
        )
        pods = [Placed(k, k.cpu, (80,) if k.constraint == "port" else (), False) for k in running]
        nodes[name] = Node(name, labels, first.cpu * 1000, False, pods)
    templates = []
    # Per node name, the labels it was asked with in each zone (a pool's next node is
    # judged in several zones before it opens in one).
    asked_labels: dict[str, dict[str | None, Mapping[str, str]]] = {}
    for pool in workload.pools:
        taken = len(workload.existing) if pool is first else 0

        def upcoming(
            k: int, zone: str | None, pool: Pool = pool, taken: int = taken
        ) -> tuple[str, Mapping[str, str]]:
            name, labels = pool.node(taken + k, zone)
            asked_labels.setdefault(name, {})[zone] = labels
            return name, labels

        counts = Counter(
            first.node(index)[1].get(wellknown.ZONE_LABEL) for index, _ in workload.existing
        )

        templates.append(
            PoolTemplate(
                name=pool.name,
                weight=pool.weight,
                taints=(),
                allocatable=nodepool_api.template_allocatable(pool.template),
                upcoming=upcoming,
                in_flight=pool.in_flight,
                headroom=pool.headroom,
                zones=max(1, len(pool.zones)),
                namespaces=None,
                zoning=PoolZones(
                    names=pool.zones,
                    counts={z: n for z, n in counts.items() if z and pool is first},
                ),
            )
        )
    outcome = simulate(
        [profile(k) for k in workload.pending],
        nodes=existing,
        pools=templates,
        daemon_sets=daemons,
    )
    for pool in workload.pools:
        taken = len(workload.existing) if pool is first else 0
        # A node in flight is asked in one zone only; a new one opens where the outcome says.
        zones = outcome.pools[pool.name].opened_zones
        for k in range(pool.in_flight + len(zones)):
            name = pool.node(taken + k)[0]
            asked = asked_labels[name]
            labels = (
                asked[zones[k - pool.in_flight]]
                if k >= pool.in_flight
                else next(iter(asked.values()))
            )
            nodes[name] = Node(name, labels, pool.cpu * 1000, True, [])
    for node in nodes.values():
        for _ in daemons:  # no DaemonSet pod is bound yet: every pool node gets one
            ports = (9100,) if workload.daemon_port else ()
            node.pods.append(Placed(None, workload.daemon_cpu, ports, False))
    for kind, where in zip(workload.pending, outcome.placements, strict=True):
        if where is not None:
            ports = (80,) if kind.constraint == "port" else ()
            nodes[where].pods.append(Placed(kind, kind.cpu, ports, True))
    return outcome, nodes


# -- the checks, written from the API's rules -------------------------------------------------


def check_resources(nodes: Mapping[str, Node]) -> None:
    for node in nodes.values():
        if any(p.pending for p in node.pods):
            used = sum(p.cpu for p in node.pods)
            assert used <= node.cpu, f"{node.name}: {used}m used of {node.cpu}m"


def check_ports(nodes: Mapping[str, Node]) -> None:
    for node in nodes.values():
        for pod in node.pods:
            if not pod.pending:
                continue  # what was already bound is the scheduler's doing, not ours
            for port in pod.ports:
                holders = [p for p in node.pods if port in p.ports]
                assert len(holders) == 1, f"{node.name}: host port {port} taken twice"


def check_anti_affinity(nodes: Mapping[str, Node]) -> None:
    placed = [(node, p) for node in nodes.values() for p in node.pods if p.kind is not None]
    for node, pod in placed:
        for other_node, other in placed:
            if other is pod or not (pod.pending or other.pending):
                continue
            assert pod.kind is not None
            assert other.kind is not None
            # Either pod's term, matching the other's labels, in a shared domain.
            for owner, target in ((pod.kind, other.kind), (other.kind, pod.kind)):
                key = owner.anti_key
                if key is None or target.app != owner.app:
                    continue
                mine, theirs = node.labels.get(key), other_node.labels.get(key)
                assert mine is None or mine != theirs, (
                    f"anti-affinity {owner.app} over {key}: {node.name} and {other_node.name}"
                )


def check_spread(nodes: Mapping[str, Node], workload: Workload) -> None:
    everyone = [(node, p) for node in nodes.values() for p in node.pods if p.kind is not None]
    for kind in set(workload.pending):
        key = kind.spread_key
        if key is None:
            continue
        matching = [(node, p) for node, p in everyone if p.kind and p.kind.app == kind.app]
        if any(p.kind.spread_key != key or p.kind.max_skew != kind.max_skew for _, p in matching):
            continue  # a pod the constraint does not bind may go anywhere and skew it
        unplaced = sum(1 for k in workload.pending if k.app == kind.app) - sum(
            1 for _, p in matching if p.pending
        )
        if unplaced or not all(node.opened for node, _ in matching):
            continue  # only pods that all went to new nodes are judged
        domains: dict[str, int] = {}
        for node in nodes.values():
            if key in node.labels:
                domains.setdefault(node.labels[key], 0)
        for node, _ in matching:
            domains[node.labels[key]] += 1
        skew = max(domains.values()) - min(domains.values())
        assert skew <= kind.max_skew, f"spread of {kind.app} over {key}: {domains}"


def check_no_node_opened_for_nothing(
    nodes: Mapping[str, Node], outcome: SimulationOutcome, workload: Workload
) -> None:
    for pool in workload.pools:
        up = outcome.pools[pool.name]
        taken = len(workload.existing) if pool is workload.pools[0] else 0
        new = [nodes[pool.node(taken + pool.in_flight + k)[0]] for k in range(up.wanted_nodes)]
        busy = [any(p.pending for p in node.pods) for node in new]
        for k, node in enumerate(new):
            # Each new node is opened in the zone its pod needs: none is a filler.
            assert busy[k], f"{node.name} opened and left empty"


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(workloads())
def test_no_node_is_over_its_allocatable(workload: Workload) -> None:
    _, nodes = run(workload)
    check_resources(nodes)


@SETTINGS
@given(workloads())
def test_no_host_port_is_taken_twice_on_a_node(workload: Workload) -> None:
    _, nodes = run(workload)
    check_ports(nodes)


@SETTINGS
@given(workloads())
def test_no_anti_affinity_pair_shares_a_domain(workload: Workload) -> None:
    _, nodes = run(workload)
    check_anti_affinity(nodes)


@SETTINGS
@given(workloads())
def test_no_node_is_opened_and_left_empty(workload: Workload) -> None:
    outcome, nodes = run(workload)
    check_no_node_opened_for_nothing(nodes, outcome, workload)


SPILLING_REPLICAS = Workload(
    pools=(Pool(name="p", cpu=4, weight=0, headroom=6, in_flight=0, zones=()),),
    existing=(),
    daemon_cpu=0,
    daemon_port=False,
    pending=(Kind(app="a", cpu=1000, constraint="spread-host"),) * 6,
)


# Found by hypothesis: a hostname spread whose pods also fit the node already coming took
# four rounds before the nodes it opened stopped changing (three were allowed).
SPREADING_NEXT_TO_A_NODE_IN_FLIGHT = Workload(
    pools=(
        Pool(name="p", cpu=8, weight=0, headroom=0, in_flight=1, zones=()),
        Pool(name="q", cpu=2, weight=0, headroom=0, in_flight=0, zones=()),
    ),
    existing=(),
    daemon_cpu=0,
    daemon_port=False,
    pending=(Kind(app="c", cpu=500, constraint="spread-host", max_skew=2),) * 5
    + (Kind(app="c", cpu=1000, constraint="spread-host", max_skew=2),) * 7,
)


@SETTINGS
@example(SPILLING_REPLICAS)
@example(SPREADING_NEXT_TO_A_NODE_IN_FLIGHT)
@given(workloads())
def test_spread_on_new_nodes_stays_within_max_skew(workload: Workload) -> None:
    _, nodes = run(workload)
    check_spread(nodes, workload)


@SETTINGS
@given(workloads())
def test_every_pending_pod_is_placed_or_unfit_never_both(workload: Workload) -> None:
    outcome, _ = run(workload)
    for index, where in enumerate(outcome.placements):
        assert (where is None) == (index in outcome.unfit), index
