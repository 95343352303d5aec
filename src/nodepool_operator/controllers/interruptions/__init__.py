"""The interruptions controller: what the cloud says of a VM of ours without being asked
(a spot interruption warning, a scheduled change, the instance stopping) becomes a fact on
its Node at once (annotations, a NoSchedule taint, cordon), so that the NodePool
controller's repair replaces it through the one drain path and the Autoscaler plans it as
no capacity, and a restarted operator finds the notice where it left it.

``notice`` (the marks and their one reading, imported by ``controllers.health`` too),
``controller`` (reads the cloud's ``EventSource`` and writes the marks), ``metrics``,
``setup`` (wiring).
"""
