"""Bytes of memory one cached Pod (and Node) costs, with and without the cache transforms.

Each object is decoded from its own JSON text, as the informer decodes each watch event,
and kept the way the informer keeps it: after ``drop_managed_fields`` (what every
informer did before) or after ``controllers.cached.pod_fields`` / ``node_fields`` (what
the shared Pod and Node informers keep now). Memory is measured with ``tracemalloc``: the
bytes still allocated once ``--count`` objects are held, divided by the count.

The Pod is an ordinary Deployment pod as the API server returns it once it runs: one
container with a command, environment, probes, ports and mounts, the projected service
account volume, the default tolerations, five status conditions and a container status;
the Node is a kubelet's Node with addresses, images, daemon endpoints and node info.

Run:  .venv/bin/python bench/cache_memory.py [--count 20000]
"""

from __future__ import annotations

import argparse
import copy
import json
import tracemalloc
from collections.abc import Callable
from typing import Any

from nodepool_operator.controllers import cached
from nodepool_operator.runtime.informer import drop_managed_fields

Object = dict[str, Any]

POD: Object = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "web-7d9c6b8f5d-x2x9k",
        "generateName": "web-7d9c6b8f5d-",
        "namespace": "shop",
        "uid": "5a8e9a3c-2b1f-4f7e-9d51-2c4d3f9a8b71",
        "resourceVersion": "123456789",
        "creationTimestamp": "2026-11-30T17:00:00Z",
        "labels": {"app": "web", "pod-template-hash": "7d9c6b8f5d", "tier": "frontend"},
        "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-30T16:59:00Z"},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "web-7d9c6b8f5d",
                "uid": "0f3e3a58-7c1a-4d53-8a4c-9d1e4e2b7c10",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "managedFields": [
            {
                "manager": "kube-controller-manager",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2026-11-30T17:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}},
            }
        ],
    },
    "spec": {
        "containers": [
            {
                "name": "web",
                "image": "registry.example.com/shop/web:1.42.7",
                "command": ["/app/server"],
                "args": ["--port=8080", "--log-format=json", "--cache-size=256Mi"],
                "env": [{"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(8)],
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                "resources": {
                    "requests": {"cpu": "250m", "memory": "512Mi"},
                    "limits": {"memory": "512Mi"},
                },
                "readinessProbe": {
                    "httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"},
                    "periodSeconds": 5,
                    "timeoutSeconds": 1,
                    "successThreshold": 1,
                    "failureThreshold": 3,
                },
                "livenessProbe": {
                    "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                    "periodSeconds": 10,
                    "timeoutSeconds": 1,
                    "successThreshold": 1,
                    "failureThreshold": 3,
                },
                "volumeMounts": [
                    {
                        "name": "kube-api-access-abcde",
                        "readOnly": True,
                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                    }
                ],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }
        ],
        "volumes": [
            {
                "name": "kube-api-access-abcde",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {
                            "configMap": {
                                "name": "kube-root-ca.crt",
                                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                            }
                        },
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "path": "namespace",
                                        "fieldRef": {
                                            "apiVersion": "v1",
                                            "fieldPath": "metadata.namespace",
                                        },
                                    }
                                ]
                            }
                        },
                    ],
                    "defaultMode": 420,
                },
            }
        ],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "nodeName": "general-17",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    },
    "status": {
        "phase": "Running",
        "conditions": [
            {
                "type": kind,
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": "2026-11-30T17:00:03Z",
            }
            for kind in (
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled",
            )
        ],
        "hostIP": "10.0.3.17",
        "hostIPs": [{"ip": "10.0.3.17"}],
        "podIP": "10.244.17.23",
        "podIPs": [{"ip": "10.244.17.23"}],
        "startTime": "2026-11-30T17:00:01Z",
        "containerStatuses": [
            {
                "name": "web",
                "state": {"running": {"startedAt": "2026-11-30T17:00:02Z"}},
                "lastState": {},
                "ready": True,
                "restartCount": 0,
                "image": "registry.example.com/shop/web:1.42.7",
                "imageID": "registry.example.com/shop/web@sha256:" + "ab" * 32,
                "containerID": "containerd://" + "cd" * 32,
                "started": True,
            }
        ],
        "qosClass": "Burstable",
    },
}

NODE: Object = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "general-17",
        "uid": "9b1f2e3d-4c5b-6a79-8e0f-1a2b3c4d5e6f",
        "resourceVersion": "123456790",
        "creationTimestamp": "2026-11-30T16:00:00Z",
        "labels": {
            "nodepool.dev/pool": "general",
            "kubernetes.io/hostname": "general-17",
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "topology.kubernetes.io/zone": "zone-b",
            "topology.kubernetes.io/region": "region-1",
            "node.kubernetes.io/instance-type": "m5.xlarge",
        },
        "annotations": {
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        },
        "ownerReferences": [
            {
                "apiVersion": "nodepool.dev/v1alpha1",
                "kind": "NodePool",
                "name": "general",
                "uid": "3c2b1a09-8f7e-6d5c-4b3a-291807f6e5d4",
            }
        ],
    },
    "spec": {"providerID": "simcloud://general-17", "podCIDR": "10.244.17.0/24"},
    "status": {
        "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"},
        "allocatable": {
            "cpu": "3800m",
            "memory": "15Gi",
            "pods": "110",
            "ephemeral-storage": "95Gi",
        },
        "conditions": [
            {
                "type": kind,
                "status": "True" if kind == "Ready" else "False",
                "lastHeartbeatTime": "2026-11-30T17:10:00Z",
                "lastTransitionTime": "2026-11-30T16:00:30Z",
                "reason": f"Kubelet{kind}",
                "message": f"kubelet reports {kind}",
            }
            for kind in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
        ],
        "addresses": [
            {"type": "InternalIP", "address": "10.0.3.17"},
            {"type": "Hostname", "address": "general-17"},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": "ab" * 16,
            "systemUUID": "cd" * 16,
            "bootID": "ef" * 16,
            "kernelVersion": "6.1.0-18-amd64",
            "osImage": "Debian GNU/Linux 12 (bookworm)",
            "containerRuntimeVersion": "containerd://1.7.13",
            "kubeletVersion": "v1.36.3",
            "kubeProxyVersion": "v1.36.3",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
        "images": [
            {
                "names": [f"registry.example.com/image-{i}@sha256:{'0' * 64}", f"image-{i}:1"],
                "sizeBytes": 10_000_000 + i,
            }
            for i in range(20)
        ],
    },
}


def bytes_each(
    template: Object, keep: Callable[[Object], Object], *, count: int, name: str
) -> float:
    texts = []
    for index in range(count):
        obj = copy.deepcopy(template)
        obj["metadata"]["name"] = f"{name}-{index}"
        obj["metadata"]["uid"] = f"{index:08d}-0000-0000-0000-000000000000"
        texts.append(json.dumps(obj))
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    held = [keep(json.loads(text)) for text in texts]
    after, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(held) == count
    return (after - before) / count


def main(count: int) -> None:
    print(f"{count:,} objects of each kind, each decoded from its own JSON text")
    print("| kind | JSON size | kept as before (managedFields dropped) | kept now | ratio |")
    print("|---|---|---|---|---|")
    for kind, template, keep in (
        ("Pod", POD, cached.pod_fields),
        ("Node", NODE, cached.node_fields),
    ):
        before = bytes_each(template, drop_managed_fields, count=count, name=kind)
        now = bytes_each(template, keep, count=count, name=kind)
        size = len(json.dumps(template))
        print(
            f"| {kind} | {size:,} B | {before:,.0f} B | {now:,.0f} B | {before / now:.1f}x |",
            flush=True,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    arguments = parser.parse_args()
    main(arguments.count)
