"""The Nodes a pool registers, on the real API server: every resource, zones, region."""

from __future__ import annotations

from e2e.scenes import World
from harness import POOLS, settled, wait_for
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import quantity, wellknown


def _amounts(resources: dict[str, str]) -> dict[str, int]:
    return {
        name: quantity.parse_cpu_millicores(text)
        if name == "cpu"
        else int(quantity.parse_quantity(text))
        for name, text in resources.items()
    }


async def test_nodes_carry_the_template_resources_zone_region_and_hostname(world: World) -> None:
    cloud, operator = await world.operated(latency=0.5)
    template = nodepool_api.NodeTemplate(
        cpu="4",
        memory="16Gi",
        pods=110,
        ephemeral_storage="100Gi",
        extended_resources={"example.com/gpu": "2"},
        reserved={"cpu": "500m", "memory": "1Gi", "pods": "10", "example.com/gpu": "1"},
        zones=("zone-a", "zone-b"),
        region="region-1",
    )
    spec = nodepool_api.NodePoolSpec(target_nodes=3, weight=10, template=template)
    await world.custom.create_cluster_custom_object(*POOLS, nodepool_api.manifest(world.pool, spec))
    await wait_for(lambda: settled(world.custom, world.pool, 3), within=60)

    found = await world.core.list_node(label_selector=wellknown.pool_selector(world.pool))
    nodes = {n.metadata.name: n for n in found.items}
    assert sorted(nodes) == [f"{world.pool}-{i}" for i in range(3)]
    for name, node in nodes.items():
        zone = node.metadata.labels[wellknown.ZONE_LABEL]  # the VM's, checked below
        expected = {
            **nodepool_api.node_labels(world.pool, template, zone=zone),
            wellknown.HOSTNAME_LABEL: name,
        }
        # The API server adds the deprecated beta.kubernetes.io labels of its own.
        assert node.metadata.labels.items() >= expected.items()
        assert _amounts(node.status.capacity) == nodepool_api.template_capacity(template)
        assert _amounts(node.status.allocatable) == nodepool_api.template_allocatable(template)
    zones = [nodes[f"{world.pool}-{i}"].metadata.labels[wellknown.ZONE_LABEL] for i in range(3)]
    assert zones == ["zone-a", "zone-b", "zone-a"]  # the least-filled zone each time

    assert cloud.client is not None
    vms = await cloud.client.list_vms(pool=world.pool)
    assert {vm.name: vm.zone for vm in vms} == {
        name: node.metadata.labels[wellknown.ZONE_LABEL] for name, node in nodes.items()
    }
    assert operator.errors_logged() == []
