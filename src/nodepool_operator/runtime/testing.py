"""Test doubles of what the runtime talks to, shipped once beside it (as controller-runtime
ships ``pkg/client/fake``) so that tests do not grow their own:

* ``FakeApiServer``: the ``Client`` surface over a dict, strict where the real server is:
  every write gives the object a new resourceVersion, a spec change a new generation; an
  update or a patch carrying a stale resourceVersion gets 409, a delete with another uid
  409, a second create ``AlreadyExists``, a read or write of nothing ``NotFound``; status
  is written only through ``/status``, and a status write that adds a field or changes a
  value is recorded in ``metadata.managedFields`` under ``field_manager`` with its time
  to the second (one that only removes, or changes nothing, leaves the entry as it was);
  an object with a deletionTimestamp goes when its last finalizer does. Every call is
  recorded.
* ``FakeInformer``: the reads a reconciler makes of an informer (``get``, ``by_index``,
  ``resource_version``) over a store that lags behind a ``FakeApiServer`` until ``sync``,
  or that a test fills by hand.
* ``FakeWallClock``: a wall clock that moves when the test says; ``clock.FakeClock`` is
  the monotonic one.

Subclasses add faults: ``FakeApiServer.before`` runs before every call (raise there to
kill the caller mid-pass) and ``answer`` may lose a reply after the write took effect.
"""

from __future__ import annotations

import builtins
import copy
import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nodepool_operator.runtime import conditions, errors
from nodepool_operator.runtime.client import Object, Resource
from nodepool_operator.runtime.informer import object_key
from nodepool_operator.runtime.status import prune_none

__all__ = [
    "FakeApiServer",
    "FakeInformer",
    "FakeWallClock",
    "adds_or_changes",
    "merge",
    "sets_a_value",
]

IndexFunc = Callable[[Object], Iterable[str]]


class FakeWallClock:
    """Seconds since the epoch, moved only by the test (``advance``, or ``now`` set)."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """RFC 7386 merge patch, in place."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def adds_or_changes(before: Any, after: Any) -> bool:
    """Whether going from ``before`` to ``after`` adds a field or changes a value, which
    is when the API server moves the time of the writer's ``managedFields`` entry; a
    write that only removes (a key, or an item of a list) does not. Lists count by item:
    an item of ``after`` that ``before`` does not hold is an addition or a change."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        return any(key not in before or adds_or_changes(before[key], after[key]) for key in after)
    if isinstance(before, list) and isinstance(after, list):
        return any(item not in before for item in after)
    return bool(before != after)


def sets_a_value(patch: Any) -> bool:
    """Whether a merge patch of differences (what the status writer sends) adds a field
    or changes a value: it has a value that is not a removal (``None``). A fake that
    records status writes without keeping the status moves the writer's record on these
    only, as ``adds_or_changes`` does on the status before and after."""
    if isinstance(patch, Mapping):
        return any(sets_a_value(value) for value in patch.values())
    return patch is not None


def _key(name: str, namespace: str | None) -> str:
    return f"{namespace}/{name}" if namespace else name


class FakeApiServer:
    """Objects by (plural, namespace/name), with the API server's rules (module doc)."""

    def __init__(
        self, *, wall_clock: FakeWallClock | None = None, field_manager: str = "test-controller"
    ) -> None:
        self.wall_clock = wall_clock or FakeWallClock()
        #: The manager the client's writes are recorded under, as ``Client.field_manager``.
        self.field_manager = field_manager
        self.objects: dict[tuple[str, str], Object] = {}
        self.calls: list[tuple[str, str, str]] = []  # (verb, plural[/sub], name)
        self._versions = itertools.count(1)
        self._uids = itertools.count(1)

    @property
    def resource_version(self) -> str:
        """The version of the last write (what a LIST now would say)."""
        return str(
            max((int(o["metadata"]["resourceVersion"]) for o in self.objects.values()), default=0)
        )

    # --- what a test (the user, other controllers) does: never faulted ---

    def put(self, plural: str, obj: Object) -> Object:
        """Store ``obj`` as a create would, bypassing every check and fault."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{next(self._uids)}")
        meta.setdefault("creationTimestamp", conditions.rfc3339(self.wall_clock.time()))
        meta["generation"] = 1
        meta["resourceVersion"] = self._next_version()
        self.objects[(plural, object_key(obj))] = obj
        return copy.deepcopy(obj)

    def edit(
        self, plural: str, name: str, change: Callable[[Object], None], namespace: str | None = None
    ) -> Object:
        """Change a stored object in place: a new resourceVersion, a new generation if the
        spec changed."""
        obj = self._stored(plural, _key(name, namespace))
        spec_before = copy.deepcopy(obj.get("spec"))
        change(obj)
        if obj.get("spec") != spec_before:
            obj["metadata"]["generation"] = int(obj["metadata"].get("generation", 1)) + 1
        obj["metadata"]["resourceVersion"] = self._next_version()
        return obj

    def stored(self, plural: str) -> list[Object]:
        return [copy.deepcopy(o) for (kind, _), o in sorted(self.objects.items()) if kind == plural]

    def writes(self) -> list[tuple[str, str, str]]:
        return [c for c in self.calls if c[0] not in ("get", "list")]

    # --- hooks for faults ---

    def before(self, verb: str, resource: Resource, name: str) -> None:
        """Runs before every call, read or write; raise here to fail it with no effect."""

    def answer(self, obj: Object) -> Object:
        """The reply of a write that took effect (a subclass may lose it)."""
        return copy.deepcopy(obj)

    # --- the Client surface ---

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Object:
        self._call("get", resource, name)
        return copy.deepcopy(self._stored(resource.plural, _key(name, namespace)))

    async def list_page(self, resource: Resource, **_: Any) -> Object:
        self._call("list", resource, "")
        return {
            "metadata": {"resourceVersion": self.resource_version},
            "items": self.stored(resource.plural),
        }

    async def create(self, resource: Resource, body: Object, **_: Any) -> Object:
        name = str(body["metadata"].get("name", ""))
        self._call("create", resource, name)
        if (resource.plural, object_key(body)) in self.objects:
            raise errors.AlreadyExists(f"{resource.plural} {name!r} already exists")
        return self.answer(self.put(resource.plural, body))

    async def replace(self, resource: Resource, body: Object, **_: Any) -> Object:
        """An update: the body's resourceVersion is the precondition; status is kept."""
        name = str(body["metadata"]["name"])
        self._call("replace", resource, name)
        stored = self._stored(resource.plural, object_key(body))
        if body["metadata"].get("resourceVersion") != stored["metadata"]["resourceVersion"]:
            raise errors.Conflict(f"{resource.plural} {name!r}: the object has been modified")

        def change(obj: Object) -> None:
            status = obj.get("status")
            obj.clear()
            obj.update(copy.deepcopy(body))
            obj["metadata"] = {**stored["metadata"], **copy.deepcopy(body["metadata"])}
            if status is not None:
                obj["status"] = status

        obj = self.edit(resource.plural, name, change, body["metadata"].get("namespace"))
        return self.answer(obj)

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        patch_type: str = "merge",
        **_: Any,
    ) -> Object:
        """A merge patch, a resourceVersion in it a precondition; or a JSON patch
        (``patch_type="json"``) of ``test``, ``replace``, ``add`` and ``remove`` on object
        paths, a failed test refused with 422 as the API server does."""
        self._call("patch", resource, name)
        key = _key(name, namespace)
        stored = self._stored(resource.plural, key)
        if patch_type == "json":
            return self._json_patch(resource, name, namespace, copy.deepcopy(patch))
        patch = copy.deepcopy(patch)
        sent = (patch.get("metadata") or {}).pop("resourceVersion", None)
        if sent is not None and sent != stored["metadata"]["resourceVersion"]:
            raise errors.Conflict(f"{resource.plural} {name!r}: the object has been modified")
        if subresource == "status":
            patch = {"status": patch.get("status") or {}}
        else:
            patch.pop("status", None)

        def change(obj: Object) -> None:
            before = copy.deepcopy(obj.get("status") or {})
            merge(obj, patch)
            obj["status"] = prune_none(obj.get("status") or {})
            if subresource == "status" and adds_or_changes(before, obj["status"]):
                self._record_status_write(obj)

        obj = self.edit(resource.plural, name, change, namespace)
        if obj["metadata"].get("deletionTimestamp") and not obj["metadata"].get("finalizers"):
            del self.objects[(resource.plural, key)]
        return self.answer(obj)

    def _json_patch(
        self, resource: Resource, name: str, namespace: str | None, ops: list[dict[str, Any]]
    ) -> Object:
        stored = self._stored(resource.plural, _key(name, namespace))
        for op in ops:
            *parents, last = [p for p in str(op["path"]).split("/") if p]
            found: Any = stored
            for part in parents:
                found = found.get(part) if isinstance(found, dict) else None
            if op["op"] == "test" and (found or {}).get(last) != op["value"]:
                raise errors.Invalid(f"testing value {op['path']} failed")
            if op["op"] in ("replace", "remove") and last not in (found or {}):
                raise errors.Invalid(f"{op['path']}: missing value")

        def change(obj: Object) -> None:
            for op in ops:
                *parents, last = [p for p in str(op["path"]).split("/") if p]
                target = obj
                for part in parents:
                    target = target.setdefault(part, {})
                if op["op"] in ("replace", "add"):
                    target[last] = copy.deepcopy(op["value"])
                elif op["op"] == "remove":
                    del target[last]

        return self.answer(self.edit(resource.plural, name, change, namespace))

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        uid: str | None = None,
        **_: Any,
    ) -> Object:
        self._call("delete", resource, name)
        key = _key(name, namespace)
        stored = self._stored(resource.plural, key)
        if uid is not None and stored["metadata"]["uid"] != uid:
            raise errors.Conflict(f"{resource.plural} {name!r}: uid precondition failed")
        if stored["metadata"].get("finalizers"):
            stored["metadata"].setdefault(
                "deletionTimestamp", conditions.rfc3339(self.wall_clock.time())
            )
            stored["metadata"]["resourceVersion"] = self._next_version()
            return self.answer(stored)
        del self.objects[(resource.plural, key)]
        return self.answer(stored)

    # --- helpers ---

    def _call(self, verb: str, resource: Resource, name: str) -> None:
        self.calls.append((verb, resource.plural, name))
        self.before(verb, resource, name)

    def _record_status_write(self, obj: Object) -> None:
        """Our ``managedFields`` entry for ``/status`` gets the time of this write (to the
        second, as the server writes it)."""
        entries = obj["metadata"].setdefault("managedFields", [])
        ours = [
            entry
            for entry in entries
            if entry.get("manager") == self.field_manager and entry.get("subresource") == "status"
        ]
        if not ours:
            ours = [
                {
                    "manager": self.field_manager,
                    "operation": "Update",
                    "apiVersion": obj.get("apiVersion", "v1"),
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {}},
                    "subresource": "status",
                }
            ]
            entries.append(ours[0])
        ours[0]["time"] = conditions.rfc3339(self.wall_clock.time())

    def _next_version(self) -> str:
        return str(next(self._versions))

    def _stored(self, plural: str, key: str) -> Object:
        found = self.objects.get((plural, key))
        if found is None:
            raise errors.NotFound(f"{plural} {key!r} not found")
        return found


class FakeInformer:
    """An informer's reads over a store: filled by hand, or ``sync``ed from a server."""

    def __init__(
        self,
        indexes: Mapping[str, IndexFunc] | None = None,
        *,
        server: FakeApiServer | None = None,
        plural: str = "",
    ) -> None:
        self.indexes = dict(indexes or {})
        self.server = server
        self.plural = plural
        self.store: dict[str, Object] = {}
        self.stamps = 0
        self.resource_version = ""
        self.handlers: list[Any] = []  # told of each put and remove, as a watch tells
        self.synced = True  # what has_synced() answers: False for a cache not listed yet

    def sync(self) -> None:
        """Catch up with the server: what a watch would have delivered by now."""
        if self.server is None:
            raise RuntimeError("a FakeInformer without a server is filled with put()")
        self.store = {object_key(o): o for o in self.server.stored(self.plural)}
        self.resource_version = self.server.resource_version

    def get(self, name: str, namespace: str | None = None) -> Object | None:
        found = self.store.get(_key(name, namespace))
        return copy.deepcopy(found) if found is not None else None

    def by_index(self, index: str, value: str) -> list[Object]:
        return [copy.deepcopy(o) for o in self.store.values() if value in self.indexes[index](o)]

    def index_stamp(self, index: str, value: str) -> int:
        """A new stamp on every call: nothing read from a bucket of this fake is kept."""
        self.stamps += 1
        return self.stamps

    def list(self) -> list[Object]:
        return [copy.deepcopy(o) for o in self.store.values()]

    def put(self, obj: Object) -> None:
        """Store a copy of ``obj``; the handlers are told as a watch event would, and the
        cache's resourceVersion moves to the object's when that is newer."""
        key = object_key(obj)
        old = self.store.get(key)
        stored = self.store[key] = copy.deepcopy(obj)
        version = str(obj.get("metadata", {}).get("resourceVersion", ""))
        current = self.resource_version
        if version.isdigit() and (not current.isdigit() or int(version) > int(current)):
            self.resource_version = version
        for handler in self.handlers:
            if old is None:
                handler.on_add(stored)
            else:
                handler.on_update(old, stored)

    def remove(self, key: str) -> None:
        gone = self.store.pop(key, None)
        for handler in self.handlers if gone is not None else ():
            handler.on_delete(gone)

    def add_index(self, name: str, func: IndexFunc) -> None:
        self.indexes[name] = func

    def add_handler(self, handler: Any) -> None:
        self.handlers.append(handler)

    def items(self) -> builtins.list[Object]:
        """The stored objects themselves (``list`` hands out copies)."""
        return list(self.store.values())

    def has_synced(self) -> bool:
        return self.synced

    def __len__(self) -> int:
        return len(self.store)


def informer_of(*objects: Object, version: str = "1") -> FakeInformer:
    """A FakeInformer holding ``objects``, its resourceVersion at least ``version``."""
    informer = FakeInformer()
    informer.resource_version = version
    for obj in objects:
        informer.put(obj)
    return informer
