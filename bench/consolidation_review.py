"""CPU of one consolidation review per batch: 1,000 nodes, 150 candidates, one pool.

The Autoscaler reviews every pool's underused nodes in every batch
(``Consolidator.propose`` then ``apply``, formerly ``Consolidator.review``: read the
pool's node views, choose the candidates with the scheduling simulation, keep their stamps
and taints). This measures the CPU time of one review of one pool of 1,000 Nodes (4 cpu,
16Gi), of which 850 are busy (two 1200m/2Gi replicas each: 60%, above the default 50%
threshold) and 150 are candidates: one 1-cpu/1Gi replica each (25%), movable, and fitting
on the busy nodes' free room. Every candidate carries a recent ``unneeded-since`` stamp
(``unneededSeconds`` 600 not reached), so a review writes nothing: what is timed is the
decision alone, never an API round trip. Two situations:

* ``nothing changed``: the review after a review, with no Node and no pod changed;
* ``a pod on a busy node changed``: one pod changed (a new resourceVersion and label, as
  a watch delivers a pod's update), on a node that is no candidate;
* ``k changed``: before the review, one pod on each of k candidates changed, k = 1, 10,
  150.

The world is built in memory: the objects live in ``runtime.testing.FakeApiServer`` (the
client the review writes and lists through), and the informers are the runtime's own
``Informer``, filled from it and fed each change as its watch would deliver it. Not
``testing.FakeInformer``: its ``index_stamp`` moves on every read (so nothing a review
reads is ever kept) and its ``by_index`` copies the whole store, which would time the fake.
The plan the review is given (the whole cluster's nodes, as ``PlanMaker.plan`` sees them)
is made by the Autoscaler's own planner over those informers, outside the timed section,
again after every change. ``build`` makes the world; ``review_once`` is the one call
timed (the controller's calls, as ``PoolDecider.decide`` makes them).

Each row is the median (and min, max) of ``--repeat`` reviews, after one untimed warm-up
review; CPU time is ``time.process_time``. The target (issue 45): at most 100 ms when
nothing changed, and linear in the candidates that did.

Run:  .venv/bin/python bench/consolidation_review.py [--nodes 1000] [--candidates 150]
      [--changed 1 10 150] [--repeat 5]

Before: ``Consolidator.review`` at 7779759 (one scheduling simulation per candidate,
of all the pods chosen so far, over the whole cluster), this bench at bcf499b, on the
2-core development machine, other sessions' builds and tests beside it (load 3.5 to 4):

    $ PYTHONPATH=<checkout of 7779759>/src .venv/bin/python bench/consolidation_review.py
    1000 nodes, 150 candidates, one pool; CPU ms per review

    | situation | median ms | min ms | max ms | median ms per changed candidate |
    |---|---:|---:|---:|---:|
    | nothing changed | 2,418 | 2,289 | 2,556 | - |
    | a pod on a busy node changed | 2,620 | 2,443 | 2,821 | - |
    | 1 candidate changed | 2,842 | 2,711 | 3,100 | 2,841.8 |
    | 10 candidates changed | 2,934 | 2,812 | 2,997 | 293.4 |
    | 150 candidates changed | 2,796 | 2,606 | 2,909 | 18.6 |

About 2.4 to 2.9 s whatever changed: the 150 simulations are the cost (cProfile of one
review: ``simulate`` is 99% of it, most of each call building the 1,000-node cluster
state again; reading the node views is negligible).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler.config import AutoscalerConfig
from nodepool_operator.controllers.autoscaler.consolidator import PDBS, Consolidator, PoolTurn
from nodepool_operator.controllers.autoscaler.decide import batch_plan, scaling
from nodepool_operator.controllers.autoscaler.decide.batch_plan import Observation
from nodepool_operator.controllers.autoscaler.decide.consolidation_rules import Review
from nodepool_operator.controllers.autoscaler.setup import Reads, planner_reads
from nodepool_operator.controllers.resources import AUTOSCALERS, NODEPOOLS
from nodepool_operator.runtime import conditions, kinds, testing
from nodepool_operator.runtime.client import Object, Resource
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import Informer, Transform, object_key

POOL = "bench"
AUTOSCALER = "nas-bench"
NAMESPACE = "apps"
TEMPLATE = nodepool_api.NodeTemplate(cpu="4", memory="16Gi", pods=110)
BUSY_PODS = (("1200m", "2Gi"), ("1200m", "2Gi"))  # 60% of a node: never a candidate
CANDIDATE_POD = ("1", "1Gi")  # 25%: a candidate, fits on any busy node's free room
UNNEEDED_SECONDS = 600


class WatchedInformer(Informer):
    """The runtime's informer, holding what the fake server stores, and taking each
    change as its watch would deliver it (indexes, their stamps and the informer's
    resourceVersion kept up to date)."""

    def listed_at(self, version: str) -> None:
        """The resourceVersion of the LIST it was filled from."""
        self._resource_version = version

    def deliver(self, obj: Object) -> None:
        key, fresh = object_key(obj), self.transform(obj)
        old = self._store.get(key)
        self._put(key, fresh)
        self._resource_version = str(obj["metadata"]["resourceVersion"])
        if old is None:
            self._emit_add(fresh)
        else:
            self._emit_update(old, fresh)


class ServerCache:
    """The manager cache's surface (``InformerSource``) over a ``FakeApiServer``."""

    def __init__(self, server: testing.FakeApiServer) -> None:
        self.server = server
        self.informers: dict[str, WatchedInformer] = {}

    def informer(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform = lambda obj: obj,
    ) -> Informer:
        found = self.informers.get(resource.plural)
        if found is None:
            made = WatchedInformer.holding(
                resource, self.server.stored(resource.plural), transform=transform
            )
            assert isinstance(made, WatchedInformer)  # holding() builds its own class
            made.listed_at(self.server.resource_version)
            found = self.informers[resource.plural] = made
        return found


@dataclass
class World:
    server: testing.FakeApiServer
    cache: ServerCache
    reads: Reads
    consolidator: Consolidator
    autoscaler: Object
    candidates: list[str]  # the candidates' pod names, one per candidate node
    busy: str  # a pod on a busy node (no candidate)
    seen: Observation | None = None


def _node(name: str, *, pool_uid: str, stamped_at: float | None) -> Object:
    room = {"cpu": TEMPLATE.cpu, "memory": TEMPLATE.memory, "pods": str(TEMPLATE.pods)}
    annotations = {}
    if stamped_at is not None:
        annotations[wellknown.UNNEEDED_SINCE_ANNOTATION] = conditions.rfc3339(stamped_at)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                **nodepool_api.node_labels(POOL, TEMPLATE),
                wellknown.HOSTNAME_LABEL: name,
            },
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": nodepool_api.API_VERSION,
                    "kind": nodepool_api.KIND,
                    "name": POOL,
                    "uid": pool_uid,
                }
            ],
        },
        "spec": {},
        "status": {
            "allocatable": room,
            "capacity": room,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _pod(name: str, node: str, cpu: str, memory: str) -> Object:
    replica_set = name.rsplit("-", 1)[0]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"app": replica_set},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": replica_set,
                    "uid": f"uid-{replica_set}",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
            ],
        },
        "status": {"phase": "Running"},
    }


def _objects(server: testing.FakeApiServer, *, nodes: int, candidates: int) -> list[str]:
    """Store the pool, its Autoscaler, its Nodes and their pods; the candidates' pods."""
    policy = autoscaler_api.ScaleDownPolicy(enabled=True, unneeded_seconds=UNNEEDED_SECONDS)
    spec = autoscaler_api.AutoscalerSpec(node_pool_name=POOL, scale_down=policy)
    autoscaler = autoscaler_api.manifest(AUTOSCALER, spec)
    # Watching for an hour: the candidates' stamps (a minute old) were made under it.
    started = conditions.rfc3339(server.wall_clock.time() - 3600)
    autoscaler["metadata"]["creationTimestamp"] = started
    server.put(AUTOSCALERS.plural, autoscaler)
    pool_spec = nodepool_api.NodePoolSpec(
        target_nodes=nodes, min_nodes=0, max_nodes=nodes, template=TEMPLATE
    )
    pool = server.put(NODEPOOLS.plural, nodepool_api.manifest(POOL, pool_spec))
    # Stamped a minute ago: unneeded, not for long enough to be tainted or named.
    stamped_at = server.wall_clock.time() - 60
    moving: list[str] = []
    for index in range(nodes):
        name = f"{POOL}-{index:04d}"
        candidate = index % (nodes // candidates) == 0 and len(moving) < candidates
        node = _node(
            name, pool_uid=pool["metadata"]["uid"], stamped_at=stamped_at if candidate else None
        )
        server.put(kinds.NODES.plural, node)
        if candidate:
            moving.append(f"light-{index:04d}-0")
            server.put(kinds.PODS.plural, _pod(moving[-1], name, *CANDIDATE_POD))
            continue
        for number, (cpu, memory) in enumerate(BUSY_PODS):
            server.put(kinds.PODS.plural, _pod(f"busy-{index:04d}-{number}", name, cpu, memory))
    return moving


def build(*, nodes: int, candidates: int) -> World:
    """The cluster in memory, the Autoscaler's planner over it, and its Consolidator."""
    server = testing.FakeApiServer(field_manager="autoscaler-controller")
    moving = _objects(server, nodes=nodes, candidates=candidates)
    cache = ServerCache(server)
    reads = planner_reads(cache, config=AutoscalerConfig(), wall_clock=server.wall_clock)
    consolidator = Consolidator(
        client=server,  # type: ignore[arg-type]
        nodes=reads.nodes,
        pods=reads.pods,
        budgets=cache.informer(PDBS),
        profile=reads.plan_maker.cache.get,
        recorder=EventRecorder(server, component="bench"),  # type: ignore[arg-type]
        wall_clock=server.wall_clock,
    )
    autoscaler = reads.autoscalers.get(AUTOSCALER)
    assert autoscaler is not None
    busy = f"busy-{nodes - 1:04d}-0"
    assert busy.replace("busy", "light") not in moving
    return World(server, cache, reads, consolidator, autoscaler, moving, busy)


async def observe(world: World) -> Observation:
    """The planner's plan, as a batch makes it before any pool's review (not timed)."""
    made = await world.reads.plan_maker.plan()
    seen = batch_plan.part_of(made, AUTOSCALER, autoscaler_api.spec_of(world.autoscaler))
    assert isinstance(seen, Observation), seen
    world.seen = seen
    return seen


async def review_once(world: World, seen: Observation) -> Review:
    """One review of the pool: the batch's choice (``Consolidator.choose``, for this one
    pool) and the pool's pass from it (``Consolidator.propose``, then ``apply``), as the
    planner and ``PoolDecider`` make them."""
    spec = autoscaler_api.spec_of(world.autoscaler)
    blocked = scaling.scale_down_blocker(
        seen.pool, enabled=spec.scale_down.enabled, pending_fitting=seen.pending_fitting
    )
    assert blocked is None, f"scale-down is blocked ({blocked}): nothing would be measured"
    turn = PoolTurn(
        pool=seen.pool.name,
        pool_uid=seen.pool_uid,
        room=max(0, seen.pool.target - seen.pool.min_nodes),
        policy=spec.scale_down,
        blocked=blocked,
    )
    choices = await world.consolidator.choose(
        [turn], cluster=seen.cluster, daemon_sets=seen.daemon_sets
    )
    proposal = world.consolidator.propose(world.autoscaler, turn, choices[turn.pool])
    await world.consolidator.apply(proposal)
    return proposal.review


def change(world: World, pods: Iterable[str], *, mark: str) -> None:
    """A label change on each pod, delivered to the informer as its watch would."""

    def relabel(obj: Object) -> None:
        obj["metadata"].setdefault("labels", {})["bench/round"] = mark

    informer = world.cache.informers[kinds.PODS.plural]
    for name in pods:
        informer.deliver(world.server.edit(kinds.PODS.plural, name, relabel, NAMESPACE))


async def timed(world: World, pods: Sequence[str], *, repeat: int) -> list[float]:
    """CPU seconds of ``repeat`` reviews, each after the ``pods`` changed."""
    spent = []
    for round_ in range(repeat):
        change(world, pods, mark=f"{len(pods)}-{round_}")
        seen = await observe(world) if pods else world.seen
        assert seen is not None
        writes = len(world.server.writes())
        started = time.process_time()
        review = await review_once(world, seen)
        spent.append(time.process_time() - started)
        assert review.candidates == len(world.candidates), review
        assert len(world.server.writes()) == writes, "a review wrote: it would time the API"
    return spent


def row(label: str, spent: Sequence[float], changed: int) -> str:
    median = statistics.median(spent)
    per_change = f"{median / changed * 1000:,.1f}" if changed else "-"
    return (
        f"| {label} | {median * 1000:,.0f} | {min(spent) * 1000:,.0f} | "
        f"{max(spent) * 1000:,.0f} | {per_change} |"
    )


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000, help="Nodes in the pool")
    parser.add_argument("--candidates", type=int, default=150, help="of them, candidates")
    parser.add_argument(
        "--changed",
        type=int,
        nargs="+",
        default=[1, 10, 150],
        help="how many candidates change before a review (one row each)",
    )
    parser.add_argument("--repeat", type=int, default=5, help="reviews per row (the median)")
    args = parser.parse_args(argv)
    world = build(nodes=args.nodes, candidates=args.candidates)
    seen = await observe(world)
    warm = await review_once(world, seen)  # fills the views and profiles a running one has
    assert warm.candidates == args.candidates, warm
    print(f"{args.nodes} nodes, {args.candidates} candidates, one pool; CPU ms per review\n")
    print("| situation | median ms | min ms | max ms | median ms per changed candidate |")
    print("|---|---:|---:|---:|---:|")
    steady = await timed(world, (), repeat=args.repeat)
    print(row("nothing changed", steady, 0))
    elsewhere = await timed(world, [world.busy], repeat=args.repeat)
    print(row("a pod on a busy node changed", elsewhere, 0))
    for asked in args.changed:
        changed = min(asked, args.candidates)
        spent = await timed(world, world.candidates[:changed], repeat=args.repeat)
        print(row(f"{changed} candidate{'s' if changed > 1 else ''} changed", spent, changed))


if __name__ == "__main__":
    asyncio.run(main())
