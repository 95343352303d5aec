"""The nominations contract, the NodePool controller's side: a Node a scale-up asked to
hold keeps the unregistered taint after its kubelet reported, until the Autoscaler marks
it nominated or the wait, counted from the Node turning Ready, runs out.

``reported`` Nodes turned Ready at CREATED + 5; the requests ask for 20 s."""

from __future__ import annotations

import copy
import math
from typing import Any

from nodepool_operator.api import nominations, scalerequest, wellknown
from nodepool_operator.controllers.nodepool import nodes, plan
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.controllers.nodepool.registration import Registrar
from nodepool_operator.runtime import conditions
from nodepool_operator.runtime import nodes as k8s_nodes
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.testing import FakeApiServer, FakeWallClock
from unit.nodepool.web_pool import CREATED, created, reported, vm


def request(*, made: float = CREATED, wait: int | None = 20) -> Object:
    spec = scalerequest.ScaleRequestSpec(
        node_pool_name="web", target_nodes=2, await_nominations_seconds=wait
    )
    body = scalerequest.manifest("web-up", spec)
    body["metadata"]["creationTimestamp"] = conditions.rfc3339(made)
    return body


def nominated(node: Object) -> Object:
    node = copy.deepcopy(node)
    node["metadata"].setdefault("annotations", {})[wellknown.NOMINATED_ANNOTATION] = (
        conditions.rfc3339(CREATED + 3)
    )
    return node


READY = CREATED + 5  # when ``reported`` Nodes turned Ready
REGISTRATION = 600.0  # the pool's registrationTimeoutSeconds


def test_a_ready_node_made_for_a_request_that_waits_is_held_until_ready_plus_the_wait() -> None:
    assert nominations.held_until(reported(created()), [request()]) == READY + 20


def test_a_node_not_ready_yet_is_held_with_no_end_of_its_own() -> None:
    assert nominations.held_until(created(), [request()]) == math.inf


def test_the_longest_wait_of_the_pools_requests_made_before_the_node_counts() -> None:
    requests = [request(wait=5), request(made=CREATED - 30, wait=40), request(wait=None)]
    assert nominations.held_until(reported(created()), requests) == READY + 40


def test_a_request_made_after_the_node_does_not_hold_it() -> None:
    assert nominations.held_until(created(), [request(made=CREATED + 1)]) is None


def test_no_wait_asked_no_hold() -> None:
    assert nominations.held_until(created(), [request(wait=None)]) is None
    assert nominations.held_until(created(), [request(wait=0)]) is None
    assert nominations.held_until(created(), []) is None


def test_a_nominated_an_untainted_or_a_deleted_node_is_not_held() -> None:
    untainted = created()
    untainted["spec"]["taints"] = []
    deleted = created()
    deleted["metadata"]["deletionTimestamp"] = conditions.rfc3339(CREATED + 1)
    for node in (nominated(created()), untainted, deleted):
        assert nominations.held_until(node, [request()]) is None


def test_the_crd_bounds_the_wait() -> None:
    schema = scalerequest.SPEC_SCHEMA["properties"]["awaitNominationsSeconds"]
    assert (schema["minimum"], schema["maximum"]) == (0, 300)
    assert scalerequest.spec_of(request()).to_dict()["awaitNominationsSeconds"] == 20


def _holds(found: dict[str, Object], *, now: float, registration: float = REGISTRATION) -> Any:
    return nominations.holds(
        found,
        [request()],
        now=now,
        is_ready=k8s_nodes.is_ready,
        registration_seconds=registration,
    )


def test_no_node_is_held_past_half_its_registration_timeout() -> None:
    node = reported(created("web-0"))
    assert _holds({"web-0": node}, now=CREATED + 6, registration=20) == {"web-0": CREATED + 10}
    assert _holds({"web-0": node}, now=CREATED + 10, registration=20) == {}


def test_a_nominated_node_never_waits_for_the_others_past_its_own_wait() -> None:
    # web-1 turned Ready later than web-0: web-0 waits for its mark, but not past its own.
    late = reported(created("web-1"), heartbeat=CREATED + 15)
    found = {"web-0": nominated(reported(created("web-0"))), "web-1": late}
    assert _holds(found, now=CREATED + 6) == {"web-0": READY + 20, "web-1": CREATED + 35}
    assert _holds(found, now=READY + 20) == {"web-1": CREATED + 35}


def _registrar(api: FakeApiServer, *, now: float) -> Registrar:
    return Registrar(client=api, nodes=None, config=NodePoolConfig(), wall_clock=FakeWallClock(now))


def _view(api: FakeApiServer, *found: Object) -> plan.PoolView:
    for node in found:
        api.put("nodes", node)
    by_name: dict[str, Any] = {n["metadata"]["name"]: n for n in found}
    return plan.PoolView(vms=[vm(n) for n in by_name], nodes=by_name, pods_per_node={})


async def _initialise(api: FakeApiServer, view: plan.PoolView, *, now: float) -> float | None:
    return await _registrar(api, now=now).initialise(
        view, pool="web", requests=[request()], registration_seconds=REGISTRATION
    )


def _still_tainted(api: FakeApiServer) -> list[str]:
    return [n["metadata"]["name"] for n in api.stored("nodes") if nodes.is_unregistered(n)]


async def test_a_held_node_keeps_the_taint_and_the_pass_looks_again_when_the_wait_ends() -> None:
    api = FakeApiServer()
    view = _view(api, reported(created("web-0")), reported(created("web-1")))
    assert await _initialise(api, view, now=CREATED + 6) == 19  # READY + 20, from CREATED + 6
    assert api.writes() == []
    assert _still_tainted(api) == ["web-0", "web-1"]


async def test_the_nodes_one_batch_nominated_are_released_together() -> None:
    api = FakeApiServer()
    # web-1's mark is not in the cache yet: web-0 waits for it, so neither turns alone.
    view = _view(api, nominated(reported(created("web-0"))), reported(created("web-1")))
    assert await _initialise(api, view, now=CREATED + 6) == 19
    assert api.writes() == []
    view = _view(api, nominated(reported(created("web-0"))), nominated(reported(created("web-1"))))
    assert await _initialise(api, view, now=CREATED + 6) is None
    assert _still_tainted(api) == []


async def test_a_node_made_after_the_mark_does_not_hold_the_nominated_ones() -> None:
    later = reported(created("web-1"))
    later["metadata"]["creationTimestamp"] = conditions.rfc3339(CREATED + 4)
    api = FakeApiServer()
    view = _view(api, nominated(reported(created("web-0"))), later)
    assert await _initialise(api, view, now=CREATED + 6) == 19  # web-1's own wait
    assert _still_tainted(api) == ["web-1"]


async def test_a_node_not_ready_yet_does_not_hold_the_nominated_ones() -> None:
    api = FakeApiServer()
    # web-1's kubelet has not reported: the Autoscaler released web-0 without it.
    view = _view(api, nominated(reported(created("web-0"))), created("web-1"))
    # web-1 waits for its Ready, never past half its registration timeout (CREATED + 300).
    assert await _initialise(api, view, now=CREATED + 6) == 294
    assert _still_tainted(api) == ["web-1"]


async def test_once_the_wait_has_run_out_the_taint_goes_without_nominations() -> None:
    api = FakeApiServer()
    view = _view(api, reported(created("web-0")))
    assert await _initialise(api, view, now=READY + 20) is None
    assert _still_tainted(api) == []


async def test_without_a_request_that_waits_the_taint_goes_as_soon_as_the_kubelet_reports() -> None:
    api = FakeApiServer()
    view = _view(api, reported(created("web-0")))
    again = await _registrar(api, now=CREATED + 6).initialise(
        view, pool="web", requests=[request(wait=None)]
    )
    assert again is None
    assert _still_tainted(api) == []
