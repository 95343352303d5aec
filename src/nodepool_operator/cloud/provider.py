"""The cloud provider protocol the NodePool controller uses, its value types and its errors.

A provider owns VMs; the controller owns their names. Because the controller derives each
VM's name deterministically, ``create_vm`` is idempotent by name: a retry after a lost
response, or a whole operator restart, finds the VM it already asked for instead of making
a second one.

A provider serves one cluster, named when it is made (``run --cluster-name``): every VM it
creates carries that cluster, and every lookup (list, get, delete, the existence check of
a create) sees only that cluster's VMs. Two clusters sharing one cloud account may then
use the same pool and VM names; a name taken in another cluster is invisible, never
adopted and never deleted.

Errors, classed once so callers decide to retry by type, never by parsing messages::

    CloudError                      code: str, transient: bool
    ├── TransientCloudError         transient=True: retrying later may help
    │   │                           (timeouts, connection errors, 5xx)
    │   └── RateLimited             429; carries retry_after (seconds, or None)
    └── PermanentCloudError         transient=False: retrying the same call will not help
        ├── InsufficientCapacity    no room for this shape in this zone now; carries zone
        │                           and shape, the offering a planner should back off
        ├── QuotaExceeded           the account may not hold more VMs
        ├── InvalidMachineSpec      cpu/memory/pods/zone the cloud rejects
        └── VmConflict              the name exists with a different pool

``InsufficientCapacity`` is permanent for the call (asking the same zone for the same
shape at once will not help), not for the offering: capacity comes back. A caller backs
off that (pool, zone, shape) and tries another zone or pool meanwhile; ``QuotaExceeded``
is the account-wide counterpart, with no zone.

A transient error does not mean the call had no effect: a create answered with a 5xx or a
timeout may have made the VM, which is why creation must be idempotent.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Final, NewType, Protocol

from nodepool_operator.api import launch
from nodepool_operator.cloud import catalog

__all__ = [
    "UNAUTHORIZED_CODES",
    "CatalogSource",
    "CloudError",
    "CloudEvent",
    "CloudProvider",
    "EventSource",
    "InsufficientCapacity",
    "InvalidMachineSpec",
    "MachineSpec",
    "PermanentCloudError",
    "QuotaExceeded",
    "RateLimited",
    "TransientCloudError",
    "VirtualMachine",
    "VmConflict",
    "VmName",
    "VmState",
]

#: The codes the providers give a call the cloud refused to authenticate (simcloud's 401,
#: EC2's AuthFailure). The operator's startup check names such a refusal once, at ERROR,
#: with the fix; what runs after it says no more than a warning about the same refusal.
UNAUTHORIZED_CODES: Final = frozenset({"Unauthorized", "AuthFailure"})

VmName = NewType("VmName", str)
"""A VM's name, unique within the cloud account; also the name of the Node it becomes."""


class VmState(enum.StrEnum):
    """Where a VM is in its life. A VM that is gone is not listed at all."""

    PROVISIONING = "Provisioning"
    RUNNING = "Running"
    DELETING = "Deleting"


@dataclasses.dataclass(frozen=True, kw_only=True)
class MachineSpec:
    """The shape of one machine, in Kubernetes quantities (cpu "4" or "500m", memory "16Gi").

    ``zone``: where to place it; None lets the cloud choose.
    ``pool_uid``: the NodePool's uid, for a provider whose idempotency key must tell a
    pool from an older one of the same name (EC2's client token).
    ``launch``: the template's provider section; each provider reads its own part.
    ``node_labels`` and ``node_taints``: what the VM's kubelet registers its Node with, as
    user data tells a real one (``--node-labels``, ``--register-with-taints``; a taint as
    ``key[=value]:Effect``); a cloud whose VMs boot no kubelet of ours ignores them.
    """

    cpu: str
    memory: str
    pods: int
    zone: str | None = None
    pool_uid: str | None = None
    launch: launch.ProviderSection | None = None
    node_labels: tuple[tuple[str, str], ...] = ()
    node_taints: tuple[str, ...] = ()
    #: An instance type of the cloud's catalog (``CatalogSource``), and the capacity type
    #: to buy it as (``catalog.CAPACITY_TYPES``; None: on-demand). None: the cloud makes
    #: ``cpu`` and ``memory`` as asked (a cloud that sells any shape).
    instance_type: str | None = None
    capacity_type: catalog.CapacityType | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class VirtualMachine:
    """A VM as the cloud reports it at one moment."""

    name: VmName
    pool: str
    cpu: str
    memory: str
    state: VmState
    provider_id: str
    """The Node's ``spec.providerID``, e.g. ``simcloud:///<cluster>/<name>``."""
    created_at: float
    """Wall-clock epoch seconds, as the cloud recorded them."""
    zone: str | None = None
    """The zone the VM runs in: the one asked for, else the cloud's choice."""
    kubelet_joins: bool = True
    """False for a VM that runs but whose kubelet will never register (a simulated
    fault): its Node must never be made Ready by a simulator, so the registration
    timeout is what finds it."""
    boots_kubelet: bool = False
    """True for a VM that boots a kubelet of its own (simcloud's hollow kubelets): a
    simulator must never play its Node's kubelet, whatever the operator's flags say."""
    instance_type: str | None = None
    """The catalog's instance type it runs as; None when it was made as a bare shape."""
    capacity_type: catalog.CapacityType | None = None
    """How it is bought (on-demand or spot); None when it was made as a bare shape."""
    terminate_at: float | None = None
    """Set once the cloud has given notice it takes the VM back (a spot interruption):
    wall-clock epoch seconds when it will."""


class CloudProvider(Protocol):
    """VM lifecycle operations; every method may raise a ``CloudError``.

    Implementations do not retry: the caller's workqueue owns retry and backoff, and it can
    only do that well if it sees each failure (and ``RateLimited.retry_after``).
    """

    async def create_vm(self, *, name: VmName, pool: str, spec: MachineSpec) -> VirtualMachine:
        """Create the VM, or return it unchanged if a VM of that name exists in ``pool``.

        An existing VM is returned whatever its state (even ``DELETING``) and whatever its
        spec: the name, not the spec, is the idempotency key. Raises ``VmConflict`` if the
        name is taken by another pool.
        """
        ...

    async def delete_vm(self, name: VmName) -> None:
        """Start deleting the VM; a VM that is absent or already deleting is a success."""
        ...

    async def list_vms(self, *, pool: str) -> list[VirtualMachine]:
        """Every VM of ``pool`` that is not gone yet, including those still deleting."""
        ...

    async def get_vm(self, name: VmName) -> VirtualMachine | None:
        """The VM, or ``None`` if there is no such VM (or it is gone)."""
        ...

    async def close(self) -> None:
        """Release connections; the provider must not be used afterwards."""
        ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class CloudEvent:
    """Something the cloud tells about a VM without being asked (EC2's EventBridge
    messages). ``kind``: ``SpotInterruptionWarning`` (the cloud takes the VM back at
    ``terminate_at``), ``RebalanceRecommendation`` (it is at higher risk of that),
    ``ScheduledChange`` (maintenance will stop or retire it at ``terminate_at``),
    ``InstanceStateChange`` (it is being taken back, or stopped, now: ``state``).
    ``receipt``: what the source needs to forget it once handled (``EventSource``)."""

    kind: str
    name: VmName
    pool: str
    at: float
    terminate_at: float | None = None
    state: str | None = None
    receipt: str = ""


class EventSource(Protocol):
    """A cloud that tells of interruptions as they come. A reader takes events with
    ``events`` and says each is ``handled`` once acted on: one not said handled may come
    again (a queue's message becomes visible again; a restarted reader starts over), so
    acting on one twice must do no harm."""

    async def events(self, *, wait: float) -> list[CloudEvent]:
        """The next events, oldest first; waits up to ``wait`` seconds for one when there
        is none yet (a long poll), then answers the empty list."""
        ...

    async def handled(self, event: CloudEvent) -> None:
        """``event`` was acted on: it is not to be told again."""
        ...


class CatalogSource(Protocol):
    """A cloud that says what it sells: its instance types and priced offerings."""

    async def catalog(self) -> catalog.Catalog:
        """The catalog now (prices and availability change: callers cache it for a
        while, never for good); an empty one when the cloud makes any shape asked."""
        ...


class CloudError(Exception):
    """A cloud call failed. ``code`` is a stable machine-readable reason."""

    transient: bool = False
    code: str = "CloudError"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class TransientCloudError(CloudError):
    """The call may succeed if repeated later (timeout, connection error, 5xx)."""

    transient = True
    code = "Unavailable"


class RateLimited(TransientCloudError):  # noqa: N818 (named after the cloud's error code)
    """The cloud throttled the caller; wait ``retry_after`` seconds (if given) first."""

    code = "RateLimited"

    def __init__(self, message: str, *, retry_after: float | None, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after


class PermanentCloudError(CloudError):
    """Repeating the same call will fail the same way; it needs a change first."""

    transient = False
    code = "PermanentError"


class QuotaExceeded(PermanentCloudError):  # noqa: N818 (named after the cloud's error code)
    code = "QuotaExceeded"


class InsufficientCapacity(PermanentCloudError):  # noqa: N818 (named after the cloud's error code)
    """The cloud has no room now for ``shape`` in ``zone`` (EC2's
    ``InsufficientInstanceCapacity``, simcloud's ``InsufficientCapacity``).

    ``zone``: the zone refused; None when the VM's zone was the cloud's to choose and every
    zone it could use refused. ``shape``: what was asked, as the provider names it (an
    instance type; simcloud's ``<cpu>/<memory>``); None if the cloud did not say.
    """

    code = "InsufficientCapacity"

    def __init__(
        self, message: str, *, zone: str | None, shape: str | None, code: str | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.zone = zone
        self.shape = shape


class InvalidMachineSpec(PermanentCloudError):  # noqa: N818 (named after the cloud's error code)
    code = "InvalidMachineSpec"


class VmConflict(PermanentCloudError):  # noqa: N818 (named after the cloud's error code)
    code = "VmConflict"
