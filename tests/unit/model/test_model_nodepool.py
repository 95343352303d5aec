"""Model-based tests of the NodePool controller (hypothesis stateful testing).

The real reconciler and its real pool steps run against the model of the API server, the
caches and the cloud in ``cluster_model``. Hypothesis draws any sequence of: spec edits
and label edits by the user, ScaleRequests (some based on a target that is no longer the
pool's), reconciles, caches catching up, VMs booting, dying and finishing their deletion,
cloud faults (a create that fails with no effect, one that takes effect and loses its
answer, a quota, a listing that fails, comes back empty or lags behind the creates), API
answers lost after the write took effect, Nodes turning NotReady or deleted by hand, and
operator crashes (between any two of its calls, or between passes): everything the
operator remembered is lost, and a new one starts from the API server and the cloud.

Whatever the sequence, once the faults stop and the operator is left to work, the pool
ends with exactly ``targetNodes`` VMs and Nodes of the same names, every Node Ready (no
orphan VM, no Node without a VM), every ScaleRequest answered, ``observedGeneration ==
generation``, the scale finished and the user's labels intact. At every step: no VM was
created beyond the target of the newest copy of the pool the operator knew (its cache's,
or one it got from the server: a read, or its own update's answer, since a target it
writes is acted on in the same pass), no Node was
deleted while its VM ran, no NodePool update went without a resourceVersion and no
target was written from a request based on another target. And at any step, a restart
makes the same decisions: an operator started afresh judges the pool (unhealthy Nodes,
VMs that never registered or are stuck, victims of a scale-down) as the running one does,
now and when each timer fires, and holds back the cloud's creates after a refusal (a
quota) until the same moment (``restart_decides_the_same``); the model shows it can tell
(``test_the_model_catches_a_timer_kept_in_memory``), and a restart in the middle of a
quota pause asks the cloud nothing before the pause ends
(``test_a_restart_during_a_quota_pause_keeps_the_pause``).

Runs: the default profile tries ``NODEPOOL_MODEL_EXAMPLES`` sequences (default 60) of up
to ``NODEPOOL_MODEL_STEPS`` steps (default 40), derandomized so that each run is the same;
``NODEPOOL_MODEL_EXAMPLES=2000 NODEPOOL_MODEL_STEPS=80`` is the long run (random seeds).
Each run prints what it tried at the end (``conftest.py``). The model shows it can tell:
a create whose answer is lost, then a listing that does not show that VM yet, leaves two
VMs with the real operator and three (a twin) with one that names each new VM afresh
(``test_the_model_catches_vm_names_that_are_not_idempotent``).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.cloud.provider import VmName, VmState
from nodepool_operator.controllers import capacity
from nodepool_operator.controllers.nodepool import (
    inventory,
    plan,
    registration,
)
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.controllers.nodepool.controller import NodePoolReconciler
from nodepool_operator.controllers.resources import NODEPOOLS
from nodepool_operator.runtime import clock as clock_module
from nodepool_operator.runtime import conditions, errors
from nodepool_operator.runtime.controller import Request
from unit.model import cluster_model as model

POOL = "p"
MAX_NODES = 5
CONFIG = NodePoolConfig(poll_interval=1.0, request_retention=60.0)
#: Passes the operator gets, once the faults stop, to reach the desired state.
SETTLE_PASSES = 300
EXAMPLES = int(os.environ.get("NODEPOOL_MODEL_EXAMPLES", "60"))
STEPS = int(os.environ.get("NODEPOOL_MODEL_STEPS", "40"))

TRIED = model.TRIED


class NodePoolModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.wall = model.WallClock()
        self.mono = clock_module.FakeClock()
        self.tripwire = model.Tripwire()
        self.api = model.ApiServer(clock=self.wall, tripwire=self.tripwire)
        self.cloud = model.Cloud(clock=self.wall, tripwire=self.tripwire)
        self.api.vm_alive = self.cloud.alive
        self.cloud.wanted = self._wanted_as_cached
        self.caches = model.caches(self.api)
        self.user_labels: dict[str, str] = {}
        self.requests_made = 0
        self.operator = self._start_operator()
        TRIED["sequences"] += 1

    def _wanted_as_cached(self, pool: str) -> int:
        """The size the operator may aim for: the newest copy of the pool it knows says it
        (its cache's, or one it got from the server: a read, or its own update's answer)."""
        known = [self.caches["nodepools"].get(pool), self.api.seen.get(pool)]
        newest = max(
            (p for p in known if p is not None),
            key=lambda p: int(p["metadata"]["resourceVersion"]),
            default=None,
        )
        return 0 if newest is None else plan.desired_nodes(nodepool_api.spec_of(newest))

    def _sync_caches(self) -> None:
        for cache in self.caches.values():
            cache.sync()

    def _start_operator(self) -> NodePoolReconciler:
        """A new operator process: nothing remembered, its caches listed afresh."""
        self._sync_caches()
        self.cloud.answered.clear()
        self.api.seen.clear()
        return self._new_operator()

    def _new_operator(self) -> NodePoolReconciler:
        return model.new_operator(
            api=self.api,
            caches=self.caches,
            cloud=self.cloud,
            config=CONFIG,
            clock=self.mono,
            wall_clock=self.wall,
        )

    # --- the user -------------------------------------------------------------------------

    @initialize(size=st.integers(0, MAX_NODES))
    def create_pool(self, size: int) -> None:
        spec = nodepool_api.NodePoolSpec(target_nodes=size, min_nodes=0, max_nodes=MAX_NODES)
        self.api.put("nodepools", nodepool_api.manifest(POOL, spec))
        self.caches["nodepools"].sync()  # the operator's informer sees the new pool

    @rule(size=st.integers(0, MAX_NODES))
    def user_sets_target(self, size: int) -> None:
        self.api.edit("nodepools", POOL, lambda pool: pool["spec"].update(targetNodes=size))

    @rule(value=st.sampled_from(["a", "b", "c"]))
    def user_labels_the_pool(self, value: str) -> None:
        key = f"team-{len(self.user_labels) % 3}"
        self.user_labels[key] = value

        def label(pool: dict[str, Any]) -> None:
            pool["metadata"]["labels"] = {**(pool["metadata"].get("labels") or {}), key: value}

        self.api.edit("nodepools", POOL, label)

    @rule(size=st.integers(0, MAX_NODES + 2), stale=st.booleans())
    def autoscaler_asks(self, size: int, stale: bool) -> None:
        current = self.api.objects[("nodepools", POOL)]["spec"]["targetNodes"]
        self.requests_made += 1
        spec = scalerequest_api.ScaleRequestSpec(
            node_pool_name=POOL,
            target_nodes=size,
            based_on_target_nodes=current + 1 if stale else current,
        )
        self.api.put("scalerequests", scalerequest_api.manifest(f"r-{self.requests_made}", spec))

    # --- the operator ---------------------------------------------------------------------

    @rule(caught_up=st.booleans())
    def reconcile(self, caught_up: bool) -> None:
        """A pass with the caches as they are, or once the watches delivered everything."""
        if caught_up:
            self._sync_caches()
        self._reconcile()

    @rule(calls=st.integers(1, 12))
    def operator_killed_mid_pass(self, calls: int) -> None:
        self._sync_caches()
        self.tripwire.calls_left = calls
        self._reconcile()
        self.tripwire.calls_left = None

    @rule()
    def operator_restarted(self) -> None:
        TRIED["crashes"] += 1
        self.operator = self._start_operator()

    @rule(later=st.sampled_from([30.0, 700.0, 3600.0]))
    def restart_decides_the_same(self, later: float) -> None:
        """A new operator started now reaches the verdicts the running one reaches (which
        Nodes are unhealthy, which VMs never registered or are stuck, which go for the
        size), now, when the next timer fires, and ``later``: every timer counts from the
        world, never from the running operator's memory. Compared on the world as it is
        once the watches and the cloud's listing have caught up (what anyone can see)."""
        TRIED["restart-checks"] += 1
        self._sync_caches()
        self.cloud.listing_catches_up()
        listing, self.cloud.listing = self.cloud.listing, "ok"
        try:
            self._compare_restarted(later)
        finally:
            self.cloud.listing = listing

    def _compare_restarted(self, later: float) -> None:
        pool = self.caches["nodepools"].get(POOL)
        assert pool is not None
        spec = nodepool_api.spec_of(pool)
        desired = plan.desired_nodes(spec)
        restarted = self._new_operator()
        now = self.wall.time()
        running = self._judge(self.operator, pool, spec, desired, now)
        assert self._judge(restarted, pool, spec, desired, now) == running
        timer = running.changes_in if isinstance(running, plan.Verdicts) else None
        for at in (timer, (timer or 0) + 0.01, later):
            if at is not None:
                expected = self._judge(self.operator, pool, spec, desired, now + at)
                assert self._judge(restarted, pool, spec, desired, now + at) == expected
        # Whether VM creations are held back after a refusal, and until when.
        pause = self.operator.paused_steps.in_force(pool, now=now)
        assert restarted.paused_steps.in_force(pool, now=now) == pause
        ends = None if pause is None else capacity.pause_ends_in(pause, now=now)
        for at in (0.0, ends, later):
            if at is not None:
                expected_pause = self.operator.paused_steps.in_force(pool, now=now + at)
                assert restarted.paused_steps.in_force(pool, now=now + at) == expected_pause

    def _judge(
        self,
        operator: NodePoolReconciler,
        pool: dict[str, Any],
        spec: nodepool_api.NodePoolSpec,
        desired: int,
        now: float,
    ) -> plan.Verdicts | str:
        judging = operator.lifecycle.judge(pool, spec, desired, now=now)  # type: ignore[attr-defined]
        try:
            verdicts: plan.Verdicts = self.loop.run_until_complete(judging)
        except inventory.ListingDoubtful as doubt:
            return doubt.reason  # both refuse to judge on a listing they cannot trust
        return verdicts

    @rule(cache=st.sampled_from(["nodepools", "nodes", "scalerequests"]))
    def cache_catches_up(self, cache: str) -> None:
        self.caches[cache].sync()

    @rule(seconds=st.sampled_from([0.1, 1.0, 10.0, 60.0, 700.0]))
    def time_passes(self, seconds: float) -> None:
        self.wall.now += seconds
        self.loop.run_until_complete(self.mono.advance(seconds))

    # --- the cloud ------------------------------------------------------------------------

    @rule()
    def vms_boot(self) -> None:
        self.cloud.boot()

    @rule()
    def deletions_finish(self) -> None:
        self.cloud.finish_deletions()

    @rule(boot_at_once=st.booleans())
    def cloud_boot_speed(self, boot_at_once: bool) -> None:
        self.cloud.boot_at_once = boot_at_once

    @precondition(lambda self: bool(self.cloud.vms))
    @rule(data=st.data())
    def vm_dies(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.cloud.vms)))
        del self.cloud.vms[name]
        TRIED["faults"] += 1

    @rule(faults=st.lists(st.sampled_from(["transient", "lost"]), min_size=1, max_size=3))
    def creates_fail(self, faults: list[str]) -> None:
        self.cloud.create_faults.extend(faults)
        TRIED["faults"] += len(faults)

    @rule(quota=st.integers(0, MAX_NODES))
    def quota_set(self, quota: int) -> None:
        self.cloud.quota = quota
        TRIED["faults"] += 1

    @rule(listing=st.sampled_from(["fails", "empty", "ok"]))
    def listing_goes(self, listing: str) -> None:
        self.cloud.listing = listing
        TRIED["faults"] += listing != "ok"

    @rule(lagging=st.booleans())
    def listing_lags(self, lagging: bool) -> None:
        self.cloud.lagging = lagging
        TRIED["faults"] += lagging

    @rule()
    def listing_catches_up(self) -> None:
        self.cloud.listing_catches_up()

    @rule(count=st.integers(1, 3))
    def api_answers_lost(self, count: int) -> None:
        self.api.lose_answers = count
        TRIED["faults"] += count

    # --- the Nodes ------------------------------------------------------------------------

    @precondition(lambda self: bool(self.api.stored("nodes")))
    @rule(data=st.data(), long_ago=st.booleans())
    def node_turns_not_ready(self, data: st.DataObject, long_ago: bool) -> None:
        name = data.draw(st.sampled_from([n["metadata"]["name"] for n in self.api.stored("nodes")]))
        since = self.wall.time() - (3600 if long_ago else 0)

        def fail(node: dict[str, Any]) -> None:
            node["status"]["conditions"] = [
                {
                    "type": "Ready",
                    "status": "False",
                    "lastTransitionTime": conditions.rfc3339(since),
                }
            ]

        self.api.edit("nodes", name, fail)
        TRIED["faults"] += 1

    @precondition(lambda self: bool(self.api.stored("nodes")))
    @rule(data=st.data())
    def node_deleted_by_hand(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from([n["metadata"]["name"] for n in self.api.stored("nodes")]))
        del self.api.objects[("nodes", name)]
        TRIED["faults"] += 1

    # --- what holds at every step -----------------------------------------------------------

    @invariant()
    def nothing_forbidden_happened(self) -> None:
        TRIED["steps"] += 1  # invariants run after every step
        assert self.api.violations == []
        assert self.cloud.violations == []

    # --- the end ----------------------------------------------------------------------------

    def teardown(self) -> None:
        try:
            self._settle()
            self._check_desired_state()
        finally:
            self.loop.close()

    def _reconcile(self) -> float | None:
        TRIED["passes"] += 1
        try:
            result = self.loop.run_until_complete(self.operator.reconcile(Request(name=POOL)))
        except model.Crash:
            TRIED["crashes"] += 1
            self.operator = self._start_operator()
            return None
        except errors.OperatorError:
            return CONFIG.poll_interval  # the controller logs it and retries on its backoff
        return result.requeue_after

    def _settle(self) -> None:
        """The faults stop; the operator works, the caches follow, the cloud boots and
        finishes deletions, time passes as the operator asks for it."""
        self.cloud.heal()
        self.api.lose_answers = 0
        for _ in range(SETTLE_PASSES):
            self._sync_caches()
            self.cloud.boot()
            self.cloud.finish_deletions()
            self._on_call_answers_an_empty_listing()
            writes = self.api.operator_writes
            delay = self._reconcile()
            self._sync_caches()
            if self.api.operator_writes == writes and self._desired_state_problems() == []:
                return
            step = min(delay if delay is not None else 1.0, 60.0)
            self.wall.now += max(step, 0.1)
            self.loop.run_until_complete(self.mono.advance(max(step, 0.1)))

    def _on_call_answers_an_empty_listing(self) -> None:
        """Every VM of the pool died while it owns Nodes: the operator lists none and, by
        design, deletes nothing on that (the cloud might have lost its state, or be the
        wrong endpoint) but says ``Degraded: CloudListEmpty``. The person on call, who
        can tell, removes the Nodes (docs/operations.md); the operator does the rest."""
        status = self.api.objects[("nodepools", POOL)].get("status") or {}
        told = any(
            c.get("reason") == "CloudListEmpty" and c.get("status") == "True"
            for c in status.get("conditions") or ()
        )
        if told and not any(vm.pool == POOL for vm in self.cloud.vms.values()):
            TRIED["on-call"] += 1
            for node in self.api.stored("nodes"):
                del self.api.objects[("nodes", node["metadata"]["name"])]

    def _check_desired_state(self) -> None:
        assert self._desired_state_problems() == []
        assert self.api.violations == []

    def _desired_state_problems(self) -> list[str]:
        problems = []
        pool = self.api.objects[("nodepools", POOL)]
        spec = nodepool_api.spec_of(pool)
        target = plan.desired_nodes(spec)
        vms = {n for n, vm in self.cloud.vms.items() if vm.state != VmState.DELETING}
        nodes = {n["metadata"]["name"] for n in self.api.stored("nodes")}
        if len(vms) != target:
            problems.append(f"{len(vms)} VMs for a target of {target}: {sorted(vms)}")
        if vms != nodes:
            problems.append(f"VMs {sorted(vms)} and Nodes {sorted(nodes)} differ")
        not_ready = [
            n["metadata"]["name"]
            for n in self.api.stored("nodes")
            if not any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n["status"].get("conditions", ())
            )
        ]
        if not_ready:
            problems.append(f"Nodes not Ready: {not_ready}")
        status = pool.get("status") or {}
        if status.get("observedGeneration") != pool["metadata"]["generation"]:
            problems.append(
                f"observedGeneration {status.get('observedGeneration')} "
                f"!= generation {pool['metadata']['generation']}"
            )
        if (status.get("currentNodes"), status.get("readyNodes")) != (target, target):
            problems.append(f"status says {status.get('currentNodes')}/{status.get('readyNodes')}")
        if status.get("scaleOperation") != "inactive":
            problems.append(f"scaleOperation {status.get('scaleOperation')}")
        labels = pool["metadata"].get("labels") or {}
        if any(labels.get(k) != v for k, v in self.user_labels.items()):
            problems.append(f"user labels lost: {labels} lacks {self.user_labels}")
        pending = [
            r["metadata"]["name"]
            for r in self.api.stored("scalerequests")
            if scalerequest_api.status_of(r).phase == "Pending"
        ]
        if pending:
            problems.append(f"requests still Pending: {pending}")
        return problems


NodePoolModel.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    derandomize=EXAMPLES <= 200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    print_blob=True,
)
TestNodePoolModel = NodePoolModel.TestCase


def test_the_model_api_refuses_a_stale_update() -> None:
    """The model is only as good as its 409s: a write on an old resourceVersion fails."""
    api = model.ApiServer(clock=model.WallClock(), tripwire=model.Tripwire())
    stored = api.put(
        "nodepools", nodepool_api.manifest(POOL, nodepool_api.NodePoolSpec(target_nodes=1))
    )
    api.edit("nodepools", POOL, lambda pool: pool["spec"].update(targetNodes=2))
    stale = copy.deepcopy(stored)
    stale["spec"]["targetNodes"] = 3

    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(errors.Conflict):
            loop.run_until_complete(api.replace(NODEPOOLS, stale))
    finally:
        loop.close()
    assert api.objects[("nodepools", POOL)]["spec"]["targetNodes"] == 2


def lost_answer_then_lagging_listing(machine: NodePoolModel) -> list[str]:
    """Two VMs asked for; the first create's answer is lost (the VM exists, listings do
    not show it yet); a second pass follows. The VMs the cloud holds then."""
    machine.create_pool(size=2)
    machine.creates_fail(["lost"])
    machine.reconcile(caught_up=True)
    machine.reconcile(caught_up=True)
    machine.nothing_forbidden_happened()
    return sorted(machine.cloud.vms)


def test_a_lost_create_answer_makes_no_twin_vm() -> None:
    machine = NodePoolModel()
    try:
        assert lost_answer_then_lagging_listing(machine) == ["p-0", "p-1"]
    finally:
        machine.loop.close()


def test_the_model_catches_vm_names_that_are_not_idempotent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A broken operator that names each new VM afresh makes a twin of the VM whose
    answer was lost; the model must see it, or its passing runs prove nothing."""
    fresh = itertools.count(100)

    def new_names(pool: str, existing: Any, count: int) -> list[VmName]:
        return [VmName(f"{pool}-{next(fresh)}") for _ in range(count)]

    monkeypatch.setattr(plan, "names_to_create", new_names)
    machine = NodePoolModel()
    try:
        assert lost_answer_then_lagging_listing(machine) == ["p-100", "p-101", "p-102"]
    finally:
        machine.loop.close()


def test_a_vm_whose_create_was_answered_counts_while_listings_do_not_show_it() -> None:
    """The long run's find: one create fails with no effect, the other is answered but
    listings lag; with the target lowered to 1, the operator must not create another."""
    machine = NodePoolModel()
    try:
        machine.create_pool(size=2)
        machine.creates_fail(["transient"])
        machine.listing_lags(lagging=True)
        machine.reconcile(caught_up=True)
        machine.user_sets_target(size=1)
        machine.reconcile(caught_up=True)
        machine.nothing_forbidden_happened()
        assert sorted(machine.cloud.vms) == ["p-1"]
    finally:
        machine.loop.close()


def test_the_model_catches_a_timer_kept_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken operator that counts the registration timeout from when it first saw a VM
    without its Node, in memory, decides differently once restarted; the restart check
    must see it, or its passing runs prove nothing."""

    def overdue_from_memory(
        self: registration.Registrar,
        vm: Any,
        view: plan.PoolView,
        spec: nodepool_api.NodePoolSpec,
        *,
        now: float,
    ) -> bool:
        seen: dict[str, float] = self.__dict__.setdefault("first_seen", {})
        if vm.name in view.nodes:
            return False
        return now - seen.setdefault(vm.name, now) >= spec.registration_timeout_seconds

    monkeypatch.setattr(registration.Registrar, "overdue", overdue_from_memory)
    machine = NodePoolModel()
    try:
        machine.create_pool(size=1)
        machine.reconcile(caught_up=True)
        [node] = machine.api.stored("nodes")
        del machine.api.objects[("nodes", node["metadata"]["name"])]
        machine.restart_decides_the_same(later=30.0)  # the running operator sees it now
        machine.time_passes(700.0)
        with pytest.raises(AssertionError):
            machine.restart_decides_the_same(later=700.0)
    finally:
        machine.loop.close()


def test_a_restart_during_a_quota_pause_keeps_the_pause() -> None:
    """The quota pause is in the pool's status: an operator started in the middle of it
    asks the cloud for no VM before it ends, then creates them at once."""
    machine = NodePoolModel()
    try:
        machine.create_pool(size=2)
        machine.quota_set(quota=0)
        machine.reconcile(caught_up=True)  # refused: the pause starts
        machine.time_passes(CONFIG.degraded_backoff)
        machine.reconcile(caught_up=True)  # refused again: twice as long
        machine.cloud.heal()  # the quota is lifted, which the operator cannot know
        machine.operator_restarted()
        machine.restart_decides_the_same(later=30.0)
        asked = machine.cloud.create_calls
        machine.time_passes(2 * CONFIG.degraded_backoff - 1)
        machine.reconcile(caught_up=True)
        assert machine.cloud.create_calls == asked  # the pause still holds
        machine.time_passes(1.0)
        machine.reconcile(caught_up=True)
        assert sorted(machine.cloud.vms) == ["p-0", "p-1"]
    finally:
        machine.loop.close()
