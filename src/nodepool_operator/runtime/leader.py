"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics.

* A candidate takes the lease when it is free (no holder) or expired; expiry is judged by
  the candidate's own monotonic clock since it last saw the lease *change*, never by
  comparing its wall clock with the holder's ``renewTime`` (clocks of two machines differ).
* The leader renews every ``retry_period``; if it cannot renew for ``renew_deadline`` it
  stops leading (the work it runs is cancelled) before another candidate may take over at
  ``lease_duration``, so two leaders never act at once.
* Every write is a PUT with the resourceVersion read just before: a 409 means someone else
  wrote first and this round is lost, which is the whole point.
* On shutdown the leader releases the lease (empty holder), so a successor takes over at
  once instead of waiting out the lease.

Defaults are controller-runtime's: 15 s lease, 10 s renew deadline, 2 s retry period.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import errors, kinds, metrics
from nodepool_operator.runtime.client import Client, Object

__all__ = ["LEASES", "LeaderElectionConfig", "LeaderElector", "LeadershipLost"]

log = logging.getLogger(__name__)

LEASES = kinds.LEASES


class LeadershipLost(Exception):  # noqa: N818 - an outcome, named as client-go names it
    """The lease could not be renewed in time; the process must stop acting."""


@dataclass(frozen=True)
class LeaderElectionConfig:
    name: str
    namespace: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


class LeaderElector:
    def __init__(
        self,
        client: Client,
        config: LeaderElectionConfig,
        *,
        clock: clock_module.Clock | None = None,
        wall_clock: clock_module.WallClock | None = None,
    ) -> None:
        self.client = client
        self.config = config
        self.clock = clock or clock_module.RealClock()
        self.wall_clock = wall_clock or clock_module.RealWallClock()
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self._leading = False
        self._status = metrics.leader_election_master_status.labels(name=config.name)
        self._status.set(0)

    @property
    def is_leader(self) -> bool:
        return self._leading

    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Wait to be elected, then run ``lead()`` while renewing; release when done."""
        await self._acquire()
        work = asyncio.create_task(lead(), name="leader-work")
        renewing = asyncio.create_task(self._renew_until_lost(), name="leader-renew")
        try:
            done, _ = await asyncio.wait({work, renewing}, return_when=asyncio.FIRST_COMPLETED)
            if renewing in done:
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await work
                renewing.result()  # raises LeadershipLost
            await work
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError, LeadershipLost):
                await renewing
            if not work.done():
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await work
            await self._release()

    async def _acquire(self) -> None:
        log.info("lease=%s identity=%s event=candidate", self.config.name, self.config.identity)
        while True:
            try:
                if await self._try_acquire_or_renew():
                    break
            except errors.ApiError as error:
                # An API server restart or a lost connection must not end the candidacy
                # (client-go logs and tries again): only the next round can tell.
                log.warning("lease=%s event=acquire-failed error=%r", self.config.name, error)
            await self.clock.sleep(self.config.retry_period)
        self._leading = True
        self._status.set(1)
        log.info("lease=%s identity=%s event=elected", self.config.name, self.config.identity)

    async def _renew_until_lost(self) -> None:
        last_renewed = self.clock.now()
        while True:
            await self.clock.sleep(self.config.retry_period)
            # A rival counts the lease from when it sees our write, which may be as early
            # as the moment we sent it: the deadline runs from the attempt, not the answer.
            attempt_started = self.clock.now()
            try:
                renewed = await self._renew_before(last_renewed + self.config.renew_deadline)
            except errors.ApiError as error:
                log.warning("lease=%s event=renew-failed error=%r", self.config.name, error)
                renewed = False
            if renewed:
                last_renewed = attempt_started
            elif self.clock.now() - last_renewed >= self.config.renew_deadline:
                self._leading = False
                self._status.set(0)
                log.error("lease=%s event=leadership-lost", self.config.name)
                raise LeadershipLost(self.config.name)

    async def _renew_before(self, deadline: float) -> bool:
        """One renewal, abandoned at ``deadline``: the API calls have no timeout of their
        own, and a request hanging past the renew deadline must not keep a leader acting
        after its lease ran out and another candidate took over (client-go bounds each
        renewal by RenewDeadline the same way)."""
        attempt = asyncio.ensure_future(self._try_acquire_or_renew())
        timer = asyncio.ensure_future(self.clock.sleep(max(0.0, deadline - self.clock.now())))
        try:
            await asyncio.wait({attempt, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            if not attempt.done():
                attempt.cancel()
                await asyncio.wait({attempt})
        return not attempt.cancelled() and attempt.result()

    async def _try_acquire_or_renew(self) -> bool:
        config = self.config
        now = self._micro_time()
        try:
            lease = await self.client.get(LEASES, config.name, namespace=config.namespace)
        except errors.NotFound:
            body = self._lease_body(now=now, acquired=now, transitions=0)
            try:
                await self.client.create(LEASES, body, namespace=config.namespace)
            except errors.AlreadyExists:
                return False
            self._observe(config.identity, now)
            return True
        spec: dict[str, Any] = lease.get("spec", {})
        holder = spec.get("holderIdentity") or ""
        self._observe(holder, spec.get("renewTime") or "")
        expired = self.clock.now() > self._observed_at + float(
            spec.get("leaseDurationSeconds") or config.lease_duration
        )
        if holder and holder != config.identity and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder != config.identity:
            transitions += 1
        acquired = spec.get("acquireTime") if holder == config.identity else now
        lease["spec"] = self._lease_body(
            now=now, acquired=acquired or now, transitions=transitions
        )["spec"]
        try:
            await self.client.replace(LEASES, lease)
        except errors.Conflict:
            return False
        self._observe(config.identity, now)
        return True

    def _observe(self, holder: str, renew_time: str) -> None:
        if self._observed != (holder, renew_time):
            self._observed = (holder, renew_time)
            self._observed_at = self.clock.now()

    def _lease_body(self, *, now: str, acquired: str, transitions: int) -> Object:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.config.name, "namespace": self.config.namespace},
            "spec": {
                "holderIdentity": self.config.identity,
                "leaseDurationSeconds": int(self.config.lease_duration),
                "acquireTime": acquired,
                "renewTime": now,
                "leaseTransitions": transitions,
            },
        }

    async def _release(self) -> None:
        if not self._leading:
            return
        self._leading = False
        self._status.set(0)
        try:
            lease = await self.client.get(LEASES, self.config.name, namespace=self.config.namespace)
            if lease.get("spec", {}).get("holderIdentity") != self.config.identity:
                return
            now = self._micro_time()
            lease["spec"].update(
                {"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": now}
            )
            await self.client.replace(LEASES, lease)
            log.info("lease=%s identity=%s event=released", self.config.name, self.config.identity)
        except errors.ApiError as error:
            log.warning("lease=%s event=release-failed error=%r", self.config.name, error)

    def _micro_time(self) -> str:
        moment = datetime.datetime.fromtimestamp(self.wall_clock.time(), datetime.UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
