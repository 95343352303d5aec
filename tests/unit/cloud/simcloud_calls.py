"""Calls the simcloud tests make the same way in more than one module."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

import pytest

from nodepool_operator.cloud import credentials, provider
from nodepool_operator.cloud.simcloud import client

Serving = Callable[..., AbstractAsyncContextManager[client.SimCloudClient]]
"""The ``serving`` fixture: ``async with serving(clock=..., **config_changes) as cloud``."""

CloudErrorT = TypeVar("CloudErrorT", bound=provider.CloudError)


async def get_vm_error(
    endpoint: str,
    token: credentials.TokenSource,
    name: provider.VmName,
    expected: type[CloudErrorT],
) -> CloudErrorT:
    """The error a fresh client of ``endpoint`` holding ``token`` meets when it asks for VM
    ``name``: one of ``expected``, or the test fails."""
    async with client.SimCloudClient(endpoint, token=token) as cloud:
        with pytest.raises(expected) as raised:
            await cloud.get_vm(name)
    return raised.value
