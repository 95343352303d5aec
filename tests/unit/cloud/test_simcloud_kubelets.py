"""simcloud --kubelets hollow: one kubelet process per running VM, told what the launch
asked, stopped with its VM, paused by a partition, started again by a restarted simcloud.

The kubelet is a stand-in script with kubemark's command line (the real one is run by the
e2e tests on real kubelets): it records its arguments and sleeps until signalled.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import pathlib
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable

import pytest

from nodepool_operator.cloud import credentials, provider
from nodepool_operator.cloud.simcloud import client, kubelets, server, store, wire

SPEC = provider.MachineSpec(
    cpu="4",
    memory="16Gi",
    pods=20,
    node_labels=(("nodepool.dev/pool", "pool-a"), ("team", "blue")),
    node_taints=("nodepool.dev/unregistered:NoSchedule", "gpu=yes:NoExecute"),
)
NAME = provider.VmName("pool-a-0")
CREATE_LATENCY = 10.0  # as the config fixture sets it

_FAKE_KUBEMARK = """#!{python}
import json, pathlib, signal, sys, time
name = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--name="))
if {ignore!r}:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
path = pathlib.Path({records!r}) / (name + ".args")
path.write_text(json.dumps(sys.argv[1:]))
while True:
    time.sleep(1)
"""


def _fake_kubemark(tmp_path: pathlib.Path, *, ignore_sigterm: bool = False) -> pathlib.Path:
    records = tmp_path / "records"
    records.mkdir(exist_ok=True)
    script = tmp_path / "kubemark"
    script.write_text(
        _FAKE_KUBEMARK.format(python=sys.executable, records=str(records), ignore=ignore_sigterm)
    )
    script.chmod(0o755)
    return script


def _hollow(
    config: server.SimCloudConfig, tmp_path: pathlib.Path, **options: object
) -> server.SimCloudConfig:
    kubeconfig = tmp_path / "kubelet.kubeconfig"
    kubeconfig.write_text("{}")
    grace = float(options.pop("stop_grace", 10.0))  # type: ignore[arg-type]
    return dataclasses.replace(
        config,
        kubelets=kubelets.KubeletConfig(
            kubemark=str(_fake_kubemark(tmp_path, **options)),  # type: ignore[arg-type]
            kubeconfig=str(kubeconfig),
            log_directory=str(tmp_path / "kubelet-logs"),
            stop_grace=grace,
        ),
    )


@contextlib.asynccontextmanager
async def _hollow_cloud(
    config: server.SimCloudConfig,
    clock: store.WallClock,
    token: credentials.TokenFile,
    tmp_path: pathlib.Path,
    faults: dict[str, object] | None = None,
    **options: object,
) -> AsyncIterator[tuple[server.SimCloudServer, client.SimCloudClient]]:
    hollow = _hollow(config, tmp_path, **options).with_faults(faults or {})
    async with (
        server.SimCloudServer(hollow, clock=clock) as sim,
        client.SimCloudClient(sim.endpoint, token=token) as cloud,
    ):
        yield sim, cloud


HollowCloud = Callable[
    ..., contextlib.AbstractAsyncContextManager[tuple[server.SimCloudServer, client.SimCloudClient]]
]


@pytest.fixture
def hollow_cloud(
    config: server.SimCloudConfig,
    clock: store.WallClock,
    token: credentials.TokenFile,
    tmp_path: pathlib.Path,
) -> HollowCloud:
    """``async with hollow_cloud(**options) as (sim, cloud)``: a simcloud booting stand-in
    kubelets (``options`` as ``_hollow`` and ``_hollow_cloud`` take them), and a client."""

    def start(
        **options: object,
    ) -> contextlib.AbstractAsyncContextManager[
        tuple[server.SimCloudServer, client.SimCloudClient]
    ]:
        return _hollow_cloud(config, clock, token, tmp_path, **options)  # type: ignore[arg-type]

    return start


async def _booted(
    sim: server.SimCloudServer,
    cloud: client.SimCloudClient,
    advance: Callable[[float], None],
    *names: str,
) -> list[int]:
    """Create VMs of ``names`` (NAME alone by default), let them boot: their kubelets' pids."""
    for name in names or (NAME,):
        await cloud.create_vm(name=provider.VmName(name), pool="pool-a", spec=SPEC)
    advance(CREATE_LATENCY)
    pids = []
    for name in names or (NAME,):
        pid = await _eventually(lambda name=name: _pid(sim, name))  # type: ignore[misc]
        assert isinstance(pid, int)
        pids.append(pid)
    return pids


async def _eventually(predicate: Callable[[], object], *, within: float = 10.0) -> object:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        value = predicate()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {within}s: {value!r}")
        await asyncio.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _paused(pid: int) -> bool:
    return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def _pid(sim: server.SimCloudServer, name: str = NAME) -> int | None:
    assert sim.kubelets is not None
    return sim.kubelets.pids().get((store.DEFAULT_CLUSTER, name))


async def test_a_running_vm_boots_one_kubelet_told_what_its_launch_asked(
    hollow_cloud: HollowCloud, advance: Callable[[float], None], tmp_path: pathlib.Path
) -> None:
    async with hollow_cloud() as (sim, cloud):
        await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)
        await asyncio.sleep(2 * kubelets.SYNC_SECONDS)
        assert _pid(sim) is None  # still provisioning: nothing runs on it yet

        advance(CREATE_LATENCY)
        pid = await _eventually(lambda: _pid(sim))
        record = tmp_path / "records" / f"{NAME}.args"
        args = json.loads(str(await _eventually(lambda: record.exists() and record.read_text())))

    assert args[:4] == [
        "--morph=kubelet",
        f"--name={NAME}",
        f"--kubeconfig={tmp_path / 'kubelet.kubeconfig'}",
        "--use-host-image-service=false",
    ]
    assert args[4].startswith("--kubelet-port=")
    assert args[5:] == [
        "--kubelet-read-only-port=0",
        "--max-pods=20",
        "--node-labels=nodepool.dev/pool=pool-a,team=blue",
        "--register-with-taints=nodepool.dev/unregistered:NoSchedule,gpu=yes:NoExecute",
    ]
    assert isinstance(pid, int)
    assert not _alive(pid)  # a stopped simcloud stops its kubelets


async def test_deleting_the_vm_stops_its_kubelet(
    hollow_cloud: HollowCloud, advance: Callable[[float], None]
) -> None:
    async with hollow_cloud() as (sim, cloud):
        [pid] = await _booted(sim, cloud, advance)

        await cloud.delete_vm(NAME)  # deleting, not yet gone: the machine shuts down now

        await _eventually(lambda: not _alive(pid))
        assert _pid(sim) is None


async def test_a_kubelet_that_ignores_sigterm_is_killed_after_the_grace(
    hollow_cloud: HollowCloud, advance: Callable[[float], None], tmp_path: pathlib.Path
) -> None:
    options = {"ignore_sigterm": True, "stop_grace": 1.0}
    async with hollow_cloud(**options) as (sim, cloud):
        [pid] = await _booted(sim, cloud, advance)
        record = tmp_path / "records" / f"{NAME}.args"
        await _eventually(record.exists)  # the handler is in place

        await cloud.delete_vm(NAME)
        await asyncio.sleep(0.5)
        assert _alive(pid)  # SIGTERM ignored, grace not over

        await _eventually(lambda: not _alive(pid), within=5.0)


async def test_a_partitioned_vm_has_its_kubelet_paused_until_healed(
    hollow_cloud: HollowCloud, advance: Callable[[float], None]
) -> None:
    async with hollow_cloud() as (sim, cloud):
        pid, other_pid = await _booted(sim, cloud, advance, NAME, "pool-a-1")

        await cloud.set_faults(wire.Faults(partitioned=frozenset({NAME})))
        await _eventually(lambda: _paused(pid))
        await asyncio.sleep(2 * kubelets.SYNC_SECONDS)
        assert not _paused(other_pid)
        assert _pid(sim) == pid  # paused, not replaced

        await cloud.set_faults(wire.Faults())
        await _eventually(lambda: not _paused(pid))
        assert _alive(pid)


async def test_a_restarted_simcloud_boots_the_kubelets_of_the_vms_still_running(
    hollow_cloud: HollowCloud,
    config: server.SimCloudConfig,
    clock: store.WallClock,
    advance: Callable[[float], None],
    tmp_path: pathlib.Path,
) -> None:
    async with hollow_cloud() as (sim, cloud):
        [first] = await _booted(sim, cloud, advance)
    assert not _alive(first)

    async with server.SimCloudServer(_hollow(config, tmp_path), clock=clock) as restarted:
        second = await _eventually(lambda: _pid(restarted))
        assert isinstance(second, int)
        assert second != first
        assert _alive(second)


async def test_a_vm_whose_kubelet_never_joins_boots_none(
    hollow_cloud: HollowCloud, advance: Callable[[float], None]
) -> None:
    never = {"kubeletNeverJoins": [{"cpu": "4"}]}
    async with hollow_cloud(faults=never) as (sim, cloud):
        await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)
        advance(CREATE_LATENCY)
        await asyncio.sleep(3 * kubelets.SYNC_SECONDS)
        assert _pid(sim) is None


async def test_kwok_mode_boots_nothing(
    sim: server.SimCloudServer,
    cloud: client.SimCloudClient,
    advance: Callable[[float], None],
    config: server.SimCloudConfig,
) -> None:
    await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)
    advance(config.create_latency_seconds)
    assert sim.kubelets is None
    vm = await cloud.get_vm(NAME)
    assert vm is not None
    assert not vm.boots_kubelet  # kwok may play its kubelet


def test_the_launch_user_data_round_trips_the_wire() -> None:
    body = wire.machine_to_json(pool="pool-a", spec=SPEC)

    assert body["nodeLabels"] == {"nodepool.dev/pool": "pool-a", "team": "blue"}
    assert wire.machine_from_json(body) == ("pool-a", SPEC)


@pytest.mark.parametrize(
    "taint", ["no-effect", "key=v:Sometimes", "=v:NoSchedule", "a:NoSchedule,b:NoSchedule", 7]
)
def test_a_taint_the_kubelet_could_not_take_is_an_invalid_machine_spec(taint: object) -> None:
    body = {"pool": "p", "cpu": "1", "memory": "1Gi", "pods": 10, "nodeTaints": [taint]}
    with pytest.raises(provider.InvalidMachineSpec):
        wire.machine_from_json(body)


def test_a_partition_names_vms() -> None:
    assert wire.Faults().merged({"partitioned": ["a-0"]}).partitioned == {"a-0"}
    assert wire.Faults(partitioned=frozenset({"a-0"})).to_json()["partitioned"] == ["a-0"]
    with pytest.raises(ValueError, match="partitioned"):
        wire.Faults().merged({"partitioned": [3]})


def test_a_state_file_from_before_user_data_gains_it_with_defaults(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "old.sqlite3"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE vms (cluster TEXT NOT NULL, name TEXT NOT NULL, pool TEXT NOT NULL,"
        " cpu TEXT NOT NULL, memory TEXT NOT NULL, zone TEXT NOT NULL, created_at REAL NOT NULL,"
        " ready_at REAL NOT NULL, gone_at REAL, kubelet_joins INTEGER NOT NULL DEFAULT 1,"
        " PRIMARY KEY (cluster, name));"
        "CREATE TABLE creations (cluster TEXT NOT NULL, name TEXT NOT NULL,"
        " count INTEGER NOT NULL, PRIMARY KEY (cluster, name));"
        "INSERT INTO vms VALUES ('default', 'old-0', 'old', '1', '1Gi', 'sim-1a', 0, 0, NULL, 1);"
    )
    old.commit()
    old.close()

    timing = store.Timing(create_latency_seconds=0, delete_latency_seconds=0)
    kept = store.SimCloudStore(str(path), timing=timing)
    try:
        assert kept.booted() == [store.Guest(cluster="default", name="old-0", pods=110)]
    finally:
        kept.close()


async def test_a_vm_with_a_hollow_kubelet_has_the_provider_id_its_kubelet_registers(
    hollow_cloud: HollowCloud,
) -> None:
    async with hollow_cloud() as (_, cloud):
        vm = await cloud.create_vm(name=NAME, pool="pool-a", spec=SPEC)
        listed = await cloud.list_vms(pool="pool-a")

    # kubemark cannot be told one: it registers kubemark://<name>, so the VM says so too.
    assert vm.provider_id == f"kubemark://{NAME}"
    assert [v.provider_id for v in listed] == [f"kubemark://{NAME}"]
    # And that its kubelet is its own, so that no operator annotates its Node for kwok.
    assert vm.boots_kubelet
    assert [v.boots_kubelet for v in listed] == [True]
