"""ScaleRequests through the NodePool reconciler, on fakes (caches, API, cloud): ordering,
the basis check at apply time, and requests for a pool that does not exist."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import scalerequest as scalerequest_api
from nodepool_operator.api import wellknown
from nodepool_operator.cloud.provider import VirtualMachine, VmState
from nodepool_operator.controllers.nodepool import request_facts
from nodepool_operator.runtime.client import Object, Resource
from unit.nodepool.requests_world import CREATED, World


def _pending(*objs: Object) -> list[str]:
    return [r["metadata"]["name"] for r in request_facts.pending_requests(list(objs))]


def test_pending_requests_are_ordered_by_creation_then_resource_version_not_name() -> None:
    world = World()
    # Same second: resourceVersion decides, as a number ("9" < "10"), not as text.
    a = world.request("a", pool="p", target=1, version="10")
    b = world.request("b", pool="p", target=1, version="9")
    # An earlier second wins whatever its version and name.
    z = world.request("z", pool="p", target=1, created="2027-01-15T07:59:59Z", version="99")
    assert _pending(a, b, z) == ["z", "b", "a"]
    assert _pending(z, a, b) == ["z", "b", "a"]


def test_answered_and_deleting_requests_are_not_pending() -> None:
    world = World()
    done = world.request("done", pool="p", target=1)
    done["status"] = {"phase": "Applied"}
    leaving = world.request("leaving", pool="p", target=1)
    leaving["metadata"]["deletionTimestamp"] = CREATED
    assert _pending(done, leaving) == []


async def test_a_request_based_on_the_current_target_is_applied() -> None:
    world = World()
    world.pool("p", nodepool_api.NodePoolSpec(target_nodes=2))
    world.request("r", pool="p", target=5, based_on=2)

    await world.reconcile("p")

    assert world.target_of("p") == 5
    status = world.api.request_status("r")
    assert (status["phase"], status["appliedTargetNodes"]) == ("Applied", 5)


async def test_an_applied_request_reaches_the_cloud_in_the_same_pass_without_a_pool_get() -> None:
    world = World()
    world.pool("p", nodepool_api.NodePoolSpec(target_nodes=0))
    world.request("r", pool="p", target=2, based_on=0)

    await world.reconcile("p")

    assert world.target_of("p") == 2
    assert sorted(name for name, _ in world.cloud.created) == ["p-0", "p-1"]
    assert ("get", "nodepools", "p") not in world.api.calls  # the write's precondition
    [pool_status] = [s for n, s in world.api.status_patches if n == "p"]
    assert pool_status["scaleOperation"] == "active"


async def test_a_request_based_on_an_old_target_is_superseded_and_never_applied() -> None:
    world = World()
    world.pool("p", nodepool_api.NodePoolSpec(target_nodes=2))
    world.request("r", pool="p", target=5, based_on=1)

    await world.reconcile("p")

    assert world.target_of("p") == 2
    assert ("replace", "nodepools", "p") not in world.api.calls
    status = world.api.request_status("r")
    assert status["phase"] == "Superseded"
    assert "appliedTargetNodes" not in status
    assert "targetNodes=1" in status["message"]
    assert "now 2" in status["message"]


async def test_the_basis_is_checked_again_on_the_pool_read_after_a_conflict() -> None:
    world = World()
    world.pool("p", nodepool_api.NodePoolSpec(target_nodes=2))
    world.request("r", pool="p", target=5, based_on=2)

    def user_scales_to_3() -> None:
        pool = world.api.objects[("nodepools", "p")]
        pool["spec"]["targetNodes"] = 3
        pool["metadata"]["resourceVersion"] = "6"

    world.api.before_replace.append(user_scales_to_3)

    await world.reconcile("p")

    assert world.target_of("p") == 3  # the user's newer value stands
    assert world.api.calls.count(("replace", "nodepools", "p")) == 1
    status = world.api.request_status("r")
    assert status["phase"] == "Superseded"
    assert "now 3" in status["message"]


async def test_a_hand_made_request_without_a_basis_is_applied_whatever_the_target() -> None:
    world = World()
    world.pool("p", nodepool_api.NodePoolSpec(target_nodes=2))
    world.request("r", pool="p", target=4)

    await world.reconcile("p")

    assert world.target_of("p") == 4
    assert world.api.request_status("r")["phase"] == "Applied"


async def test_the_newest_request_by_creation_wins_and_older_ones_are_superseded() -> None:
    world = World()
    world.pool("p", nodepool_api.NodePoolSpec(target_nodes=1))
    world.request("a-newer", pool="p", target=3, version="20")
    world.request("b-older", pool="p", target=7, version="19")

    await world.reconcile("p")

    assert world.target_of("p") == 3
    assert world.api.request_status("a-newer")["phase"] == "Applied"
    older = world.api.request_status("b-older")
    assert (older["phase"], older["message"]) == ("Superseded", "superseded by a-newer")


async def test_a_request_for_a_pool_that_does_not_exist_is_rejected_once() -> None:
    world = World()
    world.request("r", pool="ghost", target=3)

    await world.reconcile("ghost")

    status = world.api.request_status("r")
    assert status["phase"] == "Rejected"
    assert status["message"] == "NodePool 'ghost' does not exist"
    assert "appliedTargetNodes" not in status
    [told] = world.api.events("ScaleRequestRejected")
    assert (told["type"], told["message"]) == ("Warning", "NodePool 'ghost' does not exist")
    assert (told["involvedObject"]["kind"], told["involvedObject"]["name"]) == ("ScaleRequest", "r")
    calls = len(world.api.calls)

    await world.reconcile("ghost")  # the cache still shows it Pending

    assert len(world.api.calls) == calls  # no second answer, not even a second look


async def test_a_request_a_limit_refuses_gets_a_warning_and_the_superseded_one_none() -> None:
    world = World()
    world.pool("p", nodepool_api.NodePoolSpec(target_nodes=4, max_nodes=4))
    world.request("older", pool="p", target=5, version="19")
    world.request("newer", pool="p", target=9, version="20")

    await world.reconcile("p")

    assert world.api.request_status("newer")["phase"] == "Rejected"
    assert world.api.request_status("older")["phase"] == "Superseded"
    [told] = world.api.events("ScaleRequestRejected")
    assert told["involvedObject"]["name"] == "newer"
    assert told["message"] == "pool is at maxNodes=4; cannot grow"


async def test_a_pool_the_cache_has_not_shown_yet_does_not_reject_its_requests() -> None:
    world = World()
    world.pool("new", nodepool_api.NodePoolSpec(target_nodes=0), in_cache=False)
    world.request("r", pool="new", target=3)

    await world.reconcile("new")

    assert world.api.status_patches == []
    assert world.api.writes() == []


async def test_requests_for_a_pool_deleted_before_the_apply_are_rejected() -> None:
    world = World()
    world.pool("p", nodepool_api.NodePoolSpec(target_nodes=1))
    world.request("r", pool="p", target=3)
    del world.api.objects[("nodepools", "p")]

    await world.reconcile("p")

    assert world.api.request_status("r")["phase"] == "Rejected"
    assert world.cloud.created == []  # the pass stopped: nothing to converge


async def test_a_rejected_orphan_is_deleted_after_the_retention_period() -> None:
    world = World()
    orphan = world.request("r", pool="ghost", target=3, created="2027-01-15T07:58:00Z")
    orphan["status"] = {"phase": "Rejected"}
    world.requests.put(orphan)

    await world.reconcile("ghost")

    assert ("delete", "scalerequests", "r") in world.api.calls


async def test_new_vms_no_request_places_go_to_the_least_filled_zones() -> None:
    world = World()
    template = nodepool_api.NodeTemplate(zones=("a", "b"))
    world.pool("p", nodepool_api.NodePoolSpec(target_nodes=3, template=template))

    await world.reconcile("p")

    assert sorted((name, spec.zone) for name, spec in world.cloud.created) == [
        ("p-0", "a"),
        ("p-1", "b"),
        ("p-2", "a"),
    ]


async def test_new_vms_go_to_the_zones_the_request_named() -> None:
    world = World()
    template = nodepool_api.NodeTemplate(zones=("a", "b", "c"))
    world.pool("p", nodepool_api.NodePoolSpec(target_nodes=0, template=template))
    world.request("up", pool="p", target=3, zones={"c": 2})

    await world.reconcile("p")

    assert world.api.request_status("up")["phase"] == "Applied"
    # Two where the request said, the third where the pool is emptiest.
    assert sorted(spec.zone for _, spec in world.cloud.created) == ["a", "c", "c"]


async def test_a_restart_after_the_request_was_applied_still_launches_in_its_zone() -> None:
    # The target was written and the request answered, then the operator stopped before
    # any VM was made: the new one reads the request from the world and follows it.
    world = World()
    template = nodepool_api.NodeTemplate(zones=("a", "b", "c"))
    world.pool("p", nodepool_api.NodePoolSpec(target_nodes=1, template=template))
    answered = world.request("up", pool="p", target=1, zones={"c": 1})
    answered["status"] = {"phase": "Applied", "appliedTargetNodes": 1, "observedGeneration": 1}
    world.requests.put(answered)

    await world.reconcile("p")

    assert [(name, spec.zone) for name, spec in world.cloud.created] == [("p-0", "c")]


async def test_a_zone_the_template_does_not_list_is_ignored_for_a_balanced_one() -> None:
    world = World()
    template = nodepool_api.NodeTemplate(zones=("a", "b"))
    world.pool("p", nodepool_api.NodePoolSpec(target_nodes=0, template=template))
    world.request("up", pool="p", target=1, zones={"elsewhere": 1})

    await world.reconcile("p")

    assert [spec.zone for _, spec in world.cloud.created] == ["a"]


async def test_a_request_the_server_shows_answered_is_not_answered_again() -> None:
    """Our answer was written but its reply lost: the cache still shows the request
    Pending and nothing is remembered; the server's copy says it is answered."""
    world = World()
    world.pool("p", nodepool_api.NodePoolSpec(target_nodes=2, max_nodes=5))
    request = world.request("r", pool="p", target=0, based_on=2)
    answered = copy.deepcopy(request)
    answered["status"] = {"phase": "Superseded", "message": "based on another target"}
    world.api.hold("scalerequests", answered)

    await world.reconcile("p")

    assert world.target_of("p") == 2
    assert ("replace", "nodepools", "p") not in world.api.calls
    assert [n for n, _ in world.api.status_patches if n == "r"] == []


async def test_after_the_first_pass_a_request_is_answered_from_the_cache_without_a_get() -> None:
    """Only a previous run, or a write of ours whose outcome was not seen, can have
    answered a request behind the cache's back: once the pool's requests were read from
    the server since the start, the next request is answered as the cache shows it."""
    world = World()
    world.pool("p", nodepool_api.NodePoolSpec(target_nodes=0, max_nodes=5))
    world.request("first", pool="p", target=1, based_on=0)
    await world.reconcile("p")
    assert ("get", "scalerequests", "first") in world.api.calls
    world.requests.put(world.api.objects[("scalerequests", "first")])
    world.pools.put(world.api.objects[("nodepools", "p")])

    world.request("second", pool="p", target=2, based_on=1)
    await world.reconcile("p")

    assert world.target_of("p") == 2
    assert world.api.request_status("second")["phase"] == "Applied"
    assert ("get", "scalerequests", "second") not in world.api.calls


async def test_a_request_whose_answer_write_failed_is_read_from_the_server_before_the_next() -> (
    None
):
    """The answer's write failed without a clear outcome, and was applied all the same:
    the cache still shows the request Pending, the server shows it answered, and the
    request is not answered a second time."""
    world = World()
    world.pool("p", nodepool_api.NodePoolSpec(target_nodes=0, max_nodes=5))
    world.request("first", pool="p", target=1, based_on=0)
    await world.reconcile("p")
    world.requests.put(world.api.objects[("scalerequests", "first")])
    world.pools.put(world.api.objects[("nodepools", "p")])
    second = world.request("second", pool="p", target=2, based_on=1)
    applied_but_unseen = copy.deepcopy(second)
    applied_but_unseen["status"] = {"phase": "Applied", "appliedTargetNodes": 2}
    original_patch = world.api.patch

    async def patch_then_time_out(resource: Resource, name: str, patch: Any, **kw: Any) -> Object:
        if name == "second" and kw.get("subresource") == "status":
            world.api.hold("scalerequests", applied_but_unseen)
            raise TimeoutError("the reply was lost")
        return await original_patch(resource, name, patch, **kw)

    world.api.patch = patch_then_time_out  # type: ignore[method-assign]
    with pytest.raises(TimeoutError):
        await world.reconcile("p")
    world.api.patch = original_patch  # type: ignore[method-assign]
    world.pools.put(world.api.objects[("nodepools", "p")])
    world.api.calls.clear()
    world.api.status_patches.clear()

    await world.reconcile("p")

    assert ("get", "scalerequests", "second") in world.api.calls
    assert [n for n, _ in world.api.status_patches if n == "second"] == []


def test_a_request_naming_zones_outlives_the_retention_until_its_vms_could_register() -> None:
    """Its zones are where both controllers learn the zones of VMs still booting: deleted
    after the plain 60 s, a VM slower than that would be predicted in another zone. So is
    one whose Nodes wait for nominations: it is the record that they wait."""
    created = datetime.datetime(2027, 1, 15, 8, 0, tzinfo=datetime.UTC)

    def finished(name: str, zones: dict[str, int], wait: int | None = None) -> Object:
        spec = scalerequest_api.ScaleRequestSpec(
            node_pool_name="p", target_nodes=1, new_node_zones=zones, await_nominations_seconds=wait
        )
        body = scalerequest_api.manifest(name, spec, pool_uid="uid-p")
        body["metadata"]["creationTimestamp"] = created.isoformat().replace("+00:00", "Z")
        body["status"] = {"phase": "Applied", "appliedTargetNodes": 1}
        return body

    requests = [finished("plain", {}), finished("zoned", {"b": 1}), finished("waits", {}, 20)]
    later = created + datetime.timedelta(seconds=120)
    expired, next_expiry = request_facts.expired_requests(
        requests, now=later, retention=60, zoned_retention=660
    )
    assert [r["metadata"]["name"] for r in expired] == ["plain"]
    assert next_expiry == 540
    expired, _ = request_facts.expired_requests(
        requests, now=created + datetime.timedelta(seconds=660), retention=60, zoned_retention=660
    )
    assert [r["metadata"]["name"] for r in expired] == ["plain", "zoned", "waits"]


def test_a_request_whose_nodes_waited_goes_after_the_plain_retention_once_none_can_wait() -> None:
    """Kept a registration timeout longer only as the record that its Nodes wait: once no
    Node of the pool waits or can come to, it goes after the plain retention, so its
    deletion does not come long after the pool went quiet. One naming zones is kept all
    the same (both controllers still read its zones)."""
    created = datetime.datetime(2027, 1, 15, 8, 0, tzinfo=datetime.UTC)

    def finished(name: str, zones: dict[str, int]) -> Object:
        spec = scalerequest_api.ScaleRequestSpec(
            node_pool_name="p", target_nodes=1, new_node_zones=zones, await_nominations_seconds=20
        )
        body = scalerequest_api.manifest(name, spec, pool_uid="uid-p")
        body["metadata"]["creationTimestamp"] = created.isoformat().replace("+00:00", "Z")
        body["status"] = {"phase": "Applied", "appliedTargetNodes": 1}
        return body

    requests = [finished("waits", {}), finished("zoned", {"b": 1})]
    later = created + datetime.timedelta(seconds=120)
    for settled, gone in ((False, []), (True, ["waits"])):
        expired, _ = request_facts.expired_requests(
            requests, now=later, retention=60, zoned_retention=660, nominations_settled=settled
        )
        assert [r["metadata"]["name"] for r in expired] == gone


def _vm(name: str) -> VirtualMachine:
    return VirtualMachine(
        name=name,
        pool="p",
        cpu=4,
        memory="16Gi",
        state=VmState.RUNNING,
        provider_id=name,
        created_at=0.0,
    )


def _registered(name: str, *, tainted: bool = False) -> Object:
    taints = [{"key": wellknown.UNREGISTERED_TAINT_KEY, "effect": "NoSchedule"}]
    return {"metadata": {"name": name}, "spec": {"taints": taints if tainted else []}}


def test_no_node_can_wait_once_every_wanted_vm_has_its_node_untainted() -> None:
    settled = request_facts.nominations_settled
    vms = [_vm("p-0"), _vm("p-1")]
    both = {"p-0": _registered("p-0"), "p-1": _registered("p-1")}
    assert settled(vms, both, desired=2)
    assert settled([], {}, desired=0)
    # A VM still to launch, a VM without its Node, a Node still tainted: one may wait.
    assert not settled(vms, both, desired=3)
    assert not settled(vms, {"p-0": both["p-0"]}, desired=2)
    assert not settled(vms, {**both, "p-1": _registered("p-1", tainted=True)}, desired=2)


def _pool_after_a_request_that_waited(target: int) -> World:
    """A pool at ``target`` and its finished request of two minutes ago, which asked its
    Nodes to wait for nominations (past the plain retention, within the long one)."""
    world = World()
    world.pool("p", nodepool_api.NodePoolSpec(target_nodes=target))
    waited = world.request("waited", pool="p", target=target, created="2027-01-15T07:58:00Z")
    waited["spec"]["awaitNominationsSeconds"] = 20
    waited["status"] = {"phase": "Applied", "appliedTargetNodes": target}
    world.requests.put(waited)
    return world


async def test_the_reconciler_deletes_a_request_whose_nodes_waited_once_the_pool_settled() -> None:
    world = _pool_after_a_request_that_waited(0)

    await world.reconcile("p")

    assert ("delete", "scalerequests", "waited") in world.api.calls


async def test_the_reconciler_keeps_a_request_whose_nodes_may_still_wait() -> None:
    world = _pool_after_a_request_that_waited(1)

    await world.reconcile("p")  # its VM is launched, its Node not registered yet

    assert world.cloud.created
    assert ("delete", "scalerequests", "waited") not in world.api.calls


def test_a_finished_request_without_a_readable_creation_time_is_kept_not_a_crash() -> None:
    spec = scalerequest_api.ScaleRequestSpec(node_pool_name="p", target_nodes=1)
    body = scalerequest_api.manifest("odd", spec, pool_uid="uid-p")
    body["metadata"]["creationTimestamp"] = "yesterday"
    body["status"] = {"phase": "Applied", "appliedTargetNodes": 1}
    now = datetime.datetime(2027, 1, 15, 8, 0, tzinfo=datetime.UTC)
    expired, next_expiry = request_facts.expired_requests([body], now=now, retention=60)
    assert (expired, next_expiry) == ([], None)
