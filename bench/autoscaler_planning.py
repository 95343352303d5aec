"""How long the Autoscaler's scheduling simulation takes for 10,000 and 50,000 pending pods.

Planning is the pure part of a scan: ``simulation.simulate`` places every pending pod as
kube-scheduler's filters would, on the free room of the nodes there, the nodes in flight
and new template nodes of two pools (one over three zones, with a DaemonSet on every
node). The controller runs it in a worker thread, so the event loop keeps serving watches
and the lease; its time is the time a decision waits. Three pod mixes:

* ``deployments``: 8 distinct pod shapes (a handful of Deployments), the common case,
  placed a node's worth at a time;
* ``random``: every pod a different cpu/memory request, the worst case for grouping;
* ``constraints``: Deployments of 50 replicas, each with one of: required anti-affinity
  over hostname, topology spread over zone or hostname, a host port, a zone pinned by
  nodeSelector, a toleration, or nothing; pods of a Deployment are placed one by one;
* ``statefulsets``: StatefulSets of 50 replicas spread over zones (maxSkew 1), each pod
  with its own ``statefulset.kubernetes.io/pod-name`` label, as every StatefulSet pod has;
* ``statefulsets-equal-labels``: the same pods without the pod-name label, the yardstick
  for what unique labels no selector reads may cost.

four where the new nodes' offerings are chosen by price (``simulation.priced_packing``,
the step after the filters: pending pods, grouped by request and allowed offerings,
packed onto a generic catalog of 100 instance types in three zones, on-demand and spot:
600 offerings, ``tests/priced_mixes.py``), each
with its price against the lower bound (``simulation.price_bound``, computed after the
clock stops, on a grid of 4 steps) and against Karpenter's rule (largest type, then the
cheapest that holds each node's pods):

* ``priced-mixed-sizes``: 12 Deployments from 250m to 30 cpu, cpu-heavy, memory-heavy,
  balanced and tiny; ``priced-small``: 8 Deployments of 100m-1 cpu (pod slots bind);
  ``priced-random``: every pod its own request (50m-4 cpu, 64Mi-16Gi); ``priced-zonal``:
  the mixed sizes with a third of the Deployments pinned to one zone;

and one case where the cost is the cluster, not the pending pods:

* ``burst-on-large-cluster``: ``bench/scale.py --fractions 1.0``'s burst: 1,000 pools
  without zones (4 cpu, 16Gi; 5 Nodes each with 10 running pods of 300m/1Gi, room for
  5 more Nodes), and 1,000 pending pods of 1500m/2Gi, 10 on each of the first 100 pools
  by a nodeSelector naming it. Its pending count is fixed, so it runs once, at the
  first size.

Profiles are parsed before the clock starts (the operator caches them per pod
resourceVersion, so a scan re-parses only pods that changed). Each case is run
``--repeat`` times; min and median are printed.

Run:  .venv/bin/python bench/autoscaler_planning.py [--sizes 10000 50000] [--repeat 3]
      [--mixes deployments random ...]

``--fingerprint`` prints, per mix, a sha256 of the serialised outcome instead of times:
every pool's new and wanted nodes, zones and hosted pods, and every pod's placement or
unfit reason. A refactoring that must not change a plan prints the same line before and
after (run once, at ``--sizes 2000``).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import random
import statistics
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler import constraints, simulation

# The constraint kinds are built by the same code the e2e and differential tests use.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import priced_mixes
import workloads
from nodepool_operator.controllers.autoscaler.simulation import price_bound, priced_packing

GI = 1024**3
ZONES = ("zone-a", "zone-b", "zone-c")
TEMPLATE = nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=110, zones=ZONES)
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
PRICED_MIXES = ("priced-mixed-sizes", "priced-small", "priced-random", "priced-zonal")
PRICED_TYPES = 100
MIXES = (
    *PRICED_MIXES,
    "deployments",
    "random",
    "constraints",
    "statefulsets",
    "statefulsets-equal-labels",
    "burst-on-large-cluster",
)
#: The mixes whose world is their own, with this many pending pods whatever the size.
FIXED_PENDING = {"burst-on-large-cluster": 1_000}
LARGE_POOLS, LARGE_NODES_PER_POOL, LARGE_PODS_PER_NODE, LARGE_BURST_POOLS = 1_000, 5, 10, 100


def pod(name: str, cpu: int, memory: int, *, labels: Mapping[str, str], **spec: Any) -> Any:
    port = spec.pop("host_port", None)
    made = workloads.container(f"{cpu}m", memory=str(memory), host_port=port)
    return constraints.profile_of(
        {
            "metadata": {"name": name, "namespace": "bench", "labels": dict(labels)},
            "spec": {"containers": [made], **spec},
        }
    )


def constrained(index: int, kind: str, rng: random.Random) -> dict[str, Any]:
    labels = {"app": f"d{index}"}
    spec = workloads.constrain(
        kind,
        labels,
        zone=rng.choice(ZONES) if kind == "zone-pin" else ZONES[0],
        toleration={"key": "dedicated", "operator": "Exists"},
    )
    if kind == "host-port":
        spec["host_port"] = 9000 + index
    return {"labels": labels, **spec}


def pods(mix: str, *, count: int, rng: random.Random) -> list[constraints.PodProfile]:
    if mix == "deployments":
        shapes = [
            (rng.choice([100, 250, 500, 1000, 2000]), rng.choice([1, 2, 4, 8]) * GI // 4)
            for _ in range(8)
        ]
        made = {s: pod("p", *s, labels={"app": str(s)}) for s in shapes}
        return [made[rng.choice(shapes)] for _ in range(count)]
    if mix == "random":
        return [
            pod(
                f"p{i}",
                rng.randrange(50, 2000),
                rng.randrange(64, 8192) * 1024**2,
                labels={"app": f"p{i}"},
            )
            for i in range(count)
        ]
    if mix.startswith("statefulsets"):
        return stateful_sets(count, rng=rng, unique=mix == "statefulsets")
    found = []
    for index in range(count // 50):
        spec = constrained(index, rng.choice(workloads.KINDS), rng)
        labels = spec.pop("labels")
        profile = pod(
            f"d{index}",
            rng.choice([100, 250, 500]),
            rng.choice([1, 2]) * GI // 4,
            labels=labels,
            **spec,
        )
        found.extend([profile] * 50)
    return found


def stateful_sets(count: int, *, rng: random.Random, unique: bool) -> list[Any]:
    found = []
    for index in range(count // 50):
        name = f"s{index}"
        selector = {"app": name}
        cpu, memory = rng.choice([100, 250, 500]), rng.choice([1, 2]) * GI // 4
        spread = workloads.constrain("spread-zone", selector, zone=ZONES[0], toleration={})
        shared = pod(name, cpu, memory, labels=selector, **spread)
        for ordinal in range(50):
            if unique:
                labels = {**selector, POD_NAME_LABEL: f"{name}-{ordinal}"}
                found.append(pod(f"{name}-{ordinal}", cpu, memory, labels=labels, **spread))
            else:
                found.append(shared)
    return found


def pools(count: int) -> list[simulation.PoolTemplate]:
    def upcoming(pool: str, template: nodepool_api.NodeTemplate) -> Any:
        def at(k: int, zone: str | None) -> tuple[str, Mapping[str, str]]:
            name = f"{pool}-{50 + k}"
            labels = nodepool_api.node_labels(pool, template, zone=zone)
            return name, {**labels, wellknown.HOSTNAME_LABEL: name}

        return at

    tainted = nodepool_api.NodeTemplate(
        cpu="8",
        memory="32Gi",
        pods=110,
        taints=(nodepool_api.Taint(key="dedicated", effect="NoSchedule"),),
    )
    return [
        simulation.PoolTemplate(
            name=name,
            weight=weight,
            taints=tuple(
                constraints.NodeTaint(t.key, t.value or "", t.effect) for t in template.taints
            ),
            allocatable=nodepool_api.template_allocatable(template),
            upcoming=upcoming(name, template),
            in_flight=20,
            headroom=count,  # never the limit: the whole simulation is measured
            zones=max(1, len(template.zones)),
            namespaces=None,
            zoning=simulation.PoolZones(
                names=template.zones,
                counts={z: 50 // len(ZONES) + (i < 50 % len(ZONES)) for i, z in enumerate(ZONES)}
                if template.zones
                else {},
            ),
        )
        for name, template, weight in (("general", TEMPLATE, 0), ("dedicated", tainted, 10))
    ]


def nodes(rng: random.Random) -> list[simulation.ExistingNode]:
    found = []
    for i in range(50):
        name = f"general-{i}"
        labels = nodepool_api.node_labels("general", TEMPLATE, zone=ZONES[i % len(ZONES)])
        busy = pod("busy", rng.randrange(0, 4000), rng.randrange(0, 16) * GI, labels={})
        found.append(
            simulation.ExistingNode(
                name=name,
                pool="general",
                labels={**labels, wellknown.HOSTNAME_LABEL: name},
                taints=(),
                unschedulable=False,
                allocatable=nodepool_api.template_allocatable(TEMPLATE),
                pods=(busy,),
            )
        )
    return found


DAEMON = simulation.DaemonSetView(
    "agent",
    constraints.profile_of(
        {
            "metadata": {"name": "agent", "namespace": "kube-system", "labels": {"app": "agent"}},
            "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "100m"}}}]},
        },
        extra_tolerations=constraints.DAEMON_TOLERATIONS,
    ),
)


def large_cluster() -> tuple[
    list[simulation.ExistingNode], list[simulation.PoolTemplate], list[constraints.PodProfile]
]:
    """``burst-on-large-cluster``: its Nodes, pools and pending pods."""
    template = nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=110)
    allocatable = nodepool_api.template_allocatable(template)

    def labels(pool: str, name: str) -> dict[str, str]:
        found = nodepool_api.node_labels(pool, template, zone=None)
        return {**found, wellknown.HOSTNAME_LABEL: name}

    def upcoming(pool: str) -> Any:
        def at(k: int, zone: str | None) -> tuple[str, Mapping[str, str]]:
            name = f"{pool}-{LARGE_NODES_PER_POOL + k}"
            return name, labels(pool, name)

        return at

    existing, templates = [], []
    for index in range(LARGE_POOLS):
        pool = f"pool-{index:04d}"
        for k in range(LARGE_NODES_PER_POOL):
            name = f"{pool}-{k}"
            running = pod(f"{name}-app", 300, GI, labels={"app": f"{name}-app"})
            existing.append(
                simulation.ExistingNode(
                    name=name,
                    pool=pool,
                    labels=labels(pool, name),
                    taints=(),
                    unschedulable=False,
                    allocatable=allocatable,
                    pods=(running,) * LARGE_PODS_PER_NODE,
                )
            )
        templates.append(
            simulation.PoolTemplate(
                name=pool,
                weight=0,
                taints=(),
                allocatable=allocatable,
                upcoming=upcoming(pool),
                in_flight=0,
                headroom=LARGE_NODES_PER_POOL,  # maxNodes is twice the target
                zones=1,
                namespaces=frozenset({"bench"}),
            )
        )
    pending = [
        pod(
            f"burst-{i}",
            1500,
            2 * GI,
            labels={"app": "burst"},
            nodeSelector={wellknown.POOL_LABEL: f"pool-{i % LARGE_BURST_POOLS:04d}"},
        )
        for i in range(FIXED_PENDING["burst-on-large-cluster"])
    ]
    return existing, templates, pending


def measure(
    mix: str, *, count: int, repeat: int
) -> tuple[list[float], list[float], simulation.SimulationOutcome]:
    """Wall-clock and CPU seconds of each run, and the outcome."""
    rng = random.Random(42)
    daemon_sets = [DAEMON]
    if mix in FIXED_PENDING:
        existing, templates, pending = large_cluster()
        daemon_sets = []
    else:
        existing, pending = nodes(rng), pods(mix, count=count, rng=rng)
        templates = pools(count)
    wall: list[float] = []
    cpu: list[float] = []
    outcome = None
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        outcome = simulation.simulate(
            pending, nodes=existing, pools=templates, daemon_sets=daemon_sets
        )
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    assert outcome is not None
    return wall, cpu, outcome


def fingerprint(outcome: simulation.SimulationOutcome) -> str:
    """sha256 of the outcome serialised with sorted keys: equal plans, equal digests."""
    serialised = json.dumps(
        {
            "pools": {name: dataclasses.asdict(pool) for name, pool in outcome.pools.items()},
            "placements": outcome.placements,
            "unfit": {str(index): reason for index, reason in outcome.unfit.items()},
        },
        sort_keys=True,
    )
    return hashlib.sha256(serialised.encode()).hexdigest()


def print_fingerprints(sizes: list[int], mixes: list[str]) -> None:
    for count in sizes:
        for mix in mixes:
            if (mix in FIXED_PENDING and count != sizes[0]) or mix in PRICED_MIXES:
                continue
            pending = FIXED_PENDING.get(mix, count)
            _, _, outcome = measure(mix, count=pending, repeat=1)
            print(f"{pending} {mix} {fingerprint(outcome)}", flush=True)


def measure_priced(
    mix: str, *, count: int, repeat: int
) -> tuple[list[float], priced_packing.PackingPlan, float, float]:
    """CPU seconds of each cost-aware plan, the plan, the lower bound and the price of
    Karpenter's rule (largest, then cheapest) on the same pods."""
    candidates = priced_mixes.catalog(PRICED_TYPES)
    demands = priced_mixes.mix(mix.removeprefix("priced-"), count, random.Random(42), candidates)
    cpu: list[float] = []
    plan = None
    for _ in range(repeat):
        started = time.process_time()
        plan = priced_packing.plan_cheapest(demands, candidates)
        cpu.append(time.process_time() - started)
    assert plan is not None
    bound = price_bound.price_lower_bound(demands, candidates, steps=4)
    largest = priced_packing.pack(demands, candidates, priced_packing.LARGEST).price
    return cpu, plan, bound, largest


def main_priced(sizes: list[int], repeat: int, mixes: list[str]) -> None:
    print(
        "| pending pods | mix | offerings | new nodes | $/h | lower bound | to the bound "
        "| Karpenter's rule | strategy kept | CPU min | CPU median |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    offerings = len(priced_mixes.catalog(PRICED_TYPES))
    for count in sizes:
        for mix in mixes:
            cpu, plan, bound, largest = measure_priced(mix, count=count, repeat=repeat)
            print(
                f"| {count:,} | {mix} | {offerings} | {len(plan.nodes):,} | {plan.price:,.2f} "
                f"| {bound:,.2f} | {plan.price / bound:.3f}x | {largest / bound:.3f}x "
                f"| {plan.strategy} | {min(cpu) * 1000:.0f} ms "
                f"| {statistics.median(cpu) * 1000:.0f} ms |",
                flush=True,
            )


def main(sizes: list[int], repeat: int, mixes: list[str]) -> None:
    priced = [mix for mix in mixes if mix in PRICED_MIXES]
    if priced:
        main_priced(sizes, repeat, priced)
        print()
    mixes = [mix for mix in mixes if mix not in PRICED_MIXES]
    if not mixes:
        return
    # CPU time is what the simulation itself costs; on a machine shared with other work
    # the wall-clock time also holds the time other processes had the core.
    print("| pending pods | mix | new nodes | unplaceable | min | median | CPU min | CPU median |")
    print("|---|---|---|---|---|---|---|---|")
    for count in sizes:
        for mix in mixes:
            if mix in FIXED_PENDING and count != sizes[0]:
                continue
            pending = FIXED_PENDING.get(mix, count)
            wall, cpu, outcome = measure(mix, count=pending, repeat=repeat)
            new = sum(p.new_nodes for p in outcome.pools.values())
            print(
                f"| {pending:,} | {mix} | {new:,} | {len(outcome.unfit):,} "
                f"| {min(wall) * 1000:.0f} ms | {statistics.median(wall) * 1000:.0f} ms "
                f"| {min(cpu) * 1000:.0f} ms | {statistics.median(cpu) * 1000:.0f} ms |",
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mixes", nargs="+", choices=MIXES, default=list(MIXES))
    parser.add_argument("--fingerprint", action="store_true", help="print plan digests")
    arguments = parser.parse_args()
    if arguments.fingerprint:
        print_fingerprints(arguments.sizes, arguments.mixes)
    else:
        main(arguments.sizes, arguments.repeat, arguments.mixes)
