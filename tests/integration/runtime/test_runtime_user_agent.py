"""The API server knows the operator by name: the audit log shows its User-Agent."""

from __future__ import annotations

import uuid
from importlib import metadata

from harness import wait_for
from integration.runtime.support import GADGETS, gadget
from nodepool_devtools.cluster.pytest_plugin import Cluster
from nodepool_operator.runtime.client import Client


async def test_the_audit_log_names_the_operator_as_user_agent(
    cluster: Cluster, client: Client, namespace: str
) -> None:
    log = cluster.audit_log()
    log.mark()
    name = f"g-{uuid.uuid4().hex[:6]}"
    await client.create(GADGETS, gadget(name, namespace))
    await client.delete(GADGETS, name, namespace=namespace)

    async def agents_of_our_writes() -> list[tuple[str, str]] | None:
        found = [
            (e.verb, e.user_agent)
            for e in log.events_since_mark()
            if e.resource == GADGETS.plural and e.name == name
        ]
        return found if len(found) == 2 else None

    expected = f"nodepool-operator/{metadata.version('nodepool-operator')}"
    assert await wait_for(agents_of_our_writes, within=10) == [
        ("create", expected),
        ("delete", expected),
    ]
