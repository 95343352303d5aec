"""Registration on a fake API server: what a pass of Node creates answers when some fail."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers.nodepool import inventory, plan, registration
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.runtime import conditions, errors
from nodepool_operator.runtime.client import Object, Resource
from nodepool_operator.runtime.testing import FakeApiServer, FakeInformer, FakeWallClock
from unit.nodepool.web_pool import CREATED, POOL, TEMPLATE, UNREGISTERED, vm

SPEC = nodepool_api.NodePoolSpec(target_nodes=3, template=TEMPLATE)


class FailingCreates(FakeApiServer):
    """Refuses (422) the Node creates named in ``refused``; fails (500) those in ``failing``."""

    def __init__(
        self,
        *,
        refused: frozenset[str],
        failing: frozenset[str],
        broken: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(wall_clock=FakeWallClock(CREATED + 10))
        self.refused, self.failing, self.broken = refused, failing, broken

    async def create(self, resource: Resource, body: Object, **kw: Any) -> Object:
        name = body["metadata"]["name"]
        if name in self.refused:
            raise errors.Invalid(f'Node "{name}" is invalid: metadata.labels: Invalid value')
        if name in self.failing:
            raise errors.InternalError("etcd is away")
        if name in self.broken:
            raise TypeError("a fault of ours, not an answer of the API server")
        return await super().create(resource, body, **kw)


def _registrar(api: FakeApiServer) -> registration.Registrar:
    return registration.Registrar(
        client=api,  # type: ignore[arg-type]
        nodes=FakeInformer(server=api, plural="nodes"),  # type: ignore[arg-type]
        config=NodePoolConfig(create_parallelism=4),
        wall_clock=FakeWallClock(CREATED + 10),
    )


async def test_a_refusal_among_the_creates_is_returned_though_another_create_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = FailingCreates(refused=frozenset({"web-1"}), failing=frozenset({"web-2"}))
    with caplog.at_level(logging.WARNING, logger=registration.__name__):
        refused = await _registrar(api).register(POOL, SPEC, [vm(f"web-{i}") for i in range(4)])
    assert refused is not None
    reason, message = refused
    assert reason == registration.NODE_REFUSED
    assert "web-1" in message
    assert "etcd is away" in caplog.text  # the failure is not lost either: logged
    assert sorted(n["metadata"]["name"] for n in api.stored("nodes")) == ["web-0", "web-3"]


async def test_a_failed_create_without_a_refusal_fails_the_pass() -> None:
    api = FailingCreates(refused=frozenset(), failing=frozenset({"web-2"}))
    with pytest.raises(errors.InternalError):
        await _registrar(api).register(POOL, SPEC, [vm(f"web-{i}") for i in range(4)])
    assert sorted(n["metadata"]["name"] for n in api.stored("nodes")) == [
        "web-0",
        "web-1",
        "web-3",
    ]


async def test_a_fault_of_ours_is_raised_even_beside_a_refusal() -> None:
    api = FailingCreates(
        refused=frozenset({"web-1"}), failing=frozenset(), broken=frozenset({"web-2"})
    )
    with pytest.raises(TypeError):
        await _registrar(api).register(POOL, SPEC, [vm(f"web-{i}") for i in range(4)])


# -- a Node its kubelet registered first ---------------------------------------------------


def kubelet_node(
    name: str, *, created_at: float, provider_id: str | None = None, **meta: Any
) -> Object:
    """The Node a kubelet registers: its own labels and taints, no owner, and a provider ID
    only if the kubelet was given one (hollow kubelets are not)."""
    node: Object = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "creationTimestamp": conditions.rfc3339(created_at),
            "labels": {wellknown.POOL_LABEL: "web", "kubernetes.io/hostname": name},
            **meta,
        },
        "spec": {"taints": [dict(UNREGISTERED)]},
        "status": {"capacity": {"cpu": "1", "memory": "3840Mi", "pods": "110"}},
    }
    if provider_id is not None:
        node["spec"]["providerID"] = provider_id
    return node


async def _register_beside(node: Object) -> tuple[FakeApiServer, registration.Registrar]:
    api = FakeApiServer(wall_clock=FakeWallClock(CREATED + 10))
    api.put("nodes", node)
    registrar = _registrar(api)
    assert await registrar.register(POOL, SPEC, [vm("web-0")]) is None
    return api, registrar


async def test_a_node_its_kubelet_registered_after_the_vm_is_adopted() -> None:
    api, _ = await _register_beside(kubelet_node("web-0", created_at=CREATED + 4))

    (node,) = api.stored("nodes")
    assert inventory.owned_by(node, POOL["metadata"]["uid"])
    assert node["metadata"]["ownerReferences"][0]["kind"] == nodepool_api.KIND
    assert node["metadata"]["labels"][wellknown.POOL_LABEL] == "web"
    # The template's taint joins the kubelet's; the unregistered one waits for readiness.
    assert node["spec"]["taints"] == [UNREGISTERED, {"key": "gpu", "effect": "NoSchedule"}]
    assert node["status"]["capacity"]["cpu"] == "1"  # the kubelet's report is kept
    assert [c[0] for c in api.calls if c[1] == "nodes" and c[0] != "list"] == [
        "create",  # the create that found it
        "patch",
    ]


async def test_a_node_made_in_the_vms_second_counts_as_after_it() -> None:
    # creationTimestamp has whole seconds; the VM was made at CREATED + 0.0 here, so this
    # is the truncation of a Node made a fraction of a second after it.
    api, _ = await _register_beside(kubelet_node("web-0", created_at=CREATED))
    assert inventory.owned_by(api.stored("nodes")[0], POOL["metadata"]["uid"])


async def test_a_node_whose_provider_id_names_the_vm_is_adopted_whatever_its_age() -> None:
    node = kubelet_node("web-0", created_at=CREATED - 100, provider_id=vm("web-0").provider_id)
    api, _ = await _register_beside(node)
    assert inventory.owned_by(api.stored("nodes")[0], POOL["metadata"]["uid"])


@pytest.mark.parametrize(
    ("why", "node"),
    [
        ("older than the VM", kubelet_node("web-0", created_at=CREATED - 1)),
        (
            "another VM's provider ID",
            kubelet_node("web-0", created_at=CREATED + 4, provider_id="simcloud:///other/web-0"),
        ),
        (
            "owned by another pool",
            kubelet_node(
                "web-0",
                created_at=CREATED + 4,
                ownerReferences=[{"kind": nodepool_api.KIND, "name": "web", "uid": "old-uid"}],
            ),
        ),
        (
            "labelled for another pool",
            kubelet_node("web-0", created_at=CREATED + 4, labels={wellknown.POOL_LABEL: "api"}),
        ),
        (
            "being deleted",
            kubelet_node(
                "web-0",
                created_at=CREATED + 4,
                deletionTimestamp=conditions.rfc3339(CREATED + 5),
                finalizers=["example.com/hold"],
            ),
        ),
    ],
)
async def test_a_node_that_is_not_the_vms_stays_a_taken_name(why: str, node: Object) -> None:
    api, registrar = await _register_beside(node)

    (stored,) = api.stored("nodes")
    assert not inventory.owned_by(stored, POOL["metadata"]["uid"]), why
    assert not [c for c in api.calls if c[:2] == ("patch", "nodes")]
    assert stored["metadata"].get("ownerReferences") == node["metadata"].get("ownerReferences")
    # Not expected either: the VM, never registered, is replaced once overdue.
    view = plan.PoolView(vms=(vm("web-0"),), nodes={}, pods_per_node={})
    assert registrar.overdue(vm("web-0"), view, SPEC, now=CREATED + 10_000)


async def test_an_adoption_that_meets_a_change_waits_for_the_next_pass() -> None:
    class ChangedMeanwhile(FakeApiServer):
        async def patch(self, resource: Resource, name: str, patch: Any, **kw: Any) -> Object:
            raise errors.Conflict("the object has been modified")

    api = ChangedMeanwhile(wall_clock=FakeWallClock(CREATED + 10))
    api.put("nodes", kubelet_node("web-0", created_at=CREATED + 4))

    assert await _registrar(api).register(POOL, SPEC, [vm("web-0")]) is None
    assert not inventory.owned_by(api.stored("nodes")[0], POOL["metadata"]["uid"])
