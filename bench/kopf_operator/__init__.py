"""The kopf baseline of ``bench/contention.py``: the same controllers, written with kopf."""
