"""Hollow kubelets: the kubelet each running simcloud VM boots (``simcloud --kubelets hollow``).

A real VM boots, and its kubelet registers the Node (or finds it), reports what *it* finds
(capacity, allocatable), renews its Lease and runs the pods bound to it. Here that kubelet
is kubemark's hollow kubelet (``kubemark --morph=kubelet``): the real kubelet code over a
fake container runtime and a fake cAdvisor, which reports 1 CPU and 3840Mi whatever shape
the VM was asked for, as a kubelet reports the machine it runs on, not the template.

One process per VM that is RUNNING (and whose kubelet joins: the ``kubeletNeverJoins``
fault boots none), named after the VM (the Node's name), told at launch what user data
tells a real one: ``--node-labels`` and ``--register-with-taints`` from the create, and
``--max-pods`` from its pods. A hollow kubelet cannot be told a provider ID: it registers
``kubemark://<name>``, so that is the provider ID simcloud reports for the VM
(``provider_id``), as a real cloud reports the one its kubelets register. The process is

- started within ``SYNC_SECONDS`` of the VM turning RUNNING, and again after it exits
  (a crashed kubelet is restarted, as systemd does, at most once every
  ``RESTART_SECONDS``), and after a simcloud restart (the VMs live in the state file);
- stopped when the VM's deletion starts: SIGTERM, then SIGKILL after ``stop_grace``;
- SIGSTOPped while the VM is ``partitioned`` (a fault): its Lease and status stop, its
  pods stay, as a network partition looks from the API server; SIGCONT when healed.

Each process dies with simcloud (``PR_SET_PDEATHSIG``), so a killed simcloud leaves no
kubelet behind; a stopped simcloud stops them as it would delete them. Their output goes
to ``<log_directory>/<cluster>/<name>.log``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Collection, Iterable
from pathlib import Path

from nodepool_operator.cloud.simcloud import store

__all__ = [
    "RESTART_SECONDS",
    "SYNC_SECONDS",
    "HollowKubelets",
    "KubeletConfig",
    "arguments",
    "provider_id",
]

log = logging.getLogger(__name__)

#: How often simcloud compares the kubelets it runs with the VMs that run.
SYNC_SECONDS = 0.5
#: A kubelet that exited is started again no sooner than this after its last start.
RESTART_SECONDS = 5.0
_PR_SET_PDEATHSIG = 1

Key = tuple[str, str]  # (cluster, VM name)


@dataclasses.dataclass(frozen=True, kw_only=True)
class KubeletConfig:
    """``kubemark``: the binary; ``kubeconfig``: the credentials every kubelet uses;
    ``log_directory``: where their output goes; ``stop_grace``: seconds from SIGTERM to
    SIGKILL."""

    kubemark: str
    kubeconfig: str
    log_directory: str
    stop_grace: float = 10.0


def provider_id(cluster: str, name: str) -> str:
    """The provider ID a hollow kubelet registers its Node with (kubemark's own choice; it
    has no flag for it): the VM's, in ``--kubelets hollow``."""
    return f"kubemark://{name}"


def arguments(config: KubeletConfig, guest: store.Guest, *, port: int) -> list[str]:
    """The command line of ``guest``'s hollow kubelet, listening on ``port``."""
    command = [
        config.kubemark,
        "--morph=kubelet",
        f"--name={guest.name}",
        f"--kubeconfig={config.kubeconfig}",
        # Else it asks the host's container runtime for images: there is none here.
        "--use-host-image-service=false",
        f"--kubelet-port={port}",
        "--kubelet-read-only-port=0",
        f"--max-pods={guest.pods}",
    ]
    if guest.node_labels:
        command.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in guest.node_labels))
    if guest.node_taints:
        command.append("--register-with-taints=" + ",".join(guest.node_taints))
    return command


@dataclasses.dataclass(eq=False)
class _Kubelet:
    process: subprocess.Popen[bytes]
    started: float
    paused: bool = False


class HollowKubelets:
    """The kubelet processes of one simcloud; ``sync`` makes them match the VMs."""

    def __init__(
        self, config: KubeletConfig, *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._config = config
        self._monotonic = monotonic
        self._running: dict[Key, _Kubelet] = {}
        # Exited kubelets: when each last started, so a crash loop is paced.
        self._exited: dict[Key, float] = {}
        self._stopping: list[tuple[subprocess.Popen[bytes], float]] = []

    def pids(self) -> dict[Key, int]:
        """The running kubelets' process ids, by (cluster, VM name)."""
        return {key: kubelet.process.pid for key, kubelet in self._running.items()}

    def sync(self, guests: Iterable[store.Guest], *, partitioned: Collection[str]) -> None:
        """Start the kubelets of ``guests`` that have none, stop those whose VM is no
        longer among them, pause those ``partitioned`` names and resume the others."""
        now = self._monotonic()
        wanted = {(guest.cluster, guest.name): guest for guest in guests}
        for key in [k for k in self._running if k not in wanted]:
            self._stop(key, self._running.pop(key), now=now, why="vm-not-running")
        for key, kubelet in list(self._running.items()):
            code = kubelet.process.poll()
            if code is not None:
                log.warning("event=kubelet-exited vm=%s/%s code=%d", *key, code)
                del self._running[key]
                self._exited[key] = kubelet.started
        self._exited = {k: at for k, at in self._exited.items() if k in wanted}
        for key, guest in wanted.items():
            if key in self._running:
                continue
            if key in self._exited and now - self._exited[key] < RESTART_SECONDS:
                continue
            self._exited.pop(key, None)
            self._running[key] = self._start(guest, now=now)
        for (cluster, name), kubelet in self._running.items():
            pause = name in partitioned
            if pause != kubelet.paused:
                kubelet.process.send_signal(signal.SIGSTOP if pause else signal.SIGCONT)
                kubelet.paused = pause
                log.info(
                    "event=kubelet-%s vm=%s/%s pid=%d",
                    "paused" if pause else "resumed",
                    cluster,
                    name,
                    kubelet.process.pid,
                )
        self._reap(now)

    async def close(self) -> None:
        """Stop every kubelet, as deleting its VM would, and wait until they are gone."""
        now = self._monotonic()
        for key in list(self._running):
            self._stop(key, self._running.pop(key), now=now, why="simcloud-stopping")
        while self._stopping:
            self._reap(self._monotonic())
            if self._stopping:
                await asyncio.sleep(0.05)

    def _start(self, guest: store.Guest, *, now: float) -> _Kubelet:
        command = arguments(self._config, guest, port=_free_port())
        path = Path(self._config.log_directory) / guest.cluster / f"{guest.name}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as output:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                # Only a prctl runs between fork and exec: safe in a process with threads.
                preexec_fn=_die_with_parent,
            )
        log.info("event=kubelet-started vm=%s/%s pid=%d", guest.cluster, guest.name, process.pid)
        return _Kubelet(process=process, started=now)

    def _stop(self, key: Key, kubelet: _Kubelet, *, now: float, why: str) -> None:
        log.info("event=kubelet-stopping vm=%s/%s pid=%d why=%s", *key, kubelet.process.pid, why)
        with contextlib.suppress(ProcessLookupError):
            kubelet.process.send_signal(signal.SIGTERM)
            if kubelet.paused:
                # A stopped process holds SIGTERM until it runs again.
                kubelet.process.send_signal(signal.SIGCONT)
        self._stopping.append((kubelet.process, now + self._config.stop_grace))

    def _reap(self, now: float) -> None:
        left = []
        for process, deadline in self._stopping:
            if process.poll() is not None:
                continue
            if now >= deadline:
                log.warning("event=kubelet-killed pid=%d after=grace", process.pid)
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                process.wait()
                continue
            left.append((process, deadline))
        self._stopping = left


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _die_with_parent() -> None:
    # Linux only, as the rest of the local tooling: the kernel sends SIGKILL to the kubelet
    # when simcloud exits, however it exits.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:  # simcloud died before the prctl took effect
        os._exit(1)
