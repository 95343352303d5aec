"""What the chaos tests drive: a simcloud, operator replicas, pools, and the checks.

Everything runs as the processes a user runs (``nodepool-operator simcloud`` and ``run``)
against the session's real control plane, so a SIGKILL, a SIGSTOP or a restart is the
real thing. ``NODEPOOL_CHAOS_BROKEN=<breakage>`` starts every operator through
``broken_operator.py`` instead (one practice removed), to show the checks catch it.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client, config

from harness import (
    CLI,
    MERGE,
    POOLS,
    Operator,
    SimCloud,
    operator_args,
    pool_body,
    remove_pool,
    wait_for,
)
from nodepool_devtools.cluster import controlplane
from nodepool_devtools.cluster.pytest_plugin import Cluster
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud import credentials, provider
from nodepool_operator.cloud.simcloud.client import SimCloudClient

OPERATOR_USER = controlplane.IDENTITIES["operator"].user
BROKEN_ENV = "NODEPOOL_CHAOS_BROKEN"
WRAPPER = Path(__file__).with_name("broken_operator.py")
#: Seconds between two looks at a scaling pool (``run --poll-interval``).
POLL_INTERVAL = 0.5
#: The label a user (GitOps, kubectl) sets on a pool during the faults; it must survive.
USER_LABEL = "chaos.nodepool.dev/edited-by-user"
#: The leader-election Lease of ``run --leader-elect`` (operator.OperatorOptions).
LEASE = "nodepool-operator"


def operator_command() -> list[str]:
    """The command that starts the operator: the CLI, or the broken wrapper."""
    breakage = os.environ.get(BROKEN_ENV)
    if not breakage:
        return CLI
    return [sys.executable, str(WRAPPER), breakage]


@dataclass
class Rates:
    """The operator's requests while the faults lasted, sampled every ``every`` seconds.

    API requests are the audit log's events by the operator's user (reads and writes:
    the audit policy records every request of that user); cloud calls are simcloud's
    own ``/v1`` call counter.
    """

    every: float
    api: list[int] = field(default_factory=list)
    api_writes: list[int] = field(default_factory=list)
    cloud: list[int] = field(default_factory=list)
    seconds: float = 0.0

    def per_second(self, samples: list[int]) -> float:
        return sum(samples) / self.seconds if self.seconds else 0.0

    def peak(self, samples: list[int]) -> float:
        return max(samples, default=0) / self.every

    def figures(self) -> dict[str, float]:
        return {
            "seconds": round(self.seconds, 1),
            "api_requests_per_s": round(self.per_second(self.api), 2),
            "api_requests_peak_per_s": round(self.peak(self.api), 2),
            "api_writes_per_s": round(self.per_second(self.api_writes), 2),
            "cloud_calls_per_s": round(self.per_second(self.cloud), 2),
            "cloud_calls_peak_per_s": round(self.peak(self.cloud), 2),
        }


@dataclass(frozen=True)
class Bound:
    """The most the operator may ask per second, averaged over any ``Rates.every`` window.

    API server: a restarted operator re-lists and re-watches its informers (about 20
    requests), each scaling pool is looked at every ``POLL_INTERVAL`` and a look writes
    at most its status, a Node and an event or two; the lease costs a GET and a PUT every
    2 s per replica. Cloud: a look is one listing plus the creates and deletes it needs
    (at most ``create_parallelism`` = 10), and a refused create pauses the pool 10 s.
    ``api`` and ``cloud`` below are those sums for the tests' pools, rounded up.
    """

    api: float
    cloud: float

    def check(self, rates: Rates) -> list[str]:
        broken = []
        if rates.peak(rates.api) > self.api:
            broken.append(
                f"API server: {rates.peak(rates.api):.1f} requests/s > bound {self.api}/s"
            )
        if rates.peak(rates.cloud) > self.cloud:
            broken.append(f"cloud: {rates.peak(rates.cloud):.1f} calls/s > bound {self.cloud}/s")
        return broken


class RateSampler:
    """Counts the operator's API requests and cloud calls per window while faults last."""

    def __init__(self, fleet: Fleet, *, every: float = 5.0) -> None:
        self.fleet = fleet
        self.rates = Rates(every=every)
        self._task: asyncio.Task[None] | None = None
        self._started = 0.0

    async def __aenter__(self) -> RateSampler:
        self.fleet.audit.mark()
        self._cloud_before = await self.fleet.cloud_calls()
        self._started = time.monotonic()
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        await self._sample()
        self.rates.seconds = time.monotonic() - self._started

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.rates.every)
            await self._sample()

    async def _sample(self) -> None:
        events = [e for e in self.fleet.audit.follow() if e.user == OPERATOR_USER]
        self.rates.api.append(len(events))
        self.rates.api_writes.append(sum(e.is_write for e in events))
        calls = await self.fleet.cloud_calls()
        self.rates.cloud.append(calls - self._cloud_before)
        self._cloud_before = calls


@dataclass
class PoolRecord:
    """What the user asked of one pool, to check nothing of it was lost."""

    name: str
    targets: list[int]
    deleted: bool = False

    @property
    def target(self) -> int:
        return self.targets[-1]

    def creations_needed(self) -> int:
        """The fewest VM creations the target history needs: its increases, summed."""
        steps = zip([0, *self.targets], self.targets, strict=False)
        return sum(max(0, after - before) for before, after in steps)


class Fleet:
    """One test's simcloud, operator replicas and pools, on the session's control plane."""

    def __init__(self, *, cluster: Cluster, api: client.ApiClient, directory: Path) -> None:
        if cluster.plane is None:
            raise RuntimeError("chaos tests need the local control plane")
        self.plane = cluster.plane
        self.audit = cluster.audit_log()
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.directory = directory
        self.cloud: SimCloud | None = None
        self.operators: list[Operator] = []
        self.pools: dict[str, PoolRecord] = {}
        self.crashes = 0
        self.faults = 0
        self._cloud_calls_before_restarts = 0
        self._cloud_restarting = asyncio.Lock()
        self._cloud_responses_before_restarts: collections.Counter[int] = collections.Counter()
        self._started = 0

    # -- the cloud --------------------------------------------------------------------

    async def start_cloud(self, *faults: str) -> SimCloud:
        """A simcloud on a fixed port (a restart keeps it), VMs booting in about 1 s."""
        token = self.directory / "simcloud.token"
        credentials.write_new_token(token)
        port_file = self.directory / "simcloud.port"
        args = [
            *CLI,
            "simcloud",
            "--state",
            str(self.directory / "simcloud.sqlite3"),
            "--port",
            str(controlplane.free_port()),
            "--port-file",
            str(port_file),
            "--token-file",
            str(token),
            "--create-latency",
            "1",
            "--latency-jitter",
            "0.5",
            "--delete-latency",
            "0.5",
            *faults,
        ]
        process = Operator("simcloud", args, self.directory / "simcloud.log")
        self.cloud = SimCloud(process, port_file, token)
        await self.cloud.start()
        return self.cloud

    @property
    def cloud_client(self) -> SimCloudClient:
        assert self.cloud is not None
        assert self.cloud.client is not None
        return self.cloud.client

    async def restart_cloud(self) -> None:
        """SIGKILL the cloud and start it again on the same port and state file."""
        assert self.cloud is not None
        async with self._cloud_restarting:  # the counters of a dead process are gone
            self._cloud_calls_before_restarts = await self._cloud_calls()
            self._cloud_responses_before_restarts = await self._cloud_responses()
            self.cloud.process.kill()
            await self.cloud_client.close()
            await self.cloud.start()
        self.faults += 1

    async def cloud_responses(self) -> collections.Counter[int]:
        """``/v1`` answers by status code since the first start."""
        async with self._cloud_restarting:
            return await self._cloud_responses()

    async def cloud_calls(self) -> int:
        """``/v1`` calls since the first start (the counter restarts with the process)."""
        async with self._cloud_restarting:
            return await self._cloud_calls()

    async def _cloud_responses(self) -> collections.Counter[int]:
        stats = await self.cloud_client.stats()
        return self._cloud_responses_before_restarts + collections.Counter(stats.responses)

    async def _cloud_calls(self) -> int:
        stats = await self.cloud_client.stats()
        return int(self._cloud_calls_before_restarts + stats.calls_total)

    # -- operators --------------------------------------------------------------------

    def start_operator(self, *extra: str) -> Operator:
        args = [
            *operator_command(),
            *operator_args(
                self.plane.kubeconfig_for("operator"),
                "--cloud-endpoint",
                self.cloud.endpoint if self.cloud else "",
                "--cloud-token-file",
                str(self.cloud.token_file if self.cloud else ""),
                poll_interval=POLL_INTERVAL,
            ),
            *extra,
        ]
        self._started += 1
        operator = Operator("operator", args, self.directory / f"operator-{self._started}.log")
        operator.start()
        self.operators.append(operator)
        return operator

    async def started(self, operator: Operator, *, marker: str = "event=started") -> None:
        """Wait until the operator's controllers run (or it was elected, with ``marker``)."""

        async def logged() -> bool:
            if not operator.running:
                raise AssertionError(f"operator exited:\n{operator.output()[-3000:]}")
            return marker in operator.output()

        await wait_for(logged, within=90, every=0.1)

    def crash(self, operator: Operator) -> None:
        """SIGKILL: no cleanup, no lease release."""
        operator.kill()
        self.crashes += 1
        self.faults += 1

    def stop_all(self) -> None:
        for operator in self.operators:
            if operator.popen is not None and operator.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    operator.popen.send_signal(signal.SIGCONT)  # a paused one must hear TERM
            operator.stop()
        if self.cloud is not None:
            self.cloud.process.stop()

    async def leader(self) -> Operator:
        """The replica holding the Lease (its log names the identity it was elected as)."""
        coordination = client.CoordinationV1Api(self.core.api_client)

        async def holder() -> Operator | None:
            try:
                lease = await coordination.read_namespaced_lease(LEASE, "nodepool-system")
            except client.exceptions.ApiException as error:
                if error.status == 404:  # nobody elected yet
                    return None
                raise
            identity = lease.spec.holder_identity
            for operator in self.operators:
                if (
                    identity
                    and operator.running
                    and f"identity={identity} event=elected" in (operator.output())
                ):
                    return operator
            return None

        found: Operator = await wait_for(holder, within=60)
        return found

    def pause(self, operator: Operator) -> None:
        """SIGSTOP: the process keeps its lease and connections but does nothing."""
        assert operator.popen is not None
        operator.popen.send_signal(signal.SIGSTOP)
        self.faults += 1

    def resume(self, operator: Operator) -> None:
        assert operator.popen is not None
        operator.popen.send_signal(signal.SIGCONT)

    # -- the control plane ------------------------------------------------------------

    async def restart_apiserver(self) -> None:
        """Stop kube-apiserver (SIGTERM, SIGKILL after 3 s) and start it again."""
        try:
            await asyncio.to_thread(self.plane.stop_component, "kube-apiserver", timeout=3)
        finally:
            await asyncio.to_thread(self.plane.start_component, "kube-apiserver")
        self.faults += 1

        async def serving() -> bool:
            try:
                await self.custom.list_cluster_custom_object(*POOLS, limit=1)
            except (TimeoutError, client.exceptions.ApiException, aiohttp.ClientError, OSError):
                return False
            return True

        await wait_for(serving, within=60, every=0.2)

    async def operator_authorized(self) -> None:
        """Wait until the operator's user may list NodePools (a restarted API server
        refuses it until its authorizer's caches are filled)."""
        configuration = client.Configuration()
        await config.load_kube_config(
            config_file=str(self.plane.kubeconfig_for("operator")),
            client_configuration=configuration,
        )
        async with client.ApiClient(configuration) as api:
            custom = client.CustomObjectsApi(api)

            async def allowed() -> bool:
                try:
                    await custom.list_cluster_custom_object(*POOLS, limit=1)
                except client.exceptions.ApiException:
                    return False
                return True

            await wait_for(allowed, within=60, every=0.2)

    async def compact_etcd(self) -> int:
        """Compact etcd at its current revision (its JSON gateway), so every watch that
        resumes from an older resourceVersion is answered 410 Gone; the revision."""
        state = json.loads(self.plane.state_file.read_text())
        etcd = f"http://127.0.0.1:{state['ports']['etcd-client']}/v3"
        async with aiohttp.ClientSession() as session:
            any_key = {"key": base64.b64encode(b"\0").decode(), "limit": 1}
            async with session.post(f"{etcd}/kv/range", json=any_key) as response:
                response.raise_for_status()
                revision = int((await response.json())["header"]["revision"])
            compaction = {"revision": revision, "physical": True}
            async with session.post(f"{etcd}/kv/compaction", json=compaction) as response:
                response.raise_for_status()
        self.faults += 1
        return revision

    # -- the user's side ----------------------------------------------------------------

    async def create_pool(self, target: int, *, max_nodes: int = 12) -> str:
        name = f"chaos-{uuid.uuid4().hex[:6]}"
        await self.custom.create_cluster_custom_object(
            *POOLS, pool_body(name, target=target, max_nodes=max_nodes)
        )
        self.pools[name] = PoolRecord(name, [target])
        return name

    async def set_target(self, name: str, target: int) -> None:
        """A user's edit: ``targetNodes`` and a label, as kubectl or GitOps would."""
        patch = {"spec": {"targetNodes": target}, "metadata": {"labels": {USER_LABEL: str(target)}}}
        await self.custom.patch_cluster_custom_object(*POOLS, name, patch, _content_type=MERGE)
        self.pools[name].targets.append(target)

    async def delete_pool(self, name: str) -> None:
        await self.custom.delete_cluster_custom_object(*POOLS, name)
        self.pools[name].deleted = True

    def live_pools(self) -> list[str]:
        return [p.name for p in self.pools.values() if not p.deleted]

    async def remove_pools(self) -> None:
        for name in self.live_pools():
            await remove_pool(self.custom, name, within=60)

    # -- the checks ---------------------------------------------------------------------

    async def settle(self, *, within: float = 180) -> None:
        """Wait until every live pool is settled on its target and every deleted one gone."""
        for record in self.pools.values():
            if record.deleted:
                await wait_for(lambda r=record: self._gone(r.name), within=within)
            else:
                await wait_for(lambda r=record: self._settled(r), within=within)

    async def _settled(self, record: PoolRecord) -> bool:
        pool = await self.custom.get_cluster_custom_object(*POOLS, record.name)
        return nodepool_api.is_settled(pool, record.target) and await self._vms_match_nodes(
            record.name
        )

    async def _gone(self, name: str) -> bool:
        try:
            await self.custom.get_cluster_custom_object(*POOLS, name)
        except client.exceptions.ApiException as error:
            if error.status != 404:
                raise
            return not await self.cloud_client.list_vms(pool=name) or False
        return False

    async def _vms_match_nodes(self, name: str) -> bool:
        vms = await self.cloud_client.list_vms(pool=name)
        return sorted(vm.name for vm in vms) == sorted(await self.node_names(name))

    async def node_names(self, pool: str) -> list[str]:
        found = await self.core.list_node(label_selector=f"{wellknown.POOL_LABEL}={pool}")
        return [n.metadata.name for n in found.items]

    async def violations(self) -> list[str]:
        """Every broken promise, as one line each (empty: all kept)."""
        broken: list[str] = []
        creations = (await self.cloud_client.stats()).creations_by_name
        for record in self.pools.values():
            broken += await self._pool_violations(record, creations)
        known = set(self.pools)
        strays = {vm.rsplit("-", 1)[0] for vm in creations} - known
        for pool in sorted(strays):  # VMs of a pool the test never made: a renamed VM
            vms = await self.cloud_client.list_vms(pool=pool)
            if vms:
                broken.append(f"orphan VMs of unknown pool {pool}: {[vm.name for vm in vms]}")
        return broken

    async def _pool_violations(self, record: PoolRecord, creations: dict[str, int]) -> list[str]:
        name = record.name
        vms = await self.cloud_client.list_vms(pool=name)
        nodes = await self.node_names(name)
        made = sum(n for vm, n in creations.items() if vm.rsplit("-", 1)[0] == name)
        broken: list[str] = []
        if made > record.creations_needed():
            broken.append(
                f"{name}: {made} VMs created where the targets {record.targets} "
                f"needed {record.creations_needed()} (duplicates)"
            )
        if record.deleted:
            if vms or nodes:
                broken.append(
                    f"{name} deleted but left VMs {[v.name for v in vms]} and Nodes {nodes}"
                )
            return broken
        pool = await self.custom.get_cluster_custom_object(*POOLS, name)
        live = sorted(vm.name for vm in vms if vm.state == provider.VmState.RUNNING)
        if len(live) != record.target or len(vms) != record.target:
            broken.append(f"{name}: {len(vms)} VMs ({len(live)} running), target {record.target}")
        if sorted(nodes) != sorted(vm.name for vm in vms):
            broken.append(f"{name}: VMs {sorted(v.name for v in vms)} but Nodes {sorted(nodes)}")
        if pool["spec"]["targetNodes"] != record.target:
            broken.append(
                f"{name}: user's targetNodes={record.target} lost "
                f"(spec says {pool['spec']['targetNodes']})"
            )
        label = (pool["metadata"].get("labels") or {}).get(USER_LABEL)
        if len(record.targets) > 1 and label != str(record.target):
            broken.append(f"{name}: user's label {USER_LABEL}={record.target} lost ({label})")
        status = pool.get("status") or {}
        if status.get("observedGeneration") != pool["metadata"]["generation"]:
            broken.append(
                f"{name}: observedGeneration {status.get('observedGeneration')} "
                f"!= generation {pool['metadata']['generation']}"
            )
        return broken


async def settle_and_check(fleet: Fleet, *, within: float = 180) -> list[str]:
    """Settle (a timeout is a violation too), then every broken promise."""
    try:
        await fleet.settle(within=within)
    except AssertionError as error:
        return [f"not settled: {error}", *await fleet.violations()]
    return await fleet.violations()


def summary(fleet: Fleet, rates: Rates, broken: Iterable[str]) -> dict[str, Any]:
    broken = list(broken)
    return {
        "faults_injected": fleet.faults,
        "crashes_survived": fleet.crashes,
        "pools": len(fleet.pools),
        "lost_user_edits": sum("user's" in line for line in broken),
        "violations": len(broken),
        **rates.figures(),
    }
