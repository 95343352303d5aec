"""Time as a dependency, so that backoff, batching and leases are testable without sleeps."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

__all__ = ["Clock", "RealClock"]


class Clock(Protocol):
    """Monotonic time and sleeping; the only source of time the runtime uses."""

    def now(self) -> float:
        """Seconds on a monotonic scale (not wall time)."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
