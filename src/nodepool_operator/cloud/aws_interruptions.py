"""EC2's interruption messages, read from the SQS queue EventBridge delivers them to.

The queue (one per cluster: EventBridge cannot filter by tag, so every queue of the
account hears of every instance) receives four kinds of EventBridge messages, as
Karpenter's interruption controller reads them (rules and queue: ``deploy/aws/``):

* ``EC2 Spot Instance Interruption Warning``: EC2 takes the spot instance back two
  minutes after the message's ``time`` -> ``SpotInterruptionWarning``;
* ``EC2 Instance Rebalance Recommendation``: the spot instance is at higher risk of
  that -> ``RebalanceRecommendation``;
* ``AWS Health Event`` of category ``scheduledChange`` for EC2: maintenance will stop or
  retire the instances it names at its ``startTime`` -> ``ScheduledChange``, one event
  per instance;
* ``EC2 Instance State-change Notification``: ``stopping``, ``stopped``,
  ``shutting-down`` or ``terminated`` -> ``InstanceStateChange`` (``state``).

An event names the VM by its ``nodepool.dev/vm-name`` tag, looked up among the cluster's
instances (``vm_of``). A message is deleted once every event made from it is handled
(``handled``), so one a crashed reader never acted on comes again after the queue's
visibility timeout. A message that names no instance of this cluster, a state change to
``pending`` or ``running``, a message this reader does not know, or one it cannot read is
logged (at debug for the first two, as they are the queue's daily traffic) and deleted
at once: nothing here will ever act on it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from nodepool_operator import timestamps
from nodepool_operator.cloud import aws_errors, provider

if TYPE_CHECKING:
    from types_aiobotocore_sqs import SQSClient

__all__ = [
    "REBALANCE_RECOMMENDATION",
    "SCHEDULED_CHANGE",
    "SPOT_INTERRUPTION_WARNING",
    "SPOT_NOTICE_SECONDS",
    "STATE_CHANGE",
    "SqsEvents",
]

log = logging.getLogger(__name__)

SPOT_INTERRUPTION_WARNING: Final = "SpotInterruptionWarning"
REBALANCE_RECOMMENDATION: Final = "RebalanceRecommendation"
SCHEDULED_CHANGE: Final = "ScheduledChange"
STATE_CHANGE: Final = "InstanceStateChange"
#: EC2 takes a spot instance back two minutes after its warning.
SPOT_NOTICE_SECONDS: Final = 120.0
_LEAVING_STATES: Final = frozenset({"stopping", "stopped", "shutting-down", "terminated"})
#: SQS answers at most 10 messages and waits at most 20 s per receive.
_MAX_MESSAGES: Final = 10
_MAX_WAIT: Final = 20

#: instance id -> (VM name, pool), or None for an instance that is not this cluster's.
VmOf = Callable[[str], Awaitable[tuple[provider.VmName, str] | None]]


class SqsEvents:
    """``provider.EventSource`` over one SQS queue of EventBridge messages."""

    def __init__(self, *, queue_url: str, client: Callable[[], Awaitable[SQSClient]], vm_of: VmOf):
        self._queue_url = queue_url
        self._client = client
        self._vm_of = vm_of
        # receipt -> events made from its message not handled yet
        self._outstanding: dict[str, int] = {}

    async def events(self, *, wait: float) -> list[provider.CloudEvent]:
        sqs = await self._client()
        try:
            answer = await sqs.receive_message(
                QueueUrl=self._queue_url,
                MaxNumberOfMessages=_MAX_MESSAGES,
                WaitTimeSeconds=max(0, min(_MAX_WAIT, int(wait))),
            )
        except Exception as error:
            raise aws_errors.classify(error, what="ReceiveMessage") from error
        found: list[provider.CloudEvent] = []
        for message in answer.get("Messages", []):
            receipt = str(message.get("ReceiptHandle", ""))
            made = await self._read(str(message.get("Body", "")), receipt=receipt)
            if not made:
                await self._delete(receipt)
                continue
            self._outstanding[receipt] = len(made)
            found.extend(made)
        return found

    async def handled(self, event: provider.CloudEvent) -> None:
        left = self._outstanding.get(event.receipt, 1) - 1
        if left > 0:
            self._outstanding[event.receipt] = left
            return
        self._outstanding.pop(event.receipt, None)
        await self._delete(event.receipt)

    async def _delete(self, receipt: str) -> None:
        sqs = await self._client()
        try:
            await sqs.delete_message(QueueUrl=self._queue_url, ReceiptHandle=receipt)
        except Exception as error:
            raise aws_errors.classify(error, what="DeleteMessage") from error

    async def _read(self, body: str, *, receipt: str) -> list[provider.CloudEvent]:
        """The events of one message; empty when nothing here will act on it."""
        try:
            message = json.loads(body)
            kind, instances, due, state = _meaning(message)
            at = timestamps.parse_rfc3339(str(message.get("time", "")))
        except (ValueError, TypeError, AttributeError, KeyError) as error:
            log.warning("event=interruption-message-unreadable error=%r body=%.200s", error, body)
            return []
        if kind is None:
            detail_type = message.get("detail-type")
            # A state change to running, or a health event of another kind, is the queue's
            # daily traffic; a message of a kind no rule here sends is worth a look.
            level = logging.DEBUG if detail_type in (_STATE, _HEALTH) else logging.WARNING
            log.log(level, "event=interruption-message-ignored detail_type=%r", detail_type)
            return []
        if kind == SPOT_INTERRUPTION_WARNING and at is not None:
            due = at + SPOT_NOTICE_SECONDS
        made = []
        for instance in instances:
            vm = await self._vm_of(instance)
            if vm is None:
                log.debug("event=interruption-message-not-ours instance=%s kind=%s", instance, kind)
                continue
            name, pool = vm
            when = at if at is not None else 0.0
            made.append(
                provider.CloudEvent(
                    kind=kind,
                    name=name,
                    pool=pool,
                    at=when,
                    terminate_at=due,
                    state=state,
                    receipt=receipt,
                )
            )
        return made


_SPOT: Final = "EC2 Spot Instance Interruption Warning"
_REBALANCE: Final = "EC2 Instance Rebalance Recommendation"
_HEALTH: Final = "AWS Health Event"
_STATE: Final = "EC2 Instance State-change Notification"


def _meaning(message: Mapping[str, Any]) -> tuple[str | None, list[str], float | None, str | None]:
    """(kind, instance ids, when the change is due, new state) of one EventBridge message;
    kind None: a message nothing here acts on."""
    detail_type = message.get("detail-type")
    detail = message.get("detail") or {}
    if detail_type == _SPOT:
        return SPOT_INTERRUPTION_WARNING, [str(detail["instance-id"])], None, None
    if detail_type == _REBALANCE:
        return REBALANCE_RECOMMENDATION, [str(detail["instance-id"])], None, None
    if detail_type == _HEALTH:
        if detail.get("service") != "EC2" or detail.get("eventTypeCategory") != "scheduledChange":
            return None, [], None, None
        instances = [str(e["entityValue"]) for e in detail.get("affectedEntities") or ()]
        due = timestamps.parse_rfc3339(str(detail.get("startTime", "")))
        return SCHEDULED_CHANGE, instances, due, None
    if detail_type == _STATE:
        state = str(detail["state"])
        if state not in _LEAVING_STATES:
            return None, [], None, None
        return STATE_CHANGE, [str(detail["instance-id"])], None, state
    return None, [], None, None
