"""Resource quantities parse to exact integers, rounded up, with clear errors."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from nodepool_operator.api import fields, nodepool_schema, quantity

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
        ("", "expected a number"),
        (".", "expected a number"),
        ("+", "expected a number"),
        ("Gi", "expected a number"),
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
        ("1e100", "an exponent of at most two digits"),
        ("1e-100", "an exponent of at most two digits"),
        ("1" * 65, "longer than 64 characters"),
    ],
)
def test_malformed_quantities_raise_value_error_naming_the_text(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match="invalid quantity") as raised:
        quantity.parse_quantity(text)
    assert problem in str(raised.value)
    assert repr(text) in str(raised.value) or len(text) > quantity.MAX_LENGTH


def test_negative_quantities_parse_but_are_not_cpu_or_memory() -> None:
    assert quantity.parse_quantity("-1.5") == Fraction(-3, 2)
    with pytest.raises(ValueError, match="without a minus sign"):
        quantity.parse_cpu_millicores("-1")
    with pytest.raises(ValueError, match="without a minus sign"):
        quantity.parse_memory_bytes("-1Gi")
    with pytest.raises(ValueError, match="without a minus sign"):
        quantity.parse_non_negative_quantity("-0")


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


def _quantity_schemas() -> list[tuple[str, Mapping[str, Any]]]:
    """Every quantity field of the rendered NodePool CRD, with its format rule alone (the
    first; the others say what else a field needs, such as a value above zero)."""
    crd = nodepool_schema.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    template = crd["properties"]["spec"]["properties"]["template"]["properties"]
    nodes = {
        "cpu": template["cpu"],
        "memory": template["memory"],
        "ephemeralStorage": template["ephemeralStorage"],
        "extendedResources.*": template["extendedResources"]["additionalProperties"],
        "reserved.*": template["reserved"]["additionalProperties"],
    }
    return [
        (name, {**node, "x-kubernetes-validations": node["x-kubernetes-validations"][:1]})
        for name, node in nodes.items()
    ]


QUANTITY_SCHEMAS = _quantity_schemas()

# Near misses as well as quantities: every character the grammar uses, and some it
# does not (a space, a newline, a non-ASCII digit), and texts around the length limit.
_near_quantities = st.text(alphabet="0123456789.+-eEKMGTPinumk \n\u0664", max_size=12)
_long_quantities = st.from_regex(r"[0-9]{50,70}(\.[0-9]?)?[KMGTPE]?i?", fullmatch=True)
_grammatical = st.from_regex(quantity.QUANTITY_PATTERN, fullmatch=True)


@pytest.mark.parametrize("field", [name for name, _ in QUANTITY_SCHEMAS])
@given(text=st.one_of(_near_quantities, _long_quantities, _grammatical))
def test_the_crd_accepts_exactly_the_quantities_the_parser_accepts(
    field: str, text: str, server_model: Any
) -> None:
    [schema] = [node for name, node in QUANTITY_SCHEMAS if name == field]
    accepted_by_crd = server_model.validate(schema, text, path=field) == []
    try:
        quantity.parse_non_negative_quantity(text)
        parsed = True
    except ValueError:
        parsed = False
    assert accepted_by_crd == parsed


@pytest.mark.parametrize("field", [name for name, _ in QUANTITY_SCHEMAS])
@given(number=st.integers(min_value=-(2**40), max_value=2**63))
def test_an_integer_quantity_is_accepted_when_not_negative_and_read_as_its_digits(
    field: str, number: int, server_model: Any
) -> None:
    [schema] = [node for name, node in QUANTITY_SCHEMAS if name == field]
    accepted_by_crd = server_model.validate(schema, number, path=field) == []
    assert accepted_by_crd == (number >= 0)
    if accepted_by_crd:
        text = fields.quantity({"q": number}, "q", default="1")
        assert text == str(number)
        assert quantity.parse_non_negative_quantity(text) == number


def test_the_crd_uses_the_parser_grammar_and_length_for_every_quantity() -> None:
    for name, schema in QUANTITY_SCHEMAS:
        assert schema["x-kubernetes-int-or-string"] is True, name
        assert "pattern" not in schema, name  # the format rule says it, in words
        [format_rule] = schema["x-kubernetes-validations"]
        assert f"self.matches('{quantity.NON_NEGATIVE_QUANTITY_PATTERN}')" in format_rule["rule"]
        assert format_rule["message"] == f"must be {nodepool_schema.QUANTITY_HELP}", name
        assert "[0-9]" not in format_rule["message"], name
        assert schema["maxLength"] == quantity.MAX_LENGTH, name


@given(text=_grammatical)
def test_every_text_of_the_grammar_parses(text: str) -> None:
    assume(len(text) <= quantity.MAX_LENGTH)
    value = quantity.parse_quantity(text)
    assert (value < 0) == (text.startswith("-") and value != 0)
