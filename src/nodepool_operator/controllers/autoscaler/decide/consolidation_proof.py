"""The proof that a candidate's pods fit on the Nodes that stay, made one candidate at a
time (pure: the scheduling simulation only).

``consolidation_rules.choose_together`` asks, candidate after candidate, whether the pods
of every candidate chosen so far and of the next one fit on the other Nodes. ``Proof``
keeps the room of the Nodes that stay as the candidates chosen so far left it: each
candidate's pods are simulated once, on that room, and committed there when the candidate
is chosen, so a review is linear in candidates, not quadratic. A pod placed on a Node that is
chosen later moves again with that Node's own pods. Placing candidate after candidate is
one order kube-scheduler could take; a pod it finds no room for keeps its Node, as the
joint simulation would.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nodepool_operator.controllers.autoscaler import simulation
from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.autoscaler.decide.consolidation_rules import pod_key
from nodepool_operator.controllers.autoscaler.snapshot.consolidation_views import NodeView

__all__ = ["Proof"]

#: One pod on its way: its profile and the key events name it by.
_Moving = tuple[PodProfile, str]


class Proof:
    """``fits`` for ``rules.choose_together``, incremental over the chosen candidates."""

    def __init__(
        self,
        *,
        views: Sequence[NodeView],
        cluster: Sequence[simulation.ExistingNode],
        daemon_sets: Sequence[simulation.DaemonSetView],
        profile: Callable[[Mapping[str, Any]], PodProfile | str],
    ) -> None:
        # Nodes already leaving (tainted, cordoned, named) take no pod: never room. A Node
        # only kept from going (do-not-disrupt, a nominated pod) is room as any other.
        leaving = {v.name for v in views if v.tainted or not v.gives_room}
        self.room = {n.name: n for n in cluster if n.name not in leaving}
        self.daemon_sets = daemon_sets
        # Every candidate's pods profiled here, where the Proof is made (the event loop):
        # the choice runs in a worker thread, and a profile reads the informers' caches.
        self.profiles = {id(pod): profile(pod) for v in views for pod in v.to_move}
        self.chosen: set[str] = set()
        # Pods placed on a Node by an earlier candidate's proof: they move again with it.
        self.placed_on: dict[str, list[_Moving]] = {}
        # The last candidate proved, not yet known to be chosen: its placements.
        self._proved: tuple[str, list[tuple[_Moving, str]]] | None = None

    def __call__(self, chosen: Sequence[NodeView]) -> tuple[str, str] | None:
        """Which pod of ``chosen[-1]`` fits nowhere on the Nodes that stay once every
        other Node of ``chosen`` is gone (``(pod, why)``), or None."""
        *before, view = chosen
        self._commit(before)
        moving = self._moving(view)
        if isinstance(moving, tuple):
            return moving
        outcome = simulation.simulate(
            [profile for profile, _ in moving],
            nodes=[n for name, n in self.room.items() if name != view.name],
            pools=(),
            daemon_sets=self.daemon_sets,
        )
        if outcome.unfit:
            first = min(outcome.unfit)
            return moving[first][1], outcome.unfit[first]
        placed = [
            (pod, node)
            for pod, node in zip(moving, outcome.placements, strict=True)
            if node is not None
        ]
        self._proved = (view.name, placed)
        return None

    def together(self, views: Sequence[NodeView]) -> bool:
        """Whether the pods of all ``views`` fit at once on the Nodes that stay (one
        simulation, nothing committed): a candidate's pod that does not makes the chooser
        prove the candidates one by one instead."""
        return self.unfit_together(views) is None

    def unfit_together(self, views: Sequence[NodeView]) -> tuple[str, str] | None:
        """Which pod of ``views`` fits nowhere once all of them are gone (``(pod, why)``),
        their pods simulated at once on the Nodes that stay; None when every one fits."""
        moving: list[_Moving] = []
        for view in views:
            found = self._moving(view)
            if isinstance(found, tuple):
                return found
            moving.extend(found)
        going = {v.name for v in views}
        outcome = simulation.simulate(
            [profile for profile, _ in moving],
            nodes=[n for name, n in self.room.items() if name not in going],
            pools=(),
            daemon_sets=self.daemon_sets,
        )
        if outcome.unfit:
            first = min(outcome.unfit)
            return moving[first][1], outcome.unfit[first]
        return None

    def _moving(self, view: NodeView) -> list[_Moving] | tuple[str, str]:
        """The pods that leave with ``view``: its own and those earlier proofs put there;
        ``(pod, why)`` when one cannot be read."""
        moving: list[_Moving] = []
        for pod in view.to_move:
            profile = self.profiles[id(pod)]
            if not isinstance(profile, PodProfile):
                return pod_key(pod), f"its requests cannot be read: {profile}"
            moving.append((profile, pod_key(pod)))
        return [*moving, *self.placed_on.get(view.name, ())]

    def _commit(self, before: Sequence[NodeView]) -> None:
        """Make the room what the candidates chosen so far leave: their Nodes gone, the
        pods of the last one proved placed."""
        for view in before:
            if view.name in self.chosen:
                continue
            self.chosen.add(view.name)
            self.room.pop(view.name, None)
            if self._proved is not None and self._proved[0] == view.name:
                for pod, node in self._proved[1]:
                    self._place(pod, node)
            self.placed_on.pop(view.name, None)
        self._proved = None

    def _place(self, pod: _Moving, node: str) -> None:
        found = self.room.get(node)
        if found is None:
            return
        self.room[node] = dataclasses.replace(found, pods=(*found.pods, pod[0]))
        self.placed_on.setdefault(node, []).append(pod)
