"""The JSON shapes simcloud's server and client share, and the one table of status codes.

Keys are camelCase, as in Kubernetes. A create request (``zone``, ``nodeLabels`` and
``nodeTaints`` optional)::

    {"pool": "pool-a", "cpu": "4", "memory": "16Gi", "pods": 110, "zone": "sim-1b",
     "nodeLabels": {"nodepool.dev/pool": "pool-a"},
     "nodeTaints": ["nodepool.dev/unregistered:NoSchedule"]}

``nodeLabels`` and ``nodeTaints`` are the VM's user data: what its kubelet registers its
Node with (``--node-labels``; ``--register-with-taints``, each ``key[=value]:Effect``), and
``pods`` its ``--max-pods``. ``instanceType`` and ``capacityType`` (optional) buy a
type of the catalog (``GET /v1/catalog``: Karpenter kwok's ``instance_types.json`` form,
``catalog.Catalog.to_json``; an empty list when simcloud sells any shape): the VM then
has that type's cpu and memory, and reports both fields. Only a simcloud that boots
kubelets (``--kubelets hollow``) uses the user data; it then reports the provider ID its
kubelets register, ``kubemark://<name>``, and ``"bootsKubelet": true`` on every VM, so
that an operator never annotates their Nodes for kwok.

A VM on the wire::

    {"name": "pool-a-0", "pool": "pool-a", "cpu": "4", "memory": "16Gi",
     "state": "Provisioning", "providerId": "simcloud:///prod/pool-a-0",
     "createdAt": 1764410000.25, "zone": "sim-1b"}

A VM whose kubelet never joins (a fault) also has ``"kubeletJoins": false``.

Every ``/v1`` call may carry ``?cluster=NAME``: the VM is made in that cluster, and only
that cluster's VMs are seen. Without it a call is unscoped (every cluster's VMs; a create
goes to the default cluster), for tests and admins.

An error is ``{"code": "QuotaExceeded", "message": "..."}`` with the status from
``STATUS_BY_CODE``; a 429 also has a ``Retry-After`` header in whole seconds. An
``InsufficientCapacity`` error (503, as EC2 answers its own with a 5xx) also carries
``"zone"`` (null: every zone the VM could go to) and ``"shape"`` (``<cpu>/<memory>``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Final

from nodepool_operator.api import fields
from nodepool_operator.cloud import catalog, provider
from nodepool_operator.cloud.simcloud import store

__all__ = [
    "STATUS_BY_CODE",
    "Faults",
    "SimCloudStats",
    "error_for_status",
    "error_json",
    "event_from_json",
    "event_to_json",
    "machine_from_json",
    "machine_to_json",
    "status_for_error",
    "vm_from_json",
    "vm_to_json",
]

STATUS_BY_CODE: Final[Mapping[str, int]] = {
    "InvalidRequest": 400,
    "Unauthorized": 401,
    provider.InvalidMachineSpec.code: 400,
    provider.QuotaExceeded.code: 403,
    provider.InsufficientCapacity.code: 503,
    "VmNotFound": 404,
    provider.VmConflict.code: 409,
    provider.RateLimited.code: 429,
    "InternalError": 500,
    provider.TransientCloudError.code: 503,
}


def status_for_error(error: provider.CloudError) -> int:
    """The HTTP status the server answers ``error`` with."""
    status = STATUS_BY_CODE.get(error.code)
    if status is not None:
        return status
    return 503 if error.transient else 400


def error_json(code: str, message: str, **details: str | None) -> dict[str, object]:
    return {"code": code, "message": message, **details}


def error_to_json(error: provider.CloudError) -> dict[str, object]:
    if isinstance(error, provider.InsufficientCapacity):
        return error_json(error.code, error.message, zone=error.zone, shape=error.shape)
    return error_json(error.code, error.message)


def error_for_status(
    status: int, *, body: object, retry_after: float | None
) -> provider.CloudError:
    """The typed error for a non-success answer; the status decides, the body refines.

    The status is trusted over the body's code because a proxy or a crashed server can
    answer with a status and no JSON at all.
    """
    code = body.get("code") if isinstance(body, dict) else None
    message = body.get("message") if isinstance(body, dict) else None
    code = code if isinstance(code, str) and code else None
    text = message if isinstance(message, str) and message else f"simcloud answered {status}"
    if status == 429:
        return provider.RateLimited(text, retry_after=retry_after)
    # Before the 5xx rule: capacity is answered with a 503, yet asking again at once for
    # the same zone and shape does not help.
    if code == provider.InsufficientCapacity.code and isinstance(body, dict):
        zone, shape = body.get("zone"), body.get("shape")
        return provider.InsufficientCapacity(
            text,
            zone=zone if isinstance(zone, str) else None,
            shape=shape if isinstance(shape, str) else None,
        )
    if status >= 500 or status == 408:
        return provider.TransientCloudError(text, code=code or f"HTTP{status}")
    if status == 403 and code == provider.QuotaExceeded.code:
        return provider.QuotaExceeded(text)
    if status == 400 and code in (None, provider.InvalidMachineSpec.code):
        return provider.InvalidMachineSpec(text)
    if status == 409:
        return provider.VmConflict(text)
    return provider.PermanentCloudError(text, code=code or f"HTTP{status}")


def machine_to_json(*, pool: str, spec: provider.MachineSpec) -> dict[str, object]:
    body: dict[str, object] = {
        "pool": pool,
        "cpu": spec.cpu,
        "memory": spec.memory,
        "pods": spec.pods,
    }
    if spec.zone is not None:
        body["zone"] = spec.zone
    if spec.node_labels:
        body["nodeLabels"] = dict(spec.node_labels)
    if spec.node_taints:
        body["nodeTaints"] = list(spec.node_taints)
    if spec.instance_type is not None:
        body["instanceType"] = spec.instance_type
    if spec.capacity_type is not None:
        body["capacityType"] = spec.capacity_type
    return body


def machine_from_json(obj: Mapping[str, object]) -> tuple[str, provider.MachineSpec]:
    """The pool and machine of a create request; raises the error a real cloud would."""
    pool = obj.get("pool")
    if not isinstance(pool, str):
        raise provider.PermanentCloudError("pool must be a string", code="InvalidRequest")
    cpu, memory, pods, zone = obj.get("cpu"), obj.get("memory"), obj.get("pods"), obj.get("zone")
    if not isinstance(cpu, str) or not isinstance(memory, str):
        raise provider.InvalidMachineSpec('cpu and memory must be strings, like "4" and "16Gi"')
    if isinstance(pods, bool) or not isinstance(pods, int):
        raise provider.InvalidMachineSpec("pods must be an integer")
    if zone is not None and not isinstance(zone, str):
        raise provider.InvalidMachineSpec("zone must be a string or absent")
    instance_type, capacity_type = obj.get("instanceType"), obj.get("capacityType")
    if instance_type is not None and (not isinstance(instance_type, str) or not instance_type):
        raise provider.InvalidMachineSpec("instanceType must be a non-empty string or absent")
    if capacity_type is not None and capacity_type not in catalog.CAPACITY_TYPES:
        kinds = ", ".join(catalog.CAPACITY_TYPES)
        raise provider.InvalidMachineSpec(f"capacityType must be one of {kinds}, or absent")
    labels, taints = obj.get("nodeLabels") or {}, obj.get("nodeTaints") or []
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise provider.InvalidMachineSpec("nodeLabels must map strings to strings")
    if not isinstance(taints, list) or not all(_is_taint(t) for t in taints):
        raise provider.InvalidMachineSpec('nodeTaints must be strings like "key=value:NoSchedule"')
    return pool, provider.MachineSpec(
        cpu=cpu,
        memory=memory,
        pods=pods,
        zone=zone,
        node_labels=tuple(sorted(labels.items())),
        node_taints=tuple(taints),
        instance_type=instance_type,
        capacity_type=_capacity_type(capacity_type),
    )


def _capacity_type(value: object) -> catalog.CapacityType | None:
    for kind in catalog.CAPACITY_TYPES:
        if value == kind:
            return kind
    return None


def _is_taint(taint: object) -> bool:
    """``key[=value]:Effect``, as kubelet's ``--register-with-taints`` takes one; no comma,
    since the flag joins them with commas."""
    if not isinstance(taint, str) or "," in taint:
        return False
    key_value, _, effect = taint.rpartition(":")
    return bool(key_value.partition("=")[0]) and effect in TAINT_EFFECTS


#: The effects a taint may have.
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def vm_to_json(vm: provider.VirtualMachine) -> dict[str, object]:
    return {
        "name": vm.name,
        "pool": vm.pool,
        "cpu": vm.cpu,
        "memory": vm.memory,
        "state": vm.state.value,
        "providerId": vm.provider_id,
        "createdAt": vm.created_at,
        "zone": vm.zone,
        "kubeletJoins": vm.kubelet_joins,
        "bootsKubelet": vm.boots_kubelet,
        **({"instanceType": vm.instance_type} if vm.instance_type is not None else {}),
        **({"capacityType": vm.capacity_type} if vm.capacity_type is not None else {}),
        **({"terminateAt": vm.terminate_at} if vm.terminate_at is not None else {}),
    }


def vm_from_json(data: object) -> provider.VirtualMachine:
    """Raises ``ValueError`` if ``data`` is not a VM as ``vm_to_json`` writes it."""
    obj = _object(data)
    zone = obj.get("zone")
    if zone is not None and not isinstance(zone, str):
        raise ValueError(f"zone must be a string or null, not {zone!r}")
    return provider.VirtualMachine(
        name=provider.VmName(fields.required_string(obj, "name")),
        pool=fields.required_string(obj, "pool"),
        cpu=fields.required_string(obj, "cpu"),
        memory=fields.required_string(obj, "memory"),
        state=provider.VmState(fields.required_string(obj, "state")),
        provider_id=fields.required_string(obj, "providerId"),
        created_at=fields.required_number(obj, "createdAt"),
        zone=zone,
        kubelet_joins=fields.boolean(obj, "kubeletJoins", default=True),
        boots_kubelet=fields.boolean(obj, "bootsKubelet", default=False),
        instance_type=fields.optional_string(obj, "instanceType"),
        capacity_type=_capacity_type(obj.get("capacityType")),
        terminate_at=fields.optional_number(obj, "terminateAt"),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Faults:
    """The faults simcloud injects into ``/v1`` calls; changeable at run time.

    ``transient_error_rate`` is the fraction of calls failed with a 503 (before the call
    takes effect) or a 500 (after it took effect, so the caller cannot tell). Rate limiting
    is a token bucket of ``rate_limit_burst`` tokens refilled at ``rate_limit_per_second``
    (``None``: no limit). ``quota_max_vms`` caps the VMs that exist at once, deleting ones
    included (``None``: no quota). ``slow_call_seconds`` is added to every call after it
    took effect, so a client that times out has still created its VM. ``list_empty``
    makes every VM listing answer 200 with no items (a cloud that lost its state, or a
    wrong endpoint) while gets still find the VMs.

    ``capacity`` limits how many VMs of an offering (any of a zone, a shape, an
    ``instanceType``, a ``capacityType``: ``spot`` or ``on-demand``, a VM made without an
    instance type being on-demand) may exist at once; a create beyond one is refused
    with ``InsufficientCapacity`` (``maxVms`` 0: none at all). VMs created while they
    match an offering of ``kubelet_never_joins`` run but never get a Ready Node: they
    carry ``kubelet_joins=False``. ``partitioned`` names VMs cut off from the cluster:
    with hollow kubelets (``--kubelets hollow``) the kubelet of each is stopped (SIGSTOP:
    its Lease and status stop, its pods stay) until the name leaves the list (SIGCONT);
    with kwok it changes nothing. As JSON::

        {"capacity": [{"zone": "sim-1a", "maxVms": 0},
                      {"cpu": "8", "memory": "32Gi", "maxVms": 2},
                      {"zone": "sim-1b", "instanceType": "c-2x", "capacityType": "spot",
                       "maxVms": 0}],
         "kubeletNeverJoins": [{"zone": "sim-1c"}],
         "partitioned": ["general-0"],
         "spotInterruptions": [{"zone": "sim-1a", "instanceType": "c-2x", "perHour": 6}]}

    ``spotInterruptions`` gives running spot VMs (of the zone and instance type given,
    else any) interruption notices at random, at ``perHour`` notices per VM per hour:
    the VM then shows ``terminateAt`` and the event stream tells it; the cloud takes it
    back at that time (``--spot-notice-seconds`` after the notice).
    """

    transient_error_rate: float = 0.0
    rate_limit_per_second: float | None = None
    rate_limit_burst: int = 10
    quota_max_vms: int | None = None
    slow_call_seconds: float = 0.0
    list_empty: bool = False
    capacity: tuple[store.CapacityLimit, ...] = ()
    kubelet_never_joins: tuple[store.MachineSelector, ...] = ()
    partitioned: frozenset[str] = frozenset()
    spot_interruptions: tuple[store.InterruptionRate, ...] = ()

    def __post_init__(self) -> None:
        if not 0.0 <= self.transient_error_rate <= 1.0:
            raise ValueError(f"transient_error_rate must be in [0, 1]: {self.transient_error_rate}")
        if self.rate_limit_per_second is not None and not self.rate_limit_per_second > 0:
            raise ValueError(f"rate_limit_per_second must be > 0: {self.rate_limit_per_second}")
        if self.rate_limit_burst < 1:
            raise ValueError(f"rate_limit_burst must be >= 1: {self.rate_limit_burst}")
        if self.quota_max_vms is not None and self.quota_max_vms < 0:
            raise ValueError(f"quota_max_vms must be >= 0: {self.quota_max_vms}")
        if not self.slow_call_seconds >= 0.0:
            raise ValueError(f"slow_call_seconds must be >= 0: {self.slow_call_seconds}")

    def to_json(self) -> dict[str, object]:
        return {
            "transientErrorRate": self.transient_error_rate,
            "rateLimitPerSecond": self.rate_limit_per_second,
            "rateLimitBurst": self.rate_limit_burst,
            "quotaMaxVms": self.quota_max_vms,
            "slowCallSeconds": self.slow_call_seconds,
            "listEmpty": self.list_empty,
            "capacity": [
                {**_offering_to_json(c.offering), "maxVms": c.max_vms} for c in self.capacity
            ],
            "kubeletNeverJoins": [_offering_to_json(o) for o in self.kubelet_never_joins],
            "partitioned": sorted(self.partitioned),
            "spotInterruptions": [_rate_to_json(r) for r in self.spot_interruptions],
        }

    def merged(self, patch: object) -> Faults:
        """These faults with the keys present in ``patch`` replaced (null clears a limit).

        Raises ``ValueError`` on unknown keys or bad values, so a typo in a test or a curl
        command fails loudly instead of silently injecting nothing.
        """
        obj = _object_of(patch, set(self.to_json()), "fault")
        return Faults(
            transient_error_rate=(
                fields.required_number(obj, "transientErrorRate")
                if "transientErrorRate" in obj
                else self.transient_error_rate
            ),
            rate_limit_per_second=(
                fields.optional_number(obj, "rateLimitPerSecond")
                if "rateLimitPerSecond" in obj
                else self.rate_limit_per_second
            ),
            rate_limit_burst=(
                fields.required_integer(obj, "rateLimitBurst")
                if "rateLimitBurst" in obj
                else self.rate_limit_burst
            ),
            quota_max_vms=(
                fields.optional_integer(obj, "quotaMaxVms")
                if "quotaMaxVms" in obj
                else self.quota_max_vms
            ),
            slow_call_seconds=(
                fields.required_number(obj, "slowCallSeconds")
                if "slowCallSeconds" in obj
                else self.slow_call_seconds
            ),
            list_empty=fields.required_boolean(obj, "listEmpty")
            if "listEmpty" in obj
            else self.list_empty,
            capacity=(
                tuple(_capacity_from_json(item) for item in _list(obj, "capacity"))
                if "capacity" in obj
                else self.capacity
            ),
            kubelet_never_joins=(
                tuple(_offering_from_json(item) for item in _list(obj, "kubeletNeverJoins"))
                if "kubeletNeverJoins" in obj
                else self.kubelet_never_joins
            ),
            partitioned=(
                frozenset(_vm_name(item) for item in _list(obj, "partitioned"))
                if "partitioned" in obj
                else self.partitioned
            ),
            spot_interruptions=(
                tuple(_rate_from_json(item) for item in _list(obj, "spotInterruptions"))
                if "spotInterruptions" in obj
                else self.spot_interruptions
            ),
        )


def _vm_name(data: object) -> str:
    if not isinstance(data, str) or not data:
        raise ValueError(f"partitioned must list VM names: {data!r}")
    return data


def _offering_to_json(offering: store.MachineSelector) -> dict[str, object]:
    return fields.compact(
        {
            "zone": offering.zone,
            "cpu": offering.cpu,
            "memory": offering.memory,
            "instanceType": offering.instance_type,
            "capacityType": offering.capacity_type,
        }
    )


def _offering_from_json(data: object) -> store.MachineSelector:
    obj = _object_of(data, {"zone", "cpu", "memory", "instanceType", "capacityType"}, "offering")
    capacity_type = fields.optional_string(obj, "capacityType")
    if capacity_type is not None and capacity_type not in catalog.CAPACITY_TYPES:
        kinds = ", ".join(catalog.CAPACITY_TYPES)
        raise ValueError(f"capacityType must be one of {kinds}: {capacity_type!r}")
    return store.MachineSelector(
        zone=fields.optional_string(obj, "zone"),
        cpu=fields.optional_string(obj, "cpu"),
        memory=fields.optional_string(obj, "memory"),
        instance_type=fields.optional_string(obj, "instanceType"),
        capacity_type=_capacity_type(capacity_type),
    )


def _rate_to_json(rate: store.InterruptionRate) -> dict[str, object]:
    return fields.compact(
        {"zone": rate.zone, "instanceType": rate.instance_type, "perHour": rate.per_hour}
    )


def _rate_from_json(data: object) -> store.InterruptionRate:
    obj = _object_of(data, {"zone", "instanceType", "perHour"}, "spotInterruptions")
    return store.InterruptionRate(
        per_hour=fields.required_number(obj, "perHour"),
        zone=fields.optional_string(obj, "zone"),
        instance_type=fields.optional_string(obj, "instanceType"),
    )


def event_to_json(event: store.CloudEventRecord) -> dict[str, object]:
    return fields.compact(
        {
            "id": event.id,
            "kind": event.kind,
            "name": event.name,
            "pool": event.pool,
            "at": event.at,
            "terminateAt": event.terminate_at,
        }
    )


def event_from_json(data: object) -> tuple[int, provider.CloudEvent]:
    """The event's id in the stream and the event; raises ``ValueError`` if ``data`` is
    not an event as ``event_to_json`` writes it."""
    obj = _object(data)
    number = fields.required_integer(obj, "id")
    kind = fields.required_string(obj, "kind")
    return number, provider.CloudEvent(
        kind=kind,
        name=provider.VmName(fields.required_string(obj, "name")),
        pool=fields.required_string(obj, "pool"),
        at=fields.required_number(obj, "at"),
        terminate_at=fields.optional_number(obj, "terminateAt"),
        state="Deleting" if kind == store.STATE_CHANGE else None,
        receipt=str(number),
    )


def _capacity_from_json(data: object) -> store.CapacityLimit:
    obj = dict(_object(data))
    max_vms = fields.required_integer(obj, "maxVms")
    del obj["maxVms"]
    return store.CapacityLimit(offering=_offering_from_json(obj), max_vms=max_vms)


def _list(obj: Mapping[str, object], key: str) -> list[object]:
    value = obj[key]
    if value is None:
        return []  # null clears, as for the other faults
    if not isinstance(value, list):
        raise ValueError(f"{key} must be a list")
    return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimCloudStats:
    """What simcloud has been asked, so tests can bound the operator's request rate.

    ``calls`` and ``responses`` count ``/v1`` calls since the server process started (or
    the last reset), keyed by ``"METHOD /route/{param}"`` and by status code.
    ``creations_by_name`` is kept in the state file: it survives restarts and resets, so
    "never two VMs for one name" can be checked across both.
    """

    calls: Mapping[str, int]
    responses: Mapping[int, int]
    responses_by_call: Mapping[str, Mapping[int, int]]
    deletions_started: int
    creations_by_name: Mapping[str, int]

    @property
    def calls_total(self) -> int:
        return sum(self.calls.values())

    @property
    def vms_created(self) -> int:
        return sum(self.creations_by_name.values())

    def to_json(self) -> dict[str, object]:
        return {
            "calls": dict(self.calls),
            "callsTotal": self.calls_total,
            "responses": {str(k): v for k, v in self.responses.items()},
            "responsesByCall": {
                call: {str(k): v for k, v in by_code.items()}
                for call, by_code in self.responses_by_call.items()
            },
            "deletionsStarted": self.deletions_started,
            "vmsCreated": self.vms_created,
            "creationsByName": dict(self.creations_by_name),
        }

    @classmethod
    def from_json(cls, data: object) -> SimCloudStats:
        obj = _object(data)
        return cls(
            calls=_counts(obj.get("calls")),
            responses=_codes(obj.get("responses")),
            responses_by_call={
                call: _codes(by_code)
                for call, by_code in _object(obj.get("responsesByCall")).items()
            },
            deletions_started=fields.required_integer(obj, "deletionsStarted"),
            creations_by_name=_counts(obj.get("creationsByName")),
        )


def _object(data: object) -> dict[str, object]:
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ValueError(f"expected a JSON object, not {type(data).__name__}")
    return data


def _object_of(data: object, keys: set[str], what: str) -> dict[str, object]:
    """``data`` as a JSON object whose keys are all in ``keys``; a ``ValueError`` naming
    the unknown ``what`` keys otherwise."""
    obj = _object(data)
    unknown = set(obj) - keys
    if unknown:
        raise ValueError(f"unknown {what} keys: {sorted(unknown)}")
    return obj


def _counts(data: object) -> dict[str, int]:
    obj = _object(data)
    return {key: fields.required_integer(obj, key) for key in obj}


def _codes(data: object) -> dict[int, int]:
    return {int(code): count for code, count in _counts(data).items()}
