"""Leader election between manager processes, on a real Lease in the real API server.

Each candidate is ``leader_candidate.py``: a Manager with a LeaderElectionConfig and one
trivial controller over the test namespace's ConfigMaps, started as its own process, so a
SIGKILL is a real crash (no release, no cleanup) and a SIGTERM the real shutdown path.
Takeover times are read from the Lease itself: ``spec.acquireTime`` is written by the new
leader when it takes the lease.
"""

from __future__ import annotations

import asyncio
import datetime
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import Process, wait_for
from nodepool_devtools.cluster.pytest_plugin import Cluster
from nodepool_operator.runtime import kinds
from nodepool_operator.runtime.client import Client, Object, Resource

CANDIDATE = Path(__file__).with_name("leader_candidate.py")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)

# Short timings for the crash test (the Lease stores whole seconds); the graceful test
# uses the defaults, 15 s / 10 s / 2 s.
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 4.0, 3.0, 0.5
# Process start-up, API round trips and a loaded machine: added to the bounds below.
LATENCY_MARGIN = 1.0


class Candidate(Process):
    def __init__(self, identity: str, args: list[str], log: Path) -> None:
        super().__init__(identity, args, log)
        self.identity = identity

    def facts(self, kind: str) -> list[list[str]]:
        """The ``kind`` lines the candidate printed, each split into words."""
        return [line.split() for line in self.output().splitlines() if line.startswith(kind + " ")]

    @property
    def elected_at(self) -> float | None:
        elected = self.facts("elected")
        return float(elected[0][-1]) if elected else None

    def reconciled(self, key: str) -> bool:
        return any(words[2] == key for words in self.facts("reconciled"))

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


class Candidates:
    """Starts candidate processes for one Lease in the test's namespace; stops them all."""

    def __init__(self, cluster: Cluster, namespace: str, directory: Path) -> None:
        self.kubeconfig = cluster.kubeconfig
        self.namespace = namespace
        self.directory = directory
        self.lease = f"runtime-test-{uuid.uuid4().hex[:6]}"
        self.started: list[Candidate] = []

    def start(self, identity: str, timings: tuple[float, float, float] | None = None) -> Candidate:
        args = [
            sys.executable,
            str(CANDIDATE),
            *("--kubeconfig", str(self.kubeconfig), "--namespace", self.namespace),
            *("--lease", self.lease, "--identity", identity),
        ]
        if timings is not None:
            duration, deadline, retry_period = timings
            args += ["--lease-duration", str(duration), "--renew-deadline", str(deadline)]
            args += ["--retry-period", str(retry_period)]
        candidate = Candidate(identity, args, self.directory / f"{identity}.log")
        candidate.start()
        self.started.append(candidate)
        return candidate


@pytest.fixture
def candidates(cluster: Cluster, namespace: str, tmp_path: Path) -> Iterator[Candidates]:
    found = Candidates(cluster, namespace, tmp_path)
    yield found
    for candidate in found.started:
        candidate.stop()


async def _lease(client: Client, name: str, namespace: str) -> Object:
    return await client.get(kinds.LEASES, name, namespace=namespace)


def _micro_time(value: str) -> float:
    parsed = datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ")
    return parsed.replace(tzinfo=datetime.UTC).timestamp()


async def _watched_config_map(client: Client, namespace: str) -> str:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "watched"}}
    await client.create(CONFIGMAPS, body, namespace=namespace)
    return f"{namespace}/watched"


async def test_one_of_two_managers_leads_and_the_other_takes_over_when_the_leader_is_killed(
    client: Client, namespace: str, candidates: Candidates
) -> None:
    lease_name = candidates.lease
    timings = (LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD)
    both = [candidates.start("alpha", timings), candidates.start("beta", timings)]
    key = await _watched_config_map(client, namespace)

    async def the_elected() -> list[Candidate]:
        return [c for c in both if c.elected_at is not None]

    elected = await wait_for(the_elected, within=60, every=0.1)
    assert len(elected) == 1
    leader = elected[0]
    (standby,) = (c for c in both if c is not leader)

    async def leader_reconciled() -> bool:
        return leader.reconciled(key)

    await wait_for(leader_reconciled, within=30, every=0.1)

    # Several renewals go by (each a new renewTime on the Lease) and the standby, polling
    # all along, never starts its controllers.
    renewals: set[str] = set()

    async def renewed_four_times() -> bool:
        spec = (await _lease(client, lease_name, namespace))["spec"]
        assert spec["holderIdentity"] == leader.identity
        renewals.add(spec["renewTime"])
        return len(renewals) >= 4

    await wait_for(renewed_four_times, within=30, every=RETRY_PERIOD / 2)
    assert standby.elected_at is None
    assert standby.facts("reconciled") == []
    assert "event=candidate" in standby.output()

    killed_at = time.time()
    leader.kill()
    last_renewal = _micro_time((await _lease(client, lease_name, namespace))["spec"]["renewTime"])

    async def standby_elected() -> float | None:
        return standby.elected_at

    elected_at = await wait_for(standby_elected, within=LEASE_DURATION * 4, every=0.1)
    spec = (await _lease(client, lease_name, namespace))["spec"]
    acquired = _micro_time(spec["acquireTime"])
    print(
        f"\ntakeover {acquired - killed_at:.2f}s after SIGKILL,"
        f" {acquired - last_renewal:.2f}s after the last renewal"
        f" (lease {LEASE_DURATION:g}s, retry {RETRY_PERIOD:g}s);"
        f" controllers running {elected_at - killed_at:.2f}s after SIGKILL"
    )
    assert spec["holderIdentity"] == standby.identity
    assert spec["leaseTransitions"] == 1
    assert elected_at > killed_at, "its controllers started only after the leader was gone"
    # Never before the lease ran out: a whole lease duration after the last renewal ...
    assert acquired - last_renewal > LEASE_DURATION
    # ... and within lease duration plus retry period of the moment the standby saw that
    # renewal, which itself comes up to one retry period after the renewal (client-go's
    # rule: expiry is judged by the candidate's own clock, from when it saw the change).
    assert acquired - last_renewal <= LEASE_DURATION + 2 * RETRY_PERIOD + LATENCY_MARGIN
    assert acquired - killed_at <= LEASE_DURATION + 2 * RETRY_PERIOD + LATENCY_MARGIN

    async def standby_reconciled() -> bool:
        return standby.reconciled(key)

    await wait_for(standby_reconciled, within=30, every=0.1)
    assert [c.identity for c in both if c.alive()] == [standby.identity]


async def test_a_leader_stopped_by_sigterm_releases_the_lease_and_a_standby_takes_over_at_once(
    client: Client, namespace: str, candidates: Candidates
) -> None:
    lease_name = candidates.lease
    retry_period = 2.0  # the default, with the default 15 s lease
    key = await _watched_config_map(client, namespace)
    alpha = candidates.start("alpha")

    async def alpha_reconciled() -> bool:
        return alpha.reconciled(key)

    await wait_for(alpha_reconciled, within=60, every=0.1)
    beta = candidates.start("beta")

    async def beta_is_candidate() -> bool:
        return "event=candidate" in beta.output()

    await wait_for(beta_is_candidate, within=60, every=0.1)

    stopped_at = time.time()
    assert await asyncio.to_thread(alpha.stop) == 0
    assert alpha.facts("stopped"), "alpha drained and exited by itself"
    assert "event=released" in alpha.output()

    async def beta_reconciled() -> bool:
        return beta.reconciled(key)

    await wait_for(beta_reconciled, within=30, every=0.1)
    spec = (await _lease(client, lease_name, namespace))["spec"]
    took = _micro_time(spec["acquireTime"]) - stopped_at
    print(f"\ntakeover {took:.2f}s after SIGTERM (lease 15s, retry {retry_period:g}s)")
    assert spec["holderIdentity"] == beta.identity
    # At the standby's next retry, not after the 15 s lease ran out.
    assert took <= retry_period + 2 * LATENCY_MARGIN

    # A standby stopped by SIGTERM leaves at once too: it was only waiting for the lease.
    gamma = candidates.start("gamma")

    async def gamma_is_candidate() -> bool:
        return "event=candidate" in gamma.output()

    await wait_for(gamma_is_candidate, within=60, every=0.1)
    began = time.monotonic()
    assert await asyncio.to_thread(gamma.stop) == 0
    assert time.monotonic() - began < retry_period + LATENCY_MARGIN
    assert gamma.elected_at is None
    assert gamma.facts("stopped")

    assert await asyncio.to_thread(beta.stop) == 0
    released = (await _lease(client, lease_name, namespace))["spec"]
    assert not released.get("holderIdentity"), "the last leader released the lease"
