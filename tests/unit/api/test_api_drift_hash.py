"""The spec hash a Node records: what shapes a node drifts it, and only that."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from nodepool_operator.api import drift, nodepool, wellknown

TYPES = {
    "key": wellknown.INSTANCE_TYPE_LABEL,
    "operator": "In",
    "values": ["m5.large", "c5.xlarge"],
}


def spec(**template: Any) -> nodepool.NodePoolSpec:
    base: dict[str, Any] = {
        "cpu": "4",
        "memory": "16Gi",
        "labels": {"team": "a", "tier": "web"},
        "taints": [
            {"key": "a", "effect": "NoSchedule"},
            {"key": "b", "value": "1", "effect": "NoExecute"},
        ],
    }
    base.update(template)
    return nodepool.NodePoolSpec.from_dict({"targetNodes": 3, "maxNodes": 10, "template": base})


def changed(before: nodepool.NodePoolSpec, after: nodepool.NodePoolSpec) -> tuple[str, ...]:
    return drift.drifted_sections(drift.spec_hash(before), drift.spec_hash(after))


def sha(canonical: str) -> str:
    return hashlib.sha256(canonical.encode()).hexdigest()[:10]


def test_the_hash_is_stable_across_operator_versions() -> None:
    """The canonical form is pinned: if this fails, every Node in every cluster drifts on
    upgrade. Change what is hashed only with a new HASH_VERSION."""
    assert drift.spec_hash(spec()) == drift.SpecHash(
        "v1",
        {
            "capacity": sha('{"cpu":4000,"memory":17179869184,"pods":110}'),
            "labels": sha('{"team":"a","tier":"web"}'),
            "provider": sha("null"),
            "region": sha("null"),
            "reserved": sha("{}"),
            "taints": sha(
                '[{"effect":"NoSchedule","key":"a"},{"effect":"NoExecute","key":"b","value":"1"}]'
            ),
        },
    )


@pytest.mark.parametrize(
    "field",
    [
        {"targetNodes": 9},
        {"minNodes": 1},
        {"maxNodes": 50},
        {"weight": 7},
        {"drainTimeoutSeconds": 30},
        {"notReadyTimeoutSeconds": 60},
        {"registrationTimeoutSeconds": 60},
    ],
)
def test_fields_that_change_nothing_on_a_running_node_do_not_drift_it(
    field: dict[str, Any],
) -> None:
    before = spec()
    after = nodepool.NodePoolSpec.from_dict({**before.to_dict(), **field})
    assert after != before
    assert changed(before, after) == ()


def test_startup_taints_and_zones_are_not_hashed() -> None:
    assert changed(spec(), spec(startupTaints=[{"key": "cni", "effect": "NoSchedule"}])) == ()
    assert changed(spec(), spec(zones=["za", "zb"])) == ()


@pytest.mark.parametrize(
    ("template", "section"),
    [
        ({"labels": {"team": "b", "tier": "web"}}, "labels"),
        ({"taints": [{"key": "a", "effect": "NoExecute"}]}, "taints"),
        ({"cpu": "8"}, "capacity"),
        ({"memory": "32Gi"}, "capacity"),
        ({"pods": 50}, "capacity"),
        ({"extendedResources": {"nvidia.com/gpu": "1"}}, "capacity"),
        ({"reserved": {"cpu": "100m"}}, "reserved"),
        ({"region": "eu-west-1"}, "region"),
        ({"provider": {"parameters": {"image": "ami-2"}}}, "provider"),
    ],
)
def test_each_field_that_shapes_a_node_drifts_it_by_name(
    template: dict[str, Any], section: str
) -> None:
    assert changed(spec(), spec(**template)) == (section,)


def test_writing_the_same_spec_differently_drifts_nothing() -> None:
    same = spec(
        cpu="4000m",
        memory="16384Mi",
        labels={"tier": "web", "team": "a"},
        taints=[
            {"key": "b", "value": "1", "effect": "NoExecute"},
            {"key": "a", "effect": "NoSchedule"},
        ],
    )
    assert changed(spec(), same) == ()


def test_several_changes_are_all_named() -> None:
    assert changed(spec(), spec(cpu="8", labels={"team": "b"})) == ("capacity", "labels")


def test_the_annotation_text_reads_back() -> None:
    hashed = drift.spec_hash(spec())
    assert drift.SpecHash.parse(hashed.text) == hashed


@pytest.mark.parametrize("text", ["", "v1", "v1;", "v1;labels", "v1;=abc", "v1;labels="])
def test_an_annotation_edited_by_hand_is_no_hash(text: str) -> None:
    assert drift.SpecHash.parse(text) is None


def test_a_node_stamped_under_another_hash_version_is_not_drifted_but_stamped_again() -> None:
    current = drift.spec_hash(spec())
    older = drift.SpecHash("v0", {"labels": "0000000000"})
    assert drift.drifted_sections(older, current) == ()

    def node(text: str | None) -> dict[str, Any]:
        annotations = {} if text is None else {drift.SPEC_HASH_ANNOTATION: text}
        return {"metadata": {"annotations": annotations}}

    assert drift.needs_stamp(node(older.text), current)
    assert drift.needs_stamp(node(None), current)
    assert drift.needs_stamp(node("v1;labels"), current)  # edited by hand: no hash
    assert not drift.needs_stamp(node(current.text), current)
    # Same version, other sections: a drifted Node keeps the hash it was made from.
    assert not drift.needs_stamp(node(drift.spec_hash(spec(cpu="8")).text), current)


def test_a_node_outside_the_zones_its_pool_allows_has_drifted() -> None:
    def node(zone: str | None) -> dict[str, Any]:
        labels = {} if zone is None else {"topology.kubernetes.io/zone": zone}
        return {"metadata": {"name": "n", "labels": labels}}

    zoned = spec(zones=["za", "zb"])
    assert not drift.zone_drifted(node("za"), zoned)
    assert drift.zone_drifted(node("zc"), zoned)
    assert not drift.zone_drifted(node("zc"), spec())  # no zones: any zone is the pool's
    assert not drift.zone_drifted(node(None), zoned)  # the cloud's choice, unknown


def spec_with_requirements(**template: Any) -> nodepool.NodePoolSpec:
    return nodepool.NodePoolSpec.from_dict({**spec(**template).to_dict(), "requirements": [TYPES]})


@pytest.mark.parametrize(
    "template",
    [{"cpu": "8"}, {"memory": "32Gi"}, {"pods": 50}, {"extendedResources": {"x.io/y": "1"}}],
)
def test_a_pool_with_requirements_is_not_drifted_by_the_templates_shape(
    template: dict[str, Any],
) -> None:
    """Its Nodes are the catalog offerings they were launched as: the template's cpu,
    memory and pods shape none of them (``requirements_drifted`` judges the offering)."""
    assert changed(spec_with_requirements(), spec_with_requirements(**template)) == ()
    assert "capacity" not in drift.spec_hash(spec_with_requirements()).sections


def test_a_pool_with_requirements_is_still_drifted_by_the_rest_of_its_template() -> None:
    before, after = spec_with_requirements(), spec_with_requirements(labels={"team": "b"})
    assert changed(before, after) == ("labels",)


def test_a_node_stamped_before_its_pool_had_requirements_is_not_drifted_by_its_shape() -> None:
    """The pool gains requirements (and another cpu): the capacity its Nodes recorded
    is no longer the pool's to judge; the offering's labels are."""
    assert changed(spec(), spec_with_requirements(cpu="8")) == ()


def test_a_node_launched_by_requirements_drifts_when_the_pool_drops_them() -> None:
    """Without requirements the template shapes the Node again: a catalog Node, which
    recorded no capacity, differs from it."""
    assert changed(spec_with_requirements(), spec()) == ("capacity",)


def test_a_pool_with_requirements_judges_its_nodes_by_their_offering() -> None:
    pool = spec_with_requirements(cpu="8")
    current = drift.spec_hash(pool)
    stamped = drift.spec_hash(spec_with_requirements()).text

    def node(instance_type: str) -> dict[str, Any]:
        return {
            "metadata": {
                "name": "n",
                "labels": {wellknown.INSTANCE_TYPE_LABEL: instance_type},
                "annotations": {drift.SPEC_HASH_ANNOTATION: stamped},
            }
        }

    assert drift.drift_of(node("m5.large"), pool, current) == ()
    assert drift.drift_of(node("t3.micro"), pool, current) == ("requirements",)
