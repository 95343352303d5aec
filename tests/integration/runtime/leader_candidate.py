"""A manager with leader election and one trivial controller, run as a process of its own.

    python leader_candidate.py --kubeconfig K --namespace NS --lease NAME --identity ID \
        [--lease-duration S --renew-deadline S --retry-period S]

The test that starts two of these reads their output, one line per fact, ``time`` being
wall-clock seconds:

    elected IDENTITY TIME              its controllers started (it leads)
    reconciled IDENTITY KEY TIME       its controller reconciled a ConfigMap of NS
    stopped IDENTITY TIME              SIGTERM handled: drained, lease released, exiting
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from nodepool_operator.runtime.client import Client, Resource
from nodepool_operator.runtime.controller import Controller, Request, Result
from nodepool_operator.runtime.leader import LeaderElectionConfig
from nodepool_operator.runtime.manager import Manager

CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)


def say(*words: object) -> None:
    print(*words, f"{time.time():.3f}", flush=True)


class Announcer:
    def __init__(self, identity: str) -> None:
        self.identity = identity

    async def reconcile(self, request: Request) -> Result:
        say("reconciled", self.identity, request)
        return Result()


async def _announce_election(manager: Manager, identity: str) -> None:
    await manager.started.wait()
    say("elected", identity)


async def main(options: argparse.Namespace) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(
        config_file=options.kubeconfig, client_configuration=configuration
    )
    async with k8s.ApiClient(configuration) as api:
        election = LeaderElectionConfig(
            name=options.lease,
            namespace=options.namespace,
            identity=options.identity,
            lease_duration=options.lease_duration,
            renew_deadline=options.renew_deadline,
            retry_period=options.retry_period,
        )
        manager = Manager(Client(api, field_manager=options.identity), leader_election=election)
        controller = Controller(
            name=f"announcer-{options.identity}", reconciler=Announcer(options.identity)
        )
        controller.watch(manager.cache.informer(CONFIGMAPS, namespace=options.namespace))
        manager.add(controller)
        announcing = asyncio.create_task(_announce_election(manager, options.identity))
        try:
            await manager.run(stop)
        finally:
            announcing.cancel()
    say("stopped", options.identity)


def _options(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--lease", required=True)
    parser.add_argument("--identity", required=True)
    parser.add_argument("--lease-duration", type=float, default=15.0)
    parser.add_argument("--renew-deadline", type=float, default=10.0)
    parser.add_argument("--retry-period", type=float, default=2.0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="time=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
    )
    asyncio.run(main(_options(sys.argv[1:])))
