"""The Autoscaler's third phase, pure: from the snapshot and the simulation's outcome, what
to do. No I/O, no clock (the time is an argument): each pool's scale-up or scale-down
(``scaling``), every Autoscaler's part of the batch's plan (``batch_plan``), its status
computed from the decision (``status_report``), and consolidation's choice of the Nodes
that go, returned as the marks to write (``consolidation_rules``, ``consolidation_proof``,
``consolidation_choice``). Imports neither the API client nor the runtime's writers.
"""
