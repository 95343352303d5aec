"""The Autoscaler controller: turns unschedulable Pods into ScaleRequests, and idle nodes back.

Two loops wired in ``setup``: the planner (``planner``, one per cluster, one plan per
batch) and the per-Autoscaler status reconcile (``controller``). A batch runs four
phases, each a package, in this order:

1. ``snapshot``: what is read from the shared caches (no API call, no write);
2. ``simulation``: where kube-scheduler would put the pending pods, and which pool's new
   nodes they need (pure);
3. ``decide``: every Autoscaler's part of the plan, each pool's scale-up or scale-down,
   its status, consolidation's choice (pure: no I/O, no clock);
4. ``act``: the only writer: the ScaleRequest hand-off, consolidation's Node marks, the
   events that explain a decision.

``constraints`` (a pod's requests and scheduling constraints, and their matching rules)
is read by every phase. The loop's own modules stay at the top: ``planner``,
``plan_maker`` (snapshot then simulation), ``decisions`` (one pool's pass),
``consolidator`` (consolidation's passes), ``verdicts``, ``controller``, ``watches``,
``setup``, ``config``, ``metrics``. import-linter holds the phases apart (pyproject.toml).
"""
