"""Controller machinery in the manner of controller-runtime; it knows nothing of NodePools.

Informers and their caches, the rate-limited workqueue, the reconcile loop, conflict-aware
writes (retry_on_conflict, a status writer that never sends a no-op), server-side apply,
events, leader election, metrics and the manager that runs it all.
"""
