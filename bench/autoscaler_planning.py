"""How long the Autoscaler's planning takes for 10,000 and 50,000 pending pods.

Planning is the pure part of a scan: first-fit-decreasing packing of the unschedulable
pods onto the free room of Ready nodes, the nodes in flight and new template nodes, and
the decision that follows (``plan.decide``). The controller runs it in a worker thread
(``asyncio.to_thread``), so the event loop keeps serving watches and the lease; its time
is the time a decision waits. Two pod mixes:

* ``deployments``: 8 distinct request shapes (pods of a handful of Deployments), the
  common case, which the packer places a whole group at a time;
* ``random``: every pod a different cpu/memory request, the worst case for grouping.

The pool has 50 Ready nodes with random free room and 20 nodes in flight, and a 4 cpu /
16 GiB template. Each case is run ``--repeat`` times; min and median are printed.

Run:  .venv/bin/python bench/autoscaler_planning.py [--sizes 10000 50000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from nodepool_operator.api import nodepool as np
from nodepool_operator.controllers.autoscaler import plan
from nodepool_operator.controllers.autoscaler.fit import NodeShape, Resources

GI = 1024**3
SHAPE = NodeShape.of_pool("bench", np.NodeTemplate(cpu="4", memory="16Gi", pods=110))


def pods(mix: str, *, count: int, rng: random.Random) -> list[Resources]:
    if mix == "deployments":
        shapes = [
            Resources(
                cpu=rng.choice([100, 250, 500, 1000, 2000]),
                memory=rng.choice([1, 2, 4, 8]) * GI // 4,
            )
            for _ in range(8)
        ]
        return [rng.choice(shapes) for _ in range(count)]
    return [
        Resources(cpu=rng.randrange(50, 2000), memory=rng.randrange(64, 8192) * 1024**2)
        for _ in range(count)
    ]


def pool(rng: random.Random, count: int) -> plan.PoolFacts:
    free = tuple(
        Resources(
            cpu=rng.randrange(0, 4000), memory=rng.randrange(0, 16) * GI, pods=rng.randrange(0, 110)
        )
        for _ in range(50)
    )
    return plan.PoolFacts(
        name="bench",
        min_nodes=0,
        max_nodes=count,  # never the limit: the whole packing is measured
        target=70,
        ready=50,
        free=free,
        shape=SHAPE,
        open_request=False,
    )


def measure(mix: str, *, count: int, repeat: int) -> tuple[list[float], plan.Decision]:
    rng = random.Random(42)
    facts, requests = pool(rng, count), pods(mix, count=count, rng=rng)
    times: list[float] = []
    decision = None
    for _ in range(repeat):
        started = time.perf_counter()
        decision = plan.decide(facts, requests, unneeded=[], unneeded_seconds=600, blocked=None)
        times.append(time.perf_counter() - started)
    assert decision is not None
    return times, decision


def main(sizes: list[int], repeat: int) -> None:
    print("| pending pods | mix | nodes asked for | min | median |")
    print("|---|---|---|---|---|")
    for count in sizes:
        for mix in ("deployments", "random"):
            times, decision = measure(mix, count=count, repeat=repeat)
            print(
                f"| {count:,} | {mix} | {decision.target - decision.current:,} "
                f"| {min(times) * 1000:.0f} ms | {statistics.median(times) * 1000:.0f} ms |",
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000])
    parser.add_argument("--repeat", type=int, default=5)
    arguments = parser.parse_args()
    main(arguments.sizes, arguments.repeat)
