"""How long a noticed Node's pods take to run elsewhere: the time is the Node's notice
(``notice.NOTICED_AT_ANNOTATION``, a fact in the world) to the first look that finds every
controller that had pods on it with as many pods Running on other Nodes as it had
Running in all when the notice came, and none Pending.

What is followed is held in memory (the controllers and their counts at the notice): a
restarted operator does not measure the moves under way, it only misses samples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from nodepool_operator.runtime import pods as k8s_pods

__all__ = ["Move", "controller_of", "finished", "start"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Move:
    node: str
    kind: str
    noticed_at: float
    #: controller uid -> its pods Running at the notice (on this Node or any other)
    wanted: Mapping[str, int]


def controller_of(pod: Mapping[str, Any]) -> str | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def _movable(pod: Mapping[str, Any]) -> bool:
    return not k8s_pods.is_daemon_or_mirror(pod) and not k8s_pods.is_terminal(pod)


def start(
    *,
    node: str,
    kind: str,
    noticed_at: float,
    on_node: Iterable[Mapping[str, Any]],
    every_pod: Iterable[Mapping[str, Any]],
) -> Move | None:
    """What to follow for ``node``; None when it holds no pod a controller replaces (a
    bare pod is not replaced by anyone: there is nothing to time)."""
    owners = {owner for pod in on_node if _movable(pod) and (owner := controller_of(pod))}
    if not owners:
        return None
    wanted = dict.fromkeys(owners, 0)
    for pod in every_pod:
        owner = controller_of(pod)
        if owner in wanted and (pod.get("status") or {}).get("phase") == "Running":
            wanted[owner] += 1
    return Move(node=node, kind=kind, noticed_at=noticed_at, wanted=wanted)


def finished(move: Move, every_pod: Iterable[Mapping[str, Any]]) -> bool:
    """Every controller of ``move`` has its pods Running elsewhere, none Pending."""
    running = dict.fromkeys(move.wanted, 0)
    for pod in every_pod:
        owner = controller_of(pod)
        if owner not in running or not _movable(pod):
            continue
        spec, phase = pod.get("spec") or {}, (pod.get("status") or {}).get("phase")
        if spec.get("nodeName") == move.node or phase != "Running":
            return False
        running[owner] += 1
    return all(running[owner] >= count for owner, count in move.wanted.items())
