"""Workqueue operations per second, next to asyncio.Queue as the naive baseline.

    .venv/bin/python bench/runtime_queue.py [--keys 20000] [--repeat 5]

Each row is the best of ``--repeat`` runs over ``--keys`` operations, on the real clock, with
the Prometheus metrics the queue keeps on every operation. The baseline is what a
controller without a workqueue would use: a FIFO that neither deduplicates keys, nor keeps
a key from two workers at once, nor delays or rate-limits anything. Its put+get is the floor
any queue pays in Python; the ratio column says how many times that floor each row costs.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import platform
import sys
import time
from collections.abc import Awaitable, Callable

from nodepool_operator.runtime import clock, workqueue

_names = itertools.count()


def _queue() -> workqueue.WorkQueue[str]:
    return workqueue.WorkQueue(name=f"bench-{next(_names)}", clock=clock.RealClock())


async def baseline_put_get(keys: list[str]) -> float:
    """asyncio.Queue: put then get each key (no dedup, no in-flight set, no metrics)."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    started = time.perf_counter()
    for key in keys:
        queue.put_nowait(key)
    for _ in keys:
        await queue.get()
        queue.task_done()
    return time.perf_counter() - started


async def add_get_done(keys: list[str]) -> float:
    """WorkQueue: add, then get and done, each of N distinct keys: one full cycle per key."""
    queue = _queue()
    started = time.perf_counter()
    for key in keys:
        queue.add(key)
    for _ in keys:
        queue.done(await queue.get())
    elapsed = time.perf_counter() - started
    queue.shut_down()
    return elapsed


async def add_new(keys: list[str]) -> float:
    """WorkQueue.add of a key not yet queued (the first event of a burst)."""
    queue = _queue()
    started = time.perf_counter()
    for key in keys:
        queue.add(key)
    elapsed = time.perf_counter() - started
    queue.shut_down()
    return elapsed


async def get_done(keys: list[str]) -> float:
    """WorkQueue.get then done of a queued key (what a worker pays around a reconcile)."""
    queue = _queue()
    for key in keys:
        queue.add(key)
    started = time.perf_counter()
    for _ in keys:
        queue.done(await queue.get())
    elapsed = time.perf_counter() - started
    queue.shut_down()
    return elapsed


async def dedup_hit_queued(keys: list[str]) -> float:
    """WorkQueue.add of a key already waiting: the event is absorbed, nothing is queued."""
    queue = _queue()
    queue.add("hot")
    started = time.perf_counter()
    for _ in keys:
        queue.add("hot")
    elapsed = time.perf_counter() - started
    assert len(queue) == 1
    queue.shut_down()
    return elapsed


async def dedup_hit_in_flight(keys: list[str]) -> float:
    """WorkQueue.add of a key being reconciled: marked dirty once, queued again at done()."""
    queue = _queue()
    queue.add("hot")
    key = await queue.get()
    started = time.perf_counter()
    for _ in keys:
        queue.add("hot")
    elapsed = time.perf_counter() - started
    assert len(queue) == 0
    queue.done(key)
    assert len(queue) == 1
    queue.shut_down()
    return elapsed


async def add_after(keys: list[str]) -> float:
    """WorkQueue.add_after of distinct keys (a heap push; the delay task is started once)."""
    queue = _queue()
    started = time.perf_counter()
    for key in keys:
        queue.add_after(key, 3600.0)
    elapsed = time.perf_counter() - started
    queue.shut_down()
    return elapsed


async def add_rate_limited(keys: list[str]) -> float:
    """WorkQueue.add_rate_limited: a failed key, per-key backoff max'd with the token bucket."""
    queue = _queue()
    started = time.perf_counter()
    for key in keys:
        queue.add_rate_limited(key)
    elapsed = time.perf_counter() - started
    queue.shut_down()
    return elapsed


CASES: list[tuple[str, Callable[[list[str]], Awaitable[float]]]] = [
    ("asyncio.Queue put+get (baseline)", baseline_put_get),
    ("add + get + done, distinct keys", add_get_done),
    ("add, new key", add_new),
    ("get + done", get_done),
    ("add, key already queued (dedup hit)", dedup_hit_queued),
    ("add, key in flight (dirty hit)", dedup_hit_in_flight),
    ("add_after, distinct keys", add_after),
    ("add_rate_limited, distinct keys", add_rate_limited),
]


async def main(options: argparse.Namespace) -> None:
    keys = [f"namespace/object-{i}" for i in range(options.keys)]
    results: list[tuple[str, float]] = []
    for title, case in CASES:
        best = min([await case(keys) for _ in range(options.repeat)])
        results.append((title, best / len(keys)))
    floor = results[0][1]
    print(
        f"workqueue, {options.keys} operations per run, best of {options.repeat};"
        f" Python {platform.python_version()} on {platform.machine()}"
    )
    print()
    print("| operation | ops/s | ns/op | x baseline |")
    print("|---|---:|---:|---:|")
    for title, per_op in results:
        print(f"| {title} | {1 / per_op:,.0f} | {per_op * 1e9:,.0f} | {per_op / floor:.1f} |")


def _options(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=20_000, help="operations per run")
    parser.add_argument("--repeat", type=int, default=5, help="runs per row; the best counts")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(_options(sys.argv[1:])))
