"""Informers: one LIST+WATCH per resource, a cache with indexes, events for every controller.

The loop follows client-go's reflector:

* a paginated LIST builds the cache and gives the resourceVersion to watch from;
* a WATCH with bookmarks keeps it current; when the server ends a watch normally or the
  connection drops, the next watch resumes from the last resourceVersion seen (events or
  bookmarks), so nothing is delivered twice and nothing is missed;
* on 410 Gone (the version fell out of the server's window) the informer re-LISTs and
  delivers the difference between the old cache and the new list as events, deletes
  included, so a controller never keeps acting on an object that vanished while it was
  disconnected;
* any other failure backs off (exponentially, capped) and retries; the process survives
  an API server restart.

Handlers are plain callbacks that only enqueue keys; they must not block or do I/O.
Objects pass through a transform before they are stored (by default dropping
``metadata.managedFields``, the largest part of most objects, which controllers never read;
``keep_write_times`` keeps of it only who wrote which part when, for a cache whose
controller times its status writes from the API server's record of them).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from prometheus_client import Gauge

from nodepool_operator import pacing
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import errors, metrics
from nodepool_operator.runtime.client import Client, Object, Resource

__all__ = [
    "EventHandler",
    "IndexFunc",
    "Informer",
    "InformerCache",
    "InformerSource",
    "Transform",
    "drop_managed_fields",
    "keep_write_times",
    "label_index",
    "object_key",
]

log = logging.getLogger(__name__)

IndexFunc = Callable[[Object], Iterable[str]]
Transform = Callable[[Object], Object]

PAGE_SIZE = 500
WATCH_TIMEOUT_SECONDS = 300
BACKOFF_INITIAL = 0.2
BACKOFF_MAX = 30.0
SHORT_WATCH_SECONDS = 1.0


class EventHandler(Protocol):
    def on_add(self, obj: Object) -> None: ...

    def on_update(self, old: Object, new: Object) -> None: ...

    def on_delete(self, obj: Object) -> None: ...


def object_key(obj: Object) -> str:
    """``namespace/name`` for namespaced objects, ``name`` for cluster-scoped ones."""
    meta = obj["metadata"]
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


@functools.cache
def label_index(label: str) -> IndexFunc:
    """The index of objects by the value of their ``label``; one function per label, so
    controllers sharing an informer that each declare it share one index."""

    def values(obj: Object) -> list[str]:
        value = (obj.get("metadata", {}).get("labels") or {}).get(label)
        return [str(value)] if value else []

    return values


def drop_managed_fields(obj: Object) -> Object:
    obj.get("metadata", {}).pop("managedFields", None)
    return obj


#: What ``keep_write_times`` keeps of a ``managedFields`` entry: who wrote which part when.
_WRITE_RECORD: Final = ("manager", "operation", "subresource", "time")


def keep_write_times(obj: Object) -> Object:
    """Each ``managedFields`` entry cut to who wrote which part of the object and when,
    without its field set (most of the entry, read by nobody): the transform of a cache
    whose controller times its status writes from the API server's record of them
    (``status.recorded_status_write``)."""
    meta = obj.get("metadata") or {}
    entries = meta.get("managedFields")
    if isinstance(entries, list):
        meta["managedFields"] = [
            {key: entry[key] for key in _WRITE_RECORD if key in entry}
            for entry in entries
            if isinstance(entry, dict)
        ]
    return obj


#: Stamps of index buckets, from one sequence for every index of every informer: a
#: bucket emptied and filled again never gets a stamp it had before.
_STAMPS = itertools.count(1)


@dataclass
class _Index:
    func: IndexFunc
    entries: dict[str, set[str]] = field(default_factory=dict)
    # value -> a stamp taken when an object filed under it last came, changed or went
    stamps: dict[str, int] = field(default_factory=dict)

    def add(self, key: str, obj: Object) -> None:
        for value in self.func(obj):
            self.entries.setdefault(value, set()).add(key)
            self.stamps[value] = next(_STAMPS)

    def remove(self, key: str, obj: Object) -> None:
        for value in self.func(obj):
            keys = self.entries.get(value)
            if keys is not None:
                keys.discard(key)
                if keys:
                    self.stamps[value] = next(_STAMPS)
                else:
                    del self.entries[value]
                    del self.stamps[value]


class Informer:
    """The shared cache of one resource (optionally narrowed by namespace and selectors)."""

    def __init__(
        self,
        client: Client | None,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform = drop_managed_fields,
        clock: clock_module.Clock | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.transform = transform
        self.clock = clock or clock_module.RealClock()
        self._store: dict[str, Object] = {}
        self._indexes: dict[str, _Index] = {}
        self._handlers: list[EventHandler] = []
        self._synced = asyncio.Event()
        self._resource_version = ""
        self.lists = 0  # how many full LISTs were made: 1 + one per 410 Gone or failure
        self.watches = 0
        # Set once the informer runs: a replayed recording is no cache of this process.
        self._size_gauge: Gauge | None = None

    @classmethod
    def holding(
        cls,
        resource: Resource,
        objects: Iterable[Object],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform = drop_managed_fields,
    ) -> Informer:
        """An informer that holds exactly ``objects`` (already selected as the selectors
        say), synced, and never lists or watches: a recorded cache replayed offline."""
        informer = cls(
            None,
            resource,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            transform=transform,
        )
        informer._replace({object_key(obj): transform(obj) for obj in objects})
        informer._synced.set()
        return informer

    # -- configuration ----------------------------------------------------------------

    def add_index(self, name: str, func: IndexFunc) -> None:
        """Index the cache by ``func`` under ``name``; shared informers share their indexes.

        Defining the same index again (same name, same function) is a no-op, so every
        controller can declare the indexes it reads. Another function under a taken name,
        or the same function under a second name, is refused: one would silently read the
        other's index, or the cache would keep the same index twice.
        """
        existing = self._indexes.get(name)
        if existing is not None:
            if existing.func is not func:
                raise ValueError(
                    f"the {self.resource.plural} informer has an index {name!r} "
                    "of another function; share the function or choose another name"
                )
            return
        for other_name, other in self._indexes.items():
            if other.func is func:
                raise ValueError(
                    f"the {self.resource.plural} informer has this index already, "
                    f"as {other_name!r}; read it under that name"
                )
        index = _Index(func)
        for key, obj in self._store.items():
            index.add(key, obj)
        self._indexes[name] = index

    def add_handler(self, handler: EventHandler) -> None:
        """Register a handler; once synced, it is first told of every cached object."""
        self._handlers.append(handler)
        if self.has_synced():
            for obj in list(self._store.values()):
                handler.on_add(obj)

    # -- reading ----------------------------------------------------------------------

    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_for_sync(self) -> None:
        await self._synced.wait()

    def get(self, name: str, namespace: str | None = None) -> Object | None:
        return self._store.get(f"{namespace}/{name}" if namespace else name)

    def items(self) -> list[Object]:
        return list(self._store.values())

    def by_index(self, index: str, value: str) -> list[Object]:
        keys = self._indexes[index].entries.get(value, ())
        return [self._store[k] for k in keys]

    def index_stamp(self, index: str, value: str) -> int:
        """A number that changes whenever an object filed under ``value`` comes, changes
        or goes (0: none is), so that what is read from the bucket can be kept until then."""
        return self._indexes[index].stamps.get(value, 0)

    def __len__(self) -> int:
        return len(self._store)

    def selector(self) -> str:
        """What narrows this informer below its whole resource, as the ``selector`` label of
        ``nodepool_operator_informer_objects`` says it ("" for the whole resource)."""
        parts = [
            f"{name}={value}"
            for name, value in (
                ("namespace", self.namespace),
                ("labels", self.label_selector),
                ("fields", self.field_selector),
            )
            if value
        ]
        return ";".join(parts)

    @property
    def resource_version(self) -> str:
        return self._resource_version

    # -- the loop ---------------------------------------------------------------------

    async def run(self) -> None:
        """LIST, then WATCH for ever; returns only when cancelled.

        Run again after a cancellation, it resumes watching from the last resourceVersion
        it saw (and re-lists only if the server says that version is gone).
        """
        if self.client is None:
            raise RuntimeError(f"the {self.resource.plural} informer replays a recording")
        self._size_gauge = metrics.nodepool_operator_informer_objects.labels(
            resource=self.resource.plural, selector=self.selector()
        )
        self._size_gauge.set(len(self._store))
        failures = 0  # failed or empty watches in a row: what the next wait grows with
        need_list = not self._resource_version
        while True:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                started = self.clock.now()
                delivered = await self._watch()
                if delivered == 0 and self.clock.now() - started < SHORT_WATCH_SECONDS:
                    # A watch closed at once with nothing in it (a proxy, an overloaded
                    # server): as client-go's reflector does, back off instead of hammering.
                    await self.clock.sleep(self._backoff(failures))
                    failures += 1
                else:
                    failures = 0
            except errors.Gone:
                log.info("resource=%s event=watch-expired action=relist", self.resource.plural)
                need_list = True
            except Exception as error:
                # A dropped connection keeps the resourceVersion: resume the watch from it.
                # Anything else we do not understand re-lists, which is always correct.
                need_list = need_list or not isinstance(error, errors.ConnectionFailed)
                delay = self._backoff(failures)
                log.warning(
                    "resource=%s event=watch-failed error=%r retry_in=%.1fs relist=%s",
                    self.resource.plural,
                    error,
                    delay,
                    need_list,
                )
                await self.clock.sleep(delay)
                failures += 1

    @staticmethod
    def _backoff(failures: int) -> float:
        return pacing.exponential(initial=BACKOFF_INITIAL, failures=failures, maximum=BACKOFF_MAX)

    async def _list(self) -> None:
        assert self.client is not None  # run() refuses an informer without one
        fresh: dict[str, Object] = {}
        continue_token: str | None = None
        while True:
            page = await self.client.list_page(
                self.resource,
                namespace=self.namespace,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
                limit=PAGE_SIZE,
                continue_token=continue_token,
            )
            kind = self.resource.kind
            for item in page.get("items", []):
                # LIST items carry no apiVersion/kind; restore them so cached objects are whole.
                item.setdefault("apiVersion", self.resource.api_version)
                item.setdefault("kind", kind)
                obj = self.transform(item)
                fresh[object_key(obj)] = obj
            continue_token = page.get("metadata", {}).get("continue") or None
            if not continue_token:
                self._resource_version = page["metadata"]["resourceVersion"]
                break
        self.lists += 1
        self._replace(fresh)
        self._synced.set()

    def _replace(self, fresh: dict[str, Object]) -> None:
        """Swap in a new list and deliver what changed, deletes included."""
        old_store = self._store
        for key in [k for k in old_store if k not in fresh]:
            self._delete(key)
        for key, obj in fresh.items():
            old = old_store.get(key)
            if old is None:
                self._put(key, obj)
                self._emit_add(obj)
            elif _version(old) != _version(obj):
                self._put(key, obj)
                self._emit_update(old, obj)

    async def _watch(self) -> int:
        """Follow one watch until the server ends it; return how many events it carried."""
        assert self.client is not None  # run() refuses an informer without one
        self.watches += 1
        delivered = 0
        stream = self.client.watch(
            self.resource,
            resource_version=self._resource_version,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=WATCH_TIMEOUT_SECONDS,
        )
        async for event in stream:
            delivered += 1
            version = event.object.get("metadata", {}).get("resourceVersion")
            if event.type == "BOOKMARK":
                if version:
                    self._resource_version = version
                continue
            obj = self.transform(event.object)
            key = object_key(obj)
            if event.type in ("ADDED", "MODIFIED"):
                old = self._store.get(key)
                self._put(key, obj)
                if old is None:
                    self._emit_add(obj)
                else:
                    self._emit_update(old, obj)
            elif event.type == "DELETED" and key in self._store:
                self._delete(key, last_state=obj)
            if version:
                self._resource_version = version
        return delivered

    # -- store ------------------------------------------------------------------------

    def _put(self, key: str, obj: Object) -> None:
        old = self._store.get(key)
        for index in self._indexes.values():
            if old is not None:
                index.remove(key, old)
            index.add(key, obj)
        self._store[key] = obj
        self._export_size()

    def _delete(self, key: str, *, last_state: Object | None = None) -> None:
        old = self._store.pop(key)
        for index in self._indexes.values():
            index.remove(key, old)
        self._export_size()
        self._emit_delete(last_state or old)

    def _export_size(self) -> None:
        if self._size_gauge is not None:
            self._size_gauge.set(len(self._store))

    def _emit_add(self, obj: Object) -> None:
        for handler in self._handlers:
            _safely(handler.on_add, obj)

    def _emit_update(self, old: Object, new: Object) -> None:
        for handler in self._handlers:
            _safely(handler.on_update, old, new)

    def _emit_delete(self, obj: Object) -> None:
        for handler in self._handlers:
            _safely(handler.on_delete, obj)


def _version(obj: Object) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion", ""))


def _safely(callback: Callable[..., None], *args: Any) -> None:
    # One faulty handler must not stop the informer nor starve the other controllers.
    try:
        callback(*args)
    except Exception:
        log.exception("event handler %r failed", callback)


@dataclass(frozen=True)
class _InformerKey:
    resource: Resource
    namespace: str | None
    label_selector: str | None
    field_selector: str | None


class InformerSource(Protocol):
    """Where a controller gets its informers: the manager's cache, or a recording."""

    def informer(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform = ...,
    ) -> Informer: ...


class InformerCache:
    """Hands out one shared informer per (resource, namespace, selectors) in a process."""

    def __init__(self, client: Client, *, clock: clock_module.Clock | None = None) -> None:
        self.client = client
        self.clock = clock or clock_module.RealClock()
        self._informers: dict[_InformerKey, Informer] = {}
        self._tasks: dict[_InformerKey, asyncio.Task[None]] = {}
        self._started = False

    def informer(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform = drop_managed_fields,
    ) -> Informer:
        key = _InformerKey(resource, namespace, label_selector, field_selector)
        found = self._informers.get(key)
        if found is not None and found.transform is not transform:
            # One shared cache keeps one shape of object: a second transform would be
            # silently ignored and its controller would read fields that are not there.
            raise ValueError(
                f"the {resource.plural} informer is shared with another transform; "
                "request it with the same one"
            )
        if found is None:
            found = Informer(
                self.client,
                resource,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                transform=transform,
                clock=self.clock,
            )
            self._informers[key] = found
            if self._started:
                self._tasks[key] = asyncio.create_task(
                    found.run(), name=f"informer-{resource.plural}"
                )
        return found

    def start(self) -> None:
        self._started = True
        for key, informer in self._informers.items():
            if key not in self._tasks:
                self._tasks[key] = asyncio.create_task(
                    informer.run(), name=f"informer-{key.resource.plural}"
                )

    async def wait_for_sync(self, *, within: float | None = None) -> None:
        waits = [i.wait_for_sync() for i in self._informers.values()]
        async with asyncio.timeout(within):
            await asyncio.gather(*waits)

    async def stop(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()
        self._started = False

    def informers(self) -> list[Informer]:
        return list(self._informers.values())
