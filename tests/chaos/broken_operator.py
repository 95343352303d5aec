"""The operator with one practice deliberately removed: the chaos suite must catch it.

Test-only: it monkeypatches the installed package in this process, then runs the CLI's
own ``main`` with the remaining arguments, so everything else is the real operator::

    python tests/chaos/broken_operator.py BREAKAGE run --kubeconfig ...

Breakages (``NODEPOOL_CHAOS_BROKEN=<name>`` makes the chaos suite start this wrapper):

``blind-retry``
    A permanent cloud refusal (quota) is retried at once instead of pausing the pool's
    VM creations (practice 2: 403/quota never retried blindly). Caught by the cloud
    request-rate bound of the quota scenario.
``no-finalizer``
    The NodePool finalizer is never added, so deleting a pool does not wait for its VMs
    to be released. Caught by the orphan-VM check after pool deletions.
``random-vm-names``
    VMs are created under fresh random names instead of ``<pool>-<index>``, so a create
    repeated by another replica makes a second VM. Only a split brain (a paused leader
    resuming in the middle of a scale-up) can show it here; see docs/reliability.md.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from nodepool_operator import cli
from nodepool_operator.api import nodepool as np
from nodepool_operator.controllers.nodepool import backoff, controller


def _blind_retry() -> None:
    refused = backoff.CloudBackoff.refused

    def pause_that_ends_now(
        self: backoff.CloudBackoff, pool: str, *, now: float, **rest: Any
    ) -> backoff.Pause:
        pause = refused(self, pool, now=now, **rest)
        self._pauses[pool] = backoff.Pause(
            until=now,
            generation=pause.generation,
            failures=pause.failures,
            reason=pause.reason,
            message=pause.message,
        )
        return self._pauses[pool]

    backoff.CloudBackoff.refused = pause_that_ends_now  # type: ignore[method-assign]


def _no_finalizer() -> None:
    async def skip(self: controller.NodePoolReconciler, pool: dict[str, Any]) -> None:
        return None

    controller.NodePoolReconciler._add_finalizer = skip  # type: ignore[method-assign]


def _random_vm_names() -> None:
    def fresh_names(pool: str, taken: Iterable[str]) -> Iterator[str]:
        while True:
            yield f"{pool}-{uuid.uuid4().hex[:6]}"

    np.vm_names = fresh_names


BREAKAGES: dict[str, Callable[[], None]] = {
    "blind-retry": _blind_retry,
    "no-finalizer": _no_finalizer,
    "random-vm-names": _random_vm_names,
}


def main() -> None:
    breakage, *rest = sys.argv[1:]
    BREAKAGES[breakage]()
    print(f"broken operator: practice removed: {breakage}", flush=True)
    sys.argv = ["nodepool-operator", *rest]
    cli.main()


if __name__ == "__main__":
    main()
