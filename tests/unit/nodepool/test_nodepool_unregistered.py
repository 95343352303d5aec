"""The unregistered taint: on every Node the operator creates, removed only once the
kubelet has reported, and a Node that keeps it too long is repaired."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.controllers.nodepool import nodes, plan, repair
from nodepool_operator.runtime import errors, kinds
from nodepool_operator.runtime.client import Object, Resource
from nodepool_operator.runtime.testing import FakeApiServer, FakeWallClock
from unit.nodepool.web_pool import CREATED, POOL, TEMPLATE, UNREGISTERED, created, reported, vm


def test_the_operators_nodes_carry_the_taint_besides_the_templates() -> None:
    taints = created()["spec"]["taints"]
    assert taints == [{"key": "gpu", "effect": "NoSchedule"}, UNREGISTERED]
    assert nodes.is_unregistered(created())


def test_nodes_made_without_the_flag_have_only_the_templates_taints() -> None:
    node = nodes.node_manifest(pool=POOL, vm=vm("web-0"), template=TEMPLATE, simulated=True)
    assert node["spec"]["taints"] == [{"key": "gpu", "effect": "NoSchedule"}]
    assert not nodes.is_unregistered(node)


def test_a_kubelet_has_reported_with_ready_a_heartbeat_capacity_and_allocatable() -> None:
    assert nodes.kubelet_reported(reported(created()))


def test_a_node_nobody_wrote_to_is_not_reported() -> None:
    assert not nodes.kubelet_reported(created())


def test_ready_without_a_heartbeat_is_not_reported() -> None:
    node = reported(created())
    del node["status"]["conditions"][0]["lastHeartbeatTime"]
    assert not nodes.kubelet_reported(node)


def test_a_heartbeat_older_than_the_node_is_not_its_kubelets() -> None:
    assert not nodes.kubelet_reported(reported(created(), heartbeat=CREATED - 60))


def test_not_ready_is_not_reported() -> None:
    node = reported(created())
    node["status"]["conditions"][0]["status"] = "False"
    assert not nodes.kubelet_reported(node)


def test_a_status_without_allocatable_pods_is_not_a_kubelets_report() -> None:
    node = reported(created(), allocatable={"cpu": "4", "memory": "16Gi"})
    assert not nodes.kubelet_reported(node)


async def test_the_taint_goes_once_the_kubelet_reported_and_the_others_stay() -> None:
    api = FakeApiServer()
    api.put("nodes", reported(created()))
    api.put("nodes", created("web-1"))
    assert await nodes.remove_unregistered_taint(api, "web-0")
    (after, untouched) = api.stored("nodes")
    assert after["spec"]["taints"] == [{"key": "gpu", "effect": "NoSchedule"}]
    assert untouched["spec"]["taints"][-1] == UNREGISTERED


async def test_no_write_before_the_kubelet_reported() -> None:
    api = FakeApiServer()
    api.put("nodes", created())
    assert not await nodes.remove_unregistered_taint(api, "web-0")
    assert api.writes() == []
    assert nodes.is_unregistered(api.stored("nodes")[0])


async def test_no_write_for_a_node_already_untainted_or_gone() -> None:
    api = FakeApiServer()
    node = reported(created())
    node["spec"]["taints"] = []
    api.put("nodes", node)
    assert not await nodes.remove_unregistered_taint(api, "web-0")
    assert not await nodes.remove_unregistered_taint(api, "web-9")
    assert api.writes() == []


class TaintedMeanwhile(FakeApiServer):
    """Another writer adds a taint between our read and our first patch."""

    def __init__(self) -> None:
        super().__init__(wall_clock=FakeWallClock(CREATED + 10))
        self.raced = False

    def before(self, verb: str, resource: Resource, name: str) -> None:
        if verb == "patch" and not self.raced:
            self.raced = True
            self.edit(
                "nodes",
                name,
                lambda node: node["spec"]["taints"].append({"key": "other", "effect": "NoExecute"}),
            )


async def test_a_conflict_reads_again_and_keeps_the_taint_another_writer_added() -> None:
    api = TaintedMeanwhile()
    api.put("nodes", reported(created()))
    assert await nodes.remove_unregistered_taint(api, "web-0")
    assert api.stored("nodes")[0]["spec"]["taints"] == [
        {"key": "gpu", "effect": "NoSchedule"},
        {"key": "other", "effect": "NoExecute"},
    ]
    assert [verb for verb, plural, _ in api.calls if plural == kinds.NODES.plural] == [
        "list",
        "patch",  # 409
        "list",
        "patch",
    ]


def _view(node: Object) -> plan.PoolView:
    return plan.PoolView(vms=[vm("web-0")], nodes={"web-0": node}, pods_per_node={})


SPEC = nodepool_api.NodePoolSpec(
    target_nodes=1, template=TEMPLATE, registration_timeout_seconds=300
)


def test_a_ready_node_that_keeps_the_taint_past_registration_is_repaired() -> None:
    ready = reported(created())
    assert repair.unhealthy(_view(ready), SPEC, now=CREATED + 299) == frozenset()
    assert repair.unhealthy_in(_view(ready), SPEC, now=CREATED + 299) == 1
    assert repair.unhealthy(_view(ready), SPEC, now=CREATED + 300) == {"web-0"}


def test_a_ready_node_without_the_taint_is_never_repaired_for_registration() -> None:
    ready = reported(created())
    ready["spec"]["taints"] = []
    assert repair.unhealthy(_view(ready), SPEC, now=CREATED + 10_000) == frozenset()


def test_a_tainted_node_never_ready_is_repaired_at_registration_as_before() -> None:
    assert repair.unhealthy(_view(created()), SPEC, now=CREATED + 300) == {"web-0"}


async def test_initialising_a_node_records_how_long_since_the_cloud_created_its_vm() -> None:
    from prometheus_client import REGISTRY

    from nodepool_operator.controllers.nodepool.config import NodePoolConfig
    from nodepool_operator.controllers.nodepool.registration import Registrar

    api = FakeApiServer()
    api.put("nodes", reported(created()))
    registrar = Registrar(
        client=api, nodes=None, config=NodePoolConfig(), wall_clock=FakeWallClock(CREATED + 12)
    )
    view = plan.PoolView(vms=[vm("web-0")], nodes={"web-0": reported(created())}, pods_per_node={})
    labels = {"pool": "web-metric"}
    before = REGISTRY.get_sample_value("nodepool_node_initialization_seconds_sum", labels) or 0.0

    await registrar.initialise(view, pool="web-metric")

    after = REGISTRY.get_sample_value("nodepool_node_initialization_seconds_sum", labels)
    assert after == before + 12
    assert not nodes.is_unregistered(api.stored("nodes")[0])


class SlowPatches(FakeApiServer):
    """Each Node patch takes a moment; counts how many were in flight at once, and
    fails the patches of the Nodes named in ``failing``."""

    def __init__(self, *, failing: frozenset[str] = frozenset()) -> None:
        super().__init__(wall_clock=FakeWallClock(CREATED + 10))
        self.failing = failing
        self.in_flight = self.most_in_flight = 0

    async def patch(self, resource: Resource, name: str, body: Any, **kw: Any) -> Object:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.01)
            if name in self.failing:
                raise errors.ServerError("etcd is away")
            return await super().patch(resource, name, body, **kw)
        finally:
            self.in_flight -= 1


def _registrar(api: FakeApiServer, *, parallelism: int) -> Any:
    from nodepool_operator.controllers.nodepool.config import NodePoolConfig
    from nodepool_operator.controllers.nodepool.registration import Registrar

    config = NodePoolConfig(create_parallelism=parallelism)
    return Registrar(client=api, nodes=None, config=config, wall_clock=FakeWallClock(CREATED + 12))


def _ready_nodes(api: FakeApiServer, count: int) -> plan.PoolView:
    ready = {f"web-{i}": reported(created(f"web-{i}")) for i in range(count)}
    for node in ready.values():
        api.put("nodes", node)
    return plan.PoolView(vms=[vm(n) for n in ready], nodes=ready, pods_per_node={})


async def test_the_nodes_of_one_decision_turn_schedulable_together() -> None:
    api = SlowPatches()
    view = _ready_nodes(api, 6)
    await _registrar(api, parallelism=4).initialise(view, pool="web")
    assert not any(nodes.is_unregistered(node) for node in api.stored("nodes"))
    assert api.most_in_flight == 4  # not one after another, and never more than allowed


async def test_one_failed_removal_leaves_the_others_done_and_fails_the_pass() -> None:
    api = SlowPatches(failing=frozenset({"web-1"}))
    view = _ready_nodes(api, 3)
    with pytest.raises(errors.ServerError):
        await _registrar(api, parallelism=4).initialise(view, pool="web")
    still = [n["metadata"]["name"] for n in api.stored("nodes") if nodes.is_unregistered(n)]
    assert still == ["web-1"]  # retried by the next pass


async def test_a_change_to_another_field_since_the_read_does_not_hold_the_taint_back() -> None:
    """The controller-manager annotates a Node as it turns Ready: the removal tests the
    taints only, so it goes through in one patch rather than a 409 and a round trip."""
    api = FakeApiServer()
    api.put("nodes", reported(created()))
    read = await nodes.reported_and_tainted(api, "web-0")
    assert read is not None

    def annotate(node: Object) -> None:
        node["metadata"].setdefault("annotations", {})["node.alpha.kubernetes.io/ttl"] = "0"

    api.edit("nodes", "web-0", annotate)
    assert await nodes.remove_unregistered_taint(api, "web-0", read=read)
    [after] = api.stored("nodes")
    assert after["spec"]["taints"] == [{"key": "gpu", "effect": "NoSchedule"}]
    assert [c for c in api.writes() if c[0] == "patch"] == [("patch", "nodes", "web-0")]


async def test_a_taint_added_since_the_read_is_kept_by_reading_again() -> None:
    api = FakeApiServer()
    api.put("nodes", reported(created()))
    read = await nodes.reported_and_tainted(api, "web-0")
    assert read is not None

    def taint(node: Object) -> None:
        node["spec"]["taints"].append({"key": "other", "effect": "NoSchedule"})

    api.edit("nodes", "web-0", taint)
    assert await nodes.remove_unregistered_taint(api, "web-0", read=read)
    [after] = api.stored("nodes")
    assert after["spec"]["taints"] == [
        {"key": "gpu", "effect": "NoSchedule"},
        {"key": "other", "effect": "NoSchedule"},
    ]
