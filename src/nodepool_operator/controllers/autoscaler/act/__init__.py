"""The Autoscaler's last phase, the only writer: a decision handed over as one ScaleRequest
(``handoff``), consolidation's marks on the Nodes (``node_marks``), and the events that
explain a decision to people (``notices``). The status is written by the per-Autoscaler
controller (``controller``) through the runtime's status writer.
"""
