"""The operator with one practice deliberately removed: the chaos suite must catch it.

Test-only: it monkeypatches the installed package in this process, then runs the CLI's
own ``main`` with the remaining arguments, so everything else is the real operator::

    python tests/chaos/broken_operator.py BREAKAGE run --kubeconfig ...

Breakages (``NODEPOOL_CHAOS_BROKEN=<name>`` makes the chaos suite start this wrapper):

``blind-retry``
    A permanent cloud refusal (quota) is retried at once instead of pausing the pool's
    VM creations (practice 2: 403/quota never retried blindly). Caught by the cloud
    request-rate bound of the quota scenario.
``random-vm-names``
    VMs are created under fresh random names instead of ``<pool>-<index>``, so a create
    repeated by another replica makes a second VM. Only a split brain (a paused leader
    resuming in the middle of a scale-up) can show it here; see docs/reliability.md.
"""

from __future__ import annotations

import dataclasses
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from nodepool_operator import cli
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.controllers.nodepool import backoff
from nodepool_operator.runtime import conditions


def _replace(owner: object, name: str, replacement: object) -> None:
    """Swap one attribute, loudly refusing if a refactor renamed it: a breakage that
    silently patches nothing would make the suite pass and prove nothing."""
    if not hasattr(owner, name):
        raise SystemExit(f"broken operator: {owner!r} has no {name!r} to replace any more")
    setattr(owner, name, replacement)


def _blind_retry() -> None:
    refused = backoff.CloudPauses.refused

    def pause_that_ends_now(
        self: backoff.CloudPauses,
        previous: nodepool_api.CloudPause | None,
        *,
        now: float,
        **rest: Any,
    ) -> nodepool_api.CloudPause:
        pause = refused(self, previous, now=now, **rest)
        return dataclasses.replace(pause, until=conditions.rfc3339(now))

    _replace(backoff.CloudPauses, "refused", pause_that_ends_now)


def _random_vm_names() -> None:
    def fresh_names(pool: str, taken: Iterable[str]) -> Iterator[str]:
        while True:
            yield f"{pool}-{uuid.uuid4().hex[:6]}"

    _replace(nodepool_api, "vm_names", fresh_names)


BREAKAGES: dict[str, Callable[[], None]] = {
    "blind-retry": _blind_retry,
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
