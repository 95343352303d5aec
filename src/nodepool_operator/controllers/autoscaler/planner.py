"""The planner: one loop that plans every pending pod once per batch, for every pool.

It runs as a controller of one key (``PLAN``), so it runs on the leader only, once at a
time, and its batches come from the workqueue: the first event of a burst opens a batch,
which closes after ``idle`` seconds without a new pod or ``longest`` seconds after it
opened (Karpenter's batcher: 1 s and 10 s; ``idle`` is the smallest
``spec.batchWindowSeconds`` of the Autoscalers; see ``Batch``). Events: pending pods,
Nodes, NodePools, Autoscalers, ScaleRequests, DaemonSets, volumes (``watches``); and a
scan every smallest ``scanIntervalSeconds`` (sooner when a node's unneeded timer runs
out).

Each batch makes one plan (``plan_maker``: the snapshot, then the simulation), cuts every
Autoscaler's part of it (``decide.batch_plan``) and, for each pool's Autoscaler, runs one
pass (``decisions``: the decision, then its ScaleRequest); it records every Autoscaler's
verdict (``verdicts``) and wakes the Autoscalers whose status that changes. Contracts:
every pool's request is made before any event that explains one is written; the events
are written after the batch, not in it (a request they delayed, in this batch or the
next, is a node that boots later); one batch's events are written after the batch
before's, so a pod's story stays in order.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nominations as api_nominations
from nodepool_operator.api import wellknown
from nodepool_operator.controllers import readiness
from nodepool_operator.controllers.autoscaler.act import handoff
from nodepool_operator.controllers.autoscaler.act.nominations import Nominator
from nodepool_operator.controllers.autoscaler.consolidator import PoolTurn
from nodepool_operator.controllers.autoscaler.constraints import pending_pods
from nodepool_operator.controllers.autoscaler.decide import batch_plan, nominations
from nodepool_operator.controllers.autoscaler.decide.batch_plan import (
    BatchPlan,
    MissingPool,
    Observation,
    Part,
)
from nodepool_operator.controllers.autoscaler.decide.consolidation_choice import (
    Choice,
    named_by_open_requests,
)
from nodepool_operator.controllers.autoscaler.decisions import PoolDecider
from nodepool_operator.controllers.autoscaler.plan_maker import PlanMaker
from nodepool_operator.controllers.autoscaler.snapshot.pod_profiles import (
    ALL_NAMESPACES,
    NOMINATED_INDEX,
)
from nodepool_operator.controllers.autoscaler.verdicts import AutoscalerVerdicts, Verdict
from nodepool_operator.controllers.resources import REQUESTS_BY_POOL
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import errors
from nodepool_operator.runtime import nodes as k8s_nodes
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.controller import Request, Result

__all__ = ["LONGEST_BATCH_SECONDS", "NAME", "PLAN", "Batch", "Planner"]

log = logging.getLogger(__name__)

NAME: Final = "autoscaler-planner"
#: The planner's one key.
PLAN: Final = Request(name="cluster")
#: A batch closes this long after its first event however busy the cluster stays.
LONGEST_BATCH_SECONDS: Final = 10.0
#: The soonest a pool is looked at again when a check is due now (never 0: no requeue).
_SOONEST_CHECK: Final = 0.05


@dataclass(frozen=True)
class _Passed:
    """One pool's pass: seconds until it must be looked at again (None: at the scan), and
    the events that explain its decision (None: no decision was made)."""

    check: float | None
    tell: Callable[[], Awaitable[None]] | None
    requested: bool = False  # it made a ScaleRequest


class Batch:
    """When the events of one batch began and when the last new one that holds it open
    arrived (memory only: a restart begins with a plan of everything, which needs no
    window).

    As Karpenter's batcher, an object that already moved in this batch does not hold it
    open again: a burst's pod is created, then marked unschedulable; counted once, the
    batch closes when no new object has moved for the idle window, not when the same ones
    stop moving. And only new demand holds a batch open: a new pod, not yet judged by
    kube-scheduler. Everything else (its mark, a Node registered, Ready or gone, a pod
    bound, a pool or request changed) opens a batch but does not keep it open: in a burst
    on a busy cluster kube-scheduler marks the pods over many seconds while the Nodes of
    the first requests register, and a batch those held open would make every pool wait
    for the longest window. Closed one idle window after their last new pod, the batches
    of a long marking tail are more, and each plans only what is marked by then
    (docs/performance.md has the measurements)."""

    def __init__(self, clock: clock_module.Clock) -> None:
        self.clock = clock
        self.opened: float | None = None
        self.last: float | None = None
        self._moved: set[str] = set()  # uids of the objects that moved in this batch
        self.closing_now = False  # something in it cannot wait for the window

    def event(self, uid: str = "", *, holds: bool = True) -> None:
        """An object moved; ``uid`` empty: something without one (always counted).
        ``holds``: it is new demand, which keeps the batch open for another idle window;
        otherwise it opens a batch when none is open and leaves an open one as it is."""
        if uid and uid in self._moved:
            return
        if uid:
            self._moved.add(uid)
        now = self.clock.now()
        if self.opened is None:
            self.opened = self.last = now
        elif holds:
            self.last = now

    def close_now(self) -> None:
        """The open batch closes at the next look, whatever its window."""
        self.closing_now = True

    def wait(self, *, idle: float, longest: float) -> float:
        """Seconds until the batch closes; 0 when it has (or none is open)."""
        if self.opened is None or self.last is None or self.closing_now:
            return 0.0
        now = self.clock.now()
        quiet, age = now - self.last, now - self.opened
        if quiet >= idle or age >= longest:
            return 0.0
        return min(idle - quiet, longest - age)

    def close(self) -> None:
        self.opened = self.last = None
        self.closing_now = False
        self._moved.clear()


class Planner:
    """Plans all pending pods, decides for every pool, records each Autoscaler's verdict."""

    def __init__(
        self,
        *,
        plan_maker: PlanMaker,
        decider: PoolDecider,
        verdicts: AutoscalerVerdicts,
        wake: Callable[[Object], None],
        clock: clock_module.Clock,
        parallelism: int,
        unready_limits: readiness.UnreadyLimits = readiness.DEFAULT_LIMITS,
        nominator: Nominator | None = None,
    ) -> None:
        """``wake(autoscaler)``: called after each batch for every Autoscaler (its
        reconcile is queued when its status has something new to say). ``parallelism``:
        pools handed over, and pools' events written, at a time
        (``AutoscalerConfig.hand_over_parallelism``). ``unready_limits``: past them, no
        scale decision is made (``AutoscalerConfig.unready_limits``). ``nominator``:
        writes the nominations of the pools' new Nodes after each batch's decisions
        (``decide.nominations``; None: none are written)."""
        self.plan_maker = plan_maker
        self.autoscalers = plan_maker.autoscalers
        self.decider = decider
        self.verdicts = verdicts
        self.wake = wake
        self.clock = clock
        self.batch = Batch(clock)
        self.parallelism = max(1, parallelism)
        self.unready_limits = unready_limits
        self.nominator = nominator
        self._holding = False  # the last batch was held by the cluster's unready Nodes
        self._windows: tuple[str, float, float] = ("", 0.0, 0.0)
        # The batches' events still being written, oldest first.
        self._telling: list[asyncio.Task[None]] = []

    def triggered(self, moved: Object) -> Iterable[Request]:
        """The watches' mapper for all but pods: every change they pass is part of the
        open batch, and none holds it open. A pool's Node Ready and waiting for its
        nominations closes the batch at once: pods wait on it until they are written."""
        self.batch.event(_uid(moved), holds=False)
        if self.nominator is not None and _awaits_nominations(moved):
            self.batch.close_now()
        return (PLAN,)

    def pod_triggered(self, pod: Object) -> Iterable[Request]:
        """The pods' mapper: a pod waiting for kube-scheduler's first verdict holds the
        batch open (its mark is coming); its mark, its binding or its end does not."""
        holds = pending_pods.is_pending_unbound(pod) and not pending_pods.is_judged(pod)
        self.batch.event(_uid(pod), holds=holds)
        return (PLAN,)

    def window(self, _: Request) -> float:
        """The idle window: the smallest ``spec.batchWindowSeconds`` (none when the open
        batch is to close at once)."""
        return 0.0 if self.batch.closing_now else self._intervals()[0]

    def _intervals(self) -> tuple[float, float]:
        """(smallest batch window, smallest scan interval), cached per Autoscaler cache
        version: the window is asked for on every event."""
        version = self.autoscalers.resource_version
        if self._windows[0] != version or not version:
            specs = [autoscaler_api.spec_of(a) for a in self.autoscalers.items()]
            idle = min(
                (s.batch_window_seconds for s in specs),
                default=autoscaler_api.DEFAULT_BATCH_WINDOW_SECONDS,
            )
            scan = min((float(s.scan_interval_seconds) for s in specs), default=0.0)
            self._windows = (version, idle, scan)
        return self._windows[1], self._windows[2]

    async def reconcile(self, request: Request) -> Result:
        idle, scan = self._intervals()
        wait = self.batch.wait(idle=idle, longest=max(LONGEST_BATCH_SECONDS, idle))
        if wait > 0:
            return Result(requeue_after=wait)
        opened = self.batch.opened
        self.batch.close()  # events from here on open the next batch
        autoscalers = sorted(
            (a for a in self.autoscalers.items() if not a["metadata"].get("deletionTimestamp")),
            key=lambda a: str(a["metadata"]["name"]),
        )
        self.verdicts.keep_only({str(a["metadata"]["name"]) for a in autoscalers})
        # Marks of an Autoscaler deleted or repointed are nobody's to clear but ours.
        await self.decider.consolidator.clear_unwatched(
            (autoscaler_api.spec_of(a).node_pool_name for a in autoscalers),
            named=named_by_open_requests(
                self.plan_maker.pool_reads.requests.items(), node=self.plan_maker.nodes.get
            ),
        )
        if not autoscalers:
            return Result()
        held = self._cluster_unready()
        if held is not None or self._holding:  # told as it starts (and forgotten as it ends)
            self._tell_after_batch(
                [functools.partial(self.decider.notices.held, a, why=held) for a in autoscalers]
            )
        self._holding = held is not None
        if held is not None:
            # As cluster-autoscaler halts: Nodes unready in such numbers say more about the
            # network or the control plane than about demand, and the NodePool controller
            # holds its repairs on the same count. Statuses keep their last verdict.
            log.warning("event=scaling-held %s", held)
            return Result(requeue_after=scan)
        started = self.clock.now()
        made = await self.plan_maker.plan()
        planned = self.clock.now()
        parts = {
            str(a["metadata"]["name"]): batch_plan.part_of(
                made, str(a["metadata"]["name"]), autoscaler_api.spec_of(a)
            )
            for a in autoscalers
        }
        turns = {
            name: self.decider.turn(
                a,
                part,
                leaving=self._leaving(part.pool.name),
                held=self._held(),
                unhealthy=self.plan_maker.pool_reads.unhealthy,
            )
            for a in autoscalers
            if isinstance(part := parts[name := str(a["metadata"]["name"])], Observation)
        }
        choices = await self._choose(list(turns.values()), made)
        limit = asyncio.Semaphore(self.parallelism)

        async def one(autoscaler: Object) -> _Passed:
            async with limit:
                name = str(autoscaler["metadata"]["name"])
                return await self._one(autoscaler, parts[name], turns.get(name), choices)

        passes = await asyncio.gather(*(one(a) for a in autoscalers))
        nominate_in = await self._nominate(made, autoscalers, parts)
        for autoscaler in autoscalers:
            self.wake(autoscaler)
        self._log_batch(made, passes, opened=opened, started=started, planned=planned)
        self._tell_after_batch([p.tell for p in passes if p.tell is not None])
        checks = [p.check for p in passes if p.check is not None]
        if nominate_in is not None:
            checks.append(max(nominate_in, _SOONEST_CHECK))
        return Result(requeue_after=min([scan, *checks]))

    async def _nominate(
        self, made: BatchPlan, autoscalers: Sequence[Object], parts: Mapping[str, Part]
    ) -> float | None:
        """Nominate the pending pods this plan put on its pools' new Nodes that wait for
        it, and release those Nodes (``decide.nominations``); the seconds until a look is
        due for a Ready Node still waiting (None: none). A pool in dry run writes nothing:
        its Nodes' wait runs out."""
        if self.nominator is None:
            return None
        pools = {
            part.pool.name: nominations.PoolToRelease(part.pool.target, part.pool_uid)
            for autoscaler in autoscalers
            if isinstance(part := parts[str(autoscaler["metadata"]["name"])], Observation)
            and not autoscaler_api.spec_of(autoscaler).dry_run
        }
        if not pools:
            return None
        requests = self.plan_maker.pool_reads.requests
        plan = nominations.plan_nominations(
            pools=pools,
            nodes=self.plan_maker.nodes.items(),
            known=frozenset(node.name for node in made.world.nodes),
            requests_of=lambda pool: requests.by_index(REQUESTS_BY_POOL, pool),
            pending=made.world.pending,
            profiles=made.world.profiles,
            placements=made.outcome.placements,
            now=self.nominator.wall_clock.time(),
        )
        try:
            await self.nominator.write(plan)
        except errors.OperatorError as error:
            # The batch's requests stand; a Node left unmarked is released by its wait's
            # end, and the next batch tries the marks again.
            log.warning("event=nominations-failed error=%r", error)
            return LONGEST_BATCH_SECONDS if error.transient else plan.check_in
        return plan.check_in

    def _cluster_unready(self) -> str | None:
        """Why no scale decision is made now, or None: the cluster's unready Nodes past
        both limits (``readiness``)."""
        cluster = readiness.cluster_readiness(self.plan_maker.nodes.items())
        if not cluster.past(self.unready_limits):
            return None
        limits = self.unready_limits
        return (
            f"{cluster.down} of the cluster's {cluster.total} Nodes are unready, more than "
            f"{limits.ok_count} and more than {limits.max_percentage:g}%; decisions resume "
            "once fewer are"
        )

    def _tell_after_batch(self, tells: list[Callable[[], Awaitable[None]]]) -> None:
        """Write this batch's events once the batch before's are written, without holding
        the planner: the next batch plans and hands over meanwhile."""
        self._telling = [t for t in self._telling if not t.done()]
        if not tells:
            return
        before = self._telling[-1] if self._telling else None
        self._telling.append(asyncio.create_task(self._tell_all(before, tells), name=NAME))

    async def _tell_all(
        self, before: asyncio.Task[None] | None, tells: list[Callable[[], Awaitable[None]]]
    ) -> None:
        if before is not None:
            await asyncio.wait([before])
        limit = asyncio.Semaphore(self.parallelism)

        async def tell(explain: Callable[[], Awaitable[None]]) -> None:
            async with limit:
                await self._tell(explain)

        await asyncio.gather(*(tell(explain) for explain in tells))

    async def told(self) -> None:
        """Wait until every batch's events are written (tests, and a draining stop)."""
        while self._telling:
            await asyncio.wait(self._telling)
            self._telling = [t for t in self._telling if not t.done()]

    async def stop(self, *, drain: bool) -> None:
        """Draining (shutdown): write the events still waiting. Not draining (leadership
        lost: another replica may be deciding already): drop them, nothing of ours goes on."""
        if drain:
            await self.told()
            return
        telling, self._telling = self._telling, []
        for task in telling:
            task.cancel()
        await asyncio.gather(*telling, return_exceptions=True)

    def _refused(
        self,
        autoscaler: Object,
        spec: autoscaler_api.AutoscalerSpec,
        refusal: handoff.RequestRefused,
    ) -> _Passed:
        """A pool's request refused for good: asking again cannot help until something
        changes (the requester does not send the same request again for a while), so it
        is looked at with the scan, and its Autoscaler is told once."""
        name = str(autoscaler["metadata"]["name"])
        level = logging.WARNING if refusal.sent else logging.DEBUG
        log.log(level, "event=request-refused autoscaler=%s said=%r", name, refusal.said)
        tell = functools.partial(
            self.decider.notices.refused, autoscaler, pool=spec.node_pool_name, said=refusal.said
        )
        return _Passed(None, tell)

    def _log_batch(
        self,
        made: BatchPlan,
        passes: Iterable[_Passed],
        *,
        opened: float | None,
        started: float,
        planned: float,
    ) -> None:
        """One line per batch: how long it was open, how long the plan and the hand-over
        took, and what they made (INFO when a request was made, DEBUG for a quiet scan)."""
        requests = sum(1 for p in passes if p.requested)
        log.log(
            logging.INFO if requests else logging.DEBUG,
            "event=batch open_seconds=%.2f pending=%d plan_seconds=%.2f requests=%d "
            "hand_over_seconds=%.2f",
            0.0 if opened is None else started - opened,
            len(made.world.pending),
            planned - started,
            requests,
            self.clock.now() - planned,
        )

    @staticmethod
    async def _tell(explain: Callable[[], Awaitable[None]]) -> None:
        """A pool's events: best effort, so a fault there fails neither the batch nor the
        other pools' events."""
        try:
            await explain()
        except Exception:
            log.exception("event=decision-events-failed")

    def _held(self) -> frozenset[str]:
        """The Nodes preemption is making room on for a nominated pod: never chosen to go
        (the room the pod waits for would go with the Node)."""
        nominated = self.plan_maker.pods.by_index(NOMINATED_INDEX, ALL_NAMESPACES)
        return frozenset(
            node for p in nominated if (node := pending_pods.nominated_node(p)) is not None
        )

    def _leaving(self, pool: str) -> frozenset[str]:
        """The Nodes the pool's open requests name (ours not yet in the cache included):
        on their way out."""
        requests = self.plan_maker.pool_reads.requests
        return named_by_open_requests(
            self.plan_maker.pool_reads.ledger.visible(
                pool,
                requests.by_index(REQUESTS_BY_POOL, pool),
                cache_version=requests.resource_version,
            ),
            # A later Node given a name an Applied request named is not that request's.
            node=self.plan_maker.nodes.get,
        )

    async def _choose(self, turns: Sequence[PoolTurn], made: BatchPlan) -> dict[str, Choice]:
        """Consolidation's choice for every pool of the batch at once."""
        if not turns:
            return {}
        try:
            return await self.decider.consolidator.choose(
                turns,
                cluster=made.world.nodes,
                daemon_sets=made.world.daemon_sets,
                offering_pools=made.world.offering_pools,
            )
        except Exception:
            # A fault of ours in the choice must not hold the scale-ups of the batch: no
            # pool chooses a Node to give up this time, and the next batch tries again.
            log.exception("event=consolidation-choice-crashed")
            return {}

    async def _one(
        self,
        autoscaler: Object,
        part: Part,
        turn: PoolTurn | None,
        choices: Mapping[str, Choice],
    ) -> _Passed:
        """Decide for one Autoscaler: when it must be looked at again, and its events."""
        name = str(autoscaler["metadata"]["name"])
        spec = autoscaler_api.spec_of(autoscaler)
        generation = int(autoscaler["metadata"].get("generation", 0))
        previous = self.verdicts.get(name)
        last = previous.last_request if previous is not None else None
        if not isinstance(part, Observation) or turn is None:
            self.verdicts.put(name, Verdict(generation, part, None, last))
            if isinstance(part, MissingPool) and part.unfit:
                # Nothing is decided for a pool that does not exist, but its pods are told
                # so: a pending pod is never left without an answer on itself.
                notices, unfit = self.decider.notices, part.unfit

                async def tell() -> None:
                    await notices.unfit(unfit)

                return _Passed(None, tell)
            return _Passed(None, None)
        choice = choices.get(part.pool.name, Choice())
        try:
            decided = await self.decider.decide(autoscaler, part, turn=turn, choice=choice)
        except handoff.RequestRefused as refusal:
            return self._refused(autoscaler, spec, refusal)
        except errors.OperatorError as error:
            # The other pools' decisions stand; this one is made again by a later batch:
            # soon when asking again can help, at the next scan when it cannot.
            log.warning("event=decision-failed autoscaler=%s error=%r", name, error)
            return _Passed(LONGEST_BATCH_SECONDS if error.transient else None, None)
        except Exception:
            # A fault of ours in one pool's decision must not fail the batch: the other
            # pools' requests stand (failing the batch would retry it at once while their
            # decisions are still being handed over), and this pool is tried again later.
            log.exception("event=decision-crashed autoscaler=%s", name)
            return _Passed(LONGEST_BATCH_SECONDS, None)
        made_now = decided.made or last
        self.verdicts.put(name, Verdict(generation, part, decided.decision, made_now))
        # A check due now is a check due very soon: 0 would mean "no requeue" to the
        # runtime, and the periodic scan of every pool would stop with it.
        check = None if decided.next_check is None else max(decided.next_check, _SOONEST_CHECK)
        return _Passed(check, decided.tell, requested=decided.made is not None)


def _awaits_nominations(obj: Object) -> bool:
    """A pool's Node, Ready, still tainted unregistered and not marked nominated: it may be
    waiting for this batch's nominations (``api.nominations``)."""
    return (
        wellknown.pool_of(obj) is not None
        and wellknown.is_unregistered(obj)
        and k8s_nodes.is_ready(obj)
        and not api_nominations.is_nominated(obj)
    )


def _uid(obj: Object) -> str:
    return str(obj.get("metadata", {}).get("uid") or "")
