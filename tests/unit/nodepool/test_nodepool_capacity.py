"""Zone backoffs, on fakes and fake clocks: a zone without capacity is backed off in the
pool's status and its VMs go to the other zones; a pool with every zone backed off
launches nothing and says so; a restarted operator reads the backoff from the status;
a VM that never registers backs its zone off too; and the waits double up to 30 minutes.
"""

from __future__ import annotations

from typing import Any

from nodepool_operator import timestamps
from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.cloud.provider import InsufficientCapacity, VirtualMachine, VmName, VmState
from nodepool_operator.controllers import capacity
from nodepool_operator.runtime import conditions
from nodepool_operator.runtime.client import Object
from nodepool_operator.runtime.controller import Request
from unit.nodepool import drain_world as fakes
from unit.nodepool import repair_world as repair_fakes

TWO_ZONES = nodepool_api.NodeTemplate(zones=("a", "b"))


class Cloud(repair_fakes.Cloud):
    """A cloud with no capacity in the zones named in ``full``."""

    def __init__(self, clock: fakes.Clock, names: Any) -> None:
        super().__init__(clock, names)
        self.full: set[str | None] = set()
        self.asked: list[tuple[str, str | None]] = []

    async def create_vm(self, *, name: VmName, pool: str, spec: Any) -> VirtualMachine:  # type: ignore[override]
        self.asked.append((name, spec.zone))
        if spec.zone in self.full:
            raise InsufficientCapacity(
                f"no capacity for 4/16Gi in zone {spec.zone}", zone=spec.zone, shape="4/16Gi"
            )
        await super().create_vm(name=name, pool=pool, spec=spec)
        return VirtualMachine(
            name=name,
            pool=pool,
            cpu="4",
            memory="16Gi",
            state=VmState.PROVISIONING,
            provider_id=f"simcloud:///{name}",
            created_at=self.clock.time(),
            zone=spec.zone,
        )


class World(repair_fakes.World):
    def __init__(self, *vm_names: str) -> None:
        super().__init__(*vm_names)
        self.cloud = Cloud(self.clock, vm_names)
        self.lifecycle.launcher.cloud = self.cloud
        self.lifecycle.inventory.cloud = self.cloud
        self.lifecycle.repairer.cloud = self.cloud
        self.lifecycle.terminator.cloud = self.cloud

    def zoned(self, target: int, *, status: Object | None = None, **spec: Any) -> Object:
        found = self.pool(target, template=spec.pop("template", TWO_ZONES), **spec)
        if status is not None:
            found["status"] = status
            self.pools.put(found)
        return found

    async def pass_(self) -> Any:
        return await self.reconciler.reconcile(Request(name="p"))

    def last_status(self) -> dict[str, Any]:
        """The pool's status as the controller last wrote it (its patches are merge
        patches: only what changed)."""
        pool = self.pools.get("p")
        assert pool is not None
        assert self.api.status_patches
        return self.reconciler.reporter.status.current(pool)

    def degraded(self) -> dict[str, Any]:
        [found] = [c for c in self.last_status()["conditions"] if c["type"] == "Degraded"]
        return dict(found)


def backoff(zone: str, *, until: float, failures: int = 1) -> nodepool_api.ZoneBackoff:
    return nodepool_api.ZoneBackoff(
        zone=zone,
        reason="InsufficientCapacity",
        failures=failures,
        until=conditions.rfc3339(until),
    )


# --- the rule -----------------------------------------------------------------------------


def test_each_refusal_in_a_row_doubles_the_wait_from_a_minute_up_to_thirty() -> None:
    now = fakes.START
    entries: tuple[nodepool_api.ZoneBackoff, ...] = ()
    waits = []
    for _ in range(7):
        entries, started = capacity.record(
            entries, zone="a", shape="", reason="InsufficientCapacity", message="", now=now
        )
        assert started is not None
        until = timestamps.parse_rfc3339(started.until)
        assert until is not None
        waits.append(until - now)
        now = until  # refused again as soon as the zone is tried again
    assert waits == [60, 120, 240, 480, 960, 1800, 1800]


def test_a_zone_refused_twice_in_one_wait_counts_once() -> None:
    entries, first = capacity.record(
        (), zone="a", shape="", reason="InsufficientCapacity", message="", now=fakes.START
    )
    again, second = capacity.record(
        entries, zone="a", shape="", reason="InsufficientCapacity", message="", now=fakes.START
    )
    assert first is not None
    assert second is None
    assert again == entries


def test_a_pool_cannot_grow_only_when_every_zone_is_backed_off() -> None:
    now = fakes.START
    one = (backoff("a", until=now + 60),)
    both = (*one, backoff("b", until=now + 120))
    assert capacity.cannot_grow(one, TWO_ZONES, now=now) is None
    reason = capacity.cannot_grow(both, TWO_ZONES, now=now)
    assert reason is not None
    assert "InsufficientCapacity in all its zones" in reason
    assert capacity.cannot_grow(both, TWO_ZONES, now=now + 60) is None  # a's wait is over
    zoneless = nodepool_api.NodeTemplate()
    assert capacity.cannot_grow((backoff("", until=now + 1),), zoneless, now=now) is not None


def test_a_backoff_is_forgotten_after_a_success_or_thirty_minutes_past_its_end() -> None:
    now = fakes.START
    entries = (backoff("a", until=now - 10), backoff("b", until=now - 1801))
    assert capacity.forgotten(entries, now=now) == entries[:1]
    assert capacity.forgotten(entries, now=now, succeeded=["a"]) == ()


# --- the NodePool controller ----------------------------------------------------------------


async def test_a_zone_without_capacity_is_backed_off_and_its_vms_go_to_the_other_zone() -> None:
    world = World()
    world.cloud.full = {"a"}
    world.zoned(2)

    result = await world.pass_()

    created = sorted(name for name, state in world.cloud.vms.items() if state)
    assert created == ["p-0", "p-1"]
    assert {world.cloud.zones[n] for n in created} == {"b"}  # a refused, then passed over
    assert world.cloud.asked[0] == ("p-0", "a")
    [entry] = world.last_status()["zoneBackoffs"]
    assert (entry["zone"], entry["reason"], entry["failures"]) == ("a", "InsufficientCapacity", 1)
    assert entry["until"] == conditions.rfc3339(fakes.START + 60)
    assert entry["shape"] == "4/16Gi"
    assert world.degraded()["reason"] == "ZonesBackedOff"
    [told] = world.warnings("InsufficientCapacity")
    assert "zone a" in told
    assert "refusal 1 in a row" in told
    assert result.requeue_after is not None
    assert result.requeue_after <= 60


async def test_a_restarted_operator_skips_the_zone_its_status_backs_off() -> None:
    world = World()
    world.zoned(1, status={"zoneBackoffs": [backoff("a", until=fakes.START + 30).to_dict()]})

    await world.pass_()

    assert world.cloud.asked == [("p-0", "b")]  # a not even asked
    assert world.last_status()["zoneBackoffs"][0]["zone"] == "a"  # kept as it was

    world.clock.now += 31  # the wait is over: zone a is tried again
    world.zoned(2, status=world.last_status())
    await world.pass_()
    assert world.cloud.asked[-1] == ("p-1", "a")
    assert "zoneBackoffs" not in world.last_status()  # the launch there ended it


async def test_a_pool_with_every_zone_backed_off_launches_nothing_and_says_why() -> None:
    world = World()
    world.cloud.full = {"a", "b"}
    world.zoned(2)

    result = await world.pass_()

    assert world.cloud.vms == {}
    assert {e["zone"] for e in world.last_status()["zoneBackoffs"]} == {"a", "b"}
    degraded = world.degraded()
    assert (degraded["status"], degraded["reason"]) == ("True", "InsufficientCapacity")
    assert "in all its zones" in degraded["message"]
    assert result.requeue_after == 60  # not polled before the first wait ends

    asked = len(world.cloud.asked)
    world.zoned(2, status=world.last_status())
    await world.pass_()
    assert len(world.cloud.asked) == asked  # nothing asked while every zone waits


async def test_a_vm_that_never_registers_backs_its_zone_off() -> None:
    world = World("p-0")
    world.cloud.created_at["p-0"] = fakes.START - 901
    world.cloud.zones["p-0"] = "a"  # the cloud's record, whatever the name
    repair_fakes.refuse_nodes(world)  # the Node never comes: its VM is overdue
    world.zoned(1)

    await world.pass_()

    [entry] = world.last_status()["zoneBackoffs"]
    assert (entry["zone"], entry["reason"]) == ("a", "RegistrationTimeout")
    [told] = world.warnings("RegistrationTimeout")
    assert "VM p-0 had no Ready Node within registrationTimeoutSeconds=900" in told
