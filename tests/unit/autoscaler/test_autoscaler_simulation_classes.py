"""Pending pods grouped into classes: pods alike in all the scheduler's filters read are one
class, placed under the first of their profiles, however they are looked up; and a plan's
objects, which the garbage collector leaves alone while it runs."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from nodepool_operator.controllers.autoscaler import constraints, simulation
from nodepool_operator.controllers.autoscaler.constraints import PodProfile
from nodepool_operator.controllers.autoscaler.simulation import classes


def _profile(
    name: str, *, cpu: str = "100m", labels: dict[str, str] | None = None, **spec: Any
) -> PodProfile:
    container = {"name": "c", "resources": {"requests": {"cpu": cpu}}}
    return constraints.profile_of(
        {
            "metadata": {"name": name, "namespace": "apps", "labels": labels or {"app": name}},
            "spec": {"containers": [container], **spec},
        }
    )


def _collide(profile: PodProfile, with_: PodProfile) -> PodProfile:
    """``profile`` with the ``unlabelled_hash`` of another (as a hash collision would)."""
    object.__setattr__(profile, "unlabelled_hash", with_.unlabelled_hash)
    return profile


def test_pods_that_differ_only_by_labels_share_the_unlabelled_hash() -> None:
    one, two = _profile("one"), _profile("two")
    assert one != two
    assert one.unlabelled_key == two.unlabelled_key
    assert one.unlabelled_hash == two.unlabelled_hash == hash(one.unlabelled_key)
    bigger = _profile("one", cpu="200m")
    assert bigger.unlabelled_key != one.unlabelled_key
    other_namespace = constraints.profile_of(
        {"metadata": {"name": "one", "namespace": "db"}, "spec": {"containers": []}}
    )
    assert other_namespace.unlabelled_key[0] == "db"


def test_pods_whose_labels_no_selector_reads_are_one_class_under_the_first() -> None:
    first, second, third = _profile("a"), _profile("b"), _profile("c")
    alike = classes.Alike([first, second, third])
    assert not alike.pods_read
    assert [alike.of(p) for p in (first, second, third)] == [first, first, first]
    assert all(alike.of(p) is first for p in (first, second, third))


def test_a_profile_whose_unlabelled_hash_collides_is_a_class_of_its_own() -> None:
    small = _profile("small")
    big = _collide(_profile("big", cpu="900m"), small)
    big_twin = _collide(_profile("big-twin", cpu="900m"), small)
    alike = classes.Alike([small, big, big_twin])
    assert alike.of(small) is small
    assert alike.of(big) is big  # same hash, not alike: its own class
    assert alike.of(big_twin) is big  # alike to that class's first, not to ``small``
    assert alike.of(_profile("small-twin")) is small


def test_labels_a_selector_reads_split_classes() -> None:
    spread = {
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "x"}}}
        ]
    }
    first = _profile("one", labels={"app": "x", "pod": "1"}, **spread)
    second = _profile("two", labels={"app": "x", "pod": "2"}, **spread)
    other = _profile("three", labels={"app": "y"}, **spread)
    alike = classes.Alike([first, second, other])
    assert alike.pods_read
    assert alike.of(first) is first
    assert alike.of(second) is first  # "pod" is read by no selector
    assert alike.of(other) is other


def test_classes_are_ordered_by_priority_then_largest_share_and_keep_their_pods_in_order() -> None:
    small, big = _profile("small", cpu="100m"), _profile("big", cpu="2")
    urgent = _profile("urgent", cpu="100m", priority=10)
    pods = [small, big, small, urgent, big, small]
    found = classes.ordered(pods, {"cpu": 4000, "memory": 16 * 1024**3, "pods": 110})
    assert found.firsts == [3, 1, 0]  # priority first, then the larger share
    assert [found.members(first) for first in found.firsts] == [[3], [1, 4], [0, 2, 5]]
    assert 3 not in found.others  # a class of one pod keeps no list


# -- the collector ----------------------------------------------------------------------


def test_a_plan_runs_with_the_collector_paused_and_leaves_no_cycle_behind() -> None:
    seen: list[bool] = []
    ordered = classes.ordered

    def spy(pods: Any, reference: Any) -> classes.Classes:
        seen.append(gc.isenabled())
        return ordered(pods, reference)

    allocatable = {"cpu": 4000, "memory": 16 * 1024**3, "pods": 110}
    pool = simulation.PoolTemplate(
        name="general",
        weight=0,
        taints=(),
        allocatable=allocatable,
        upcoming=lambda k, zone: (f"general-{k}", {"kubernetes.io/hostname": f"general-{k}"}),
        in_flight=0,
        headroom=10,
        zones=1,
        namespaces=None,
    )
    pending = [_profile(f"p{i}", cpu=f"{500 + 100 * i}m") for i in range(20)]
    gc.collect()
    was = gc.isenabled()
    gc.enable()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(classes, "ordered", spy)
            outcome = simulation.simulate(pending, nodes=(), pools=[pool])
        assert seen == [False]
        assert gc.isenabled()
        assert outcome.pools["general"].new_nodes > 0
        # What the plan made is freed by reference counting as it returns: reference cycles
        # among its nodes would wait, with all they hold, for a collection.
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        left = {type(o).__name__ for o in gc.garbage}
        assert not left & {"SimNode", "Group", "RoomTree", "Simulation", "Cluster"}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if not was:
            gc.disable()
