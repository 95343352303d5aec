"""``controllers.health``: a Node carrying the cloud's notice that it takes the VM back is
unhealthy from the notice on, Ready or not; a rebalance recommendation is not."""

from __future__ import annotations

from nodepool_operator.api import nodepool as nodepool_api
from nodepool_operator.controllers import health
from nodepool_operator.controllers.interruptions import notice
from nodepool_operator.runtime import conditions, testing
from nodepool_operator.runtime.client import Object

NOW = 1_800_000_000.0
SPEC = nodepool_api.NodePoolSpec(target_nodes=3)


def ready_node(created: float = NOW - 3_600) -> Object:
    return {
        "metadata": {"name": "p-0", "creationTimestamp": conditions.rfc3339(created)},
        "spec": {},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "lastTransitionTime": conditions.rfc3339(created + 30),
                }
            ]
        },
    }


def noticed(kind: str, *, at: float = NOW - 10) -> Object:
    node = ready_node()
    marks = notice.marks(node, notice.Notice(kind=kind, noticed_at=at, terminate_at=at + 120))
    testing.merge(node, marks)
    return node


def test_a_ready_node_with_a_spot_notice_is_unhealthy_from_the_notice() -> None:
    node = noticed(notice.SPOT_INTERRUPTION)
    assert health.unhealthy_from(node, SPEC) == NOW - 10
    assert health.is_unhealthy(node, SPEC, now=NOW)
    assert not health.is_unhealthy(ready_node(), SPEC, now=NOW)


def test_every_notice_that_ends_the_vm_counts_and_a_rebalance_does_not() -> None:
    for kind in (notice.SPOT_INTERRUPTION, notice.SCHEDULED_CHANGE, notice.STATE_CHANGE):
        assert health.is_unhealthy(noticed(kind), SPEC, now=NOW), kind
    assert health.interrupted_at(noticed(notice.REBALANCE)) is None
    assert not health.is_unhealthy(noticed(notice.REBALANCE), SPEC, now=NOW)


def test_a_notice_wins_over_a_later_not_ready_timeout() -> None:
    node = noticed(notice.SPOT_INTERRUPTION)
    node["status"]["conditions"][0].update(
        status="False", lastTransitionTime=conditions.rfc3339(NOW - 5)
    )
    assert health.unhealthy_from(node, SPEC) == NOW - 10
