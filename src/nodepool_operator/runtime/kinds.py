"""Where the built-in Kubernetes kinds the runtime and controllers use live in the API."""

from __future__ import annotations

from nodepool_operator.runtime.client import Resource

__all__ = ["DAEMONSETS", "EVENTS", "LEASES", "NAMESPACES", "NODES", "PODS"]

NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
PODS = Resource("", "v1", "pods", "Pod", namespaced=True)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet", namespaced=True)
EVENTS = Resource("", "v1", "events", "Event", namespaced=True)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
