"""The error hierarchy, the status-code mapping both sides share, and request validation."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodepool_operator.cloud import provider
from nodepool_operator.cloud.simcloud import store, wire


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (provider.TransientCloudError("x"), True),
        (provider.RateLimited("x", retry_after=1.0), True),
        (provider.PermanentCloudError("x"), False),
        (provider.QuotaExceeded("x"), False),
        (provider.InvalidMachineSpec("x"), False),
        (provider.VmConflict("x"), False),
    ],
)
def test_every_cloud_error_says_whether_retrying_can_help(
    error: provider.CloudError, transient: bool
) -> None:
    assert isinstance(error, provider.CloudError)
    assert error.transient is transient


@pytest.mark.parametrize(
    ("status", "code", "expected", "expected_code"),
    [
        (429, "RateLimited", provider.RateLimited, "RateLimited"),
        (500, "InternalError", provider.TransientCloudError, "InternalError"),
        (502, None, provider.TransientCloudError, "HTTP502"),
        (503, "Unavailable", provider.TransientCloudError, "Unavailable"),
        (403, "QuotaExceeded", provider.QuotaExceeded, "QuotaExceeded"),
        (403, "Forbidden", provider.PermanentCloudError, "Forbidden"),
        (400, "InvalidMachineSpec", provider.InvalidMachineSpec, "InvalidMachineSpec"),
        (400, "InvalidRequest", provider.PermanentCloudError, "InvalidRequest"),
        (409, "VmConflict", provider.VmConflict, "VmConflict"),
        (404, None, provider.PermanentCloudError, "HTTP404"),
    ],
)
def test_status_decides_the_error_class_and_the_body_refines_it(
    status: int, code: str | None, expected: type[provider.CloudError], expected_code: str
) -> None:
    body = None if code is None else {"code": code, "message": "m"}

    error = wire.error_for_status(status, body=body, retry_after=None)

    assert type(error) is expected
    assert error.code == expected_code


@pytest.mark.parametrize(
    "error",
    [
        provider.QuotaExceeded("x"),
        provider.InvalidMachineSpec("x"),
        provider.VmConflict("x"),
        provider.RateLimited("x", retry_after=3.0),
        provider.TransientCloudError("x"),
        provider.InsufficientCapacity("x", zone="sim-1a", shape="4/16Gi"),
        provider.InsufficientCapacity("x", zone=None, shape="4/16Gi"),
    ],
)
def test_server_status_maps_back_to_the_same_error_class(error: provider.CloudError) -> None:
    status = wire.status_for_error(error)

    back = wire.error_for_status(status, body=wire.error_to_json(error), retry_after=3.0)

    assert type(back) is type(error)
    if isinstance(error, provider.InsufficientCapacity):
        assert isinstance(back, provider.InsufficientCapacity)
        assert (back.zone, back.shape) == (error.zone, error.shape)


def test_faults_patch_with_null_clears_a_limit() -> None:
    faults = wire.Faults(quota_max_vms=3, transient_error_rate=0.5)

    patched = faults.merged({"quotaMaxVms": None})

    assert patched == wire.Faults(quota_max_vms=None, transient_error_rate=0.5)


@pytest.mark.parametrize(
    "patch", [{"quotaMaxVM": 1}, {"transientErrorRate": 2.0}, {"rateLimitBurst": True}]
)
def test_faults_patch_with_a_bad_key_or_value_is_rejected(patch: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"."):
        wire.Faults().merged(patch)


@settings(max_examples=50, deadline=None)
@given(
    cpu=st.integers(min_value=1, max_value=10**6),
    millicores=st.booleans(),
    memory=st.integers(min_value=1, max_value=10**6),
    suffix=st.sampled_from(["", "k", "M", "G", "T", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]),
)
def test_any_positive_kubernetes_quantity_is_a_valid_spec(
    cpu: int, millicores: bool, memory: int, suffix: str
) -> None:
    spec = provider.MachineSpec(
        cpu=f"{cpu}m" if millicores else str(cpu), memory=f"{memory}{suffix}", pods=1
    )

    store.validate_request(name="vm-0", pool="pool", spec=spec)


@settings(max_examples=50, deadline=None)
@given(amount=st.integers(max_value=0), suffix=st.sampled_from(["", "m", "Mi", "Gi"]))
def test_no_zero_or_negative_quantity_is_a_valid_spec(amount: int, suffix: str) -> None:
    for spec in (
        provider.MachineSpec(cpu=f"{amount}{suffix}", memory="1Gi", pods=1),
        provider.MachineSpec(cpu="1", memory=f"{amount}{suffix}", pods=1),
    ):
        with pytest.raises(provider.InvalidMachineSpec):
            store.validate_request(name="vm-0", pool="pool", spec=spec)


@pytest.mark.parametrize("zone", [None, "eu-west-1a"])
def test_a_create_request_round_trips_with_or_without_a_zone(zone: str | None) -> None:
    spec = provider.MachineSpec(cpu="4", memory="16Gi", pods=110, zone=zone)

    body = wire.machine_to_json(pool="pool-a", spec=spec)

    assert ("zone" in body) == (zone is not None)
    assert wire.machine_from_json(json.loads(json.dumps(body))) == ("pool-a", spec)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"cpu": "4", "memory": "1Gi", "pods": 1}, provider.PermanentCloudError),
        ({"pool": "p", "cpu": 4, "memory": "1Gi", "pods": 1}, provider.InvalidMachineSpec),
        ({"pool": "p", "cpu": "4", "memory": "1Gi", "pods": True}, provider.InvalidMachineSpec),
        (
            {"pool": "p", "cpu": "4", "memory": "1Gi", "pods": 1, "zone": 3},
            provider.InvalidMachineSpec,
        ),
    ],
)
def test_a_malformed_create_request_is_refused_for_good(
    body: dict[str, object], error: type[provider.CloudError]
) -> None:
    with pytest.raises(error) as raised:
        wire.machine_from_json(body)
    assert not raised.value.transient


def test_a_vm_zone_round_trips_on_the_wire() -> None:
    vm = provider.VirtualMachine(
        name=provider.VmName("p-0"),
        pool="p",
        cpu="4",
        memory="16Gi",
        state=provider.VmState.RUNNING,
        provider_id="simcloud:///p-0",
        created_at=1.5,
        zone="eu-west-1c",
    )
    assert wire.vm_from_json(json.loads(json.dumps(wire.vm_to_json(vm)))) == vm
