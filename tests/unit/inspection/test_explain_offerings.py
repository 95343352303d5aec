"""``explain pod`` for a pod a pool with requirements grows for: the offering its new node
is, and the cheaper offerings that refused it."""

from __future__ import annotations

from typing import Any

import catalogs
from nodepool_operator.inspection import planning
from unit.autoscaler.catalogs import TYPES, ZONES, small_catalog
from unit.inspection.recordings import CREATED, NAMESPACE, pod, recording

MANY = "many"


def _pool() -> dict[str, Any]:
    found = catalogs.many_types_pool(MANY, TYPES, ZONES)
    found["metadata"].update(uid=f"uid-{MANY}", creationTimestamp=CREATED)
    return found


async def test_explain_names_the_offering_and_the_cheaper_ones_refused() -> None:
    recorded = recording(pools=[_pool()], nodes=[], pods=[pod("six", "6", pool=MANY)])
    reads = planning.reads_of(recorded, offerings_catalog=small_catalog())

    explained = await planning.explain_pod(reads, NAMESPACE, "six")

    assert explained.planned.startswith(f"needs a new node of pool {MANY}: targetNodes 0 -> 1")
    assert explained.offering is not None
    assert explained.offering.startswith("offering c8 in z-a (on-demand, 0.36/h)")
    # c2 is cheaper in both zones and too small for 6 cpu.
    assert "c2 in z-a (on-demand, 0.1/h): too small (Insufficient cpu)" in explained.offering
    assert "c2 in z-b (on-demand, 0.11/h): too small (Insufficient cpu)" in explained.offering
    # The pool is judged as its types, and is not listed as one no Autoscaler plans for.
    verdicts = {p.name: p for p in explained.pools}
    assert verdicts[f"{MANY}/c8/on-demand"].problem is None
    assert verdicts[f"{MANY}/c2/on-demand"].problem == "requests 6000 of cpu, a node offers 1900"
    assert MANY not in verdicts


async def test_explain_without_a_catalog_says_the_pool_is_not_grown() -> None:
    recorded = recording(pools=[_pool()], nodes=[], pods=[pod("six", "6", pool=MANY)])

    explained = await planning.explain_pod(planning.reads_of(recorded), NAMESPACE, "six")

    assert "has requirements" in explained.planned
    assert explained.offering is None
    [verdict] = explained.pools
    assert (verdict.name, verdict.autoscaled) == (MANY, True)
    assert verdict.problem is not None
    assert "has requirements" in verdict.problem
