"""The Autoscaler's first phase: what one batch reads, copied out of the shared caches.

No API call and no write: informer caches and their indexes, and what this process
created that the caches do not show yet (``scale_requests.RequestLedger``). The copies are
immutable, so the simulation and the decision run on them anywhere (a worker thread).
Never imports ``act``.
"""
