"""Reading the local control plane's audit log: the server's own count of who wrote what.

Our controllers count their writes and conflicts too, but a claim such as "zero writes
while idle" or "k writes per scale-up" is only believable when the API server says so.
The audit policy records every non-read request once, at ResponseComplete, as JSON lines.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodepool_operator import timestamps

__all__ = ["WRITE_VERBS", "AuditEvent", "AuditLog", "summarize", "writes"]

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclass(frozen=True)
class AuditEvent:
    user: str
    user_agent: str
    verb: str
    api_group: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    audit_id: str
    # A refusal because the object's namespace was being deleted: not a missing permission.
    namespace_terminating: bool = False
    # When the server received the request (seconds since the epoch, its own clock; 0 when
    # the record has none): timings from it do not depend on how late a watcher hears.
    received: float = 0.0

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> AuditEvent:
        ref = raw.get("objectRef") or {}
        return cls(
            user=(raw.get("user") or {}).get("username", ""),
            user_agent=raw.get("userAgent", ""),
            verb=raw.get("verb", ""),
            api_group=ref.get("apiGroup", ""),
            resource=ref.get("resource", ""),
            subresource=ref.get("subresource", ""),
            namespace=ref.get("namespace", ""),
            name=ref.get("name", ""),
            code=int((raw.get("responseStatus") or {}).get("code", 0)),
            audit_id=raw.get("auditID", ""),
            namespace_terminating="being terminated"
            in str((raw.get("responseStatus") or {}).get("message", "")),
            received=timestamps.parse_rfc3339(raw.get("requestReceivedTimestamp")) or 0.0,
        )

    @property
    def is_write(self) -> bool:
        return self.verb in WRITE_VERBS

    @property
    def target(self) -> str:
        """``resource/subresource`` as the server routes it, e.g. ``nodepools/status``."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


class AuditLog:
    """An audit log file read incrementally: ``mark()`` then ``events_since_mark()``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def mark(self) -> None:
        """Remember the current end of the log; later reads see only what comes after."""
        self._offset = self.path.stat().st_size if self.path.exists() else 0

    def follow(self) -> list[AuditEvent]:
        """Events written since the previous ``follow`` (or ``mark``); advances the mark."""
        found: list[AuditEvent] = []
        for event, end in self._read_with_offsets(self._offset):
            found.append(event)
            self._offset = end
        return found

    def events(self) -> list[AuditEvent]:
        return list(self._read(0))

    def events_since_mark(self) -> list[AuditEvent]:
        return list(self._read(self._offset))

    def _read(self, offset: int) -> Iterator[AuditEvent]:
        for event, _ in self._read_with_offsets(offset):
            yield event

    def _read_with_offsets(self, offset: int) -> Iterator[tuple[AuditEvent, int]]:
        if not self.path.exists():
            return
        with self.path.open("rb") as handle:
            handle.seek(offset)
            for line in handle:
                # A line still being written has no newline yet; it belongs to the next read.
                if not line.endswith(b"\n"):
                    break
                offset += len(line)
                yield AuditEvent.from_json(json.loads(line)), offset


def writes(
    events: Iterable[AuditEvent], *, user: str | None = None, resource: str | None = None
) -> list[AuditEvent]:
    return [
        e
        for e in events
        if e.is_write
        and (user is None or e.user == user)
        and (resource is None or e.resource == resource)
    ]


def summarize(events: Iterable[AuditEvent]) -> Counter[tuple[str, str, int]]:
    """Writes counted by (verb, resource/subresource, response code)."""
    return Counter((e.verb, e.target, e.code) for e in events if e.is_write)
