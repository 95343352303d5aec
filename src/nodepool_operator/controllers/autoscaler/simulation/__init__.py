"""The scheduling simulation: where kube-scheduler would put the pending pods, and which
pool's new nodes they need. Pure code: no I/O, no clock.

The simulated cluster holds the nodes that exist (Ready, or registered and booting; a
pool's or not: a node of no pool hosts pods and counts for affinity and spread, and is
never grown nor removed), the
nodes requested but not registered yet, and the new nodes the simulation opens. A pod
goes to the first node that passes every filter kube-scheduler would apply
(``NodeUnschedulable``, ``NodeAffinity``, ``VolumeBinding`` and ``VolumeZone`` (as
``volumes`` reads a pod's claims), ``TaintToleration``, ``NodeResourcesFit``, ``NodePorts``,
``InterPodAffinity``, ``PodTopologySpread``) given the pods already there
and those placed before it; a pod that fits nowhere opens the next node of the pool that
can host it: highest ``weight`` first, then least waste (cluster-autoscaler's expander),
then name; where every pool that can host it has a catalog price (``PoolTemplate.price``,
a pool with requirements), the cheapest for the pod first, those after. A node that is
not there yet has its template's allocatable minus the DaemonSet pods that would run on
it. A new node ranks only the pools whose next node the pod's static filters (namespace,
taints, nodeSelector, node affinity) do not refuse, found once per node rules and looked
at again for a pool only once it opens a node; the node groups a
pod searches are found through the labels its nodeSelector names.

Pods are placed by class: pods whose profiles are equal but for labels no selector in the
cluster reads (replicas, a StatefulSet's pods with their own pod-name labels) are one
class, placed one after the other (a node's worth at a time when nothing but resources
constrains them, then straight to the next node when it takes them; round after round at
once while a spreading class's rounds come out the same), in first-fit-decreasing order. A
max-tree over the nodes' free cpu, memory and pod slots finds the leftmost node with room
without scanning the full ones, and a per-class cursor skips the nodes the class was
already refused on (a node only fills up while one class is placed, so a refusal stands,
except where pod affinity can change it or a spread's smallest count rises). Verdicts of
the static filters are kept per node rules (selector, node affinity, tolerations), so pods
of every size with equal rules share them. Where pods are is counted only when some pod in
the simulation has pod affinity, anti-affinity or a spread (nothing else reads it).

Nodes are registered in the pool's VM order (``<pool>-<index>``, lowest free index
first). A new node goes to the zone its pod needs; a pod that could go to several zones
opens its node in the one holding the fewest of the pool's nodes (``api.zones``), and the
zones of the nodes opened are handed over in the ScaleRequest (``newNodeZones``), so the
NodePool controller creates them where they were planned.

The package, by stage: ``model`` (what it reads and answers), ``rooms`` (simulated nodes
and their room trees), ``tallies`` (affinity and spread counters), ``cluster`` (the
cluster's state), ``spreading`` (each class's spread counters), ``filters``
(kube-scheduler's filters in its order), ``pools`` (opening pool nodes), ``classes`` (pods
grouped into classes), ``pool_state`` (a pool's opened nodes, their zones, and what ranks
its next node), ``placing`` and ``rounds`` (the simulation loop), ``outcomes`` (the answer
per pool), ``explain`` (verdicts for ``nodepool-operator explain``).
"""

from nodepool_operator.controllers.autoscaler.simulation.explain import (
    NodeAnswer,
    NodeVerdicts,
    verdicts,
)
from nodepool_operator.controllers.autoscaler.simulation.model import (
    NO_AUTOSCALER,
    NO_NODE_LEFT,
    DaemonSetView,
    ExistingNode,
    PoolOutcome,
    PoolTemplate,
    PoolZones,
    SimulationOutcome,
)
from nodepool_operator.controllers.autoscaler.simulation.placing import simulate

__all__ = [
    "NO_AUTOSCALER",
    "NO_NODE_LEFT",
    "DaemonSetView",
    "ExistingNode",
    "NodeAnswer",
    "NodeVerdicts",
    "PoolOutcome",
    "PoolTemplate",
    "PoolZones",
    "SimulationOutcome",
    "simulate",
    "verdicts",
]
