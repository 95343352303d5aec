"""Test doubles of the cloud seam (``provider.CloudProvider``), shipped once beside it as
``runtime.testing`` ships the API server's, so that tests do not grow their own:

* ``virtual_machine``: a ``VirtualMachine`` as a cloud reports it, running unless told.
* ``FakeCloud``: a pool's VMs by name and state. A listing shows them all, a get finds
  one, a delete marks it DELETING and records when (by the wall clock it is given) and in
  what order. Subclasses add creates, lies and faults.
* ``FakeEventSource``: a ``provider.EventSource`` that tells what a test gives it
  (``tell``) at the next ``events`` and records which events were said ``handled``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from nodepool_operator.cloud.provider import CloudEvent, VirtualMachine, VmName, VmState

__all__ = ["FakeCloud", "FakeEventSource", "TimeSource", "virtual_machine"]


class TimeSource(Protocol):
    """What ``FakeCloud`` reads the time from (``runtime.testing.FakeWallClock`` is one)."""

    def time(self) -> float: ...


def virtual_machine(
    name: str,
    *,
    pool: str,
    cpu: str = "4",
    memory: str = "16Gi",
    state: VmState = VmState.RUNNING,
    created_at: float = 0.0,
    zone: str | None = None,
) -> VirtualMachine:
    """A VM as the cloud reports it; its provider ID is simcloud's for ``name``."""
    return VirtualMachine(
        name=VmName(name),
        pool=pool,
        cpu=cpu,
        memory=memory,
        state=state,
        provider_id=f"simcloud:///{name}",
        created_at=created_at,
        zone=zone,
    )


class FakeCloud:
    """The VMs of pool ``pool`` (4 CPU / 16Gi), all running at first (module doc)."""

    def __init__(self, clock: TimeSource, names: Iterable[str], *, pool: str = "p") -> None:
        self.clock = clock
        self.pool = pool
        self.vms = {n: VmState.RUNNING for n in names}
        self.zones: dict[str, str | None] = {}  # as the cloud records each VM's zone
        self.deleted_at: dict[str, float] = {}
        self.order: list[str] = []

    async def list_vms(self, *, pool: str) -> list[VirtualMachine]:
        return [
            virtual_machine(name, pool=pool, state=state, zone=self.zones.get(name))
            for name, state in sorted(self.vms.items())
        ]

    async def get_vm(self, name: VmName) -> VirtualMachine | None:
        found = [vm for vm in await self.list_vms(pool=self.pool) if vm.name == name]
        return found[0] if found else None

    async def delete_vm(self, name: VmName) -> None:
        self.vms[name] = VmState.DELETING
        self.deleted_at.setdefault(name, self.clock.time())
        self.order.append(f"vm {name}")


class FakeEventSource:
    """Events a test tells (``tell``), given once by ``events``; ``handled`` records them."""

    def __init__(self) -> None:
        self.told: list[CloudEvent] = []
        self.handled_events: list[CloudEvent] = []
        self.waits: list[float] = []

    def tell(self, *events: CloudEvent) -> None:
        self.told.extend(events)

    async def events(self, *, wait: float) -> list[CloudEvent]:
        self.waits.append(wait)
        given, self.told = self.told, []
        return given

    async def handled(self, event: CloudEvent) -> None:
        self.handled_events.append(event)
