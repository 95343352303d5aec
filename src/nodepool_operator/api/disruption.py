"""A pool's voluntary disruption: its budgets (``spec.disruption.budgets``) and its
nodes' lifetime (``spec.expireAfter``).

A **budget** caps how many of the pool's Nodes may be being disrupted at once:
``nodes`` is a count (``"2"``) or a share of the pool's registered Nodes (``"10%"``,
rounded up, as Karpenter does: 10% of 6 Nodes is 1). It applies to the ``reasons`` it lists (all of
them when it lists none) and, with a ``schedule`` (cron, five fields, UTC) and a
``duration``, only from each time the schedule fires until ``duration`` later.
Every budget in force for a reason caps it; the most restrictive one holds. The Nodes
being disrupted are counted across every reason, involuntary ones (a repair, a spot
interruption) included: those are not budgeted, but they use the room all the same.
A pool that sets no budget has one of ``10%``; ``nodes: "0"`` blocks.

Everything here is pure: the caller passes the time (seconds since the epoch) and the
counts it read from the world (the Nodes' disruption taints), so a restarted operator
reaches the same verdict as the one before it.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, get_args

import croniter

from nodepool_operator.api import fields, wellknown

__all__ = [
    "DEFAULT_BUDGET_NODES",
    "DISRUPTION_REASONS",
    "INTERRUPTED",
    "MAX_BUDGETS",
    "NEVER",
    "REBALANCE_ACTIONS",
    "REBALANCE_IGNORE",
    "REBALANCE_REPLACE",
    "Allowance",
    "Budget",
    "Disruption",
    "DisruptionReason",
    "Interrupted",
    "RebalanceAction",
    "TaintReason",
    "allowance",
    "expires_in",
    "next_change_in",
    "parse_duration",
    "parse_expire_after",
]

#: Why a Node is disrupted of the controllers' own accord (Karpenter's names, plus
#: ``Expired``: here expiry waits for its budget too).
DisruptionReason = Literal["Drifted", "Expired", "Underutilized", "Empty"]
DISRUPTION_REASONS: Final[tuple[DisruptionReason, ...]] = get_args(DisruptionReason)
#: Why a Node is disrupted although nobody chose to: the cloud gave notice that it takes
#: the VM back. Never budgeted (no budget names it: the VM goes whatever a budget says),
#: but counted among the Nodes being disrupted, as a repair is.
Interrupted = Literal["Interrupted"]
INTERRUPTED: Final[Interrupted] = "Interrupted"
#: Every reason the NodePool controller's disruption taint may carry.
TaintReason = Literal[DisruptionReason, Interrupted]

#: ``spec.disruption.rebalanceRecommendation``: what the cloud's rebalance recommendation
#: (a spot VM at elevated risk of being taken back, no deadline given) does to its Node.
#: ``Ignore`` (the default): nothing, it is logged. ``Replace``: the Node is cordoned and
#: its replacement launched at once beside it (not budgeted, counted, as an
#: interruption), without draining it; a notice that follows drains it as any other.
RebalanceAction = Literal["Ignore", "Replace"]
REBALANCE_ACTIONS: Final[tuple[RebalanceAction, ...]] = get_args(RebalanceAction)
REBALANCE_IGNORE: Final[RebalanceAction] = "Ignore"
REBALANCE_REPLACE: Final[RebalanceAction] = "Replace"

DEFAULT_BUDGET_NODES: Final = "10%"
#: ``expireAfter: Never``: Nodes live until something else removes them (the default).
NEVER: Final = "Never"
#: Enough for a budget per reason and per window; few enough for the CEL cost budget.
MAX_BUDGETS: Final = 50

# Go's time.ParseDuration subset people write in specs ("720h", "1h30m", "60s"): whole
# hours, minutes and seconds in that order, at least one of them.
_DURATION = re.compile(r"^(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?$")
_NODES = re.compile(r"^(?:(?P<percent>100|[1-9]?[0-9])%|(?P<count>[0-9]+))$")
_CRON_FIELDS: Final = 5


def parse_duration(text: str) -> int:
    """Seconds in a duration such as ``"8h"``, ``"1h30m"`` or ``"60s"`` (ValueError
    when it is not one)."""
    match = _DURATION.match(text)
    if not text or match is None:
        raise ValueError(f"{text!r} is not a duration such as 8h, 1h30m or 60s")
    hours, minutes, seconds = (int(match.group(unit) or 0) for unit in "hms")
    return hours * 3600 + minutes * 60 + seconds


def parse_expire_after(text: str) -> int | None:
    """``spec.expireAfter`` in seconds; None for ``Never``."""
    return None if text == NEVER else parse_duration(text)


def expires_in(*, created_at: float, expire_after: int | None, now: float) -> float | None:
    """Seconds until a Node created at ``created_at`` (its creationTimestamp) has
    expired: 0 or less once it has; None when the pool's Nodes never expire."""
    if expire_after is None:
        return None
    return created_at + expire_after - now


def _check_schedule(text: str) -> str:
    # croniter also takes a sixth (seconds) field; Kubernetes' CronJob and Karpenter's
    # budgets take five, so a six-field schedule would mean something else to the reader.
    if not (text.startswith("@") or len(text.split()) == _CRON_FIELDS):
        raise ValueError(f"{text!r} is not a cron schedule of five fields")
    if not croniter.croniter.is_valid(text):
        raise ValueError(f"{text!r} is not a valid cron schedule")
    return text


def _utc(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Budget:
    """One of ``spec.disruption.budgets``."""

    nodes: str = DEFAULT_BUDGET_NODES
    reasons: tuple[DisruptionReason, ...] = ()
    schedule: str | None = None
    duration: str | None = None

    def __post_init__(self) -> None:
        if _NODES.match(self.nodes) is None:
            raise ValueError(f"nodes: {self.nodes!r} is neither a count nor a percentage")
        if (self.schedule is None) != (self.duration is None):
            raise ValueError("schedule and duration go together: set both or neither")
        if self.schedule is not None:
            _check_schedule(self.schedule)
        if self.duration is not None:
            parse_duration(self.duration)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Budget:
        nodes = d.get("nodes", DEFAULT_BUDGET_NODES)
        if isinstance(nodes, int) and not isinstance(nodes, bool):
            nodes = str(nodes)  # int-or-string, as a PodDisruptionBudget's maxUnavailable
        if not isinstance(nodes, str) or _NODES.match(nodes) is None:
            raise fields.FieldError("nodes", f"{nodes!r} is neither a count nor a percentage")
        schedule = fields.optional_string(d, "schedule")
        duration = fields.optional_string(d, "duration")
        if (schedule is None) != (duration is None):
            raise fields.FieldError("schedule", "schedule and duration go together")
        for key, text, check in (
            ("schedule", schedule, _check_schedule),
            ("duration", duration, parse_duration),
        ):
            try:
                if text is not None:
                    check(text)
            except ValueError as e:
                raise fields.FieldError(key, str(e)) from e
        return cls(
            nodes=nodes,
            reasons=tuple(
                fields.choice({"reasons": r}, "reasons", choices=DISRUPTION_REASONS, default=None)
                for r in fields.string_list(d, "reasons")
            ),
            schedule=schedule,
            duration=duration,
        )

    def to_dict(self) -> dict[str, Any]:
        return fields.compact(
            {
                "nodes": self.nodes,
                "reasons": list(self.reasons),
                "schedule": self.schedule,
                "duration": self.duration,
            }
        )

    def applies_to(self, reason: DisruptionReason) -> bool:
        return not self.reasons or reason in self.reasons

    def cap(self, total: int) -> int:
        """How many of a pool of ``total`` Nodes this budget lets be disrupted at once."""
        match = _NODES.match(self.nodes)
        assert match is not None  # checked in __post_init__
        if match.group("count") is not None:
            return int(match.group("count"))
        return math.ceil(int(match.group("percent")) * total / 100)

    def _window(self) -> tuple[str, int] | None:
        if self.schedule is None or self.duration is None:
            return None
        return self.schedule, parse_duration(self.duration)

    def _last_fire(self, schedule: str, now: float) -> float:
        """The latest time at or before ``now`` the schedule fired."""
        # croniter's get_prev is strictly before its start; fires are whole minutes, so
        # starting a second on finds a fire at ``now`` itself, then steps back past any
        # fire later than ``now``.
        it = croniter.croniter(schedule, _utc(math.floor(now) + 1))
        fire = float(it.get_prev(float))
        while fire > now:
            fire = float(it.get_prev(float))
        return fire

    def in_force(self, now: float) -> bool:
        """Whether the budget holds at ``now``: always without a schedule, else from
        each time its schedule fires until ``duration`` later."""
        window = self._window()
        if window is None:
            return True
        schedule, duration = window
        return now < self._last_fire(schedule, now) + duration

    def changes_in(self, now: float) -> float | None:
        """Seconds until the budget comes into force or stops being in force; None
        when it never changes (no schedule)."""
        window = self._window()
        if window is None:
            return None
        schedule, duration = window
        it = croniter.croniter(schedule, _utc(now))
        end = self._last_fire(schedule, now) + duration
        if now >= end:  # out of force: until the next fire
            return float(it.get_next(float)) - now
        # In force until the window ends, unless a later fire opens another before it
        # ends (windows longer than the schedule's period overlap): follow them, a few.
        for _ in range(1000):
            following = float(it.get_next(float))
            if following >= end:
                break
            end = following + duration
        return end - now


def _default_budgets() -> tuple[Budget, ...]:
    return (Budget(),)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Disruption:
    """``spec.disruption``: the pool's budgets (one of 10% when it sets none), and what
    a cloud's rebalance recommendation does to a Node (``REBALANCE_ACTIONS``)."""

    budgets: tuple[Budget, ...] = dataclasses.field(default_factory=_default_budgets)
    rebalance_recommendation: RebalanceAction = REBALANCE_IGNORE

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Disruption:
        rebalance = fields.choice(
            d, "rebalanceRecommendation", choices=REBALANCE_ACTIONS, default=REBALANCE_IGNORE
        )
        if d.get("budgets") is None:
            return cls(rebalance_recommendation=rebalance)
        return cls(
            budgets=fields.nested_list(d, "budgets", parse=Budget.from_dict),
            rebalance_recommendation=rebalance,
        )

    def to_dict(self) -> dict[str, Any]:
        # An empty list is written: it means "no budget", not "the default".
        return {
            "budgets": [b.to_dict() for b in self.budgets],
            "rebalanceRecommendation": self.rebalance_recommendation,
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class Allowance:
    """How many more Nodes may start being disrupted for a reason now, and why.

    ``holding`` is the most restrictive budget in force (None when none is: then
    nothing caps the reason and ``allowed`` is every Node not being disrupted yet).
    """

    allowed: int
    cap: int | None
    holding: Budget | None
    disrupting: int

    def describe(self) -> str:
        """The budget that holds, as an event names it."""
        if self.holding is None:
            return "no budget in force"
        b = self.holding
        window = f", schedule {b.schedule!r} for {b.duration}" if b.schedule else ""
        reasons = f", reasons {','.join(b.reasons)}" if b.reasons else ""
        return f"budget nodes={b.nodes}{reasons}{window}: {self.disrupting} of {self.cap} in use"


def counted_in_budgets(pool_nodes: Iterable[Mapping[str, Any]]) -> int:
    """The Nodes a budget's percentage is of: the registered ones (Karpenter counts its
    initialized Nodes). A replacement still booting is not one of them yet: counted, it
    would raise "10% of 10" to 2 of 11 while it boots, and let a second Node go before the
    first one's replacement serves."""
    return sum(1 for node in pool_nodes if not wellknown.is_unregistered(node))


def allowance(
    budgets: Sequence[Budget],
    *,
    reason: DisruptionReason,
    total: int,
    disrupting: int,
    now: float,
) -> Allowance:
    """What ``budgets`` allow for ``reason`` at ``now`` on a pool of ``total`` Nodes, of
    which ``disrupting`` are being disrupted already (for any reason)."""
    in_force = [b for b in budgets if b.applies_to(reason) and b.in_force(now)]
    if not in_force:
        return Allowance(
            allowed=max(total - disrupting, 0), cap=None, holding=None, disrupting=disrupting
        )
    holding = min(in_force, key=lambda b: b.cap(total))
    cap = holding.cap(total)
    return Allowance(
        allowed=max(cap - disrupting, 0), cap=cap, holding=holding, disrupting=disrupting
    )


def next_change_in(budgets: Iterable[Budget], *, now: float) -> float | None:
    """Seconds until any of ``budgets`` comes into or out of force (None: never)."""
    changes = [c for c in (b.changes_in(now) for b in budgets) if c is not None]
    return min(changes) if changes else None
