"""The NodePool status during a scale operation: a write when it starts and when it
settles, progress in between at most once per ``PROGRESS_INTERVAL`` (from the status's own
last write, remembered or as the status records it), and the next pass asked for then."""

from __future__ import annotations

import copy
from typing import Any

from nodepool_operator.cloud.provider import VmState
from nodepool_operator.controllers.nodepool import report
from nodepool_operator.runtime.controller import Request
from nodepool_operator.runtime.status import merge_patch
from unit.nodepool.reconcile_world import World


def _scaling_up(world: World, target: int) -> World:
    world.cloud.boot_state = VmState.PROVISIONING
    world.pool(target)
    return world


def _boot(world: World, name: str) -> None:
    """The VM runs and, once the operator created its Node, kwok reports it Ready."""
    world.cloud.vms[name] = VmState.RUNNING


async def test_progress_is_written_at_most_once_per_interval_and_the_end_at_once() -> None:
    world = _scaling_up(World(), 3)
    await world.reconcile()
    assert [p["scaleOperation"] for p in world.api.status_patches] == ["active"]

    _boot(world, "p-0")
    await world.reconcile()
    world.show_created_nodes()
    delay = await world.reconcile()

    # One Node is up: progress, held back; the pass after the interval is asked for.
    assert len(world.api.status_patches) == 1
    assert delay is not None
    assert 0 < delay <= report.PROGRESS_INTERVAL

    world.advance(report.PROGRESS_INTERVAL)
    await world.reconcile()
    assert len(world.api.status_patches) == 2
    assert world.api.status_patches[-1]["readyNodes"] == 1

    _boot(world, "p-1")
    await world.reconcile()
    world.show_created_nodes()
    await world.reconcile()
    assert len(world.api.status_patches) == 2  # again within the interval: held

    _boot(world, "p-2")
    await world.reconcile()
    world.show_created_nodes()
    await world.reconcile()
    # The operation settles: written at once, with the counts held back until then.
    assert len(world.api.status_patches) == 3
    last = world.api.status_patches[-1]
    assert (last["scaleOperation"], last["readyNodes"], last["currentNodes"]) == ("inactive", 3, 3)


async def test_after_a_restart_the_interval_runs_from_the_write_the_api_server_recorded() -> None:
    world = _scaling_up(World(), 3)
    await world.reconcile()  # the operation starts: its conditions turn now
    _boot(world, "p-0")
    await world.reconcile()
    world.show_created_nodes()
    await world.reconcile()
    world.advance(report.PROGRESS_INTERVAL)
    await world.reconcile()
    assert [p.get("readyNodes") for p in world.api.status_patches] == [0, 1]
    # The cache catches up with both writes (the record of the last one with them); the
    # process restarts 3 s after that write, with no memory of it.
    world.show_status(world.pools)
    world.advance(3)
    restarted = world.reconciler_for(world.pools)

    _boot(world, "p-1")
    await restarted.reconcile(Request(name="p"))
    world.show_created_nodes()
    result = await restarted.reconcile(Request(name="p"))

    # Held from the recorded write, not from the start of the operation (the conditions'
    # lastTransitionTime, 13 s ago) nor from the restart.
    assert len(world.api.status_patches) == 2
    assert result.requeue_after is not None
    world.advance(report.PROGRESS_INTERVAL - 3 - 1)
    await restarted.reconcile(Request(name="p"))
    assert len(world.api.status_patches) == 2
    world.advance(1)
    await restarted.reconcile(Request(name="p"))
    assert len(world.api.status_patches) == 3
    assert world.api.status_patches[-1]["readyNodes"] == 2


async def test_a_restart_with_no_write_recorded_writes_progress_at_once() -> None:
    """No record of a write by our field manager (none, or only another's) and no memory:
    nothing to hold from."""
    world = _scaling_up(World(), 3)
    await world.reconcile()
    shown = world.show_status(world.pools)
    shown["metadata"]["managedFields"] = [
        {**entry, "manager": "kubectl-edit"} for entry in shown["metadata"]["managedFields"]
    ]
    world.pools.put(shown)
    restarted = world.reconciler_for(world.pools)

    _boot(world, "p-0")
    await restarted.reconcile(Request(name="p"))

    # Progress only (the VMs' count in the Scaling message), written at once.
    [_, progress] = world.api.status_patches
    assert set(progress) == {"conditions"}


def _status(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "observedGeneration": 2,
        "scaleOperation": "active",
        "currentNodes": 1,
        "readyNodes": 0,
        "selector": "nodepool.dev/pool=p",
        "conditions": [
            _condition("Ready", "False", "NodesNotReady", "0/3 nodes ready"),
            _condition("Scaling", "True", "ScalingUp", "3 VMs, 1 nodes, 3 wanted"),
            _condition("Degraded", "False", "AsExpected", "the cloud accepts our requests"),
        ],
    }
    return merge(base, changes)


def _condition(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": 2,
        "lastTransitionTime": "2030-01-02T03:04:05Z",
    }


def merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    out.update(changes)
    return out


def _with(kind: str, **fields: str) -> list[dict[str, Any]]:
    conditions = copy.deepcopy(_status()["conditions"])
    for condition in conditions:
        if condition["type"] == kind:
            condition.update(fields)
    return conditions


def test_counts_messages_and_the_steps_of_one_operation_are_progress() -> None:
    before = _status()
    after = _status(
        currentNodes=3,
        readyNodes=2,
        conditions=_with("Scaling", reason="WaitingForNodes", message="3 VMs, 3 nodes, 3 wanted"),
    )
    assert merge_patch(before, after)
    assert report.progress_only(before, after)


def test_a_start_an_end_a_new_generation_a_blocked_drain_or_a_degraded_cloud_is_not() -> None:
    before = _status()
    assert not report.progress_only(_status(scaleOperation="inactive"), before)
    assert not report.progress_only(before, _status(scaleOperation="inactive"))
    assert not report.progress_only(before, _status(observedGeneration=3, readyNodes=1))
    assert not report.progress_only(
        before, _status(conditions=_with("Scaling", reason="DrainBlocked", message="pdb"))
    )
    degraded = _with("Degraded", status="True", reason="QuotaExceeded", message="quota")
    assert not report.progress_only(before, _status(conditions=degraded))
    assert not report.progress_only(before, before)  # nothing to write at all
