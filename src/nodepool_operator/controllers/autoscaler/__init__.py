"""The Autoscaler controller: turns unschedulable Pods into ScaleRequests, and idle nodes back.

One folder, one reconcile (``controller``), wired in ``setup``. The decisions are pure and
tested alone: ``fit`` (what a pod asks for, whether a template node could hold it),
``packing`` (first-fit decreasing), ``plan`` (scale up, scale down, the effective target),
``unneeded`` (the timers behind scale-down). The rest does the I/O: ``observe`` reads the
shared caches, ``handoff`` creates ScaleRequests (the only object it writes besides its
own status and events), ``notices`` writes events, ``report`` builds the status and the
decision log line, ``watches`` says which events wake which Autoscaler.
"""
