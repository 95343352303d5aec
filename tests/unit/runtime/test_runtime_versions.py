from __future__ import annotations

from nodepool_operator.runtime import versions


def test_integer_versions_are_ordered_as_numbers_not_text() -> None:
    assert versions.compare("10", "9") == 1
    assert versions.compare("9", "10") == -1
    assert versions.compare("42", "42") == 0


def test_equal_opaque_versions_are_equal_and_different_ones_cannot_be_ordered() -> None:
    assert versions.compare("abc", "abc") == 0
    assert versions.compare("abc", "abd") is None
    assert versions.compare("12", "") is None


def test_number_is_none_for_anything_but_an_integer() -> None:
    assert versions.number("123") == 123
    assert versions.number("") is None
    assert versions.number("1a") is None


def _made(name: str, created: str, version: str) -> dict[str, dict[str, str]]:
    return {"metadata": {"name": name, "creationTimestamp": created, "resourceVersion": version}}


def test_creation_order_is_time_then_version_as_a_number_then_name() -> None:
    objects = [
        _made("a-late", "2026-01-01T00:00:02Z", "5"),
        _made("z-same-second-newer", "2026-01-01T00:00:01Z", "10"),
        _made("y-same-second-older", "2026-01-01T00:00:01Z", "9"),
        _made("b-first", "2026-01-01T00:00:00Z", "100"),
    ]
    ordered = [o["metadata"]["name"] for o in sorted(objects, key=versions.creation_order_of)]
    assert ordered == ["b-first", "y-same-second-older", "z-same-second-newer", "a-late"]


def test_creation_order_puts_an_unnumbered_version_first_and_breaks_ties_by_name() -> None:
    second = "2026-01-01T00:00:01Z"
    assert versions.creation_order(created=second, version="opaque", name="b") < (
        versions.creation_order(created=second, version="0", name="a")
    )
    assert versions.creation_order(created=second, version="7", name="a") < (
        versions.creation_order(created=second, version="7", name="b")
    )
