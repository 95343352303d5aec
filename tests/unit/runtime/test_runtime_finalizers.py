"""Adding and removing our finalizer: conditional merge patches, none when nothing changes."""

from __future__ import annotations

from typing import Any

from nodepool_operator.runtime import finalizers

OURS = "example.com/cleanup"


def _obj(*names: str) -> dict[str, Any]:
    return {"metadata": {"name": "a", "resourceVersion": "42", "finalizers": list(names)}}


def test_adding_keeps_the_others_and_is_conditional_on_the_version() -> None:
    assert finalizers.adding(_obj("other.io/keep"), OURS) == {
        "metadata": {"finalizers": ["other.io/keep", OURS], "resourceVersion": "42"}
    }
    assert finalizers.adding({"metadata": {"resourceVersion": "1"}}, OURS) == {
        "metadata": {"finalizers": [OURS], "resourceVersion": "1"}
    }


def test_removing_takes_only_ours() -> None:
    assert finalizers.removing(_obj("other.io/keep", OURS), OURS) == {
        "metadata": {"finalizers": ["other.io/keep"], "resourceVersion": "42"}
    }


def test_no_patch_when_nothing_would_change() -> None:
    assert finalizers.adding(_obj(OURS), OURS) is None
    assert finalizers.removing(_obj("other.io/keep"), OURS) is None
    assert finalizers.has(_obj(OURS), OURS)
    assert not finalizers.has({"metadata": {}}, OURS)
