"""The Autoscaler controller: turns unschedulable Pods into ScaleRequests, and idle nodes back.

One folder, two loops wired in ``setup``: the planner (``planner``, one per cluster,
one plan per batch) and the per-Autoscaler status reconcile (``controller``). The
decisions are pure and tested alone: ``fit`` (which pods are planned for, what each asks
for), ``constraints`` (a pod's scheduling constraints and their matching rules),
``simulation`` (where kube-scheduler would put the pending pods, and which pool's new
nodes they need), ``plan`` (scale up, scale down, the effective target), ``unneeded``
(the timers behind scale-down). The rest does the I/O: ``gather``, ``pool_reads``,
``profiles`` and ``observe`` read the shared caches, ``observer`` makes the one plan and
cuts each Autoscaler's part, ``decisions`` decides for a pool, ``handoff`` creates
ScaleRequests (the only object it writes besides its own status and events),
``notices`` writes events, ``report`` builds the status and the decision log line,
``verdicts`` carries the planner's results to the status reconcile, ``watches`` says
which events start a batch.
"""
