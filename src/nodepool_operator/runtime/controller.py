"""The reconcile loop: keys from informer events, one reconcile per key at a time.

The contract is controller-runtime's: a :class:`Reconciler` gets a :class:`Request` (a key,
never an event or an object), reads what it needs from caches, and returns a
:class:`Result`. The controller decides what happens next:

* success with ``requeue_after`` → the key comes back after that delay (``forget`` resets
  its backoff); success without → the key is forgotten until the next event;
* :class:`errors.Conflict` → requeued with rate limiting and logged at debug level: a
  conflict means our copy was stale, which the next reconcile (from a fresher cache) fixes;
* an :class:`errors.OperatorError` with ``retry_after`` (a 429, a throttling cloud) →
  requeued after that long;
* a transient one (API 5xx, a cloud that did not answer) → requeued with rate limiting
  (exponential per key, token bucket overall), one warning;
* a permanent one (4xx such as 422 or 403, :class:`errors.Terminal`, a cloud's refusal) →
  one log line and a metric; not retried (asking again gets the same answer) but looked
  at again after ``PERMANENT_ERROR_RECHECK_SECONDS`` (the world it depends on can change
  without an event), or at the next event;
* any other exception is a bug: requeued with rate limiting, logged with its traceback.

A reconcile runs for at most ``reconcile_timeout`` seconds: a call that hangs (a cloud
that never answers) is cancelled and the key requeued with backoff, so one key cannot
hold a worker for ever.

Watches map events to keys through a mapper (the object's own key, or its owner's) and may
be filtered by predicates such as :class:`GenerationChanged`.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import errors, metrics, workqueue
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.informer import Informer

__all__ = [
    "CURRENT_RECONCILE",
    "PERMANENT_ERROR_RECHECK_SECONDS",
    "RECONCILE_TIMEOUT_SECONDS",
    "Controller",
    "Delay",
    "Funcs",
    "GenerationChanged",
    "Mapper",
    "Predicate",
    "ReconcileContext",
    "ReconcileLogContext",
    "Reconciler",
    "Request",
    "Result",
    "StateChanged",
    "Stoppable",
    "any_of",
    "map_to_self",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReconcileContext:
    """Which reconcile a log line was written in: bound once per reconcile, not per call."""

    controller: str
    key: str
    reconcile_id: str

    def __str__(self) -> str:
        return f"controller={self.controller} key={self.key} reconcile_id={self.reconcile_id}"


#: The reconcile the current task is running, for log lines (each worker is its own task).
CURRENT_RECONCILE: contextvars.ContextVar[ReconcileContext | None] = contextvars.ContextVar(
    "current_reconcile", default=None
)


class ReconcileLogContext(logging.Filter):
    """Adds the reconcile's controller, key and id to every record written during it, so
    no log call formats them and one decision's lines can be grouped.

    ``context`` is the three as ``key=value`` text with a trailing space, empty outside a
    reconcile; ``controller``, ``key`` and ``reconcile_id`` are also set one by one ("-"
    outside a reconcile) for formatters that want fields.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        current = CURRENT_RECONCILE.get()
        record.context = f"{current} " if current else ""
        record.controller = current.controller if current else "-"
        record.key = current.key if current else "-"
        record.reconcile_id = current.reconcile_id if current else "-"
        return True


@dataclass(frozen=True, order=True)
class Request:
    """What to reconcile: a name, and a namespace for namespaced kinds."""

    name: str
    namespace: str = ""

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass(frozen=True)
class Result:
    """``requeue_after`` seconds to look again (e.g. a VM is still booting); None: don't."""

    requeue_after: float | None = None


class Reconciler(Protocol):
    async def reconcile(self, request: Request) -> Result: ...


@runtime_checkable
class Stoppable(Protocol):
    """A reconciler with work of its own that outlives a reconcile (the planner's events):
    the controller stops it after its workers, with the same ``drain``."""

    async def stop(self, *, drain: bool) -> None: ...


class Predicate(Protocol):
    """Filters events before they become keys; all three default to letting them through."""

    def create(self, obj: Object) -> bool: ...

    def update(self, old: Object, new: Object) -> bool: ...

    def delete(self, obj: Object) -> bool: ...


def _generation(obj: Object) -> object:
    return obj.get("metadata", {}).get("generation")


class Funcs:
    """The predicate base (controller-runtime's ``predicate.Funcs``): every event passes;
    a subclass overrides only the kinds of event it filters."""

    def create(self, obj: Object) -> bool:
        return True

    def update(self, old: Object, new: Object) -> bool:
        return True

    def delete(self, obj: Object) -> bool:
        return True


class GenerationChanged(Funcs):
    """Updates pass only when ``metadata.generation`` moved, i.e. the spec changed.

    Status and metadata updates (including our own status writes) never bump the generation,
    so with this predicate a controller is not woken by its own writes.
    """

    def update(self, old: Object, new: Object) -> bool:
        return _generation(old) != _generation(new)


class StateChanged(Funcs):
    """A predicate: creates and deletes pass, updates only when ``state`` differs (what a
    controller reacts to, without heartbeats and other status churn)."""

    def __init__(self, state: Callable[[Object], Hashable]) -> None:
        self.state = state

    def update(self, old: Object, new: Object) -> bool:
        return self.state(old) != self.state(new)


class _AnyOf(Funcs):
    def __init__(self, predicates: Sequence[Predicate]) -> None:
        self.predicates = predicates

    def create(self, obj: Object) -> bool:
        return any(p.create(obj) for p in self.predicates)

    def update(self, old: Object, new: Object) -> bool:
        return any(p.update(old, new) for p in self.predicates)

    def delete(self, obj: Object) -> bool:
        return any(p.delete(obj) for p in self.predicates)


def any_of(*predicates: Predicate) -> Predicate:
    return _AnyOf(predicates)


Mapper = Callable[[Object], Iterable[Request]]

#: A key whose reconcile failed for good is looked at again after this long.
PERMANENT_ERROR_RECHECK_SECONDS = 300.0
#: A reconcile still running after this long is cancelled (``errors.ReconcileTimeout``).
RECONCILE_TIMEOUT_SECONDS = 600.0
Delay = float | Callable[[Request], float]


def map_to_self(obj: Object) -> Iterable[Request]:
    meta = obj["metadata"]
    return (Request(name=meta["name"], namespace=meta.get("namespace", "")),)


class _Enqueue:
    """The informer event handler of one watch: filter, map, add to the queue."""

    def __init__(
        self,
        queue: workqueue.WorkQueue[Request],
        mapper: Mapper,
        predicates: Sequence[Predicate],
        delay: Delay | None,
    ) -> None:
        self.queue = queue
        self.mapper = mapper
        self.predicates = predicates
        self.delay = delay

    def _add(self, obj: Object) -> None:
        for request in self.mapper(obj):
            delay = self.delay(request) if callable(self.delay) else self.delay
            if delay:
                # The earliest pending add_after of a key wins, so a burst of events within
                # the window becomes one reconcile at the end of the window that the first
                # event opened: batching without ever postponing the first reaction.
                self.queue.add_after(request, delay)
            else:
                self.queue.add(request)

    def on_add(self, obj: Object) -> None:
        if all(p.create(obj) for p in self.predicates):
            self._add(obj)

    def on_update(self, old: Object, new: Object) -> None:
        if all(p.update(old, new) for p in self.predicates):
            self._add(new)
            if self.mapper is not map_to_self:
                self._add(old)  # a changed owner or label: the old owner must look too

    def on_delete(self, obj: Object) -> None:
        if all(p.delete(obj) for p in self.predicates):
            self._add(obj)


class Controller:
    """Runs one reconciler over the keys its watches produce."""

    _reconcile_ids = itertools.count(1)

    def __init__(
        self,
        *,
        name: str,
        reconciler: Reconciler,
        max_concurrent_reconciles: int = 1,
        clock: clock_module.Clock | None = None,
        queue: workqueue.WorkQueue[Request] | None = None,
        permanent_error_recheck: float = PERMANENT_ERROR_RECHECK_SECONDS,
        reconcile_timeout: float = RECONCILE_TIMEOUT_SECONDS,
    ) -> None:
        self.name = name
        self.reconciler = reconciler
        self.reconcile_timeout = reconcile_timeout
        self.max_concurrent_reconciles = max_concurrent_reconciles
        self.permanent_error_recheck = permanent_error_recheck
        self.clock = clock or clock_module.RealClock()
        # `is None`, not `or`: an empty queue is falsy (it has a length).
        self.queue: workqueue.WorkQueue[Request] = (
            queue if queue is not None else workqueue.WorkQueue(name=name, clock=self.clock)
        )
        self._watched: list[Informer] = []
        self._workers: list[asyncio.Task[None]] = []
        self._active = metrics.controller_runtime_active_workers.labels(controller=name)
        metrics.controller_runtime_max_concurrent_reconciles.labels(controller=name).set(
            max_concurrent_reconciles
        )
        metrics.start_reconcile_series(name)

    def watch(
        self,
        informer: Informer,
        *,
        mapper: Mapper = map_to_self,
        predicates: Sequence[Predicate] = (),
        delay: Delay | None = None,
    ) -> None:
        """Reconcile the keys ``mapper`` derives from the informer's events.

        With ``delay`` (seconds, or a function of the key giving them), keys are added
        after that long: a batching window, which may differ from key to key.
        """
        informer.add_handler(_Enqueue(self.queue, mapper, predicates, delay))
        self._watched.append(informer)

    @property
    def informers(self) -> list[Informer]:
        return list(self._watched)

    def start(self) -> None:
        """Start the workers; the caller has waited for the informers to sync."""
        for index in range(self.max_concurrent_reconciles):
            self._workers.append(
                asyncio.create_task(self._work(), name=f"{self.name}-worker-{index}")
            )

    async def stop(self, *, drain: bool = True) -> None:
        """Stop the workers: after their in-flight reconciles finish (``drain``), or at
        once (leadership lost: another replica may already be acting, so nothing of ours
        may go on)."""
        if drain:
            await self.queue.shut_down_with_drain()
        else:
            self.queue.shut_down()
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers.clear()
        if isinstance(self.reconciler, Stoppable):
            await self.reconciler.stop(drain=drain)

    async def _work(self) -> None:
        while True:
            try:
                request = await self.queue.get()
            except workqueue.ShutDown:
                return
            if self.queue.shutting_down:
                # Stopping: finish what is in flight, do not start the backlog.
                self.queue.done(request)
                return
            try:
                await self.reconcile_once(request)
            finally:
                self.queue.done(request)

    async def reconcile_once(self, request: Request) -> None:
        reconcile_id = f"{self.name}-{next(self._reconcile_ids)}"
        # Every log line written during this reconcile carries it (see ReconcileLogContext),
        # and no line after it: the worker's next lines are not this reconcile's.
        bound = CURRENT_RECONCILE.set(ReconcileContext(self.name, str(request), reconcile_id))
        started = time.perf_counter()
        self._active.inc()
        outcome = metrics.RESULT_SUCCESS
        try:
            result = await self._bounded(request)
        except Exception as error:
            outcome = self._handle_error(request, error)
        else:
            self.queue.forget(request)
            if result.requeue_after is not None and result.requeue_after > 0:
                self.queue.add_after(request, result.requeue_after)
                outcome = metrics.RESULT_REQUEUE_AFTER
        finally:
            self._active.dec()
            metrics.controller_runtime_reconcile_time_seconds.labels(controller=self.name).observe(
                time.perf_counter() - started
            )
            CURRENT_RECONCILE.reset(bound)
        metrics.controller_runtime_reconcile_total.labels(
            controller=self.name, result=outcome
        ).inc()

    async def _bounded(self, request: Request) -> Result:
        """The reconcile of ``request``, cancelled if it runs past ``reconcile_timeout`` on
        the controller's clock."""
        work = asyncio.ensure_future(self.reconciler.reconcile(request))
        timer = asyncio.ensure_future(self.clock.sleep(self.reconcile_timeout))
        try:
            await asyncio.wait({work, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            if not work.done():
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
        if work.cancelled():
            raise errors.ReconcileTimeout(
                f"reconcile of {request} ran past {self.reconcile_timeout:.0f}s; cancelled"
            )
        return work.result()

    def _handle_error(self, request: Request, error: Exception) -> str:
        if isinstance(error, errors.Conflict):
            metrics.nodepool_conflicts_total.labels(controller=self.name, resource="").inc()
            log.debug("event=conflict action=requeue message=%r", error.message)
            self.queue.add_rate_limited(request)
            return metrics.RESULT_REQUEUE
        metrics.controller_runtime_reconcile_errors_total.labels(controller=self.name).inc()
        if not isinstance(error, errors.OperatorError):
            log.error("event=error action=requeue-with-backoff error=%r", error, exc_info=error)
            self.queue.add_rate_limited(request)
            return metrics.RESULT_ERROR
        if error.retry_after:
            log.warning("event=throttled retry_after=%.1fs error=%r", error.retry_after, error)
            self.queue.add_after(request, float(error.retry_after))
        elif error.transient:
            # An expected, classified failure (API 5xx, cloud timeout): its message says it all.
            log.warning("event=transient-error action=requeue-with-backoff error=%r", error)
            self.queue.add_rate_limited(request)
        else:
            # Not retried: asking again would get the same answer. But the world it
            # depends on can change without an event for this key (an admin fixes the RBAC,
            # a kube-apiserver that answered 403 while its authorizer warmed up is ready),
            # so the key is looked at again after a long, fixed delay, as a resync would.
            log.error(
                "event=terminal-error action=recheck-in=%.0fs error=%r",
                self.permanent_error_recheck,
                error,
            )
            self.queue.forget(request)
            self.queue.add_after(request, self.permanent_error_recheck)
        return metrics.RESULT_ERROR
