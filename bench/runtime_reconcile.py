"""A no-op reconcile through the Controller: reconciles per second and the overhead of each.

    .venv/bin/python bench/runtime_reconcile.py [--keys 20000] [--repeat 5]

The reconciler does nothing (``return Result()``), so every microsecond measured is the
runtime's. Rows, from the floor up:

* *direct call*: ``await reconciler.reconcile(request)``, the least any loop pays;
* *naive loop*: one worker over an ``asyncio.Queue``, the baseline of a controller with no
  workqueue (no dedup, no one-key-at-a-time rule, no backoff, no metrics);
* *Controller.reconcile_once*: outcome handling, ``forget``, metrics and the reconcile-time
  histogram, without the queue;
* *Controller, N workers*: keys added to the workqueue and reconciled by the controller's
  workers, end to end (add, get, reconcile, done);
* *watch event to reconcile*: as above, each key arriving as an informer update event
  through the controller's event handler (predicates and mapper included).

Each row is the best of ``--repeat`` runs over ``--keys`` distinct keys, on the real clock;
the overhead column is the time per reconcile above the direct call. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import platform
import sys
import time
from collections.abc import Awaitable, Callable

from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.controller import Controller, GenerationChanged, Request, Result
from nodepool_operator.runtime.informer import EventHandler

_names = itertools.count()


class NoOp:
    """Reconciles nothing; sets `finished` once it has been called `expected` times."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.calls = 0
        self.finished = asyncio.Event()

    async def reconcile(self, request: Request) -> Result:
        self.calls += 1
        if self.calls == self.expected:
            self.finished.set()
        return Result()


class HandlerOnly:
    """Stands in for an informer: `Controller.watch` registers its event handler here."""

    def __init__(self) -> None:
        self.handler: EventHandler | None = None

    def add_handler(self, handler: EventHandler) -> None:
        self.handler = handler


def _controller(reconciler: NoOp, workers: int = 1) -> Controller:
    return Controller(
        name=f"bench-{next(_names)}", reconciler=reconciler, max_concurrent_reconciles=workers
    )


async def direct_call(requests: list[Request]) -> float:
    reconciler = NoOp(len(requests))
    started = time.perf_counter()
    for request in requests:
        await reconciler.reconcile(request)
    return time.perf_counter() - started


async def naive_loop(requests: list[Request]) -> float:
    reconciler = NoOp(len(requests))
    queue: asyncio.Queue[Request] = asyncio.Queue()

    async def worker() -> None:
        while True:
            request = await queue.get()
            try:
                await reconciler.reconcile(request)
            except Exception:  # pragma: no cover - a no-op does not fail
                queue.put_nowait(request)
            finally:
                queue.task_done()

    task = asyncio.create_task(worker())
    started = time.perf_counter()
    for request in requests:
        queue.put_nowait(request)
    await reconciler.finished.wait()
    elapsed = time.perf_counter() - started
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return elapsed


async def reconcile_once(requests: list[Request]) -> float:
    controller = _controller(NoOp(len(requests)))
    started = time.perf_counter()
    for request in requests:
        await controller.reconcile_once(request)
    return time.perf_counter() - started


async def _through_workers(requests: list[Request], workers: int, *, as_events: bool) -> float:
    reconciler = NoOp(len(requests))
    controller = _controller(reconciler, workers)
    source = HandlerOnly()
    controller.watch(source, predicates=[GenerationChanged()])  # type: ignore[arg-type]
    handler = source.handler
    assert handler is not None
    old: list[Object] = []
    new: list[Object] = []
    if as_events:
        for request in requests:
            meta = {"name": request.name, "namespace": request.namespace}
            old.append({"metadata": {**meta, "generation": 1}})
            new.append({"metadata": {**meta, "generation": 2}})
    controller.start()
    started = time.perf_counter()
    if as_events:
        for before, after in zip(old, new, strict=True):
            handler.on_update(before, after)
    else:
        for request in requests:
            controller.queue.add(request)
    await reconciler.finished.wait()
    elapsed = time.perf_counter() - started
    await controller.stop()
    return elapsed


def _workers(count: int, *, as_events: bool = False) -> Callable[[list[Request]], Awaitable[float]]:
    async def run(requests: list[Request]) -> float:
        return await _through_workers(requests, count, as_events=as_events)

    return run


CASES: list[tuple[str, Callable[[list[Request]], Awaitable[float]]]] = [
    ("direct call (floor)", direct_call),
    ("naive loop: asyncio.Queue, 1 worker (baseline)", naive_loop),
    ("Controller.reconcile_once (no queue)", reconcile_once),
    ("Controller, 1 worker", _workers(1)),
    ("Controller, 4 workers", _workers(4)),
    ("watch event to reconcile, 1 worker", _workers(1, as_events=True)),
]


async def main(options: argparse.Namespace) -> None:
    requests = [Request(name=f"object-{i}", namespace="bench") for i in range(options.keys)]
    results: list[tuple[str, float]] = []
    for title, case in CASES:
        best = min([await case(requests) for _ in range(options.repeat)])
        results.append((title, best / len(requests)))
    floor = results[0][1]
    naive = results[1][1]
    print(
        f"no-op reconcile, {options.keys} distinct keys per run, best of {options.repeat};"
        f" Python {platform.python_version()} on {platform.machine()}"
    )
    print()
    print("| path | reconciles/s | µs per reconcile | overhead µs | x naive loop |")
    print("|---|---:|---:|---:|---:|")
    for title, per_call in results:
        print(
            f"| {title} | {1 / per_call:,.0f} | {per_call * 1e6:.2f}"
            f" | {(per_call - floor) * 1e6:.2f} | {per_call / naive:.1f} |"
        )


def _options(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=20_000, help="reconciles per run")
    parser.add_argument("--repeat", type=int, default=5, help="runs per row; the best counts")
    return parser.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main(_options(sys.argv[1:])))
