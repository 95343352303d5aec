"""Resource quantities parse to exact integers, rounded up, with clear errors."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from nodepool_operator.api import quantity

BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}


@pytest.mark.parametrize(
    ("text", "millicores"),
    [
        ("4", 4000),
        ("500m", 500),
        ("1.5", 1500),
        ("0.1", 100),
        (".5", 500),
        ("1.", 1000),
        ("+2", 2000),
        ("0", 0),
        ("2e-1", 200),
        ("0.0001", 1),  # rounded up, as Go's MilliValue does
        ("1n", 1),
        ("1u", 1),
    ],
)
def test_cpu_parses_to_millicores(text: str, millicores: int) -> None:
    assert quantity.parse_cpu_millicores(text) == millicores


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("16Gi", 16 * 2**30),
        ("512Mi", 512 * 2**20),
        ("1G", 10**9),
        ("1e3", 1000),
        ("1E3", 1000),
        ("1e+3", 1000),
        ("1000", 1000),
        ("1Ki", 1024),
        ("1k", 1000),
        ("1.5Gi", 3 * 2**29),
        ("1E", 10**18),
        ("1Ei", 2**60),
        ("129M", 129 * 10**6),
        ("123Mi", 123 * 2**20),
        ("500m", 1),  # half a byte still needs a byte
        ("1e-3", 1),
    ],
)
def test_memory_parses_to_bytes(text: str, size: int) -> None:
    assert quantity.parse_memory_bytes(text) == size


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no digits"),
        (".", "no digits"),
        ("+", "no digits"),
        ("Gi", "no digits"),
        ("abc", "expected a number with an optional suffix"),
        ("1.2.3", "expected a number"),
        ("16GB", "expected a number"),
        ("1KiB", "expected a number"),
        ("1e", "expected a number"),
        ("1e1.5", "expected a number"),
        ("2e3m", "expected a number"),  # an exponent takes no further suffix
        ("1K", "expected a number"),  # kilo is a lower-case k
        (" 4", "expected a number"),
        ("4 ", "expected a number"),
        ("4\n", "expected a number"),
        ("٤", "expected a number"),  # a non-ASCII digit
        ("1e101", "exponent 101 is out of range"),
        ("1" * 300, "longer than 256 characters"),
    ],
)
def test_malformed_quantities_raise_value_error_naming_the_text(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match="invalid quantity") as raised:
        quantity.parse_quantity(text)
    assert problem in str(raised.value)
    assert repr(text) in str(raised.value) or len(text) > 256


def test_negative_quantities_parse_but_are_not_cpu_or_memory() -> None:
    assert quantity.parse_quantity("-1.5") == Fraction(-3, 2)
    with pytest.raises(ValueError, match="cpu must not be negative"):
        quantity.parse_cpu_millicores("-1")
    with pytest.raises(ValueError, match="memory must not be negative"):
        quantity.parse_memory_bytes("-1Gi")


def test_a_non_string_is_refused() -> None:
    with pytest.raises(ValueError, match="expected a string"):
        quantity.parse_quantity(4)  # type: ignore[arg-type]


@given(n=st.integers(min_value=0, max_value=10**20))
def test_plain_integers_are_bytes_and_cores(n: int) -> None:
    assert quantity.parse_memory_bytes(str(n)) == n
    assert quantity.parse_cpu_millicores(str(n)) == 1000 * n
    assert quantity.parse_cpu_millicores(f"{n}m") == n


@given(n=st.integers(min_value=0, max_value=10**6), suffix=st.sampled_from(sorted(BINARY)))
def test_binary_suffixes_are_powers_of_1024(n: int, suffix: str) -> None:
    assert quantity.parse_memory_bytes(f"{n}{suffix}") == n * BINARY[suffix]


@given(n=st.integers(min_value=0, max_value=10**6), suffix=st.sampled_from(sorted(DECIMAL)))
def test_decimal_suffixes_are_powers_of_1000(n: int, suffix: str) -> None:
    assert quantity.parse_quantity(f"{n}{suffix}") == n * DECIMAL[suffix]


@given(
    n=st.integers(min_value=0, max_value=10**6),
    exponent=st.integers(min_value=-quantity.MAX_EXPONENT, max_value=quantity.MAX_EXPONENT),
    e=st.sampled_from(["e", "E"]),
)
def test_exponents_are_powers_of_ten(n: int, exponent: int, e: str) -> None:
    assert quantity.parse_quantity(f"{n}{e}{exponent}") == n * Fraction(10) ** exponent


@given(
    whole=st.integers(min_value=0, max_value=10**9),
    fraction=st.text(alphabet="0123456789", min_size=1, max_size=12),
)
def test_decimal_fractions_are_exact_and_round_up(whole: int, fraction: str) -> None:
    exact = whole + Fraction(int(fraction), 10 ** len(fraction))
    text = f"{whole}.{fraction}"
    assert quantity.parse_quantity(text) == exact
    millicores = quantity.parse_cpu_millicores(text)
    assert millicores - 1 < exact * 1000 <= millicores


@given(text=st.text(alphabet="0123456789.+-eEKMGTPinumk ", max_size=8))
def test_the_crd_pattern_accepts_exactly_the_non_negative_quantities_the_parser_accepts(
    text: str,
) -> None:
    try:
        parsed: Fraction | None = quantity.parse_quantity(text)
    except ValueError as e:
        assume("out of range" not in str(e))
        parsed = None
    matches = re.fullmatch(quantity.NON_NEGATIVE_QUANTITY_PATTERN, text) is not None
    assert matches == (parsed is not None and not text.startswith("-"))
