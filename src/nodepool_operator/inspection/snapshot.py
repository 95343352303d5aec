"""What the planner reads, captured from a live cluster, saved to a file and replayed.

A snapshot is the content of the Autoscaler's informers: the same informers (resources,
selectors and transforms) the controller asks the manager's cache for, listed with the
user's own credentials (list and watch only: nothing is written), then frozen. Replayed,
the same planner runs over informers that hold exactly those objects, so a decision can
be reproduced offline, on another machine, from a file attached to a bug report.

Beside the planner's informers, a snapshot records the PodDisruptionBudgets (``policy/v1``,
``record_budgets``), which the running controllers read only when a decision is about to
stand (consolidation, a drain): ``plan`` names a budget that holds a node's replacement.
A snapshot taken by a version that did not record them replays with none known.

The caches already keep only what the controllers read of Pods and Nodes; on top of that
a snapshot drops what could carry a secret: container environment, commands, arguments
and images in any pod template, managed fields, and every annotation but the few the
controllers read.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from nodepool_operator import __version__
from nodepool_operator.controllers import cached
from nodepool_operator.controllers.autoscaler.consolidator import PDBS
from nodepool_operator.runtime import errors
from nodepool_operator.runtime.client import Object, Resource
from nodepool_operator.runtime.informer import (
    Informer,
    InformerCache,
    Transform,
    drop_managed_fields,
)

__all__ = [
    "FORMAT",
    "CacheRecording",
    "SnapshotCache",
    "SnapshotError",
    "budgets_in",
    "cache_key",
    "capture",
    "load",
    "record_budgets",
    "scrubbed",
]

#: The file format's name and version; a file of another version is refused, not guessed.
FORMAT: Final = "nodepool.dev/snapshot/v1"
#: Container fields that may hold secrets and that no filter reads.
_CONTAINER_SECRETS: Final = frozenset({"env", "envFrom", "command", "args", "image"})


class SnapshotError(Exception):
    """A snapshot that cannot be used: unreadable, another format, or lacking a cache."""


def cache_key(
    resource: Resource,
    namespace: str | None,
    label_selector: str | None,
    field_selector: str | None,
) -> str:
    return "|".join(
        (
            resource.api_version,
            resource.plural,
            namespace or "",
            label_selector or "",
            field_selector or "",
        )
    )


def scrubbed(value: Any, *, inside_container: bool = False) -> Any:
    """``value`` without what could carry a secret (see the module docstring)."""
    if isinstance(value, list):
        return [scrubbed(item, inside_container=inside_container) for item in value]
    if not isinstance(value, dict):
        return value
    kept: dict[str, Any] = {}
    for key, item in value.items():
        if key == "managedFields" or (inside_container and key in _CONTAINER_SECRETS):
            continue
        if key == "annotations" and isinstance(item, dict):
            item = {
                k: v
                for k, v in item.items()
                if k in cached.ANNOTATIONS or k.startswith("nodepool.dev/")
            }
        kept[key] = scrubbed(item, inside_container=key in ("containers", "initContainers"))
    return kept


@dataclass
class CacheRecording:
    """Informer contents by cache key, and when and where they were read."""

    caches: dict[str, list[Object]]
    captured_at: str = field(
        default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds")
    )
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "operatorVersion": __version__,
            "capturedAt": self.captured_at,
            "source": self.source,
            "caches": self.caches,
        }

    def save(self, path: Path) -> None:
        text = json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True)
        if path.name.endswith(".gz"):
            # mtime 0: the same cluster state gives the same bytes.
            path.write_bytes(gzip.compress(text.encode(), mtime=0))
        else:
            path.write_text(text)

    def counts(self) -> dict[str, int]:
        return {key.split("|")[1]: len(items) for key, items in self.caches.items()}


def load(path: Path) -> CacheRecording:
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        document = json.loads(raw)
    except FileNotFoundError as error:
        raise SnapshotError(f"no snapshot file at {path}") from error
    except (OSError, ValueError) as error:
        raise SnapshotError(f"{path} is not a snapshot file: {error}") from error
    found = document.get("format") if isinstance(document, dict) else type(document).__name__
    if found != FORMAT:
        raise SnapshotError(f"{path} is not a {FORMAT} snapshot (format: {found!r})")
    caches = document.get("caches")
    if not isinstance(caches, dict):
        raise SnapshotError(f"{path} has no caches")
    return CacheRecording(
        caches={str(k): list(v) for k, v in caches.items()},
        captured_at=str(document.get("capturedAt", "")),
        source=str(document.get("source", "")),
    )


def record_budgets(cache: InformerCache) -> None:
    """Ask ``cache`` for the PodDisruptionBudgets too, so ``capture`` records them."""
    cache.informer(PDBS)


def budgets_in(snapshot: CacheRecording) -> list[Object] | None:
    """The PodDisruptionBudgets the snapshot recorded; None when it recorded none (taken
    by a version before ``record_budgets``), which is not the same as a cluster without."""
    found = snapshot.caches.get(cache_key(PDBS, None, None, None))
    return None if found is None else list(found)


class SnapshotCache:
    """Hands out informers as the manager's cache does, each holding what the snapshot
    recorded for the same resource and selectors, synced and never watching."""

    def __init__(self, snapshot: CacheRecording) -> None:
        self.snapshot = snapshot
        self._informers: dict[str, Informer] = {}

    def informer(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform = drop_managed_fields,
    ) -> Informer:
        key = cache_key(resource, namespace, label_selector, field_selector)
        found = self._informers.get(key)
        if found is None:
            if key not in self.snapshot.caches:
                raise SnapshotError(
                    f"the snapshot holds no {resource.plural} cache (selector "
                    f"{label_selector or 'none'}): it was taken by another version"
                )
            found = Informer.holding(
                resource,
                self.snapshot.caches[key],
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                transform=transform,
            )
            self._informers[key] = found
        return found


async def _may_list(cache: InformerCache) -> None:
    """One small LIST of each resource first: an informer retries a refusal for ever, a
    person wants to hear at once which permission or CRD is missing."""
    for informer in cache.informers():
        try:
            await cache.client.list_page(informer.resource, limit=1)
        except errors.ApiError as error:
            raise SnapshotError(
                f"cannot list {informer.resource.plural}: {type(error).__name__}: {error}"
            ) from error


async def capture(
    cache: InformerCache, *, source: str = "", within: float = 120.0
) -> CacheRecording:
    """Run the informers already requested from ``cache`` until they have listed, and
    record what each holds (scrubbed). Reads only: list and watch."""
    await _may_list(cache)
    cache.start()
    try:
        await cache.wait_for_sync(within=within)
    except TimeoutError as error:
        raise SnapshotError(f"the cluster's caches did not fill within {within:.0f} s") from error
    finally:
        stopping = asyncio.ensure_future(cache.stop())
    await stopping
    caches = {
        cache_key(i.resource, i.namespace, i.label_selector, i.field_selector): _items(i.items())
        for i in cache.informers()
    }
    return CacheRecording(caches=caches, source=source)


def _items(objects: Iterable[Mapping[str, Any]]) -> list[Object]:
    return sorted(
        (scrubbed(dict(obj)) for obj in objects),
        key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]),
    )
