"""Spot nodes taken back at a rate under a steady Deployment: simcloud sells spot c4s with
a 30 s notice, and every 20 s one of the pool's spot VMs (chosen at random, seeded) gets
its notice, for a minute in the short run and five in the full one. Each time, the
Deployment's pods run on other nodes before the noticed VM is gone; no pod is deleted
past its grace (no ``DrainTimeout``), the pool is back at its target, its VMs and Nodes
match (no orphan VM, no Node without a VM), and the operator logs no error."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from typing import Any

from kubernetes_asyncio import client

import spot_pools
from chaos.fleet import Bound, Fleet, PoolRecord, RateSampler, settle_and_check, summary
from chaos.settings import SETTINGS
from harness import POOLS, settled, wait_for
from nodepool_operator.api import wellknown
from nodepool_operator.cloud import provider
from workloads import deployment

NOTICE_SECONDS = 30
EVERY_SECONDS = 20
ROUNDS = 15 if SETTINGS.mode == "full" else 3  # five minutes, or one
REPLICAS = 10
# One pool of three nodes, a replacement launched and a drain at a time.
BOUND = Bound(api=40, cloud=15)


@dataclasses.dataclass
class SpotPoolRecord(PoolRecord):
    """A pool whose VMs the cloud takes back: each one taken back needs one creation more."""

    replaced: int = 0

    def creations_needed(self) -> int:
        return super().creations_needed() + self.replaced


async def _running_off(core: client.CoreV1Api, namespace: str, victim: str) -> bool:
    found = (await core.list_namespaced_pod(namespace, label_selector="app=web")).items
    running = [p for p in found if p.status.phase == "Running"]
    return len(running) >= REPLICAS and all(p.spec.node_name != victim for p in running)


async def _vm_gone(fleet: Fleet, pool: str, vm: provider.VirtualMachine) -> bool:
    live = await fleet.cloud_client.list_vms(pool=pool)
    return not [
        v
        for v in live
        if v.name == vm.name
        and v.created_at <= vm.created_at
        and v.state != provider.VmState.DELETING
    ]


async def test_spot_interruptions_at_a_rate_lose_no_pod_and_leave_no_orphan(
    fleet: Fleet, record_figures: Any
) -> None:
    rng = random.Random(SETTINGS.seed)
    await fleet.start_cloud(
        "--catalog",
        str(spot_pools.catalog_file(fleet.directory)),
        "--spot-notice-seconds",
        str(NOTICE_SECONDS),
        "--seed",
        str(SETTINGS.seed),
    )
    operator = fleet.start_operator()
    await fleet.started(operator)
    name = f"chaos-spot-{rng.randrange(16**6):06x}"
    await fleet.custom.create_cluster_custom_object(*POOLS, spot_pools.spot_pool(name))
    record = SpotPoolRecord(name, [3])
    fleet.pools[name] = record
    await wait_for(lambda: settled(fleet.custom, name, 3), within=90)

    namespace = f"chaos-spot-{rng.randrange(16**6):06x}"
    await fleet.core.create_namespace({"metadata": {"name": namespace}})
    apps = client.AppsV1Api(fleet.core.api_client)
    body = deployment("web", selector={wellknown.POOL_LABEL: name}, replicas=REPLICAS, cpu="500m")
    await apps.create_namespaced_deployment(namespace, body)
    try:
        await wait_for(lambda: _running_off(fleet.core, namespace, ""), within=90)
        moved_after: list[float] = []
        late: list[str] = []
        async with RateSampler(fleet) as sampler:
            for _ in range(ROUNDS):
                round_started = time.monotonic()
                live = [
                    vm
                    for vm in await fleet.cloud_client.list_vms(pool=name)
                    if vm.state == provider.VmState.RUNNING
                ]
                vm = rng.choice(sorted(live, key=lambda v: v.name))
                noticed = time.monotonic()
                await fleet.cloud_client.interrupt([vm.name])
                fleet.faults += 1
                record.replaced += 1
                # Before the cloud takes the VM back: every pod Running elsewhere, and the
                # noticed VM gone by the operator's hand, not the cloud's.
                try:
                    await wait_for(
                        lambda v=vm.name: _running_off(fleet.core, namespace, v),
                        within=NOTICE_SECONDS,
                        every=0.2,
                    )
                    moved_after.append(time.monotonic() - noticed)
                except AssertionError:
                    late.append(f"pods of {vm.name} not Running elsewhere within the notice")
                await wait_for(lambda v=vm: _vm_gone(fleet, name, v), within=NOTICE_SECONDS + 15)
                await asyncio.sleep(max(0.0, EVERY_SECONDS - (time.monotonic() - round_started)))
        broken = await settle_and_check(fleet)
        broken += BOUND.check(sampler.rates)
        broken += late
        logged = operator.output()
        forced = await fleet.core.list_namespaced_event(
            "default", field_selector=f"involvedObject.name={name},reason=DrainTimeout"
        )
        broken += [f"forced drain: {e.message}" for e in forced.items]
        broken += [f"operator error: {line}" for line in operator.errors_logged()]
        await wait_for(lambda: _running_off(fleet.core, namespace, ""), within=60)
    finally:
        await fleet.core.delete_namespace(namespace)
    figures = summary(fleet, sampler.rates, broken)
    figures["interruptions"] = ROUNDS
    figures["pods_moved_max_s"] = round(max(moved_after, default=0.0), 1)
    record_figures(figures)
    print(figures)
    assert broken == [], "\n".join(broken)
    assert logged.count("event=node-interrupted") == ROUNDS
    assert operator.running
