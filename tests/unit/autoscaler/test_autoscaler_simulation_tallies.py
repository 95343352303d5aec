"""The term index (pod (anti-)affinity terms by label) gives a pod every term that matches it,
in order.

``TermIndex.may_match`` reads only the terms whose first ``In`` requirement accepts one
of the pod's labels; here it is compared with reading every term, on random selectors
(``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, none at all) and random pod labels.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from nodepool_operator.controllers.autoscaler.constraints import AffinityTerm, Selector
from nodepool_operator.controllers.autoscaler.simulation.tallies import TermIndex

KEYS = ("app", "tier", "team")
VALUES = ("a", "b", "c")

requirements = st.tuples(
    st.sampled_from(KEYS),
    st.sampled_from(("In", "NotIn", "Exists", "DoesNotExist")),
    st.frozensets(st.sampled_from(VALUES), min_size=1, max_size=2),
)
selectors = st.one_of(st.none(), st.builds(Selector, st.lists(requirements, max_size=3).map(tuple)))
terms = st.builds(
    AffinityTerm,
    selectors,
    st.one_of(st.none(), st.just(frozenset({"apps"}))),
    st.sampled_from(("kubernetes.io/hostname", "topology.kubernetes.io/zone")),
)
labels = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES))


@given(st.lists(terms, max_size=40), labels, st.integers(0, 40))
def test_the_index_gives_every_matching_term_in_order(
    added: list[AffinityTerm], pod_labels: dict[str, str], since: int
) -> None:
    index = TermIndex()
    for term in added:
        index.add(term)
    every = [term for term in added[since:] if term.matches("apps", pod_labels)]
    offered = index.may_match(pod_labels, since)
    assert [term for term in offered if term.matches("apps", pod_labels)] == every
    # Offered in the order added: a subsequence of the terms from ``since`` on.
    rest = iter(added[since:])
    assert all(any(term is other for other in rest) for term in offered)
