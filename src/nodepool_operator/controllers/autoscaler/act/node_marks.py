"""Consolidation's act step, the only writer: each mark a fact written on the Node
(stamp, taint, their removal), and one event per reason a Node stays or goes.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping, Set
from typing import Any

from nodepool_operator.api import wellknown
from nodepool_operator.controllers.autoscaler import metrics
from nodepool_operator.controllers.autoscaler.decide import consolidation_replace
from nodepool_operator.controllers.autoscaler.decide.consolidation_choice import Marks
from nodepool_operator.controllers.autoscaler.decide.consolidation_replace import Replacement
from nodepool_operator.controllers.autoscaler.decide.consolidation_rules import Kept, Review
from nodepool_operator.controllers.autoscaler.snapshot.consolidation_views import NodeView
from nodepool_operator.runtime import conditions, errors, kinds
from nodepool_operator.runtime.client import Client, Object
from nodepool_operator.runtime.events import EventRecorder
from nodepool_operator.runtime.informer import Informer

__all__ = ["NodeMarks"]

log = logging.getLogger(__name__)


class NodeMarks:
    """Writes what consolidation decided (``decide.Marks``) on Nodes, and the events that
    say why a Node stays or goes."""

    def __init__(self, *, client: Client, nodes: Informer, recorder: EventRecorder) -> None:
        self.client = client
        self.nodes = nodes
        self.recorder = recorder
        # Node -> (rule, pod) last told, so that a Node kept for the same reason scan after
        # scan is told once (a cache only: after a restart it is told once more).
        self._told: dict[str, tuple[str, str | None]] = {}

    async def apply(self, marks: Marks, *, autoscaler: Object | None, now: float) -> list[str]:
        """Write ``marks`` in order (clears first: a Node kept never waits behind one
        going); returns the names of the Nodes tainted now. A write refused (409, gone)
        is left to the next pass, which decides again from what it then reads."""
        for view, since in marks.clear:
            await self._clear(view, since=since)
        for view, replacement in marks.call_off:
            await self._call_off(view, replacement, now=now)
        for view in marks.untaint:
            await self._untaint(view)
        if autoscaler is not None:
            await self._tell_kept(autoscaler, marks.kept)
        for view in marks.stamp:
            await self._stamp(view, now)
        for view, replacement in marks.replace:
            await self._replace(view, replacement, autoscaler=autoscaler, now=now)
        return [view.name for view in marks.taint if await self._taint(view)]

    # -- writing --------------------------------------------------------------------------

    async def _patch(self, view: NodeView, body: Mapping[str, Any]) -> bool:
        """A merge patch with the resourceVersion precondition (a taint list is replaced
        whole): a 409 or a Node gone leaves it to the next pass."""
        patch = {
            **body,
            "metadata": {
                **body.get("metadata", {}),
                "resourceVersion": view.obj["metadata"].get("resourceVersion"),
            },
        }
        try:
            await self.client.patch(kinds.NODES, view.name, patch)
        except (errors.Conflict, errors.NotFound):
            return False
        metrics.nodepool_autoscaler_consolidation_node_writes_total.inc()
        return True

    async def _stamp(self, view: NodeView, now: float) -> None:
        annotations = {wellknown.UNNEEDED_SINCE_ANNOTATION: conditions.rfc3339(now)}
        if await self._patch(view, {"metadata": {"annotations": annotations}}):
            log.info("event=node-unneeded node=%s usage=%.2f", view.name, view.usage)

    async def _taint(self, view: NodeView) -> bool:
        taints = list((view.obj.get("spec") or {}).get("taints") or ())
        taints.append({"key": wellknown.CONSOLIDATING_TAINT_KEY, "effect": "NoSchedule"})
        if not await self._patch(view, {"spec": {"taints": taints}}):
            return False
        # No event here: the taint shows on the Node, and the one event a Node gets is
        # ConsolidationRemoving, once it is named (or ConsolidationKept).
        log.info(
            "event=node-consolidating node=%s usage=%.2f pods=%d",
            view.name,
            view.usage,
            len(view.to_move),
        )
        return True

    async def _replace(
        self, view: NodeView, replacement: Replacement, *, autoscaler: Object | None, now: float
    ) -> None:
        """A replacement's victim: the taint and the replacement's mark in one write (the
        record a restarted operator continues from), and the event that names both."""
        taints = list((view.obj.get("spec") or {}).get("taints") or ())
        taints.append({"key": wellknown.CONSOLIDATING_TAINT_KEY, "effect": "NoSchedule"})
        mark = consolidation_replace.mark(replacement, now=now)
        body = {
            "metadata": {"annotations": {consolidation_replace.REPLACEMENT_ANNOTATION: mark}},
            "spec": {"taints": taints},
        }
        if not await self._patch(view, body):
            return
        log.info(
            "event=node-replacing node=%s offering=%s price=%.4f replaced=%.4f",
            view.name,
            "/".join(replacement.offering),
            replacement.price_per_hour,
            replacement.replaced_per_hour,
        )
        message = f"node {view.name} is to go: {replacement.describe()}; the new node first"
        with contextlib.suppress(errors.ApiError):
            await self.recorder.event(
                _node_ref(view.obj), type="Normal", reason="ConsolidationReplacing", message=message
            )
            if autoscaler is not None and view.name == replacement.victims[0]:
                await self.recorder.event(
                    autoscaler, type="Normal", reason="ConsolidationReplacing", message=message
                )

    async def _clear(
        self, view: NodeView, *, since: float | None, called_off: str | None = None
    ) -> bool:
        """Remove the taint and a replacement's mark, and the stamp (or restart it at
        ``since``); ``called_off``: the call-off record written with them. Whether the
        write was made."""
        stamp = None if since is None else conditions.rfc3339(since)
        annotations = {
            wellknown.UNNEEDED_SINCE_ANNOTATION: stamp,
            consolidation_replace.REPLACEMENT_ANNOTATION: None,
        }
        if called_off is not None:
            annotations[consolidation_replace.CALLED_OFF_ANNOTATION] = called_off
        body: dict[str, Any] = {"metadata": {"annotations": annotations}}
        if view.tainted:
            taints = [
                t
                for t in (view.obj.get("spec") or {}).get("taints") or ()
                if t.get("key") != wellknown.CONSOLIDATING_TAINT_KEY
            ]
            body["spec"] = {"taints": taints}
        written = await self._patch(view, body)
        if written and view.tainted:
            log.info("event=node-consolidation-called-off node=%s", view.name)
        return written

    async def _call_off(self, view: NodeView, replacement: Replacement, *, now: float) -> None:
        """A victim kept because its replacement's re-check failed: as ``_clear``, with the
        call-off recorded in the same write (the same replacement is held back)."""
        record = consolidation_replace.called_off_mark(replacement, view, now=now)
        if await self._clear(view, since=None, called_off=record):
            log.info(
                "event=node-replacement-held-back node=%s offering=%s record=%s",
                view.name,
                "/".join(replacement.offering),
                record,
            )

    async def _untaint(self, view: NodeView) -> None:
        """Remove the taint and keep the stamp: the Node's room is wanted now, its timer
        holds."""
        taints = [
            t
            for t in (view.obj.get("spec") or {}).get("taints") or ()
            if t.get("key") != wellknown.CONSOLIDATING_TAINT_KEY
        ]
        if await self._patch(view, {"spec": {"taints": taints}}):
            log.info("event=node-consolidation-held node=%s", view.name)

    async def _tell_kept(self, autoscaler: Object, kept: Iterable[Kept]) -> None:
        for item in kept:
            said = (item.rule, item.pod)
            if self._told.get(item.node) == said:
                continue
            self._told[item.node] = said
            metrics.nodepool_autoscaler_consolidation_kept_total.labels(item.rule).inc()
            message = f"node {item.node} stays although underused: {item.message} ({item.rule})"
            log.info(
                "event=node-kept node=%s rule=%s pod=%s message=%r",
                item.node,
                item.rule,
                item.pod,
                item.message,
            )
            node = self.nodes.get(item.node)
            if node is not None:
                await self.recorder.event(
                    _node_ref(node), type="Normal", reason="ConsolidationKept", message=message
                )
            await self.recorder.event(
                autoscaler, type="Normal", reason="ConsolidationKept", message=message
            )

    async def announce(self, review: Review, *, request: str) -> None:
        """Tell each named Node why it goes, once its request is made."""
        for name in review.victims:
            metrics.nodepool_autoscaler_consolidation_removals_total.inc()
            self._told.pop(name, None)
            node = self.nodes.get(name)
            if node is None:
                continue
            with contextlib.suppress(errors.ApiError):
                await self.recorder.event(
                    _node_ref(node),
                    type="Normal",
                    reason="ConsolidationRemoving",
                    message=(
                        f"named for removal in ScaleRequest {request}: "
                        f"{review.reasons.get(name, '')}"
                    ),
                )

    def prune(self, candidates: Set[str]) -> None:
        """Forget what was told of Nodes gone, or candidates again (told anew if kept
        again later)."""
        for name in [*candidates, *self._told]:
            if name in candidates or self.nodes.get(name) is None:
                self._told.pop(name, None)


def _node_ref(node: Mapping[str, Any]) -> Object:
    return {"apiVersion": "v1", "kind": "Node", "metadata": dict(node.get("metadata") or {})}
