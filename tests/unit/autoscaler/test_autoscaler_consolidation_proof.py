"""The consolidation proof, made candidate after candidate on the room the ones chosen
before left (``consolidation.proof``), on the real scheduling simulation."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from nodepool_operator.controllers.autoscaler import simulation
from nodepool_operator.controllers.autoscaler.constraints import PodProfile, profile_of
from nodepool_operator.controllers.autoscaler.decide import consolidation_rules
from nodepool_operator.controllers.autoscaler.decide.consolidation_proof import Proof
from nodepool_operator.controllers.autoscaler.snapshot.consolidation_views import NodeView
from nodepool_operator.controllers.autoscaler.snapshot.pod_profiles import ProfileCache

OWNED = [{"kind": "ReplicaSet", "name": "web-1", "uid": "rs", "controller": True}]
CPU = 1000  # millicores


def pod(name: str, cpu: str = "1", **spec: Any) -> Any:
    return {
        "metadata": {"name": name, "namespace": "apps", "uid": name, "ownerReferences": OWNED},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}], **spec},
    }


def profile(obj: Any) -> PodProfile:
    found = profile_of(obj)
    assert isinstance(found, PodProfile)
    return found


def existing(
    name: str, *pods: Any, cpu: int = 4, labels: dict[str, str] | None = None
) -> simulation.ExistingNode:
    return simulation.ExistingNode(
        name=name,
        pool="p",
        labels={"kubernetes.io/hostname": name, **(labels or {})},
        taints=(),
        unschedulable=False,
        allocatable={"cpu": cpu * CPU, "memory": 16 << 30, "pods": 110},
        pods=tuple(profile(p) for p in pods),
    )


def view(name: str, *pods: Any, usage: float = 0.25) -> NodeView:
    return NodeView(
        name=name,
        obj={},
        to_move=tuple(pods),
        usage=usage,
        since=None,
        tainted=False,
        eligible=True,
    )


def choose(views: list[NodeView], cluster: list[simulation.ExistingNode]) -> Any:
    fits = Proof(views=views, cluster=cluster, daemon_sets=(), profile=ProfileCache().get)
    return consolidation_rules.choose_together(
        [(views, 0.5)], fits=fits, fit_together=fits.together
    )


def test_when_every_candidates_pods_fit_at_once_one_simulation_proves_them_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs: list[int] = []
    simulate = simulation.simulate

    def counted(*args: Any, **kwargs: Any) -> Any:
        runs.append(1)
        return simulate(*args, **kwargs)

    monkeypatch.setattr(simulation, "simulate", counted)
    pods = [pod(f"p{i}") for i in range(5)]
    views = [view(f"n{i}", p) for i, p in enumerate(pods)]
    cluster = [
        existing("stays"),
        existing("stays-too"),
        *(existing(f"n{i}", p) for i, p in enumerate(pods)),
    ]
    chosen, kept = choose(views, cluster)
    assert [v.name for v in chosen] == [f"n{i}" for i in range(5)]
    assert kept == []
    assert len(runs) == 1


def test_room_the_chosen_candidates_took_is_not_offered_again() -> None:
    a, b, c = pod("a"), pod("b"), pod("c")
    stays = existing("stays", pod("x", "2"))  # 2 CPU free: room for two of the three
    views = [view("n1", a, usage=0.1), view("n2", b, usage=0.2), view("n3", c, usage=0.3)]
    cluster = [stays, existing("n1", a), existing("n2", b), existing("n3", c)]
    chosen, kept = choose(views, cluster)
    assert [v.name for v in chosen] == ["n1", "n2"]
    [why] = kept
    assert (why.node, why.rule, why.pod) == ("n3", "no-room", "apps/c")


def test_pods_placed_on_a_candidate_chosen_later_move_again_with_it() -> None:
    # n1's pod may only run on tier=x nodes: once n1 goes, n2 is its only place. n2's own
    # pod fits on the node that stays, but n2 cannot go: n1's pod would be lost with it.
    a, b = pod("a", nodeSelector={"tier": "x"}), pod("b")
    stays = existing("stays", pod("x", "3"))
    views = [view("n1", a, usage=0.1), view("n2", b, usage=0.2)]
    tier = {"tier": "x"}
    cluster = [stays, existing("n1", a, labels=tier), existing("n2", b, labels=tier)]
    chosen, kept = choose(views, cluster)
    assert [v.name for v in chosen] == ["n1"]
    assert [k.node for k in kept] == ["n2"]


def test_a_pod_whose_requests_cannot_be_read_keeps_its_node_and_is_named() -> None:
    broken = pod("broken", "lots")
    views = [view("n1", broken)]
    chosen, kept = choose(views, [existing("stays"), existing("n1")])
    assert chosen == []
    [why] = kept
    assert why.pod == "apps/broken"
    assert why.message.startswith(
        "pod apps/broken fits on no other node: its requests cannot be read: "
    )


def test_the_pods_that_fit_nowhere_together_are_named_with_why() -> None:
    # A replacement's re-check: the victim's 3-cpu pod fits on the new 4-cpu Node; a
    # Node leaving (tainted, or named by a request) gives it no room, and the event says
    # which pod and why rather than only that the pods no longer fit.
    victim = view("victim", pod("heavy", cpu="3"))
    new = view("new")
    cluster = [existing("victim", pod("heavy", cpu="3")), existing("new"), existing("full", cpu=1)]
    fits = Proof(views=[victim, new], cluster=cluster, daemon_sets=(), profile=ProfileCache().get)
    assert fits.unfit_together([victim]) is None
    assert fits.together([victim])
    leaving = dataclasses.replace(new, gives_room=False)
    fits = Proof(
        views=[victim, leaving], cluster=cluster, daemon_sets=(), profile=ProfileCache().get
    )
    unfit = fits.unfit_together([victim])
    assert unfit is not None
    assert unfit[0] == "apps/heavy"
    assert "cpu" in unfit[1]
    assert not fits.together([victim])
