"""The Autoscaler controller: turns unschedulable Pods into ScaleRequests, and idle nodes back.

One folder, one reconcile (``controller``), wired in ``setup``. The decisions are pure and
tested alone: ``fit`` (which pods are planned for, what each asks for), ``constraints``
(a pod's scheduling constraints and their matching rules), ``simulation`` (where
kube-scheduler would put the pending pods, and which pool's new nodes they need),
``plan`` (scale up, scale down, the effective target), ``unneeded`` (the timers behind
scale-down). The rest does the I/O: ``observe`` reads the shared caches and makes the one
plan all Autoscalers share, ``handoff`` creates ScaleRequests (the only object it writes
besides its own status and events), ``notices`` writes events, ``report`` builds the
status and the decision log line, ``watches`` says which events wake which Autoscaler.
"""
