"""The demo's live terminal view: what the cluster looks like right now, from the API."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from nodepool_devtools.cluster import audit
from nodepool_operator.runtime import nodes

__all__ = ["Snapshot", "WriteCounter", "render"]


@dataclass
class WriteCounter:
    """The operator's writes and 409s as the API server's audit log records them."""

    user: str
    writes: Counter[str] = field(default_factory=Counter)
    conflicts: int = 0

    def add(self, events: list[audit.AuditEvent]) -> None:
        for event in audit.writes(events, user=self.user):
            self.writes[f"{event.verb} {event.target}"] += 1
            if event.code == 409:
                self.conflicts += 1

    @property
    def total(self) -> int:
        return sum(self.writes.values())


@dataclass
class Snapshot:
    pools: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)

    @property
    def running_pods(self) -> int:
        return sum(1 for p in self.pods if p.get("status", {}).get("phase") == "Running")

    @property
    def pending_pods(self) -> int:
        return sum(1 for p in self.pods if p.get("status", {}).get("phase") == "Pending")

    @property
    def ready_nodes(self) -> int:
        return sum(1 for n in self.nodes if nodes.is_ready(n))


def render(
    snapshot: Snapshot, *, counter: WriteCounter, steps: list[str], writer_labels: int
) -> Group:
    pools = Table(title="NodePools", expand=True)
    for column in ("name", "target", "current", "ready", "operation", "conditions"):
        pools.add_column(column)
    for pool in snapshot.pools:
        status = pool.get("status", {})
        conditions = " ".join(
            f"{c['type']}={c['status']}" for c in status.get("conditions", []) or []
        )
        operation = status.get("scaleOperation", "-")
        pools.add_row(
            pool["metadata"]["name"],
            str(pool["spec"].get("targetNodes")),
            str(status.get("currentNodes", "-")),
            str(status.get("readyNodes", "-")),
            Text(operation, style="yellow" if operation == "active" else "green"),
            conditions,
        )
    requests = Table(title="ScaleRequests", expand=True)
    for column in ("name", "target", "phase", "message"):
        requests.add_column(column)
    for request in snapshot.requests[-6:]:
        status = request.get("status", {})
        requests.add_row(
            request["metadata"]["name"],
            str(request["spec"].get("targetNodes")),
            status.get("phase", "Pending"),
            status.get("message", ""),
        )
    cluster = Table.grid(padding=(0, 3))
    cluster.add_row(
        f"nodes: [bold]{snapshot.ready_nodes}[/] ready / {len(snapshot.nodes)}",
        f"pods: [bold green]{snapshot.running_pods}[/] running, "
        f"[bold yellow]{snapshot.pending_pods}[/] pending",
        f"operator API writes: [bold]{counter.total}[/]  409s: [bold]{counter.conflicts}[/]",
        f"competing writer labels: [bold]{writer_labels}[/]",
    )
    story = Text("\n".join(steps[-8:]))
    return Group(
        Panel(cluster, title="cluster"),
        pools,
        requests,
        Panel(story, title="story"),
    )
