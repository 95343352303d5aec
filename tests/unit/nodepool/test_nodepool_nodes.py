"""The Node a RUNNING VM is registered as: resources, zone and labels from the template."""

from __future__ import annotations

import dataclasses
from typing import Any

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.api import quantity, wellknown
from nodepool_operator.cloud.provider import VirtualMachine
from nodepool_operator.cloud.testing import virtual_machine
from nodepool_operator.controllers.nodepool import launch, nodes

POOL: dict[str, Any] = {"metadata": {"name": "gpu", "uid": "uid-gpu"}}


def vm(name: str, *, zone: str = "whatever-the-cloud-says") -> VirtualMachine:
    return virtual_machine(name, pool="gpu", cpu="8", memory="32Gi", zone=zone)


TEMPLATE = nodepool_api.NodeTemplate(
    cpu="8",
    memory="32Gi",
    pods=58,
    ephemeral_storage="100Gi",
    extended_resources={"example.com/gpu": "4"},
    reserved={"cpu": "500m", "memory": "1Gi", "pods": "8", "example.com/gpu": "1"},
    zones=("eu-1a", "eu-1b", "eu-1c"),
    region="eu-1",
    labels={"accelerator": "a100"},
    taints=(nodepool_api.Taint(key="gpu", effect="NoSchedule"),),
)


def _amounts(resources: dict[str, str]) -> dict[str, int]:
    # Parsed back as a reader of the Node would: the text is a quantity of each resource.
    return {
        name: quantity.parse_cpu_millicores(text)
        if name == "cpu"
        else int(quantity.parse_quantity(text))
        for name, text in resources.items()
    }


def test_a_node_has_every_resource_of_the_template_as_capacity_and_allocatable() -> None:
    node = nodes.node_manifest(pool=POOL, vm=vm("gpu-4"), template=TEMPLATE, simulated=True)

    status = node["status"]
    assert _amounts(status["capacity"]) == nodepool_api.template_capacity(TEMPLATE)
    assert _amounts(status["allocatable"]) == nodepool_api.template_allocatable(TEMPLATE)
    assert status["allocatable"] == {
        "cpu": "7500m",
        "memory": str(31 * 1024**3),
        "pods": "50",
        "ephemeral-storage": str(100 * 1024**3),
        "example.com/gpu": "3",
    }


def test_a_node_is_labelled_with_its_vms_zone_region_hostname_and_pool() -> None:
    node = nodes.node_manifest(
        pool=POOL, vm=vm("gpu-4", zone="eu-1c"), template=TEMPLATE, simulated=True
    )

    labels = node["metadata"]["labels"]
    assert labels == {
        **nodepool_api.node_labels("gpu", TEMPLATE, zone="eu-1c"),
        wellknown.HOSTNAME_LABEL: "gpu-4",
    }
    assert labels[wellknown.ZONE_LABEL] == "eu-1c"  # the cloud's record, not the name
    assert labels[wellknown.REGION_LABEL] == "eu-1"
    assert labels[wellknown.POOL_LABEL] == "gpu"
    assert labels["accelerator"] == "a100"


def test_a_template_without_zones_gives_nodes_without_a_zone_label() -> None:
    template = nodepool_api.NodeTemplate()
    node = nodes.node_manifest(pool=POOL, vm=vm("gpu-0"), template=template, simulated=False)

    labels = node["metadata"]["labels"]
    assert wellknown.ZONE_LABEL not in labels
    assert wellknown.REGION_LABEL not in labels
    assert labels[wellknown.HOSTNAME_LABEL] == "gpu-0"
    assert node["status"]["capacity"] == {
        "cpu": "4000m",
        "memory": str(16 * 1024**3),
        "pods": "110",
    }
    assert node["status"]["allocatable"] == node["status"]["capacity"]
    assert node["metadata"]["annotations"] == {}


def test_a_node_starts_with_the_startup_taints_after_the_template_taints() -> None:
    agent = nodepool_api.Taint(key="example.com/agent-not-ready", effect="NoExecute")
    template = dataclasses.replace(TEMPLATE, startup_taints=(agent,))
    node = nodes.node_manifest(pool=POOL, vm=vm("gpu-1"), template=template, simulated=True)

    assert node["spec"]["taints"] == [
        {"key": "gpu", "effect": "NoSchedule"},
        {"key": "example.com/agent-not-ready", "effect": "NoExecute"},
    ]


def test_a_node_carries_the_template_taints_and_is_owned_by_the_pool() -> None:
    node = nodes.node_manifest(pool=POOL, vm=vm("gpu-1"), template=TEMPLATE, simulated=True)

    assert node["spec"] == {
        "providerID": "simcloud:///gpu-1",
        "taints": [{"key": "gpu", "effect": "NoSchedule"}],
    }
    [owner] = node["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("NodePool", "gpu", "uid-gpu")


def test_the_launch_tells_the_kubelet_the_labels_it_may_set_and_every_registration_taint() -> None:
    template = nodepool_api.NodeTemplate(
        cpu="1",
        memory="4Gi",
        pods=30,
        zones=("sim-1a",),
        labels={"team": "blue", "node-role.kubernetes.io/worker": "", "example.k8s.io/x": "1"},
        taints=(nodepool_api.Taint(key="gpu", value="yes", effect="NoExecute"),),
        startup_taints=(nodepool_api.Taint(key="cni", effect="NoSchedule"),),
    )

    labels, taints = nodes.kubelet_flags("web", template, zone="sim-1a")

    # A kubelet refuses to start with kubernetes.io or k8s.io labels outside its own set:
    # those the operator puts on when it adopts the Node.
    assert dict(labels) == {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "team": "blue",
        wellknown.POOL_LABEL: "web",
        "topology.kubernetes.io/zone": "sim-1a",
    }
    assert taints == (
        "gpu=yes:NoExecute",
        "cni:NoSchedule",
        f"{wellknown.UNREGISTERED_TAINT_KEY}:NoSchedule",
    )


def test_a_machine_spec_carries_the_kubelets_user_data() -> None:
    template = nodepool_api.NodeTemplate(cpu="1", memory="4Gi", pods=30)
    spec = launch.machine_spec({"metadata": {"name": "web", "uid": "u"}}, template, zone=None)
    assert (spec.pods, dict(spec.node_labels)[wellknown.POOL_LABEL]) == (30, "web")
    assert spec.node_taints == (f"{wellknown.UNREGISTERED_TAINT_KEY}:NoSchedule",)


def test_a_vm_that_boots_its_own_kubelet_is_never_annotated_for_kwok() -> None:
    own = dataclasses.replace(vm("gpu-0"), boots_kubelet=True)
    node = nodes.node_manifest(pool=POOL, vm=own, template=TEMPLATE, simulated=True)
    assert nodes.KWOK_ANNOTATION not in node["metadata"]["annotations"]
    simulated = nodes.node_manifest(pool=POOL, vm=vm("gpu-0"), template=TEMPLATE, simulated=True)
    assert simulated["metadata"]["annotations"] == {nodes.KWOK_ANNOTATION: "fake"}
