"""Python's cyclic garbage collector paused around a CPU-bound step that makes many
objects which all live until the step returns (the scheduling simulation of a plan).

Automatic collections are triggered by the number of container objects made and not yet
freed. A step that builds tens of thousands of them (simulated nodes, per-class memos)
triggers collection after collection while it runs, and each one traverses what the step
made, all still alive and none of it garbage; now and then a full pass traverses the whole
heap (the informer caches too). That is work that frees nothing. Paused for the step's
length, the collector does none of it, and none is left for later: when the step returns,
reference counting frees what it made.

The collector is process-wide: while it is paused, cyclic garbage that other threads make
(the event loop's) waits until the last pause ends, for at most one step's length. Pauses
nest and may overlap across threads: the collector is enabled again when the last one
ends, and only if it was enabled when the first one began.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


class _Pauses:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.was_enabled = False


_PAUSES = _Pauses()


@contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic cyclic garbage collection while the block runs (see the module)."""
    pauses = _PAUSES
    with pauses.lock:
        if pauses.count == 0:
            pauses.was_enabled = gc.isenabled()
            gc.disable()
        pauses.count += 1
    try:
        yield
    finally:
        with pauses.lock:
            pauses.count -= 1
            if pauses.count == 0 and pauses.was_enabled:
                gc.enable()
