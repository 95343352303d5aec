"""Pending pods grouped into classes: pods alike in all that kube-scheduler's filters read
are placed as one, in first-fit-decreasing order of their largest share of a node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.autoscaler.simulation.model import MAIN_RESOURCES, ExistingNode

__all__ = ["Alike", "Classes", "ordered", "share"]

_MAIN_INDEXES: Final = range(len(MAIN_RESOURCES))


def share(profile: PodProfile, units: Sequence[int | None]) -> float:
    """The largest share of a node the pod asks for, of cpu, memory and pod slots
    (``units``: the largest node's amount of each, in ``MAIN_RESOURCES`` order)."""
    largest, need = 0.0, profile.main_need
    for index in _MAIN_INDEXES:  # by index: no pair made per resource (this runs per class)
        amount = need[index]
        if amount > 0:
            have = units[index]
            part = amount / have if have else float("inf")
            if part > largest:
                largest = part
    return largest


@dataclass(frozen=True, slots=True)
class Classes:
    """The classes of the pending pods, each named by its first pod's index, in the order
    they are placed (``firsts``); ``others`` holds the later pods of the classes that have
    more than one.

    Per class, an index and not a list of members: a plan where every pod is a class of
    its own (each with another request) would otherwise keep a list and a pair per pod
    alive to its end, and the garbage collector would traverse them all, more than once.
    """

    firsts: list[int]
    others: dict[int, list[int]]

    def members(self, first: int) -> list[int]:
        """The pods of the class whose first pod is ``first``, in order."""
        later = self.others.get(first)
        return [first] if later is None else [first, *later]


def ordered(pods: Sequence[PodProfile], reference: Mapping[str, int]) -> Classes:
    """The classes of ``pods`` (equal profiles) in the order they are placed: higher
    priority first, then pods that need other pods near them after those that need none,
    then first-fit-decreasing by ``share``."""
    first_of: dict[PodProfile, int] = {}
    others: dict[int, list[int]] = {}
    add = first_of.setdefault  # one lookup per pod: a profile's hash is a call
    for index, profile in enumerate(pods):
        first = add(profile, index)
        if first != index:
            later = others.get(first)
            if later is None:
                others[first] = [index]
            else:
                later.append(index)
    units = [reference.get(name) for name in MAIN_RESOURCES]
    # Sorted by (priority, affinity) bucket, then by share within each: the order of one
    # stable sort by the three, without comparing a tuple per pair (most pods share a bucket).
    buckets: dict[tuple[int, bool], list[int]] = {}
    for first in first_of.values():
        profile = pods[first]
        buckets.setdefault((-profile.priority, bool(profile.affinity)), []).append(first)
    firsts: list[int] = []
    for bucket in sorted(buckets):
        items = buckets[bucket]
        shares = [-share(pods[first], units) for first in items]
        order = sorted(range(len(items)), key=shares.__getitem__)
        firsts.extend(map(items.__getitem__, order))  # no generator step per class
    return Classes(firsts, others)


class Alike:
    """One profile for the pods that differ only by labels no selector in the cluster reads.

    Pod (anti-)affinity and spread selectors are the only readers of a pod's labels; a
    label none of them names (``statefulset.kubernetes.io/pod-name``, a Job's completion
    index) changes no verdict, so pods that differ only by such labels are one class,
    placed under the first of their profiles (its other labels are never read), and the
    simulation's counters and memos per profile stay as few as the classes.
    """

    def __init__(self, profiles: Iterable[PodProfile]) -> None:
        keys: set[str] = set()
        # Pods of one workload share their terms and differ in labels: read each set of
        # terms once, not once per pod.
        terms_read: set[tuple[object, ...]] = set()
        for profile in profiles:
            terms = (profile.affinity, profile.anti_affinity, profile.spread)
            if terms != ((), (), ()) and terms not in terms_read:
                terms_read.add(terms)
                keys.update(profile.label_keys_read)
        self._keys = frozenset(keys)
        # Whether any pod reads where others are (pod affinity, anti-affinity, spread).
        self.pods_read = bool(terms_read)
        self._seen: dict[PodProfile, PodProfile] = {}
        self._first: dict[tuple[object, ...], PodProfile] = {}
        # With no label read, the first profile of each ``unlabelled_hash``: the first pod
        # of a class (every pod, when each asks for another size) is found by an integer,
        # its key neither sliced nor hashed. The others are remembered in ``_seen``, as
        # when labels are read; one whose hash is taken by a profile it is not alike to
        # goes to ``_first``.
        self._first_by_hash: dict[int, PodProfile] = {}

    def of(self, profile: PodProfile) -> PodProfile:
        if not self._keys:  # no selector anywhere (the common case): no label is read
            first = self._first_by_hash.setdefault(profile.unlabelled_hash, profile)
            if first is profile:
                return first
            found = self._seen.get(profile)
            if found is None:
                unlabelled = profile.unlabelled_key
                found = self._seen[profile] = (
                    first
                    if first.unlabelled_key == unlabelled
                    else self._first.setdefault((unlabelled,), profile)
                )
            return found
        found = self._seen.get(profile)
        if found is None:
            keys = self._keys
            read = tuple(sorted(item for item in profile.labels.items() if item[0] in keys))
            alike = (profile.namespace, read, profile.key[2:])
            found = self._seen[profile] = self._first.setdefault(alike, profile)
        return found

    def node(self, node: ExistingNode) -> ExistingNode:
        pods = tuple(map(self.of, node.pods))
        terminating = tuple(map(self.of, node.terminating))
        if _same(pods, node.pods) and _same(terminating, node.terminating):
            return node  # each pod the first of its class: most nodes' pods
        return dataclasses.replace(node, pods=pods, terminating=terminating)


def _same(these: tuple[PodProfile, ...], those: tuple[PodProfile, ...]) -> bool:
    return all(a is b for a, b in zip(these, those, strict=True))
