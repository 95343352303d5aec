"""Consolidation: underused Nodes whose pods fit on the other Nodes are removed.

A pool's Node goes through these steps, each one a fact written on the Node, so that a
restarted operator (or a new leader) takes up where the last one stopped:

1. **Candidate.** Ready, schedulable, its pods requesting less than
   ``scaleDown.utilizationThreshold`` of its allocatable CPU and of its memory, every pod
   on it movable (``movable_problem``), and every one of them fitting on the Nodes that
   stay, with every filter of the scheduling simulation, counting the pods of all the
   other candidates too (``choose``): two removals never count on the same room. An empty
   Node (DaemonSet and mirror pods only) needs no simulation: the faster path. The
   Autoscaler stamps ``UNNEEDED_SINCE_ANNOTATION`` on it (one write).
2. **Tainted.** ``unneededSeconds`` after that stamp, with nothing in flight and no more
   than ``scaleDown.maxConcurrent`` Nodes with pods to move at a time (empty Nodes are not
   counted), the Node gets the ``NoSchedule`` taint ``CONSOLIDATING_TAINT_KEY`` (one
   write): from then on no new pod is scheduled there.
3. **Named.** Once the taint shows in the cache, the decision is checked again, the
   PodDisruptionBudgets read from the API server (only now, for the few Nodes at this
   step), and the Node is named in a ScaleRequest (``spec.removeNodes``); the NodePool
   controller drains exactly those Nodes and removes them.
4. **Kept.** A Node that stops being a candidate at any step (a pod it cannot move landed
   on it, it got busy, its pods no longer fit elsewhere, a budget allows no disruption,
   a scale-up is settling) loses the stamp and the taint (one write), and an event on the
   Node and the Autoscaler names the pod and the rule that keeps it.

So a Node costs at most two writes on its way out, and one when it is kept; a Node is
never left tainted by a crash: the next pass either names it or clears it.

The package, in the order a pass runs it: ``views`` (read: the pool's member Nodes as
consolidation sees them), ``rules``, ``proof`` and ``decide`` (pure: movable pods,
budgets, usage, the choice of every pool's candidates together and its proof by the
scheduling simulation, the unneeded timers, the marks to write), ``marks`` (act: the only
writer, Node patches and events), ``consolidator`` (runs them: once per batch the choice,
then one pass per pool).
"""

from nodepool_operator.controllers.autoscaler.consolidation.consolidator import (
    PDBS,
    Consolidator,
    PoolTurn,
)
from nodepool_operator.controllers.autoscaler.consolidation.decide import Choice
from nodepool_operator.controllers.autoscaler.consolidation.rules import (
    Kept,
    NodeView,
    Review,
    budget_problem,
    choose,
    movable_problem,
    usage_of,
)

__all__ = [
    "PDBS",
    "Choice",
    "Consolidator",
    "Kept",
    "NodeView",
    "PoolTurn",
    "Review",
    "budget_problem",
    "choose",
    "movable_problem",
    "usage_of",
]
