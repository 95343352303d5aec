"""The NodePool controller's interruptions reconciler: what the cloud says of a VM of ours
without being asked (a spot interruption warning, a scheduled change, the instance
stopping) becomes a fact on its Node at once (annotations, a NoSchedule taint, cordon),
written under the NodePool controller's identity (the notice is its field on the Node).
The pool's disruption (``controllers.nodepool.disruption``) then replaces the Node through
the one disruption path: replacement launched at once, drain at once, its deadline the
notice's; the Autoscaler plans it as no capacity meanwhile (``controllers.health``), and a
restarted operator finds the notice where it left it.

``notice`` (the marks, whose keys and reading live in ``api.wellknown``), ``controller``
(reads the cloud's ``EventSource`` and writes the marks), ``metrics``, ``setup`` (wiring).
"""
