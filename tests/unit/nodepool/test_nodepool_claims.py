"""A finished request's zone claims steer no later launch: once Nodes made since it hold
every zone it asked for, the NodePool controller marks it ``status.zonesServed``, and its
claims count no more, even when one of those Nodes goes while the request is still kept
(a finished request naming zones is kept the registration timeout longer)."""

from __future__ import annotations

from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import wellknown
from nodepool_operator.api import zones as zones_api
from nodepool_operator.controllers.nodepool import answering, request_facts
from nodepool_operator.runtime import testing
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.events import EventRecorder
from unit.nodepool import requests_world

NOW = requests_world.NOW
EARLIER = "2027-01-15T07:59:00Z"  # a minute before the requests below
LATER = "2027-01-15T08:00:30Z"  # half a minute after


def applied(obj: Object, **status: Any) -> Object:
    obj["status"] = {"phase": "Applied", "observedGeneration": 1, **status}
    return obj


def node_in(name: str, zone: str, *, created: str) -> Object:
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": created,
            "labels": {wellknown.POOL_LABEL: "p", wellknown.ZONE_LABEL: zone},
        }
    }


async def test_a_served_requests_zone_no_longer_draws_the_next_launch() -> None:
    # The request asked for one node in b and got it; that node has gone since (scaled
    # down), the request is still kept. The pool's next VM goes where the pool is
    # emptiest (a, first in the template), not to b for a request that is done.
    world = requests_world.World()
    template = nodepool_api.NodeTemplate(zones=("a", "b"))
    world.pool("p", nodepool_api.NodePoolSpec(target_nodes=1, template=template))
    done = world.request("up", pool="p", target=1, zones={"b": 1})
    world.requests.put(applied(done, appliedTargetNodes=1, zonesServed=True))

    await world.reconcile("p")

    assert [(name, spec.zone) for name, spec in world.cloud.created] == [("p-0", "a")]


async def test_a_request_still_unserved_keeps_drawing_its_zone() -> None:
    world = requests_world.World()
    template = nodepool_api.NodeTemplate(zones=("a", "b"))
    world.pool("p", nodepool_api.NodePoolSpec(target_nodes=1, template=template))
    answered = world.request("up", pool="p", target=1, zones={"b": 1})
    world.requests.put(applied(answered, appliedTargetNodes=1))

    await world.reconcile("p")

    assert [(name, spec.zone) for name, spec in world.cloud.created] == [("p-0", "b")]


def test_a_request_is_served_by_nodes_made_since_in_every_zone_it_named() -> None:
    world = requests_world.World()
    whole = applied(world.request("whole", pool="p", target=3, zones={"b": 1, "c": 1}))
    half = applied(world.request("half", pool="p", target=5, zones={"c": 2}))
    pending = world.request("pending", pool="p", target=6, zones={"a": 1})
    nodes = [
        node_in("p-0", "b", created=LATER),
        node_in("p-1", "c", created=LATER),
        node_in("p-2", "c", created=LATER),  # one of the two "half" asked for
        node_in("p-3", "a", created=LATER),  # "pending" is not answered: not marked
        node_in("p-4", "c", created=EARLIER),  # older than every request: serves none
    ]

    assert request_facts.zones_served([whole, half, pending], nodes) == [whole]


def test_a_marked_request_is_not_marked_again_and_claims_nothing() -> None:
    world = requests_world.World()
    marked = applied(world.request("up", pool="p", target=1, zones={"b": 1}), zonesServed=True)

    assert zones_api.claims_of([marked]) == []
    assert request_facts.zones_served([marked], [node_in("p-0", "b", created=LATER)]) == []


async def test_the_mark_is_written_once_to_the_requests_status() -> None:
    api = testing.FakeApiServer(wall_clock=testing.FakeWallClock(NOW))
    recorder = EventRecorder(
        api,  # type: ignore[arg-type]
        component="nodepool-controller",
        wall_clock=testing.FakeWallClock(NOW),
    )
    answers = answering.RequestAnswers(
        client=api,  # type: ignore[arg-type]
        scale_requests=testing.FakeInformer({}),  # type: ignore[arg-type]
        retention=60.0,
        controller="nodepool-controller",
        recorder=recorder,
        wall_clock=testing.FakeWallClock(NOW),
    )
    world = requests_world.World()
    request = applied(world.request("up", pool="p", target=1, zones={"b": 1}))
    stored = await api.create(answering.SCALEREQUESTS, request)
    nodes = [node_in("p-0", "b", created=LATER)]

    await answers.mark_zones_served([stored], nodes)
    await answers.mark_zones_served([stored], nodes)  # the cache has not caught up yet

    found = api.objects[("scalerequests", "up")]
    assert found["status"]["zonesServed"] is True
    assert found["status"]["phase"] == "Applied"
    assert [c for c in api.calls if c[0] == "patch"] == [("patch", "scalerequests", "up")]
