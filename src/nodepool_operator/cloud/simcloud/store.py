"""simcloud's state: VMs in one SQLite file, their lifecycle computed from timestamps.

A VM belongs to one cluster and is named uniquely within it: two clusters sharing the
simulated account may both have ``general-0``. Every call names its cluster, or none for
an unscoped view of every cluster (the tests' and admins' view; a create without a
cluster goes to ``DEFAULT_CLUSTER``). A state file from before clusters is migrated on
open, its VMs into ``DEFAULT_CLUSTER``.

Each VM row keeps ``created_at``, ``ready_at`` and, once deletion starts, ``gone_at``
(wall-clock epoch seconds). Its state at time ``t`` is derived, never stored:

    gone_at <= t          gone: invisible, and purged by the next write
    gone_at is set        DELETING
    ready_at <= t         RUNNING
    otherwise             PROVISIONING

So no background task moves VMs along, and a restarted server (or one reading a copied
file) continues the same timeline. Wall time rather than monotonic time, because the
timeline must mean the same thing to the next process.

Latency model: a VM's boot time is ``create_latency_seconds`` plus a jitter drawn
uniformly from ``[-latency_jitter_seconds, +latency_jitter_seconds]``, clamped at zero;
its deletion takes ``delete_latency_seconds`` with the same jitter. Uniform jitter is
bounded, so a test or a demo can rely on a worst case.

Every method is synchronous and short, and runs one SQLite transaction: called from the
event loop with no ``await`` inside, each is atomic within the process, and
``BEGIN IMMEDIATE`` keeps it atomic against another process sharing the file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import decimal
import json
import pathlib
import random
import re
import sqlite3
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final

from nodepool_operator.api import quantity
from nodepool_operator.cloud import catalog, provider

__all__ = [
    "DEFAULT_CLUSTER",
    "CapacityLimit",
    "Guest",
    "MachineSelector",
    "ProviderIds",
    "SimCloudStore",
    "Timing",
    "WallClock",
    "shape_of",
    "simcloud_provider_id",
    "validate_request",
]

WallClock = Callable[[], float]
"""Wall-clock epoch seconds; ``time.time`` unless a test fakes it."""

ProviderIds = Callable[[str, str], str]
"""The provider ID of a VM, by (cluster, name): the ``spec.providerID`` its Node carries,
whoever registers it (``simcloud_provider_id``, or what the VM's kubelet sets)."""

#: Where a VM goes when its create names no zone (a real cloud picks one too).
ZONES = ("sim-1a", "sim-1b", "sim-1c")

#: The cluster of a create that names none, and of VMs from a state file without clusters.
DEFAULT_CLUSTER = "default"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS vms (
    cluster TEXT NOT NULL,
    name TEXT NOT NULL,
    pool TEXT NOT NULL,
    cpu TEXT NOT NULL,
    memory TEXT NOT NULL,
    zone TEXT NOT NULL,
    created_at REAL NOT NULL,
    ready_at REAL NOT NULL,
    gone_at REAL,
    kubelet_joins INTEGER NOT NULL DEFAULT 1,
    pods INTEGER NOT NULL DEFAULT 110,
    node_labels TEXT NOT NULL DEFAULT '{}',
    node_taints TEXT NOT NULL DEFAULT '[]',
    instance_type TEXT,
    capacity_type TEXT,
    reclaim_at REAL,
    PRIMARY KEY (cluster, name)
);
CREATE INDEX IF NOT EXISTS vms_by_pool ON vms (cluster, pool);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    cluster TEXT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    pool TEXT NOT NULL,
    at REAL NOT NULL,
    terminate_at REAL
);
CREATE TABLE IF NOT EXISTS creations (
    cluster TEXT NOT NULL,
    name TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (cluster, name)
);
"""
# The tables as they were before clusters, renamed aside and copied into the new ones.
_MIGRATE_TO_CLUSTERS = f"""
ALTER TABLE vms RENAME TO vms_before_clusters;
ALTER TABLE creations RENAME TO creations_before_clusters;
DROP INDEX IF EXISTS vms_by_pool;
{_SCHEMA}
INSERT INTO vms (cluster, name, pool, cpu, memory, zone, created_at, ready_at, gone_at)
    SELECT '{DEFAULT_CLUSTER}', name, pool, cpu, memory, zone, created_at, ready_at, gone_at
    FROM vms_before_clusters;
INSERT INTO creations (cluster, name, count)
    SELECT '{DEFAULT_CLUSTER}', name, count FROM creations_before_clusters;
DROP TABLE vms_before_clusters;
DROP TABLE creations_before_clusters;
"""

# Columns added since clusters, with their definitions: a file from before gains them on
# open, its VMs taking the defaults (what their kubelets were never told).
_ADDED_COLUMNS = {
    "pods": "INTEGER NOT NULL DEFAULT 110",
    "node_labels": "TEXT NOT NULL DEFAULT '{}'",
    "node_taints": "TEXT NOT NULL DEFAULT '[]'",
    "instance_type": "TEXT",
    "capacity_type": "TEXT",
    "reclaim_at": "REAL",
}
#: What the event stream (``SimCloudStore.events``) tells, as EC2's EventBridge does: a
#: spot VM's two-minute warning, and the cloud taking it back (its state turns Deleting).
SPOT_INTERRUPTION_WARNING: Final = "SpotInterruptionWarning"
#: EC2's rebalance recommendation: the VM is at elevated risk of a notice; nothing else
#: changes (no ``terminateAt``, the VM runs on).
REBALANCE_RECOMMENDATION: Final = "RebalanceRecommendation"
STATE_CHANGE: Final = "InstanceStateChange"
#: How long a spot VM runs after its interruption notice (EC2's two minutes).
DEFAULT_SPOT_NOTICE_SECONDS: Final = 120.0

# Names become Node names, so they follow the Kubernetes DNS-1123 subdomain rule.
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_CPU = re.compile(r"[1-9][0-9]*m?")
_MEMORY = re.compile(r"(?P<number>[0-9]+(\.[0-9]*)?|\.[0-9]+)(?P<suffix>[KMGTPE]i|[kMGTPE])?")
# Any zone a template names is accepted (the simulated cloud has every region), as long
# as it can be the value of the Node's zone label.
_ZONE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Guest:
    """A running VM as its kubelet sees it: its name (the Node's) and the user data of its
    launch (max pods, the labels and taints to register the Node with)."""

    cluster: str
    name: str
    pods: int
    node_labels: tuple[tuple[str, str], ...] = ()
    node_taints: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Timing:
    """How long VMs take to boot and to go away (see the module docstring)."""

    create_latency_seconds: float
    delete_latency_seconds: float
    latency_jitter_seconds: float = 0.0

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not value >= 0.0:
                raise ValueError(f"{field.name} must be >= 0: {value}")


def simcloud_provider_id(cluster: str, name: str) -> str:
    """A VM's provider ID when kwok plays its kubelet: the operator writes it on the Node."""
    return f"simcloud:///{cluster}/{name}"


def shape_of(spec: provider.MachineSpec) -> str:
    """How simcloud names a machine's shape in its answers: ``<cpu>/<memory>``."""
    return f"{spec.cpu}/{spec.memory}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class MachineSelector:
    """A set of machines by where and what: each field given must match (cpu and memory
    as quantities, so "4" matches "4000m"; ``instance_type`` a catalog type's name;
    ``capacity_type`` spot or on-demand, a VM made without an instance type being
    on-demand, as only a catalog sells spot); one with no field matches every machine."""

    zone: str | None = None
    cpu: str | None = None
    memory: str | None = None
    instance_type: str | None = None
    capacity_type: catalog.CapacityType | None = None

    def __post_init__(self) -> None:
        # Parsed now, so a bad fault is refused when set rather than on every create.
        if self.cpu is not None:
            quantity.parse_cpu_millicores(self.cpu)
        if self.memory is not None:
            quantity.parse_memory_bytes(self.memory)

    def matches(
        self,
        *,
        zone: str,
        cpu: str,
        memory: str,
        instance_type: str | None = None,
        capacity_type: str | None = None,
    ) -> bool:
        if self.zone is not None and self.zone != zone:
            return False
        if self.instance_type is not None and self.instance_type != instance_type:
            return False
        if self.capacity_type is not None and self.capacity_type != (
            capacity_type or catalog.ON_DEMAND
        ):
            return False
        if self.cpu is not None and _millicores(self.cpu) != _millicores(cpu):
            return False
        return self.memory is None or _bytes(self.memory) == _bytes(memory)

    def matches_spec(self, spec: provider.MachineSpec, *, zone: str) -> bool:
        """``spec`` (as made: ``_as_sold``) would be one of these machines in ``zone``."""
        return self.matches(
            zone=zone,
            cpu=spec.cpu,
            memory=spec.memory,
            instance_type=spec.instance_type,
            capacity_type=spec.capacity_type,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class InterruptionRate:
    """Spot VMs in ``zone`` of ``instance_type`` (None: any) get an interruption notice
    at ``per_hour`` notices per VM per hour, at random (the seeded generator)."""

    per_hour: float
    zone: str | None = None
    instance_type: str | None = None

    def __post_init__(self) -> None:
        if not self.per_hour >= 0.0:
            raise ValueError(f"perHour must be >= 0: {self.per_hour}")

    def matches(self, *, zone: str, instance_type: str | None) -> bool:
        if self.zone is not None and self.zone != zone:
            return False
        return self.instance_type is None or self.instance_type == instance_type


@dataclasses.dataclass(frozen=True, kw_only=True)
class CloudEventRecord:
    """One event of the stream, as stored: ``id`` orders them (a reader passes the last
    it saw to get the next)."""

    id: int
    cluster: str
    kind: str
    name: str
    pool: str
    at: float
    terminate_at: float | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class CapacityLimit:
    """At most ``max_vms`` VMs of ``offering`` exist at once (deleting ones included, as
    a cloud holds their hardware until they are gone); 0: the offering has no capacity."""

    offering: MachineSelector
    max_vms: int

    def __post_init__(self) -> None:
        if self.max_vms < 0:
            raise ValueError(f"maxVms must be >= 0: {self.max_vms}")


def _millicores(cpu: str) -> int | None:
    try:
        return quantity.parse_cpu_millicores(cpu)
    except ValueError:
        return None


def _bytes(memory: str) -> int | None:
    try:
        return quantity.parse_memory_bytes(memory)
    except ValueError:
        return None


def validate_request(*, name: str, pool: str, spec: provider.MachineSpec) -> None:
    """Raise the permanent error a real cloud would give for this create request."""
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        raise provider.PermanentCloudError(
            f"VM name {name!r} is not a DNS-1123 subdomain", code="InvalidRequest"
        )
    if len(pool) > 253 or not _DNS_SUBDOMAIN.fullmatch(pool):
        raise provider.PermanentCloudError(
            f"pool {pool!r} is not a DNS-1123 subdomain", code="InvalidRequest"
        )
    if not _CPU.fullmatch(spec.cpu):
        raise provider.InvalidMachineSpec(
            f'cpu {spec.cpu!r} is not a positive whole count ("4") or millicores ("500m")'
        )
    memory = _MEMORY.fullmatch(spec.memory)
    if memory is None or decimal.Decimal(memory["number"]) <= 0:
        raise provider.InvalidMachineSpec(
            f'memory {spec.memory!r} is not a positive quantity ("16Gi", "512Mi", "1G")'
        )
    # bool is an int subclass; JSON true must not pass as one pod.
    if isinstance(spec.pods, bool) or not isinstance(spec.pods, int) or spec.pods < 1:
        raise provider.InvalidMachineSpec(f"pods {spec.pods!r} is not a positive integer")
    if spec.zone is not None and not _ZONE.fullmatch(spec.zone):
        raise provider.InvalidMachineSpec(
            f"zone {spec.zone!r} is not a label value of at most 63 characters"
        )


class SimCloudStore:
    """The VMs of one simulated cloud account, kept in the SQLite file at ``path``."""

    def __init__(
        self,
        path: str,
        *,
        timing: Timing,
        clock: WallClock = time.time,
        rng: random.Random | None = None,
        provider_ids: ProviderIds = simcloud_provider_id,
        boots_kubelets: bool = False,
        sold: catalog.Catalog = catalog.NOTHING,
    ) -> None:
        """``sold``: the instance types and offerings a create may name (``--catalog``);
        a create that names none is made with the cpu and memory it asks, as before."""
        self.catalog = sold
        self._timing = timing
        self._provider_ids = provider_ids
        self._boots_kubelets = boots_kubelets
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        if path != ":memory:":
            pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE) so a write
        # takes the file lock before it reads, and two processes cannot both pass the
        # "name is free" check. timeout waits out the other process's transaction.
        self._db = sqlite3.connect(path, timeout=5.0, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        # In WAL mode NORMAL only risks the last commits on power loss, not corruption;
        # enough for a simulator, and it keeps fsync out of the event loop.
        self._db.execute("PRAGMA synchronous=NORMAL")
        columns = {row["name"] for row in self._db.execute("PRAGMA table_info(vms)")}
        if columns and "cluster" not in columns:
            self._db.executescript(f"BEGIN IMMEDIATE; {_MIGRATE_TO_CLUSTERS} COMMIT;")
            columns = {row["name"] for row in self._db.execute("PRAGMA table_info(vms)")}
        if columns:
            for column, definition in _ADDED_COLUMNS.items():
                if column not in columns:
                    self._db.execute(f"ALTER TABLE vms ADD COLUMN {column} {definition}")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def _vm(self, row: sqlite3.Row, now: float) -> provider.VirtualMachine:
        vm = _vm(row, now, self._provider_ids)
        return dataclasses.replace(vm, boots_kubelet=self._boots_kubelets)

    def create_vm(
        self,
        *,
        cluster: str | None,
        name: provider.VmName,
        pool: str,
        spec: provider.MachineSpec,
        quota_max_vms: int | None,
        capacity: Sequence[CapacityLimit] = (),
        kubelet_never_joins: Sequence[MachineSelector] = (),
    ) -> tuple[provider.VirtualMachine, bool]:
        """The VM of that name in ``cluster``, and whether this call created it.

        An existing VM of the same pool is returned as it is, whatever the spec asked now:
        the name is the idempotency key. The quota counts deleting VMs, since a real cloud
        bills them until they are gone, and is only checked when a VM would be made; so
        are the ``capacity`` limits, which refuse with ``InsufficientCapacity``. A VM
        whose create names no zone goes to the first zone with room, starting from the
        one its name hashes to. A VM matching ``kubelet_never_joins`` runs but reports
        ``kubelet_joins=False``.
        """
        validate_request(name=name, pool=pool, spec=spec)
        spec, zones = _as_sold(spec, self.catalog, name=name)
        cluster = cluster or DEFAULT_CLUSTER
        with self._write() as db:
            now = self._clock()
            self._purge(db, now)
            row = db.execute(
                "SELECT * FROM vms WHERE cluster = ? AND name = ?", (cluster, name)
            ).fetchone()
            if row is not None:
                if row["pool"] != pool:
                    raise provider.VmConflict(
                        f"VM {name!r} exists in pool {row['pool']!r}, not {pool!r}"
                    )
                return self._vm(row, now), False
            if quota_max_vms is not None:
                (count,) = db.execute("SELECT COUNT(*) FROM vms").fetchone()
                if count >= quota_max_vms:
                    raise provider.QuotaExceeded(
                        f"quota of {quota_max_vms} VMs reached ({count} exist)"
                    )
            zone = _zone_with_room(db, spec, zones=zones, capacity=capacity)
            joins = not any(o.matches_spec(spec, zone=zone) for o in kubelet_never_joins)
            ready_at = now + self._sample(self._timing.create_latency_seconds)
            db.execute(
                "INSERT INTO vms (cluster, name, pool, cpu, memory, zone, created_at, ready_at,"
                " kubelet_joins, pods, node_labels, node_taints, instance_type, capacity_type)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    *(cluster, name, pool, spec.cpu, spec.memory, zone, now, ready_at),
                    int(joins),
                    spec.pods,
                    json.dumps(dict(spec.node_labels), sort_keys=True),
                    json.dumps(list(spec.node_taints)),
                    spec.instance_type,
                    spec.capacity_type,
                ),
            )
            db.execute(
                "INSERT INTO creations (cluster, name, count) VALUES (?, ?, 1)"
                " ON CONFLICT (cluster, name) DO UPDATE SET count = count + 1",
                (cluster, name),
            )
            row = db.execute(
                "SELECT * FROM vms WHERE cluster = ? AND name = ?", (cluster, name)
            ).fetchone()
            return self._vm(row, now), True

    def delete_vm(
        self, name: provider.VmName, *, cluster: str | None
    ) -> tuple[provider.VirtualMachine | None, bool]:
        """The VM as it is now (``None`` if absent), and whether this call began deleting it.
        Unscoped (``cluster`` None), every cluster's VM of that name is deleted."""
        with self._write() as db:
            now = self._clock()
            self._purge(db, now)
            rows = db.execute(
                "SELECT * FROM vms WHERE name = ? AND (? IS NULL OR cluster = ?)",
                (name, cluster, cluster),
            ).fetchall()
            if not rows:
                return None, False
            gone_at = now + self._sample(self._timing.delete_latency_seconds)
            started = [r for r in rows if r["gone_at"] is None]
            for row in started:
                db.execute(
                    "UPDATE vms SET gone_at = ? WHERE cluster = ? AND name = ?",
                    (gone_at, row["cluster"], name),
                )
            row = db.execute(
                "SELECT * FROM vms WHERE cluster = ? AND name = ?", (rows[0]["cluster"], name)
            ).fetchone()
            return self._vm(row, now), bool(started)

    def get_vm(
        self, name: provider.VmName, *, cluster: str | None
    ) -> provider.VirtualMachine | None:
        now = self._clock()
        row = self._db.execute(
            "SELECT * FROM vms WHERE name = ? AND (gone_at IS NULL OR gone_at > ?)"
            " AND (? IS NULL OR cluster = ?) ORDER BY cluster",
            (name, now, cluster, cluster),
        ).fetchone()
        return None if row is None else self._vm(row, now)

    def list_vms(
        self, *, cluster: str | None, pool: str | None = None
    ) -> list[provider.VirtualMachine]:
        """VMs not gone yet, by name; every pool's when ``pool`` is ``None``, every
        cluster's when ``cluster`` is ``None``."""
        now = self._clock()
        rows = self._db.execute(
            "SELECT * FROM vms WHERE (gone_at IS NULL OR gone_at > ?)"
            " AND (? IS NULL OR cluster = ?) AND (? IS NULL OR pool = ?) ORDER BY name, cluster",
            (now, cluster, cluster, pool, pool),
        ).fetchall()
        return [self._vm(row, now) for row in rows]

    def booted(self) -> list[Guest]:
        """Every cluster's RUNNING VMs whose kubelet joins: the machines a kubelet runs on
        now, and what each was told at launch."""
        now = self._clock()
        rows = self._db.execute(
            "SELECT cluster, name, pods, node_labels, node_taints FROM vms"
            " WHERE gone_at IS NULL AND ready_at <= ? AND kubelet_joins = 1"
            " ORDER BY cluster, name",
            (now,),
        ).fetchall()
        return [
            Guest(
                cluster=row["cluster"],
                name=row["name"],
                pods=int(row["pods"]),
                node_labels=tuple(sorted(json.loads(row["node_labels"]).items())),
                node_taints=tuple(json.loads(row["node_taints"])),
            )
            for row in rows
        ]

    def creations_by_name(self, *, cluster: str | None = None) -> dict[str, int]:
        """How many times each name was made into a VM, over the file's whole life; summed
        over clusters unless ``cluster`` is given."""
        rows = self._db.execute(
            "SELECT name, SUM(count) AS count FROM creations WHERE (? IS NULL OR cluster = ?)"
            " GROUP BY name ORDER BY name",
            (cluster, cluster),
        ).fetchall()
        return {row["name"]: row["count"] for row in rows}

    def interrupt(
        self, names: Iterable[str], *, cluster: str | None, notice_seconds: float
    ) -> list[provider.VirtualMachine]:
        """Give each named spot VM its interruption notice now: it runs for
        ``notice_seconds`` more, then the cloud takes it back (``reclaim_due``). A VM that
        has one already keeps it. Raises ``PermanentCloudError`` (InvalidRequest) naming
        a VM that is absent, not running or not spot, before noticing any."""
        with self._write() as db:
            now = self._clock()
            rows = [self._spot_row(db, name, cluster=cluster) for name in names]
            for row in rows:
                if row["reclaim_at"] is None:
                    self._notice(db, row, now=now, notice_seconds=notice_seconds)
            return [self._vm(r, now) for r in self._rows(db, rows)]

    def recommend_rebalance(
        self, names: Iterable[str], *, cluster: str | None
    ) -> list[provider.VirtualMachine]:
        """Tell a rebalance recommendation for each named spot VM now (the stream only:
        the VM runs on, without ``terminateAt``). Raises ``PermanentCloudError``
        (InvalidRequest) naming a VM that is absent or not spot, before telling any."""
        with self._write() as db:
            now = self._clock()
            rows = [self._spot_row(db, name, cluster=cluster) for name in names]
            for row in rows:
                self._record(db, row, kind=REBALANCE_RECOMMENDATION, at=now, terminate_at=None)
            return [self._vm(r, now) for r in self._rows(db, rows)]

    @staticmethod
    def _spot_row(db: sqlite3.Connection, name: str, *, cluster: str | None) -> sqlite3.Row:
        row: sqlite3.Row | None = db.execute(
            "SELECT * FROM vms WHERE name = ? AND (? IS NULL OR cluster = ?) AND gone_at IS NULL",
            (name, cluster, cluster),
        ).fetchone()
        if row is None or row["capacity_type"] != catalog.SPOT:
            why = "no such VM" if row is None else "not a spot VM"
            raise provider.PermanentCloudError(f"{name}: {why}", code="InvalidRequest")
        return row

    def interrupt_at_rate(
        self, rates: Sequence[InterruptionRate], *, seconds: float, notice_seconds: float
    ) -> int:
        """Over ``seconds`` of time, give each running spot VM a notice with the
        probability its matching rates add up to; returns how many got one."""
        if not rates or seconds <= 0:
            return 0
        noticed = 0
        with self._write() as db:
            now = self._clock()
            rows = db.execute(
                "SELECT * FROM vms WHERE gone_at IS NULL AND reclaim_at IS NULL"
                " AND capacity_type = ? AND ready_at <= ? ORDER BY cluster, name",
                (catalog.SPOT, now),
            ).fetchall()
            for row in rows:
                per_hour = sum(
                    r.per_hour
                    for r in rates
                    if r.matches(zone=row["zone"], instance_type=row["instance_type"])
                )
                if per_hour and self._rng.random() < per_hour * seconds / 3600.0:
                    self._notice(db, row, now=now, notice_seconds=notice_seconds)
                    noticed += 1
        return noticed

    def reclaim_due(self) -> list[provider.VirtualMachine]:
        """Take back every VM whose notice has run out: it starts deleting (gone after
        the delete latency), and the stream says so. Returns them."""
        with self._write() as db:
            now = self._clock()
            rows = db.execute(
                "SELECT * FROM vms WHERE gone_at IS NULL AND reclaim_at IS NOT NULL"
                " AND reclaim_at <= ? ORDER BY cluster, name",
                (now,),
            ).fetchall()
            for row in rows:
                gone_at = now + self._sample(self._timing.delete_latency_seconds)
                db.execute(
                    "UPDATE vms SET gone_at = ? WHERE cluster = ? AND name = ?",
                    (gone_at, row["cluster"], row["name"]),
                )
                self._record(db, row, kind=STATE_CHANGE, at=now, terminate_at=None)
            return [self._vm(r, now) for r in self._rows(db, rows)]

    def events(
        self, *, after: int, cluster: str | None, limit: int = 500
    ) -> list[CloudEventRecord]:
        """The events after id ``after``, oldest first (at most ``limit``)."""
        rows = self._db.execute(
            "SELECT * FROM events WHERE id > ? AND (? IS NULL OR cluster = ?) ORDER BY id LIMIT ?",
            (after, cluster, cluster, limit),
        ).fetchall()
        return [
            CloudEventRecord(
                id=int(row["id"]),
                cluster=row["cluster"],
                kind=row["kind"],
                name=row["name"],
                pool=row["pool"],
                at=float(row["at"]),
                terminate_at=row["terminate_at"],
            )
            for row in rows
        ]

    def _notice(
        self, db: sqlite3.Connection, row: sqlite3.Row, *, now: float, notice_seconds: float
    ) -> None:
        reclaim_at = now + notice_seconds
        db.execute(
            "UPDATE vms SET reclaim_at = ? WHERE cluster = ? AND name = ?",
            (reclaim_at, row["cluster"], row["name"]),
        )
        self._record(db, row, kind=SPOT_INTERRUPTION_WARNING, at=now, terminate_at=reclaim_at)

    @staticmethod
    def _record(
        db: sqlite3.Connection,
        row: sqlite3.Row,
        *,
        kind: str,
        at: float,
        terminate_at: float | None,
    ) -> None:
        db.execute(
            "INSERT INTO events (cluster, kind, name, pool, at, terminate_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (row["cluster"], kind, row["name"], row["pool"], at, terminate_at),
        )

    @staticmethod
    def _rows(db: sqlite3.Connection, before: Sequence[sqlite3.Row]) -> list[sqlite3.Row]:
        """``before``'s rows as they are now."""
        found = []
        for old in before:
            row = db.execute(
                "SELECT * FROM vms WHERE cluster = ? AND name = ?", (old["cluster"], old["name"])
            ).fetchone()
            if row is not None:
                found.append(row)
        return found

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _sample(self, mean: float) -> float:
        jitter = self._timing.latency_jitter_seconds
        return max(0.0, mean + self._rng.uniform(-jitter, jitter))

    @staticmethod
    def _purge(db: sqlite3.Connection, now: float) -> None:
        # Gone rows must leave before a create, or a recreated name would collide.
        db.execute("DELETE FROM vms WHERE gone_at IS NOT NULL AND gone_at <= ?", (now,))


def _vm(row: sqlite3.Row, now: float, provider_id: ProviderIds) -> provider.VirtualMachine:
    if row["gone_at"] is not None:
        state = provider.VmState.DELETING
    elif row["ready_at"] <= now:
        state = provider.VmState.RUNNING
    else:
        state = provider.VmState.PROVISIONING
    name = provider.VmName(row["name"])
    return provider.VirtualMachine(
        kubelet_joins=bool(row["kubelet_joins"]),
        name=name,
        pool=row["pool"],
        cpu=row["cpu"],
        memory=row["memory"],
        state=state,
        provider_id=provider_id(row["cluster"], name),
        created_at=row["created_at"],
        zone=row["zone"],
        instance_type=row["instance_type"],
        capacity_type=_capacity_type(row["capacity_type"]),
        terminate_at=row["reclaim_at"],
    )


def _capacity_type(stored: object) -> catalog.CapacityType | None:
    return next((kind for kind in catalog.CAPACITY_TYPES if kind == stored), None)


def _as_sold(
    spec: provider.MachineSpec, sold: catalog.Catalog, *, name: str
) -> tuple[provider.MachineSpec, list[str]]:
    """The machine as made, and the zones it may go to, in order of preference.

    A create naming an instance type gets that type's cpu and memory, in the zone asked
    for or, when none is, in the zones that sell it, cheapest first (an unavailable
    offering is refused as a cloud out of that capacity refuses it). A create naming
    none is made as asked, in the zone asked for or the default zones from the one its
    name hashes to."""
    if spec.instance_type is None:
        if spec.capacity_type is not None:
            raise provider.InvalidMachineSpec("capacityType needs an instanceType")
        if spec.zone is not None:
            return spec, [spec.zone]
        start = ZONES.index(_zone(name))
        return spec, [*ZONES[start:], *ZONES[:start]]
    found = sold.type(spec.instance_type)
    if found is None:
        what = "no catalog" if sold.sells_any_shape else "no instance type of that name"
        raise provider.InvalidMachineSpec(
            f"instance type {spec.instance_type!r}: simcloud sells {what}"
        )
    kind = spec.capacity_type or catalog.ON_DEMAND
    offered = [o for o in sold.offerings_of(found.name) if o.capacity_type == kind]
    if spec.zone is not None:
        offered = [o for o in offered if o.zone == spec.zone]
    where = f"zone {spec.zone}" if spec.zone is not None else "any zone"
    if not offered:
        raise provider.InvalidMachineSpec(f"{found.name} is not sold as {kind} in {where}")
    available = [o.zone for o in offered if o.available]
    if not available:
        raise provider.InsufficientCapacity(
            f"no {kind} capacity for {found.name} in {where}", zone=spec.zone, shape=found.name
        )
    made = dataclasses.replace(
        spec,
        cpu=_cpu_text(found.cpu_millis),
        memory=_memory_text(found.memory_bytes),
        capacity_type=kind,
    )
    return made, available


def _cpu_text(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def _memory_text(size: int) -> str:
    for suffix, unit in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def _zone_with_room(
    db: sqlite3.Connection,
    spec: provider.MachineSpec,
    *,
    zones: Sequence[str],
    capacity: Sequence[CapacityLimit],
) -> str:
    """The first of ``zones`` where the capacity limits leave room for the VM. Raises
    ``InsufficientCapacity`` if none has."""
    candidates = list(zones)
    for zone in candidates:
        full = [
            limit
            for limit in capacity
            if limit.offering.matches_spec(spec, zone=zone)
            and _count(db, limit.offering) >= limit.max_vms
        ]
        if not full:
            return zone
    where = f"zone {spec.zone}" if spec.zone is not None else f"any of {', '.join(candidates)}"
    raise provider.InsufficientCapacity(
        f"no capacity for {shape_of(spec)} in {where}",
        zone=spec.zone,
        shape=shape_of(spec),
    )


def _count(db: sqlite3.Connection, offering: MachineSelector) -> int:
    # Every cluster's VMs: capacity belongs to the account's hardware, not to a cluster.
    rows = db.execute("SELECT zone, cpu, memory, instance_type, capacity_type FROM vms")
    return sum(
        offering.matches(
            zone=r["zone"],
            cpu=r["cpu"],
            memory=r["memory"],
            instance_type=r["instance_type"],
            capacity_type=r["capacity_type"],
        )
        for r in rows.fetchall()
    )


def _zone(name: str) -> str:
    # A stable hash, so a VM's zone does not depend on the server's PYTHONHASHSEED.
    return ZONES[zlib.crc32(name.encode()) % len(ZONES)]
