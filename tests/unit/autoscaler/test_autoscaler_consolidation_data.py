"""The consolidation proof judges volumes as scale-up does: a pod moves only where its
volume can follow, and a pod nominated to a node (preemption) holds its room there. The
planner and the Consolidator wired as in setup(), on fakes."""

from __future__ import annotations

from typing import Any

from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import wellknown
from nodepool_operator.controllers import cached
from nodepool_operator.controllers.autoscaler.snapshot import volumes
from nodepool_operator.runtime.client import Object
from unit.autoscaler.planning_world import node as observe_node
from unit.autoscaler.planning_world import observe, observer
from unit.autoscaler.planning_world import pod as observe_pod
from unit.autoscaler.reconcile_world import (
    REPLICATED,
    World,
    stamp,
    taints,
)

STATEFUL = [{"kind": "StatefulSet", "name": "db", "uid": "sts", "controller": True}]
LOCAL = "local"  # a class of hand-made local volumes, bound when a pod is scheduled
ZONE = wellknown.ZONE_LABEL


def local_class() -> Object:
    return {
        "metadata": {"name": LOCAL, "resourceVersion": "1"},
        "provisioner": volumes.NO_PROVISIONER,
        "volumeBindingMode": "WaitForFirstConsumer",
    }


def bound_pair(
    world: World,
    *,
    claim: str,
    volume: str,
    node_affinity: tuple[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> None:
    """A claim of the local class bound to ``volume``: its node affinity ``(key, value)``,
    its topology ``labels``."""
    spec: dict[str, Any] = {
        "capacity": {"storage": "10Gi"},
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": LOCAL,
        "claimRef": {"namespace": "apps", "name": claim},
    }
    if node_affinity is not None:
        key, value = node_affinity
        expression = {"key": key, "operator": "In", "values": [value]}
        spec["nodeAffinity"] = {
            "required": {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}
        }
    world.volumes.put(
        cached.volume_fields(
            {
                "metadata": {"name": volume, "labels": labels or {}, "resourceVersion": "1"},
                "spec": spec,
                "status": {"phase": "Bound"},
            }
        )
    )
    world.claims.put(
        cached.claim_fields(
            {
                "metadata": {
                    "name": claim,
                    "namespace": "apps",
                    "resourceVersion": "1",
                    "annotations": {cached.BIND_COMPLETED_ANNOTATION: "yes"},
                },
                "spec": {
                    "storageClassName": LOCAL,
                    "volumeName": volume,
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                },
                "status": {"phase": "Bound"},
            }
        )
    )
    world.classes.put(local_class())


def on_claim(world: World, name: str, *, node: str, claim: str) -> None:
    """A StatefulSet's pod of one cpu on ``node``, its data on ``claim``."""
    pod = world.pod(name, node=node, ownerReferences=STATEFUL)
    pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    world.pods.put(pod)


def zonal_node(world: World, name: str, zone: str | None) -> None:
    """A Node of the pool, in ``zone`` (none: a Node without topology labels)."""
    world.node(name)
    if zone is not None:
        node = world.nodes.get(name)
        assert node is not None
        node["metadata"]["labels"][ZONE] = zone
        world.nodes.put(node)


def neighbour_with_room(world: World, *, zone: str | None = None) -> None:
    """n1, half used by two replicas (not underused): room for two cpus."""
    world.autoscaler(scale_down=autoscaler_api.ScaleDownPolicy(unneeded_seconds=60))
    world.pool(target=2)
    zonal_node(world, "n1", zone)
    for name in ("a", "b"):
        world.pod(name, node="n1", ownerReferences=REPLICATED)


async def past_the_delay(world: World) -> None:
    """Two passes, the unneeded time apart: a node chosen in the first is tainted in the
    second."""
    await world.reconcile()
    await world.clock.advance(60)
    await world.reconcile()
    await world.reconcile()


def kept_messages(world: World) -> list[str]:
    return [e["message"] for e in world.api.events("ConsolidationKept")]


async def test_a_pod_on_a_local_volume_keeps_its_node_told_by_claim_and_volume() -> None:
    world = World()
    neighbour_with_room(world)
    world.node("n2")
    bound_pair(
        world,
        claim="data-db-0",
        volume="local-n2",
        node_affinity=(wellknown.HOSTNAME_LABEL, "n2"),
    )
    on_claim(world, "db-0", node="n2", claim="data-db-0")

    await past_the_delay(world)

    assert (stamp(world, "n2"), taints(world, "n2")) == (None, [])
    assert world.api.made("scalerequests") == []
    expected = (
        "node n2 stays although underused: pod apps/db-0 fits on no other node: 1 node: "
        'persistentvolumeclaim "data-db-0" is bound to persistentvolume "local-n2", whose '
        "node affinity does not match (no-room)"
    )
    assert kept_messages(world) == [expected, expected]  # on the Node and the Autoscaler


async def test_a_pod_on_a_zonal_volume_moves_only_within_its_zone() -> None:
    world = World()
    neighbour_with_room(world, zone="zone-a")
    zonal_node(world, "n2", "zone-b")
    bound_pair(world, claim="data-db-0", volume="disk-b", labels={ZONE: "zone-b"})
    on_claim(world, "db-0", node="n2", claim="data-db-0")

    await past_the_delay(world)

    assert (stamp(world, "n2"), taints(world, "n2")) == (None, [])
    [told, _] = kept_messages(world)
    assert told == (
        "node n2 stays although underused: pod apps/db-0 fits on no other node: 1 node: "
        'persistentvolumeclaim "data-db-0" is bound to persistentvolume "disk-b", which is '
        "in topology.kubernetes.io/zone zone-b (no-room)"
    )

    # Room in its own zone: the same pod may move there, and its node goes.
    world.pool(target=3)
    zonal_node(world, "n3", "zone-b")
    world.pod("c", node="n3", cpu="2", ownerReferences=REPLICATED)  # half used: stays
    await past_the_delay(world)
    assert taints(world, "n2") == [wellknown.CONSOLIDATING_TAINT_KEY]
    [request] = world.api.made("scalerequests")
    assert request["spec"]["removeNodes"] == ["n2"]


async def test_a_zonal_volume_by_node_affinity_is_judged_as_its_labels_are() -> None:
    world = World()
    neighbour_with_room(world, zone="zone-a")
    zonal_node(world, "n2", "zone-b")
    bound_pair(world, claim="data-db-0", volume="disk-b", node_affinity=(ZONE, "zone-b"))
    on_claim(world, "db-0", node="n2", claim="data-db-0")

    await past_the_delay(world)

    assert (stamp(world, "n2"), taints(world, "n2")) == (None, [])
    [told, _] = kept_messages(world)
    assert 'persistentvolume "disk-b", whose node affinity does not match' in told


def nominated(world: World, name: str, *, node: str, cpu: str, namespace: str) -> None:
    """A pending pod preemption is making room for on ``node``."""
    pod = world.pod(name, cpu=cpu, namespace=namespace)
    pod["status"]["nominatedNodeName"] = node
    world.pods.put(pod)


async def test_room_held_for_a_nominated_pod_is_no_room_for_a_candidates_pods() -> None:
    world = World()
    neighbour_with_room(world)
    world.node("n2")
    world.pod("c", node="n2", ownerReferences=REPLICATED)
    # Of a namespace the Autoscaler does not watch: its room is held all the same.
    nominated(world, "preemptor", node="n1", cpu="2", namespace="batch")

    await past_the_delay(world)

    assert (stamp(world, "n2"), taints(world, "n2")) == (None, [])
    [told, _] = kept_messages(world)
    assert told == (
        "node n2 stays although underused: pod apps/c fits on no other node: "
        "1 node: not enough free cpu (no-room)"
    )


async def test_a_nominated_pod_of_any_namespace_holds_its_room_in_the_scale_up_plan() -> None:
    world = World()
    world.autoscaler(namespaces=("apps",))
    world.pool(target=1)
    world.node("n1")
    nominated(world, "preemptor", node="n1", cpu="3", namespace="batch")
    world.pod("web", cpu="2")  # the scheduler found no room for it: held for the preemptor

    await world.reconcile()

    [request] = world.api.made("scalerequests")
    assert request["spec"]["targetNodes"] == 2
    assert [e["involvedObject"]["name"] for e in world.api.events("TriggeredScaleUp")] == ["web"]


async def test_a_nominated_pod_is_planned_no_node_and_a_node_gone_holds_nothing() -> None:
    world = World()
    world.autoscaler()
    world.pool(target=1)
    world.node("n1")
    nominated(world, "preemptor", node="n1", cpu="3", namespace="apps")
    nominated(world, "orphan", node="gone", cpu="3", namespace="apps")
    world.pod("web", cpu="1")  # fits beside the preemptor: no node for anyone

    await world.reconcile()

    assert world.api.made("scalerequests") == []
    assert world.api.events("TriggeredScaleUp") == []


async def test_a_node_preemption_is_making_room_on_is_not_unneeded() -> None:
    preemptor = observe_pod("preemptor", namespace="batch")
    preemptor["status"]["nominatedNodeName"] = "n2"
    seen = await observe(observer(nodes=[observe_node("n1"), observe_node("n2")], pods=[preemptor]))
    assert seen.unneeded == ("n1",)
