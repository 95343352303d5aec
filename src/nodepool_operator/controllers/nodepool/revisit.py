"""When the NodePool controller looks at a pool again, though no event comes.

The cloud has no watch: the controller looks again while the cloud owes it something (VMs
booting, or running without their Node yet, or still to be created), when a timer it
holds ends (a cloud pause, a zone backoff, a drain's recheck, a request's expiry, a held
back status write), and at the latest at the resync, when it lists the pool's VMs though
nothing happened (a VM deleted out of band is seen then). Node readiness needs no
polling: it arrives through the Node watch. A drain says itself when it can move on (a
pod's backoff ends, a grace period runs out): never a fixed-rate retry.
"""

from __future__ import annotations

import zlib

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud.provider import VmState
from nodepool_operator.controllers import capacity
from nodepool_operator.controllers.nodepool import backoff, plan
from nodepool_operator.controllers.nodepool.config import NodePoolConfig
from nodepool_operator.runtime import ratelimit

__all__ = ["Revisits"]

#: The shortest wait for a timer that has just ended (never a zero-delay requeue).
_SOON = 0.01


class Revisits:
    """The delay before a pool's next pass; remembers only each pool's boot-poll streak."""

    def __init__(self, config: NodePoolConfig) -> None:
        self.config = config
        # While VMs boot the cloud is asked again after 0.1 s, then 0.2, 0.4, ... up to
        # the poll interval (the runtime's per-key backoff): a VM up at once has its Node
        # soon.
        self.boot_polls = ratelimit.ItemExponentialFailureRateLimiter[str](
            base_delay=config.boot_poll_initial, max_delay=config.poll_interval
        )

    def next_pass_in(
        self,
        name: str,
        view: plan.PoolView,
        desired: int,
        *,
        pause: nodepool_api.CloudPause | None,
        zones: backoff.ZoneLedger,
        due: float | None,
        now: float,
    ) -> float:
        """Seconds until the pool's next pass: the soonest of ``due`` (a request's expiry
        or a held-back status write), a cloud pause's end, a zone backoff's end, a boot
        poll, a drain's recheck, the resync."""
        delays = [] if due is None else [due]
        if pause is not None:
            delays.append(max(capacity.pause_ends_in(pause, now=now), _SOON))
        backoff_ends = zones.ends_in()
        if backoff_ends is not None:  # the status (Degraded) changes then, and launches resume
            delays.append(max(backoff_ends, _SOON))
        boot_poll = self._boot_poll(name, view)
        if boot_poll is not None:
            delays.append(boot_poll)
        unregistered = any(vm.name not in view.nodes for vm in view.vms)
        short = pause is None and zones.cannot_grow() is None and len(view.vms) < desired
        if unregistered or short:
            delays.append(self.config.poll_interval)
        if view.recheck_in is not None:
            delays.append(max(view.recheck_in, _SOON))
        delays.append(self.resync_in(name))
        return min(delays)

    def _boot_poll(self, name: str, view: plan.PoolView) -> float | None:
        if view.launching:
            self.boot_polls.forget(name)  # new VMs: start again from the shortest wait
        if view.launching or any(vm.state == VmState.PROVISIONING for vm in view.vms):
            return self.boot_polls.when(name)
        self.boot_polls.forget(name)
        return None

    def resync_in(self, name: str) -> float:
        """The resync interval, spread per pool between 0.75x and 1.25x (a stable hash) so
        pools do not list in lockstep."""
        spread = zlib.crc32(name.encode()) / 2**32
        return self.config.cloud_resync_interval * (0.75 + 0.5 * spread)

    def forget(self, name: str) -> None:
        self.boot_polls.forget(name)
