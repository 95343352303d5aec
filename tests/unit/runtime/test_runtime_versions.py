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
