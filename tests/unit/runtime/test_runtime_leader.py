"""Leader election on a Lease: acquire, renew, expiry as the candidate observed it, release.

The Lease lives in a fake server with resourceVersion preconditions, and every candidate's
time is one FakeClock: fifteen-second leases cost nothing and the timeline is exact.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import itertools
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY

from nodepool_operator.runtime import clock as clock_
from nodepool_operator.runtime import errors, leader
from nodepool_operator.runtime.client import Object, Resource

START = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC).timestamp()
_leases = itertools.count()


class LeaseServer:
    """One Lease with resourceVersion preconditions, as the API server keeps it."""

    def __init__(self) -> None:
        self.lease: Object | None = None
        self.version = 0
        self.writes: list[tuple[str, str]] = []  # (verb, holder)

    def store(self, body: Object, verb: str) -> Object:
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.lease = stored
        self.writes.append((verb, stored["spec"].get("holderIdentity") or ""))
        return copy.deepcopy(stored)


class LeaseClient:
    """One candidate's connection to the server; it can fail or be cut off entirely."""

    def __init__(self, server: LeaseServer) -> None:
        self.server = server
        self.down = False  # every call fails as if the network were gone
        self.hang = False  # every call waits for ever: packets dropped, no reset, no timeout
        self.failures: list[errors.ApiError] = []  # the next calls fail with these
        # Runs between this candidate's read and its write: another writer getting in first.
        self.before_replace: Callable[[], None] | None = None

    async def _check(self) -> None:
        if self.hang:
            await asyncio.get_running_loop().create_future()
        if self.down:
            raise errors.ConnectionFailed("connection refused")
        if self.failures:
            raise self.failures.pop(0)

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Object:
        assert resource is leader.LEASES
        await self._check()
        if self.server.lease is None:
            raise errors.NotFound(f"leases {name!r} not found")
        return copy.deepcopy(self.server.lease)

    async def create(
        self, resource: Resource, body: Object, *, namespace: str | None = None
    ) -> Object:
        await self._check()
        if self.server.lease is not None:
            raise errors.AlreadyExists("leases already exists")
        return self.server.store(body, "create")

    async def replace(
        self, resource: Resource, body: Object, *, subresource: str | None = None
    ) -> Object:
        await self._check()
        if self.before_replace is not None:
            self.before_replace()
            self.before_replace = None
        current = self.server.lease
        assert current is not None
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise errors.Conflict("the object has been modified")
        return self.server.store(body, "update")


class WallClock:
    """Wall time that moves with the fake clock, optionally skewed."""

    def __init__(self, clock: clock_.FakeClock, skew: float = 0.0) -> None:
        self.clock = clock
        self.skew = skew

    def time(self) -> float:
        return START + self.skew + self.clock.now()


class Work:
    """What a leader runs: records when it started and whether it was cancelled."""

    def __init__(self, clock: clock_.FakeClock) -> None:
        self.clock = clock
        self.started_at: float | None = None
        self.cancelled_at: float | None = None
        self.finish = asyncio.Event()

    async def __call__(self) -> None:
        self.started_at = self.clock.now()
        try:
            await self.finish.wait()
        except asyncio.CancelledError:
            self.cancelled_at = self.clock.now()
            raise


class Candidate:
    def __init__(
        self, server: LeaseServer, clock: clock_.FakeClock, identity: str, lease: str, skew: float
    ) -> None:
        self.client = LeaseClient(server)
        self.work = Work(clock)
        config = leader.LeaderElectionConfig(name=lease, namespace="kube-system", identity=identity)
        self.elector = leader.LeaderElector(
            self.client,  # type: ignore[arg-type]
            config,
            clock=clock,
            wall_clock=WallClock(clock, skew),
        )
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self.elector.run(self.work))


@pytest.fixture
def clock() -> clock_.FakeClock:
    return clock_.FakeClock()


@pytest.fixture
def server() -> LeaseServer:
    return LeaseServer()


@pytest.fixture
async def candidate(
    server: LeaseServer, clock: clock_.FakeClock
) -> AsyncIterator[Callable[..., Candidate]]:
    lease = f"test-lease-{next(_leases)}"
    made: list[Candidate] = []

    def make(identity: str, *, skew: float = 0.0) -> Candidate:
        found = Candidate(server, clock, identity, lease, skew)
        made.append(found)
        return found

    yield make
    for found in made:
        found.client.hang = False  # let a release on the way out get through
        if found.task is not None and not found.task.done():
            found.task.cancel()
        if found.task is not None:
            await asyncio.wait_for(asyncio.gather(found.task, return_exceptions=True), 5)


def _micro_time(clock_seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(START + clock_seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _seconds(micro_time: str) -> float:
    parsed = datetime.datetime.strptime(micro_time, "%Y-%m-%dT%H:%M:%S.%fZ")
    return parsed.replace(tzinfo=datetime.UTC).timestamp() - START


async def _run_until(clock: clock_.FakeClock, check: Callable[[], bool], limit: float) -> float:
    """Advance the clock one deadline at a time until `check()`; return the time it held."""
    await clock.advance(0)
    while not check():
        deadline = clock.next_deadline()
        assert deadline is not None, "nothing left to wait for"
        assert deadline <= limit, f"not reached by t={limit}"
        await clock.advance(deadline - clock.now())
    return clock.now()


def _lease_spec(server: LeaseServer) -> dict[str, Any]:
    assert server.lease is not None
    spec: dict[str, Any] = server.lease["spec"]
    return spec


def test_defaults_are_controller_runtimes() -> None:
    config = leader.LeaderElectionConfig(name="n", namespace="ns", identity="me")
    assert (config.lease_duration, config.renew_deadline, config.retry_period) == (15, 10, 2)


async def test_a_candidate_takes_a_free_lease_runs_its_work_and_releases_it_when_done(
    server: LeaseServer, clock: clock_.FakeClock, candidate: Callable[..., Candidate]
) -> None:
    alpha = candidate("alpha")
    alpha.start()
    await clock.advance(0)
    assert alpha.elector.is_leader
    assert alpha.work.started_at == 0
    spec = _lease_spec(server)
    assert spec == {
        "holderIdentity": "alpha",
        "leaseDurationSeconds": 15,
        "acquireTime": _micro_time(0),
        "renewTime": _micro_time(0),
        "leaseTransitions": 0,
    }
    status = "leader_election_master_status"
    assert REGISTRY.get_sample_value(status, {"name": alpha.elector.config.name}) == 1

    alpha.work.finish.set()
    await clock.advance(0)
    assert alpha.task is not None
    assert alpha.task.done()
    assert alpha.task.exception() is None
    assert not alpha.elector.is_leader
    released = _lease_spec(server)
    assert not released.get("holderIdentity")
    assert released["leaseDurationSeconds"] == 1
    assert REGISTRY.get_sample_value(status, {"name": alpha.elector.config.name}) == 0


async def test_the_leader_renews_every_retry_period(
    server: LeaseServer, clock: clock_.FakeClock, candidate: Callable[..., Candidate]
) -> None:
    alpha = candidate("alpha")
    alpha.start()
    await clock.advance(7)
    spec = _lease_spec(server)
    assert _seconds(spec["renewTime"]) == pytest.approx(6)
    assert spec["acquireTime"] == _micro_time(0), "a renewal is no new acquisition"
    assert server.writes == [("create", "alpha")] + [("update", "alpha")] * 3


async def test_a_standby_waits_as_long_as_the_lease_is_renewed(
    server: LeaseServer, clock: clock_.FakeClock, candidate: Callable[..., Candidate]
) -> None:
    alpha, beta = candidate("alpha"), candidate("beta")
    alpha.start()
    beta.start()
    await clock.advance(120)
    assert alpha.elector.is_leader
    assert not beta.elector.is_leader
    assert beta.work.started_at is None
    assert {holder for _, holder in server.writes} == {"alpha"}


async def test_a_crashed_leader_is_replaced_once_the_lease_expires_and_never_earlier(
    server: LeaseServer, clock: clock_.FakeClock, candidate: Callable[..., Candidate]
) -> None:
    alpha, beta = candidate("alpha"), candidate("beta")
    alpha.start()
    beta.start()
    await clock.advance(10.5)
    alpha.client.down = True  # it can neither renew nor release: a crash, as others see it
    last_renewal = _seconds(_lease_spec(server)["renewTime"])
    assert last_renewal == 10

    took_over = await _run_until(clock, lambda: beta.elector.is_leader, limit=60)
    config = beta.elector.config
    # Expiry is measured from when beta saw the last renewal, which is up to one retry
    # period after it happened; beta then notices at its next retry.
    assert last_renewal + config.lease_duration < took_over
    assert took_over <= last_renewal + config.lease_duration + 2 * config.retry_period
    assert beta.work.started_at == took_over
    spec = _lease_spec(server)
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("beta", 1)
    assert spec["acquireTime"] == _micro_time(took_over)

    # The cut-off leader stopped acting at its renew deadline, before beta took over.
    assert alpha.task is not None
    assert alpha.task.done()
    assert isinstance(alpha.task.exception(), leader.LeadershipLost)
    assert alpha.work.cancelled_at == last_renewal + config.renew_deadline
    assert not alpha.elector.is_leader


async def test_expiry_is_judged_by_the_candidates_own_clock_not_by_the_renew_time(
    server: LeaseServer, clock: clock_.FakeClock, candidate: Callable[..., Candidate]
) -> None:
    # A lease last renewed, by the holder's clock, decades ago: a candidate whose clock
    # disagrees must still give the holder a whole lease duration from when it looked.
    server.store(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "ignored", "namespace": "kube-system"},
            "spec": {
                "holderIdentity": "ghost",
                "leaseDurationSeconds": 15,
                "renewTime": "2001-01-01T00:00:00.000000Z",
            },
        },
        "create",
    )
    beta = candidate("beta", skew=3600.0)
    beta.start()
    await clock.advance(14)
    assert not beta.elector.is_leader
    took_over = await _run_until(clock, lambda: beta.elector.is_leader, limit=60)
    assert took_over == 16, "the first retry after 15 s of seeing no change"
    assert _lease_spec(server)["leaseTransitions"] == 1


async def test_a_released_lease_is_taken_at_the_next_retry(
    server: LeaseServer, clock: clock_.FakeClock, candidate: Callable[..., Candidate]
) -> None:
    alpha, beta = candidate("alpha"), candidate("beta")
    alpha.start()
    beta.start()
    await clock.advance(5)
    alpha.work.finish.set()  # alpha shuts down cleanly and releases
    await clock.advance(0)
    released_at = clock.now()
    took_over = await _run_until(clock, lambda: beta.elector.is_leader, limit=60)
    assert took_over - released_at <= beta.elector.config.retry_period
    assert _lease_spec(server)["leaseTransitions"] == 1


async def test_a_conflict_loses_the_round_and_the_candidate_tries_again(
    server: LeaseServer, clock: clock_.FakeClock, candidate: Callable[..., Candidate]
) -> None:
    alpha = candidate("alpha")
    alpha.start()
    alpha.work.finish.set()
    await clock.advance(0)  # a released lease, free to take
    beta = candidate("beta")

    def someone_writes_first() -> None:
        assert server.lease is not None
        server.store(server.lease, "update")

    beta.client.before_replace = someone_writes_first
    beta.start()
    await clock.advance(0)
    assert not beta.elector.is_leader
    assert beta.task is not None
    assert not beta.task.done(), "a lost round is no error"
    await clock.advance(beta.elector.config.retry_period)
    assert beta.elector.is_leader


async def test_renew_failures_shorter_than_the_deadline_keep_the_leadership(
    server: LeaseServer, clock: clock_.FakeClock, candidate: Callable[..., Candidate]
) -> None:
    alpha = candidate("alpha")
    alpha.start()
    await clock.advance(1)
    alpha.client.failures.extend(errors.ServerTimeout("etcd is slow") for _ in range(4))
    await clock.advance(9)  # renewals at 2, 4, 6, 8 fail; the one at 10 succeeds
    assert alpha.elector.is_leader
    assert alpha.work.cancelled_at is None
    assert _seconds(_lease_spec(server)["renewTime"]) == pytest.approx(10)


async def test_renew_failures_for_the_renew_deadline_end_the_leadership_and_its_work(
    clock: clock_.FakeClock, candidate: Callable[..., Candidate], caplog: pytest.LogCaptureFixture
) -> None:
    alpha = candidate("alpha")
    alpha.start()
    await clock.advance(1)
    alpha.client.down = True
    await clock.advance(9)
    assert alpha.task is not None
    assert alpha.task.done()
    with pytest.raises(leader.LeadershipLost):
        alpha.task.result()
    assert alpha.work.cancelled_at == 10
    assert "event=leadership-lost" in caplog.text


async def test_a_renewal_that_hangs_ends_the_leadership_at_the_renew_deadline(
    server: LeaseServer, clock: clock_.FakeClock, candidate: Callable[..., Candidate]
) -> None:
    alpha, beta = candidate("alpha"), candidate("beta")
    alpha.start()
    beta.start()
    await clock.advance(0.5)
    alpha.client.hang = True  # its renewal at t=2 never gets an answer
    took_over = await _run_until(clock, lambda: beta.elector.is_leader, limit=60)
    assert alpha.task is not None
    assert alpha.task.done()
    assert isinstance(alpha.task.exception(), leader.LeadershipLost)
    config = alpha.elector.config
    assert alpha.work.cancelled_at == config.renew_deadline, "not held up by the hung request"
    assert took_over > config.lease_duration, "so the two never led at once"


async def test_api_errors_while_standing_by_do_not_end_the_candidacy(
    server: LeaseServer,
    clock: clock_.FakeClock,
    candidate: Callable[..., Candidate],
    caplog: pytest.LogCaptureFixture,
) -> None:
    beta = candidate("beta")
    beta.client.down = True  # e.g. the API server is restarting
    with caplog.at_level(logging.WARNING, logger="nodepool_operator.runtime.leader"):
        beta.start()
        await clock.advance(5)
        assert beta.task is not None
        assert not beta.task.done(), "still a candidate"
        beta.client.down = False
        took_over = await _run_until(clock, lambda: beta.elector.is_leader, limit=60)
    assert took_over == 6
    assert caplog.text.count("event=acquire-failed") == 3


async def test_release_leaves_a_lease_that_someone_else_holds_alone(
    server: LeaseServer, clock: clock_.FakeClock, candidate: Callable[..., Candidate]
) -> None:
    alpha = candidate("alpha")
    alpha.start()
    await clock.advance(0)
    # An operator forced the lease over by hand; alpha, finishing, must not clear it.
    assert server.lease is not None
    taken = copy.deepcopy(server.lease)
    taken["spec"]["holderIdentity"] = "intruder"
    server.store(taken, "update")
    alpha.work.finish.set()
    await clock.advance(0)
    assert _lease_spec(server)["holderIdentity"] == "intruder"
    assert server.writes[-1] == ("update", "intruder")
